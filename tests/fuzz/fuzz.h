/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzz.h: what every fuzz target defines (libFuzzer's entry
 * point) and how a target states an invariant: a broken one traps, which
 * libFuzzer and the replay driver both report as a crash with the input.
 */
#ifndef SPW_FUZZ_H
#define SPW_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s:%d: invariant %s broken\n", __FILE__, __LINE__, #cond); \
			abort();                                                          \
		}                                                                         \
	} while (0)

#endif
