/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-q8.c: the 8-bit blockwise moments of SPW_STATE_INT8
 * (kernels/q8.h) and AdamW over them (adamw_q8).
 *
 * Codes: every code of both kinds, for scales over the fp32 range
 * (subnormal ones too), decodes to a value that encodes back to the same
 * code (the reference's code too), decodes in increasing order, and a
 * block's largest value codes exactly; random values code to the nearest
 * code of the transformed value (127 sqrt(x/s), 255 sqrt(sqrt(x/s))) as
 * double arithmetic finds it, though q8.h codes with a multiplier per
 * block and no division; nan, zero and infinite blocks code as documented.
 * Kernel: every variant (and the avx512 table without native bf16) against
 * a scalar reference written here from the formulas, every grad x copy
 * dtype, lengths 0..1300 (partial blocks), bit-identical params, codes,
 * scales and copies, nothing written past the span; a span run in pieces
 * cut at block boundaries equals the whole.
 */
#include <stdlib.h>

#include "kt.h"
#include "q8.h"

#define MAXN 1300
#define MAXB ((MAXN + SPW_Q8_BLOCK - 1) / SPW_Q8_BLOCK)
#define PADC 64

/* ---- the reference, from the formulas in q8.h's comment ---- */

static float r_dec_m(int8_t q, float s)
{
	float a = (float)abs(q) * (1.0f / 127.0f);
	float mag = (a * a) * s;

	return q < 0 ? -mag : mag;
}

static float r_dec_v(uint8_t q, float s)
{
	float a = (float)q * (1.0f / 255.0f), a2 = a * a;

	return (a2 * a2) * s;
}

static int r_round(float f, int top)
{
	f = nearbyintf(f);
	if (!(f >= 1.0f))
		return 0;
	return f > (float)top ? top : (int)f;
}

/* The codes from the scale s: round(sqrt(|m|) * (127 / sqrt(s))),
 * round(sqrt(sqrt(v)) * (255 / sqrt(sqrt(s)))). */
static int8_t r_enc_m(float m, float s)
{
	int q = r_round(sqrtf(fabsf(m)) * (127.0f / sqrtf(s)), 127);

	return (int8_t)(signbit(m) ? -q : q);
}

static uint8_t r_enc_v(float v, float s)
{
	return (uint8_t)r_round(sqrtf(sqrtf(v)) * (255.0f / sqrtf(sqrtf(s))), 255);
}

static float r_ld(const void *g, enum spw_dtype t, size_t i)
{
	if (t == SPW_DTYPE_F32)
		return ((const float *)g)[i];
	if (t == SPW_DTYPE_BF16)
		return u2f((uint32_t)((const uint16_t *)g)[i] << 16);
	return (float)((const _Float16 *)g)[i];
}

static void r_adamw_q8(const struct spw_adamw_consts *k, float *p, int8_t *mq, float *ms, uint8_t *vq, float *vs,
		       const void *g, enum spw_dtype gt, void *c, enum spw_dtype ct, size_t n)
{
	for (size_t b = 0; b * SPW_Q8_BLOCK < n; b++) {
		size_t lo = b * SPW_Q8_BLOCK, hi = lo + SPW_Q8_BLOCK < n ? lo + SPW_Q8_BLOCK : n;
		float m[SPW_Q8_BLOCK], v[SPW_Q8_BLOCK], smax = 0.0f, vmax = 0.0f;
		bool mnan = false, vnan = false;

		for (size_t i = lo; i < hi; i++) {
			float gi = r_ld(g, gt, i) * k->grad_scale, m0 = r_dec_m(mq[i], ms[b]), v0 = r_dec_v(vq[i], vs[b]);
			float pd = p[i] * k->decay, mi = m0 + k->one_minus_beta1 * (gi - m0);
			float t = k->one_minus_beta2 * gi, vi = v0 * k->beta2 + t * gi;
			float den = sqrtf(vi) * k->inv_bc2_sqrt + k->eps;

			p[i] = pd + k->neg_step_size * (mi / den);
			if (ct == SPW_DTYPE_F32)
				((float *)c)[i] = p[i];
			else if (ct == SPW_DTYPE_BF16)
				((uint16_t *)c)[i] = spw_f32_to_bf16(p[i]);
			else if (ct == SPW_DTYPE_F16)
				((uint16_t *)c)[i] = spw_f32_to_f16(p[i]);
			m[i - lo] = mi;
			v[i - lo] = vi;
			mnan |= isnan(mi);
			vnan |= isnan(vi);
			if (fabsf(mi) > smax)
				smax = fabsf(mi);
			if (fabsf(vi) > vmax)
				vmax = fabsf(vi);
		}
		/* A nan's bits are above every number's: the scale is a nan. */
		ms[b] = mnan ? NAN : smax;
		vs[b] = vnan ? NAN : vmax;
		for (size_t i = lo; i < hi; i++) {
			mq[i] = r_enc_m(m[i - lo], ms[b]);
			vq[i] = r_enc_v(v[i - lo], vs[b]);
		}
	}
}

/* ---- codes ---- */

static void check_codes(uint64_t *seed)
{
	static const float scales[] = { 1.0f, 3.7e-3f, 1e-20f, 2.5e30f, 0.015625f, 6.1e-5f, 1e-30f, 3.4e38f };

	for (size_t si = 0; si < sizeof(scales) / sizeof(scales[0]); si++) {
		float s = scales[si], prev_m = -INFINITY, prev_v = -1.0f, km = spw_q8_km(s), kv = spw_q8_kv(s);

		for (int q = -127; q <= 127; q++) {
			float m = spw_q8_dec_m((int8_t)q, s);

			if (!kt_same(m, r_dec_m((int8_t)q, s)))
				TEST_FAIL("dec_m(%d, %g) = %a, reference %a", q, s, m, r_dec_m((int8_t)q, s));
			if (spw_q8_enc_m(m, km) != q || r_enc_m(m, s) != q)
				TEST_FAIL("enc_m(dec_m(%d), %g) = %d, reference %d", q, s, spw_q8_enc_m(m, km),
					  r_enc_m(m, s));
			if (!(m > prev_m) && q != 1) /* -0 (q = 0) then +x */
				TEST_FAIL("dec_m not increasing at %d (scale %g)", q, s);
			prev_m = m;
		}
		for (int q = 0; q <= 255; q++) {
			float v = spw_q8_dec_v((uint8_t)q, s);

			if (!kt_same(v, r_dec_v((uint8_t)q, s)))
				TEST_FAIL("dec_v(%d, %g) differs from the reference", q, s);
			if (spw_q8_enc_v(v, kv) != q || spw_q8_enc_v_root(sqrtf(v), kv) != q || r_enc_v(v, s) != q)
				TEST_FAIL("enc_v(dec_v(%d), %g) = %d, reference %d", q, s, spw_q8_enc_v(v, kv),
					  r_enc_v(v, s));
			if (!(v > prev_v))
				TEST_FAIL("dec_v not increasing at %d (scale %g)", q, s);
			prev_v = v;
		}
		/* The block's largest value is the scale and codes exactly. */
		ASSERT_EQ(spw_q8_enc_m(s, km), 127);
		ASSERT_EQ(spw_q8_enc_m(-s, km), -127);
		ASSERT_EQ(spw_q8_enc_v(s, kv), 255);
		ASSERT_TRUE(spw_q8_dec_m(127, s) == s && spw_q8_dec_v(255, s) == s);
	}
	/* Nearest code in the transformed space, by double arithmetic. */
	for (int i = 0; i < 2000000; i++) {
		float s = kt_uniform(seed, 0.5f, 2.0f) * powf(10.0f, (float)(int)(kt_rand(seed) % 21) - 10.0f);
		float x = kt_uniform(seed, 0.0f, 1.0f) * s * (kt_rand(seed) % 3 ? 1.0f : 1e-6f);
		double tm = 127.0 * sqrt((double)x / s), tv = 255.0 * sqrt(sqrt((double)x / s));
		int qm = spw_q8_enc_m(x, spw_q8_km(s)), qv = spw_q8_enc_v(x, spw_q8_kv(s));

		/* Within a few ulps of a tie the float arithmetic may go either way. */
		if (fabs(tm - floor(tm) - 0.5) > 1e-4 && qm != (int)floor(tm + 0.5))
			TEST_FAIL("enc_m(%a, %a) = %d, nearest %.6f", x, s, qm, tm);
		if (fabs(tv - floor(tv) - 0.5) > 1e-4 && qv != (int)floor(tv + 0.5))
			TEST_FAIL("enc_v(%a, %a) = %d, nearest %.6f", x, s, qv, tv);
		if (qm != r_enc_m(x, s) || qv != r_enc_v(x, s))
			TEST_FAIL("enc(%a, %a) = %d %d, reference %d %d", x, s, qm, qv, r_enc_m(x, s), r_enc_v(x, s));
		if (spw_q8_enc_m(-x, spw_q8_km(s)) != -qm)
			TEST_FAIL("enc_m is not odd at %a", x);
	}
	/* Subnormal scales: the multiplier stays finite, the largest codes exactly. */
	for (uint32_t bits = 1; bits < 0x00800000u; bits = bits * 3 + 1) {
		float s = u2f(bits);

		ASSERT_TRUE(isfinite(spw_q8_km(s)) && isfinite(spw_q8_kv(s)));
		ASSERT_EQ(spw_q8_enc_m(s, spw_q8_km(s)), 127);
		ASSERT_EQ(spw_q8_enc_v(s, spw_q8_kv(s)), 255);
	}
	/* nan code as 0; a zero block codes and decodes as zeros; an
	 * infinite scale codes its finite values as 0. */
	ASSERT_EQ(spw_q8_enc_m(NAN, spw_q8_km(1.0f)), 0);
	ASSERT_EQ(spw_q8_enc_v(NAN, spw_q8_kv(1.0f)), 0);
	ASSERT_EQ(spw_q8_enc_m(1.0f, spw_q8_km(NAN)), 0);
	ASSERT_EQ(spw_q8_enc_m(0.0f, spw_q8_km(0.0f)), 0);
	ASSERT_EQ(spw_q8_enc_m(-0.0f, spw_q8_km(0.0f)), 0);
	ASSERT_EQ(spw_q8_enc_v(0.0f, spw_q8_kv(0.0f)), 0);
	ASSERT_EQ(spw_q8_enc_m(1e30f, spw_q8_km(INFINITY)), 0);
	ASSERT_EQ(spw_q8_enc_v(INFINITY, spw_q8_kv(INFINITY)), 0);
	ASSERT_TRUE(spw_q8_dec_m(0, 0.0f) == 0.0f && spw_q8_dec_v(0, 0.0f) == 0.0f);
	fprintf(stderr, "q8 codes: round trips, order, nearest codes, subnormal, nan, zero and inf blocks\n");
}

/* ---- kernels ---- */

struct st {
	float p[MAXN + PADC];
	int8_t mq[MAXN + PADC];
	uint8_t vq[MAXN + PADC];
	float ms[MAXB + 4], vs[MAXB + 4];
	_Alignas(32) union { float f[MAXN + PADC]; uint16_t h[2 * (MAXN + PADC)]; } c;
};

/* The copy-out again one element past a 32-byte boundary: the kernels
 * stream aligned copies around the cache and store the others. */
static _Alignas(32) unsigned char shifted[4 * (MAXN + PADC + 1)];

static struct st src, want, got;
static float gsrc[MAXN];
static union { float f[MAXN]; uint16_t h[MAXN]; } gt_buf;

static void fill(uint64_t *s)
{
	for (size_t i = 0; i < MAXN + PADC; i++) {
		src.p[i] = kt_uniform(s, -1.0f, 1.0f);
		src.mq[i] = (int8_t)((int)(kt_rand(s) % 255) - 127);
		src.vq[i] = (uint8_t)(kt_rand(s) % 256);
	}
	for (size_t b = 0; b < MAXB + 4; b++) {
		src.ms[b] = kt_uniform(s, 0.0f, 0.1f);
		src.vs[b] = kt_uniform(s, 0.0f, 0.01f);
	}
	src.ms[1] = 0.0f; /* a fresh block: zero scale */
	for (size_t i = 0; i < MAXN; i++) {
		uint64_t r = kt_rand(s) % 700;

		gsrc[i] = kt_uniform(s, -2.0f, 2.0f);
		if (r == 0)
			gsrc[i] = 0.0f;
		else if (r == 1)
			gsrc[i] = u2f((uint32_t)(kt_rand(s) & 0x807fffff));
		else if (r == 2)
			gsrc[i] = NAN;
		else if (r == 3)
			gsrc[i] = 6e4f;
	}
}

static void grads_as(enum spw_dtype t)
{
	for (size_t i = 0; i < MAXN; i++) {
		if (t == SPW_DTYPE_F32)
			gt_buf.f[i] = gsrc[i];
		else
			gt_buf.h[i] = t == SPW_DTYPE_BF16 ? spw_f32_to_bf16(gsrc[i]) : spw_f32_to_f16(gsrc[i]);
	}
}

static void compare(const char *name, int gtp, int ct, size_t n)
{
	size_t nb = (n + SPW_Q8_BLOCK - 1) / SPW_Q8_BLOCK, cs = spw_dtype_size(ct);

	for (size_t i = 0; i < MAXN + PADC; i++)
		if (!kt_same(got.p[i], want.p[i]) || got.mq[i] != want.mq[i] || got.vq[i] != want.vq[i])
			TEST_FAIL("%s adamw_q8 g=%d c=%d n=%zu i=%zu: p %a/%a m %d/%d v %u/%u", name, gtp, ct, n, i,
				  got.p[i], want.p[i], got.mq[i], want.mq[i], got.vq[i], want.vq[i]);
	for (size_t b = 0; b < MAXB + 4; b++)
		if (!kt_same(got.ms[b], want.ms[b]) || !kt_same(got.vs[b], want.vs[b]))
			TEST_FAIL("%s adamw_q8 g=%d c=%d n=%zu block %zu (of %zu): scales %a/%a %a/%a", name, gtp, ct, n,
				  b, nb, got.ms[b], want.ms[b], got.vs[b], want.vs[b]);
	if (cs && memcmp(got.c.f, want.c.f, (MAXN + PADC) * cs))
		TEST_FAIL("%s adamw_q8 copy g=%d c=%d n=%zu", name, gtp, ct, n);
}

static void check_kernel(const struct spw_kernels *k, const char *name, const struct spw_adamw_consts *kc,
			 size_t stride)
{
	for (int gtp = 0; gtp < SPW_DTYPE_COUNT; gtp++) {
		grads_as(gtp);
		for (int ct = 0; ct <= SPW_DTYPE_NONE; ct++) {
			for (size_t n = 0; n <= MAXN; n += n < 300 ? 1 : stride) {
				void *cw = ct == SPW_DTYPE_NONE ? NULL : want.c.f, *cg = ct == SPW_DTYPE_NONE ? NULL : got.c.f;

				want = src;
				got = src;
				memset(want.c.f, 0x5a, sizeof(want.c));
				memset(got.c.f, 0x5a, sizeof(got.c));
				r_adamw_q8(kc, want.p, want.mq, want.ms, want.vq, want.vs, gt_buf.f, gtp, cw, ct, n);
				k->adamw_q8[gtp][ct](kc, got.p, got.mq, got.ms, got.vq, got.vs, gt_buf.f, cg, n);
				compare(name, gtp, ct, n);
				if (cg) {
					size_t cs = spw_dtype_size(ct);

					memset(shifted, 0x5a, sizeof(shifted));
					got = src;
					k->adamw_q8[gtp][ct](kc, got.p, got.mq, got.ms, got.vq, got.vs, gt_buf.f,
							     shifted + cs, n);
					if (memcmp(shifted + cs, want.c.f, (MAXN + PADC) * cs))
						TEST_FAIL("%s adamw_q8 unaligned copy g=%d c=%d n=%zu", name, gtp, ct, n);
				}
				/* In pieces cut at block boundaries: the same. */
				if (n > 2 * SPW_Q8_BLOCK && ct == SPW_DTYPE_BF16) {
					size_t cut = SPW_Q8_BLOCK * (1 + n % 2), gs = spw_dtype_size(gtp);

					got = src;
					memset(got.c.f, 0x5a, sizeof(got.c));
					k->adamw_q8[gtp][ct](kc, got.p, got.mq, got.ms, got.vq, got.vs, gt_buf.f, got.c.h, cut);
					k->adamw_q8[gtp][ct](kc, got.p + cut, got.mq + cut, got.ms + cut / SPW_Q8_BLOCK,
							     got.vq + cut, got.vs + cut / SPW_Q8_BLOCK,
							     (const char *)gt_buf.f + cut * gs, got.c.h + cut, n - cut);
					compare(name, gtp, ct, n);
				}
			}
		}
	}
}

int main(void)
{
	static const struct spw_adamw_hparams hps[] = {
		{ .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
		  .grad_scale = 1.0f, .step = 1 },
		{ .lr = 3e-4f, .beta1 = 0.95f, .beta2 = 0.98f, .eps = 1e-6f, .weight_decay = 0.1f,
		  .grad_scale = 0.37f, .step = 1000 },
	};
	uint64_t seed = 11;
	int variants = 0;

	check_codes(&seed);
	fill(&seed);
	KT_FOR_EACH_VARIANT(k) {
		variants++;
		for (size_t h = 0; h < sizeof(hps) / sizeof(hps[0]); h++) {
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hps[h], &kc));
			check_kernel(k, k->name, &kc, h ? 61 : 7);
			if (!strcmp(k->name, "avx512") && k != &spw__kernels_avx512)
				check_kernel(&spw__kernels_avx512, "avx512 (integer bf16)", &kc, 61);
		}
		fprintf(stderr, "%s: q8 AdamW bit-identical to the reference\n", k->name);
	}
	ASSERT_GE(variants, 1);
	return 0;
}
