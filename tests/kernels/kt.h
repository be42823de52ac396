/* SPDX-License-Identifier: MIT */
/* tests/kernels/kt.h: helpers shared by the kernel tests. */
#ifndef SPW_KT_H
#define SPW_KT_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "test.h"

static inline uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* splitmix64: reproducible, seeded per test. */
static inline uint64_t kt_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float kt_uniform(uint64_t *s, float lo, float hi)
{
	return lo + (hi - lo) * (float)((kt_rand(s) >> 40) * 0x1p-24);
}

/* Calls fn for each variant this CPU runs; returns how many. */
#define KT_FOR_EACH_VARIANT(k)                                                   \
	for (const char *const *name_ = spw_kernels_all; *name_; name_++)        \
		for (const struct spw_kernels *k = NULL;                         \
		     k == NULL && spw_kernels_variant(*name_, &k) == 0; )

/* Bitwise float equality, any nan equal to any nan. */
static inline bool kt_same(float a, float b)
{
	return (isnan(a) && isnan(b)) || f2u(a) == f2u(b);
}

/* Same for a 16-bit type with exponent mask e. */
static inline bool kt_same16(uint16_t a, uint16_t b, uint16_t e)
{
	bool na = (a & e) == e && (a & ~e & 0x7fff), nb = (b & e) == e && (b & ~e & 0x7fff);
	return (na && nb) || a == b;
}

#endif
