/* SPDX-License-Identifier: MIT */
/*
 * util/bytes.h: byte counts for messages a person reads.
 */
#ifndef SPW_UTIL_BYTES_H
#define SPW_UTIL_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* "512 B", "4.0 MiB", "2.5 GiB" (binary units up to EiB, one decimal)
 * into buf; returns buf, so it can stand in a printf argument list. */
const char *format_bytes(uint64_t v, char *buf, size_t len);

/* The same followed by the exact count where the unit rounds it:
 * "4.0 MiB (4194304 bytes)"; "512 B" as it is. For errors whose figures a
 * person compares with a limit they set. */
const char *format_bytes_exact(uint64_t v, char *buf, size_t len);

#endif
