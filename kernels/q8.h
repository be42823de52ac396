/* SPDX-License-Identifier: MIT */
/*
 * kernels/q8.h: the 8-bit blockwise codes of SPW_STATE_INT8 moments, as
 * scalar definitions every variant's kernels agree with (tests/kernels
 * checks every code), and the portable AdamW over them that the c variant
 * compiles (adamw-avx2.c and adamw-avx512.c have their own, the same bits).
 *
 * Moments are cut into blocks of SPW_Q8_BLOCK elements (a span's last
 * block may be shorter); each block has one fp32 scale s and one byte per
 * element:
 *
 *   exp_avg (signed):      s = max |m|, k = 127 / sqrt(s),
 *                          q = round(sqrt(|m|) * k) with m's sign, in
 *                          [-127, 127]; m = sign(q) * ((|q| * (1/127))^2 * s)
 *   exp_avg_sq (unsigned): s = max v, k = 255 / sqrt(sqrt(s)),
 *                          q = round(sqrt(sqrt(v)) * k), in [0, 255];
 *                          v = ((q * (1/255))^2)^2 * s
 *
 * each operation in fp32 as written, correctly rounded (sqrt, the one
 * division per block, the products); round is to nearest, ties to even;
 * a nan product codes as 0; 1/127 and 1/255 are the fp32 constants. So q
 * is the nearest code to 127 sqrt(|m| / s) (255 (v / s)^(1/4)) but within
 * a few ulps of a tie. Per element that is a square root and a product for
 * exp_avg, and for exp_avg_sq one square root more than the update's own
 * sqrt(v) (which the kernels reuse): no division per element. The powers
 * make the codes dense near zero (the dynamic range is 127^-2 ~ 6e-5 of
 * the block's largest |m| and 255^-4 ~ 2e-10 of its largest v) as the
 * 8-bit optimizers' dynamic codes are, with arithmetic every ISA does
 * exactly. The largest element of a block codes exactly. s is the largest
 * |value| by its bits, so a nan in a block makes s a nan and the whole
 * block decodes as nan; an all-zero block has s = 0 (k = inf, every
 * product 0 * inf a nan, coded 0) and decodes as zeros (zeroed memory is a
 * block of zeros).
 */
#ifndef SPW_KERNELS_Q8_H
#define SPW_KERNELS_Q8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SPW_Q8_BLOCK 256
#define SPW_Q8_INV127 (1.0f / 127.0f)
#define SPW_Q8_INV255 (1.0f / 255.0f)

static inline uint32_t spw_q8_absbits(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	return u & 0x7fffffffu;
}

static inline float spw_q8_of_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline float spw_q8_dec_m(int8_t q, float s)
{
	float a = (float)(q < 0 ? -q : q) * SPW_Q8_INV127, mag = (a * a) * s;

	return q < 0 ? -mag : mag;
}

static inline float spw_q8_dec_v(uint8_t q, float s)
{
	float a = (float)q * SPW_Q8_INV255, a2 = a * a;

	return (a2 * a2) * s;
}

/* f rounded (already a whole number or nan) clamped to [0, top], nan -> 0. */
static inline int spw_q8_clamp(float f, float top)
{
	return f >= 1.0f ? (int)(f >= top ? top : f) : 0;
}

/* A block's multipliers from its scale s: one division per block. */
static inline float spw_q8_km(float s)
{
	return 127.0f / sqrtf(s);
}

static inline float spw_q8_kv(float s)
{
	return 255.0f / sqrtf(sqrtf(s));
}

/*
 * Coding splits in two: a root that needs no scale (sqrt(|m|) with m's
 * sign bit; sqrt(sqrt(v)), from the update's own r = sqrt(v)), computed
 * while the update runs, and the code from the root once the block's
 * multiplier is known. The portable loop and the avx2 kernel take the
 * roots in the update's pass, which leaves the coding pass a product and
 * a rounding; the avx512 kernel still takes them while coding. The same
 * IEEE operations on the same values either way, so the same bits.
 */
static inline float spw_q8_root_m(float m)
{
	uint32_t u;
	float r = sqrtf(spw_q8_of_bits(spw_q8_absbits(m)));

	memcpy(&u, &m, 4);
	return spw_q8_of_bits(spw_q8_absbits(r) | (u & 0x80000000u));
}

static inline float spw_q8_root_v(float r)
{
	return sqrtf(r);
}

/* m's code from x = spw_q8_root_m(m), in a block of multiplier km. */
static inline int8_t spw_q8_enc_root_m(float x, float km)
{
	uint32_t u;
	int q = spw_q8_clamp(rintf(spw_q8_of_bits(spw_q8_absbits(x)) * km), 127.0f);

	memcpy(&u, &x, 4);
	return (int8_t)(u >> 31 ? -q : q);
}

/* v's code from x = spw_q8_root_v(sqrtf(v)), in a block of multiplier kv. */
static inline uint8_t spw_q8_enc_root_v(float x, float kv)
{
	return (uint8_t)spw_q8_clamp(rintf(x * kv), 255.0f);
}

/* m's code in a block of multiplier km = spw_q8_km(s). */
static inline int8_t spw_q8_enc_m(float m, float km)
{
	return spw_q8_enc_root_m(spw_q8_root_m(m), km);
}

/* v's code from r = sqrtf(v), in a block of multiplier kv = spw_q8_kv(s). */
static inline uint8_t spw_q8_enc_v_root(float r, float kv)
{
	return spw_q8_enc_root_v(spw_q8_root_v(r), kv);
}

static inline uint8_t spw_q8_enc_v(float v, float kv)
{
	return spw_q8_enc_v_root(sqrtf(v), kv);
}

/*
 * The portable AdamW over q8 moments (the c variant): the
 * update of kernels.h on the decoded moments, the parameter from the fp32
 * moments, then each block's new scales and codes. include kernels.h
 * first. gt and ct are constants at each call site.
 */
static inline __attribute__((always_inline)) float spw_q8_load_g(const void *g, int gt, size_t i)
{
	if (gt == 1) /* SPW_DTYPE_BF16 */
		return spw_bf16_to_f32(((const uint16_t *)g)[i]);
	if (gt == 2) /* SPW_DTYPE_F16 */
		return spw_f16_to_f32(((const uint16_t *)g)[i]);
	return ((const float *)g)[i];
}

static inline __attribute__((always_inline)) void spw_q8_store_copy(void *c, int ct, size_t i, float p)
{
	if (ct == 0)
		((float *)c)[i] = p;
	else if (ct == 1)
		((uint16_t *)c)[i] = spw_f32_to_bf16(p);
	else if (ct == 2)
		((uint16_t *)c)[i] = spw_f32_to_f16(p);
}

static inline __attribute__((always_inline)) void spw_q8_adamw_portable(
	const struct spw_adamw_consts *k, float *p, int8_t *mq, float *ms, uint8_t *vq, float *vs,
	const void *g, void *c, size_t n, int gt, int ct)
{
	const struct spw_adamw_consts K = *k;

	for (size_t b = 0; b < n; b += SPW_Q8_BLOCK) {
		size_t e = n - b < SPW_Q8_BLOCK ? n - b : SPW_Q8_BLOCK, blk = b / SPW_Q8_BLOCK;
		/* The roots of m and v, to code once the block's scales are known. */
		float m[SPW_Q8_BLOCK], r[SPW_Q8_BLOCK], sm = ms[blk], sv = vs[blk], km, kv;
		uint32_t mmax = 0, vmax = 0;

		for (size_t j = 0; j < e; j++) {
			size_t i = b + j;
			float gi = spw_q8_load_g(g, gt, i) * K.grad_scale;
			float pi = p[i] * K.decay;
			float m0 = spw_q8_dec_m(mq[i], sm), v0 = spw_q8_dec_v(vq[i], sv);
			float mi = m0 + K.one_minus_beta1 * (gi - m0);
			float vi = v0 * K.beta2 + K.one_minus_beta2 * gi * gi;
			float ri = sqrtf(vi), d = ri * K.inv_bc2_sqrt + K.eps;

			pi = pi + K.neg_step_size * (mi / d);
			p[i] = pi;
			spw_q8_store_copy(c, ct, i, pi);
			m[j] = spw_q8_root_m(mi);
			r[j] = spw_q8_root_v(ri);
			if (spw_q8_absbits(mi) > mmax)
				mmax = spw_q8_absbits(mi);
			if (spw_q8_absbits(vi) > vmax)
				vmax = spw_q8_absbits(vi);
		}
		sm = ms[blk] = spw_q8_of_bits(mmax);
		sv = vs[blk] = spw_q8_of_bits(vmax);
		km = spw_q8_km(sm);
		kv = spw_q8_kv(sv);
		for (size_t j = 0; j < e; j++) {
			mq[b + j] = spw_q8_enc_root_m(m[j], km);
			vq[b + j] = spw_q8_enc_root_v(r[j], kv);
		}
	}
}

#endif
