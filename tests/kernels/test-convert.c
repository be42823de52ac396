/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-convert.c: bf16/fp16 conversions, every variant,
 * exhaustively over all 65536 16-bit patterns, and fp32 -> 16-bit over
 * every 16-bit neighbourhood (exact values, ties, one ulp either side of
 * each tie) plus hand-picked cases.
 *
 * The oracles do not share code with the kernels: fp16 uses gcc's
 * _Float16 (libgcc soft-fp, round to nearest even), bf16 rounds in double
 * with rint() at the right scale.
 */
#include "kt.h"

/* Oracle: round fp32 x to bf16 (8-bit significand, fp32's exponent range). */
static uint16_t oracle_bf16(float x)
{
	uint32_t u = f2u(x);
	double d = x, r;
	int e;

	if (isnan(x))
		return (uint16_t)((u >> 16) | 0x40);
	if (isinf(x) || x == 0.0f)
		return (uint16_t)(u >> 16);
	frexp(d, &e);                    /* |d| in [2^(e-1), 2^e) */
	if (e - 1 < -126)
		e = -125;                /* subnormal: fixed quantum 2^-133 */
	r = ldexp(rint(ldexp(d, 8 - e)), e - 8); /* 8 significant bits, ties to even */
	if (fabs(r) >= 0x1p128)
		return (uint16_t)((u >> 16 & 0x8000) | 0x7f80);
	return (uint16_t)(f2u((float)r) >> 16);
}

static uint16_t oracle_f16(float x)
{
	_Float16 h;
	uint16_t b;

	if (isnan(x))
		return (uint16_t)(((f2u(x) >> 16) & 0x8000) | 0x7e00 | ((f2u(x) >> 13) & 0x3ff));
	h = (_Float16)x;
	memcpy(&b, &h, 2);
	return b;
}

static float oracle_f16_to_f32(uint16_t b)
{
	_Float16 h;

	if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff))
		return u2f(((uint32_t)(b & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)(b & 0x3ff) << 13));
	memcpy(&h, &b, 2);
	return (float)h;
}

#define NX (65536 * 8)
static float xs[NX];
static uint16_t got[NX], want[NX];
static float gotf[65536];
static uint16_t all16[65536];

static void check_to16(const struct spw_kernels *k, enum spw_dtype t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		want[i] = t == SPW_DTYPE_BF16 ? oracle_bf16(xs[i]) : oracle_f16(xs[i]);
	/* unaligned starts too: convert from xs + 1 */
	for (size_t off = 0; off < 2; off++) {
		memset(got, 0xa5, sizeof(got));
		k->cast[t][SPW_DTYPE_F32](got + off, xs + off, n - off);
		for (size_t i = off; i < n; i++) {
			uint16_t s = t == SPW_DTYPE_BF16 ? spw_f32_to_bf16(xs[i]) : spw_f32_to_f16(xs[i]);
			if (got[i] != want[i] || s != want[i])
				TEST_FAIL("%s: f32 0x%08x -> %s: got 0x%04x, scalar 0x%04x, want 0x%04x",
					  k->name, f2u(xs[i]), t == SPW_DTYPE_BF16 ? "bf16" : "f16",
					  got[i], s, want[i]);
		}
	}
}

int main(void)
{
	uint64_t seed = 0x5eed;
	size_t n;
	int variants = 0;

	for (uint32_t i = 0; i < 65536; i++)
		all16[i] = (uint16_t)i;

	/* Hand-picked fp32 -> bf16 cases. */
	static const struct { uint32_t in; uint16_t out; } bf[] = {
		{ 0x3f800000, 0x3f80 }, /* 1.0 */
		{ 0x3f808000, 0x3f80 }, /* tie, even stays */
		{ 0x3f818000, 0x3f82 }, /* tie, odd rounds up */
		{ 0x3f808001, 0x3f81 }, /* just above tie */
		{ 0x3f807fff, 0x3f80 }, /* just below tie */
		{ 0x7f7fffff, 0x7f80 }, /* FLT_MAX rounds to inf */
		{ 0x7f7f7fff, 0x7f7f }, /* just below: stays finite */
		{ 0x7f800000, 0x7f80 }, { 0xff800000, 0xff80 },  /* +-inf */
		{ 0x7fc00000, 0x7fc0 }, { 0xffc00001, 0xffc0 },  /* quiet nan */
		{ 0x7f800001, 0x7fc0 }, /* signalling nan, payload only in the low half: quiet nan */
		{ 0x00000001, 0x0000 }, /* tiniest subnormal rounds to 0 */
		{ 0x00008000, 0x0000 }, /* subnormal tie to even 0 */
		{ 0x00018000, 0x0002 }, /* subnormal tie to even 2 */
		{ 0x007fffff, 0x0080 }, /* largest subnormal rounds to FLT_MIN */
		{ 0x80000000, 0x8000 }, /* -0 */
	};
	for (size_t i = 0; i < sizeof(bf) / sizeof(bf[0]); i++) {
		ASSERT_UEQ(spw_f32_to_bf16(u2f(bf[i].in)), bf[i].out);
		ASSERT_UEQ(oracle_bf16(u2f(bf[i].in)), bf[i].out);
	}
	/* Hand-picked fp32 -> fp16 cases. */
	static const struct { uint32_t in; uint16_t out; } hf[] = {
		{ 0x3f800000, 0x3c00 }, /* 1.0 */
		{ 0x3f801000, 0x3c00 }, /* 1 + 2^-11: tie, even stays */
		{ 0x3f803000, 0x3c02 }, /* 1 + 3*2^-11: tie, odd rounds up */
		{ 0x477fe000, 0x7bff }, /* 65504, max half */
		{ 0x477fefff, 0x7bff }, /* just below the tie with 65536 */
		{ 0x477ff000, 0x7c00 }, /* 65520: tie, rounds to inf */
		{ 0x7f800000, 0x7c00 }, { 0xff800000, 0xfc00 },
		{ 0x7fc00000, 0x7e00 }, { 0x7f800001, 0x7e00 }, { 0xffffe000, 0xffff },
		{ 0x33800000, 0x0001 }, /* 2^-24, smallest subnormal half */
		{ 0x33000000, 0x0000 }, /* 2^-25: tie, to even 0 */
		{ 0x33000001, 0x0001 }, /* just above: rounds up */
		{ 0x33c00000, 0x0002 }, /* 1.5 * 2^-24: tie, to even 2 */
		{ 0x387fc000, 0x03ff }, /* largest subnormal half */
		{ 0x387fe000, 0x0400 }, /* tie between it and 2^-14: even = 0x400 */
		{ 0x38800000, 0x0400 }, /* 2^-14 */
		{ 0x00000001, 0x0000 }, { 0x80000001, 0x8000 },
	};
	for (size_t i = 0; i < sizeof(hf) / sizeof(hf[0]); i++) {
		ASSERT_UEQ(spw_f32_to_f16(u2f(hf[i].in)), hf[i].out);
		ASSERT_UEQ(oracle_f16(u2f(hf[i].in)), hf[i].out);
	}

	KT_FOR_EACH_VARIANT(k) {
		variants++;
		/* 16-bit -> fp32, every pattern, aligned and not. */
		for (size_t off = 0; off < 2; off++) {
			k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](gotf, all16 + off, 65536 - off);
			for (uint32_t i = (uint32_t)off; i < 65536; i++)
				if (f2u(gotf[i - off]) != i << 16)
					TEST_FAIL("%s: bf16 0x%04x -> 0x%08x", k->name, i, f2u(gotf[i - off]));
			k->cast[SPW_DTYPE_F32][SPW_DTYPE_F16](gotf, all16 + off, 65536 - off);
			for (uint32_t i = (uint32_t)off; i < 65536; i++) {
				float w = oracle_f16_to_f32((uint16_t)i);
				if (f2u(gotf[i - off]) != f2u(w) || f2u(spw_f16_to_f32((uint16_t)i)) != f2u(w))
					TEST_FAIL("%s: f16 0x%04x -> 0x%08x, scalar 0x%08x, want 0x%08x", k->name, i,
						  f2u(gotf[i - off]), f2u(spw_f16_to_f32((uint16_t)i)), f2u(w));
			}
		}

		/* fp32 -> bf16: every high half with low halves at and around the tie. */
		n = 0;
		for (uint32_t hi = 0; hi < 65536; hi++) {
			static const uint32_t lows[] = { 0, 1, 0x7fff, 0x8000, 0x8001, 0xffff };
			for (size_t j = 0; j < 6; j++)
				xs[n++] = u2f(hi << 16 | lows[j]);
			xs[n++] = u2f(hi << 16 | (uint32_t)(kt_rand(&seed) & 0xffff));
		}
		check_to16(k, SPW_DTYPE_BF16, n);

		/* fp32 -> fp16: every half value, the ties between neighbours and
		 * one fp32 ulp either side, and random fp32 of every exponent. */
		n = 0;
		for (uint32_t h = 0; h < 0x7c00; h++) {
			for (uint32_t s = 0; s < 2; s++) {
				float a = oracle_f16_to_f32((uint16_t)(h | s << 15));
				float b = oracle_f16_to_f32((uint16_t)((h + 1) | s << 15));
				float mid = (a + b) / 2; /* exact: 12 significant bits */
				xs[n++] = a;
				xs[n++] = mid;
				xs[n++] = nextafterf(mid, 0.0f);
				xs[n++] = nextafterf(mid, s ? -INFINITY : INFINITY);
			}
		}
		while (n < NX - 8)
			xs[n++] = u2f((uint32_t)kt_rand(&seed));
		xs[n++] = INFINITY;
		xs[n++] = -INFINITY;
		xs[n++] = NAN;
		check_to16(k, SPW_DTYPE_F16, n);

		/* bf16 <-> fp16, every pattern: through fp32, as documented. */
		{
			uint16_t o[65536];

			k->cast[SPW_DTYPE_F16][SPW_DTYPE_BF16](o, all16, 65536);
			for (uint32_t i = 0; i < 65536; i++)
				if (o[i] != oracle_f16(u2f(i << 16)))
					TEST_FAIL("%s: bf16 0x%04x -> f16 0x%04x, want 0x%04x", k->name, i, o[i],
						  oracle_f16(u2f(i << 16)));
			k->cast[SPW_DTYPE_BF16][SPW_DTYPE_F16](o, all16, 65536);
			for (uint32_t i = 0; i < 65536; i++)
				if (o[i] != oracle_bf16(oracle_f16_to_f32((uint16_t)i)))
					TEST_FAIL("%s: f16 0x%04x -> bf16 0x%04x", k->name, i, o[i]);
		}
		fprintf(stderr, "%s: conversions exact\n", k->name);
	}
	ASSERT_GE(variants, 1);
	return 0;
}
