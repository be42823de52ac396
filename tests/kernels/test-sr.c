/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-sr.c: stochastic rounding fp32 -> bf16 (kernels/sr.h,
 * round_sr).
 *
 * The definition: sr.h's functions equal the formulas written out again
 * here, on random and special inputs. Every variant the CPU runs:
 * bit-identical to spw_f32_to_bf16_sr() on random finite values of every
 * exponent and both signs, bf16-representable values, zeros, subnormals,
 * the largest finite floats, infinities, quiet and signalling nans with
 * payloads; for every n up to 70 and some larger, unaligned source and
 * destination, odd start indices, indices about 2^32 (the 32-bit lanes
 * wrap) and 2^64, several keys; nothing written outside the span. A span
 * cut in two at any point gives the same bits as one call. Representable
 * values and infinities are kept, every other non-nan becomes one of its
 * two bf16 neighbours, nans come out as spw_f32_to_bf16() makes them.
 * Over 65536 consecutive indices the mean of the results is within 1/64
 * of a bf16 ulp of x and the fraction rounded up within 0.01 of the
 * dropped bits' share (deterministic: the bits are a function of key and
 * index). Different keys, and different indices, give different patterns.
 */
#include "kt.h"
#include "sr.h"

#define MAXN 4099
#define OFFS 3          /* source and destination start up to this many elements in */
#define GUARD 24        /* destination elements checked untouched either side */
#define NSTAT 65536
#define GUARD_BITS 0xa5a5u

/* ---- the definition, written out again from the specification ----
 * (the constants in decimal, so a slip in sr.h's hex is not copied) */

static uint32_t r_bits(uint32_t key, uint64_t index)
{
	uint32_t x = key + (uint32_t)(index & 0xffffffffu) * 2654435769u;

	x = (x ^ (x >> 16)) * 569420461u;
	x = (x ^ (x >> 15)) * 1935289751u;
	return (x ^ (x >> 15)) >> 16;
}

static uint16_t r_round(uint32_t u, uint32_t key, uint64_t index)
{
	if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
		return (uint16_t)((u >> 16) | 0x0040u);
	return (uint16_t)((u + r_bits(key, index)) >> 16);
}

static void check_definition(uint64_t *seed)
{
	static const uint32_t special[] = {
		0x00000000u, 0x80000000u, 0x00000001u, 0x8000ffffu, 0x007fffffu, 0x7f7fffffu, 0xff7fffffu,
		0x7f7f0000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u, 0x7f800001u, 0xff80ffffu,
		0x7fa00000u, 0x7fffffffu, 0xffffffffu, 0x3f800000u, 0x3f800001u, 0x3f80ffffu,
	};

	for (int i = 0; i < 1000000; i++) {
		uint32_t u = (uint32_t)kt_rand(seed), key = (uint32_t)kt_rand(seed);
		uint64_t index = kt_rand(seed);

		if (i % 7 == 0)
			u = special[kt_rand(seed) % (sizeof(special) / sizeof(special[0]))];
		if (spw_sr_bits(key, index) != r_bits(key, index))
			TEST_FAIL("spw_sr_bits(%#x, %#jx) = %#x, the formula gives %#x", key, (uintmax_t)index,
				  spw_sr_bits(key, index), r_bits(key, index));
		if (spw_f32_to_bf16_sr(u2f(u), key, index) != r_round(u, key, index))
			TEST_FAIL("spw_f32_to_bf16_sr(%#010x, %#x, %#jx) = %#06x, the formula gives %#06x", u, key,
				  (uintmax_t)index, spw_f32_to_bf16_sr(u2f(u), key, index), r_round(u, key, index));
	}
	/* Only the low 32 bits of the index count. */
	ASSERT_UEQ(spw_sr_bits(7, 5), spw_sr_bits(7, 5 + (1ull << 32)));
	ASSERT_UEQ(spw_sr_bits(7, 0xffffffffull), spw_sr_bits(7, UINT64_MAX));
	fprintf(stderr, "sr.h: the definition as specified\n");
}

/* ---- inputs ---- */

static float pool[MAXN + OFFS];

static uint32_t nan_bits(uint64_t *s, bool quiet)
{
	uint32_t pay = (uint32_t)kt_rand(s) & 0x003fffffu, sign = (uint32_t)(kt_rand(s) & 1) << 31;

	if (quiet)
		return sign | 0x7fc00000u | pay;
	/* Signalling: quiet bit clear, payload not zero (else it is inf); some
	 * with the top payload bits zero, which truncation would make inf. */
	if (kt_rand(s) & 1)
		pay &= 0xffffu;
	return sign | 0x7f800000u | (pay ? pay : 1u);
}

static uint32_t input_bits(uint64_t *s)
{
	uint32_t sign = (uint32_t)(kt_rand(s) & 1) << 31, r = (uint32_t)kt_rand(s);

	switch (kt_rand(s) % 16) {
	case 0: /* representable in bf16 */
		return (r & 0xffff0000u) % 0x7f800000u | sign;
	case 1:
		return sign;
	case 2: /* subnormal */
		return sign | (r & 0x007fffffu);
	case 3: /* the largest finites: some round to inf */
		return sign | 0x7f7f0000u | (r & 0xffffu);
	case 4:
		return sign | 0x7f800000u;
	case 5:
		return nan_bits(s, true);
	case 6:
		return nan_bits(s, false);
	case 7: /* low bits all ones: the largest carry */
		return sign | (r & 0x7f7f0000u) | 0xffffu;
	default: /* finite, any exponent */
		return sign | ((1u + r % 254u) << 23) | ((uint32_t)kt_rand(s) & 0x007fffffu);
	}
}

static void fill_pool(uint64_t *s)
{
	for (size_t i = 0; i < MAXN + OFFS; i++)
		pool[i] = u2f(input_bits(s));
}

/* ---- one span against the scalar definition ---- */

static uint16_t out[MAXN + OFFS + 2 * GUARD];

/* Runs round_sr on x[0..n) into out at doff and checks every element
 * and the guards; returns the results. */
static const uint16_t *run_check(const struct spw_kernels *k, const float *x, size_t n, size_t doff, uint32_t key,
				 uint64_t index)
{
	uint16_t *dst = out + GUARD + doff;

	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
		out[i] = GUARD_BITS;
	k->round_sr(dst, x, n, key, index);
	for (size_t i = 0; i < n; i++) {
		uint16_t want = spw_f32_to_bf16_sr(x[i], key, index + i);

		if (dst[i] != want)
			TEST_FAIL("%s round_sr n=%zu key=%#x index=%#jx: first mismatch at i=%zu, x=%#010x: "
				  "want %#06x got %#06x",
				  k->name, n, key, (uintmax_t)index, i, f2u(x[i]), want, dst[i]);
	}
	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
		if ((out + i < dst || out + i >= dst + n) && out[i] != GUARD_BITS)
			TEST_FAIL("%s round_sr n=%zu doff=%zu: wrote element %td outside the span", k->name, n, doff,
				  (out + i) - dst);
	return dst;
}

static const uint32_t keys[] = { 0, 1, 0xdeadbeefu, 0xffffffffu };
static const uint64_t starts[] = {
	0, 1, 12345, 0xffffffffull - 37, 0xfffffff9ull, 0x123456789abcdef1ull, UINT64_MAX - 20,
};

static void check_exact(const struct spw_kernels *k)
{
	size_t calls = 0;

	for (size_t ki = 0; ki < sizeof(keys) / sizeof(keys[0]); ki++)
		for (size_t si = 0; si < sizeof(starts) / sizeof(starts[0]); si++)
			for (size_t n = 0; n <= MAXN; n = n < 70 ? n + 1 : n == 70 ? 1000 : n == 1000 ? MAXN - 32 : n + 16) {
				size_t off = (n + si) % (OFFS + 1);

				run_check(k, pool + off, n, (n + ki) % (OFFS + 1), keys[ki], starts[si]);
				calls++;
			}
	fprintf(stderr, "%s: %zu spans bit-identical to spw_f32_to_bf16_sr\n", k->name, calls);
}

/* ---- a span cut in two ---- */

static uint16_t whole[MAXN];

static void check_split(const struct spw_kernels *k)
{
	static const size_t lens[] = { 70, 200, MAXN };

	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t si = 0; si < sizeof(starts) / sizeof(starts[0]); si++) {
			size_t n = lens[li];
			uint32_t key = keys[(li + si) % 4];
			uint64_t index = starts[si];

			memcpy(whole, run_check(k, pool + 1, n, 0, key, index), n * 2);
			/* Every split point of the short ones, a spread of the long one. */
			for (size_t cut = 0; cut <= n; cut += n > 200 ? 1 + cut % 97 : 1) {
				uint16_t *dst = out + GUARD;

				memset(out, 0, sizeof(out));
				k->round_sr(dst, pool + 1, cut, key, index);
				k->round_sr(dst + cut, pool + 1 + cut, n - cut, key, index + cut);
				if (memcmp(dst, whole, n * 2)) {
					size_t i = 0;

					while (dst[i] == whole[i])
						i++;
					TEST_FAIL("%s round_sr cut at %zu of %zu (index %#jx): i=%zu got %#06x, whole %#06x",
						  k->name, cut, n, (uintmax_t)index, i, dst[i], whole[i]);
				}
			}
		}
	fprintf(stderr, "%s: spans cut in two equal one call\n", k->name);
}

/* ---- what the result may be ---- */

static void check_neighbours(const struct spw_kernels *k)
{
	size_t up = 0, down = 0;

	for (size_t ki = 0; ki < sizeof(keys) / sizeof(keys[0]); ki++) {
		const uint16_t *r = run_check(k, pool, MAXN, 1, keys[ki], 977 + ki);

		for (size_t i = 0; i < MAXN; i++) {
			uint32_t u = f2u(pool[i]);
			uint16_t t = (uint16_t)(u >> 16);

			if (isnan(pool[i])) {
				if (r[i] != spw_f32_to_bf16(pool[i]) || (r[i] & 0x7fc0u) != 0x7fc0u ||
				    (r[i] & 0x8000u) != (t & 0x8000u))
					TEST_FAIL("%s: nan %#010x became %#06x, not the quiet nan %#06x", k->name, u,
						  r[i], spw_f32_to_bf16(pool[i]));
			} else if (!(u & 0xffffu)) {
				if (r[i] != t)
					TEST_FAIL("%s: representable %#010x became %#06x", k->name, u, r[i]);
			} else if (r[i] == t) {
				down++;
			} else if (r[i] == t + 1) {
				up++;
			} else {
				TEST_FAIL("%s: %#010x became %#06x, neither %#06x nor %#06x", k->name, u, r[i], t,
					  t + 1);
			}
		}
	}
	/* Both ways, often: neither truncation nor rounding up alone. */
	ASSERT_GT(up, (up + down) / 4);
	ASSERT_GT(down, (up + down) / 4);
	fprintf(stderr, "%s: kept when representable, else a neighbour (%zu up, %zu down)\n", k->name, up, down);
}

/* ---- unbiased ---- */

static float xs[NSTAT];
static uint16_t rs[NSTAT];

static void check_unbiased(const struct spw_kernels *k)
{
	static const float vals[] = {
		1.0f + 3.0f * 0x1p-12f, -(2.0f + 0x1p-10f), 1e-3f, 0x1.00fffep0f, -0x1.0001p-3f, 0x1.0080p+100f, 3e-39f,
	};
	static const uint64_t bases[] = { 0, 0xfffff000ull, 0x5555555555555ull };

	for (size_t vi = 0; vi < sizeof(vals) / sizeof(vals[0]); vi++)
		for (size_t bi = 0; bi < sizeof(bases) / sizeof(bases[0]); bi++) {
			float x = vals[vi];
			uint32_t u = f2u(x), key = keys[(vi + bi) % 4];
			/* A bf16 ulp of x: from its exponent, subnormals' is the smallest. */
			uint32_t e = (u >> 23) & 0xffu;
			double ulp = ldexp(1.0, (e ? (int)e : 1) - 127 - 7);
			double frac = (double)(u & 0xffffu) / 65536.0, mean = 0.0, fup;
			size_t up = 0;

			for (size_t i = 0; i < NSTAT; i++)
				xs[i] = x;
			k->round_sr(rs, xs, NSTAT, key, bases[bi]);
			for (size_t i = 0; i < NSTAT; i++) {
				mean += spw_bf16_to_f32(rs[i]);
				up += rs[i] != (uint16_t)(u >> 16);
			}
			mean /= NSTAT;
			fup = (double)up / NSTAT;
			if (fabs(mean - (double)x) > ulp / 64 || fabs(fup - frac) > 0.01)
				TEST_FAIL("%s: x=%a (key %#x, from index %#jx): mean %a is %.5f ulp off, "
					  "rounded up %.5f of the time, dropped bits %.5f",
					  k->name, (double)x, key, (uintmax_t)bases[bi], mean,
					  fabs(mean - (double)x) / ulp, fup, frac);
		}
	fprintf(stderr, "%s: mean within 1/64 ulp, rounded up as often as the dropped bits say\n", k->name);
}

/* ---- keys and indices draw different bits ---- */

static uint16_t pat[8][NSTAT / 16];

static void check_keys(const struct spw_kernels *k)
{
	const size_t n = NSTAT / 16;
	const float x = 1.0f + 0x1p-8f; /* halfway: rounds up half the time */

	for (size_t i = 0; i < n; i++)
		xs[i] = x;
	for (uint32_t key = 0; key < 6; key++)
		k->round_sr(pat[key], xs, n, key * 0x01000193u, 4096);
	/* The same key from other indices: shifted patterns are new too. */
	k->round_sr(pat[6], xs, n, 0, 4096 + 1);
	k->round_sr(pat[7], xs, n, 0, 4096 + n);
	for (int a = 0; a < 8; a++)
		for (int b = a + 1; b < 8; b++) {
			size_t diff = 0;

			for (size_t i = 0; i < n; i++)
				diff += pat[a][i] != pat[b][i];
			/* Independent fair coins disagree on half: about n / 2. */
			if (diff < n / 3 || diff > 2 * n / 3)
				TEST_FAIL("%s: patterns %d and %d differ in %zu of %zu elements", k->name, a, b, diff, n);
		}
	fprintf(stderr, "%s: different keys and indices, different patterns\n", k->name);
}

int main(void)
{
	uint64_t seed = 0x5eed5;
	int variants = 0;

	check_definition(&seed);
	fill_pool(&seed);
	KT_FOR_EACH_VARIANT(k) {
		variants++;
		check_exact(k);
		check_split(k);
		check_neighbours(k);
		check_unbiased(k);
		check_keys(k);
	}
	ASSERT_GE(variants, 1);
	return 0;
}
