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
 *   exp_avg (signed):      s = max |m|, q = round(127 * sqrt(|m| / s)) with
 *                          m's sign, in [-127, 127];
 *                          m = sign(q) * ((|q| * (1/127))^2 * s)
 *   exp_avg_sq (unsigned): s = max v, q = round(255 * sqrt(sqrt(v / s))),
 *                          in [0, 255]; v = ((q * (1/255))^2)^2 * s
 *
 * round is to nearest, ties to even; a nan ratio codes as 0; 1/127 and
 * 1/255 are the fp32 constants. The powers make the codes dense near zero
 * (the dynamic range is 127^-2 ~ 6e-5 of the block's largest |m| and
 * 255^-4 ~ 2e-10 of its largest v) as the 8-bit optimizers' dynamic codes
 * are, with arithmetic every ISA does exactly (division and sqrt are
 * correctly rounded). The largest element of a block codes exactly. s is
 * the largest |value| by its bits, so a nan in a block makes s a nan and
 * the whole block decodes as nan; an all-zero block has s = 0 and decodes
 * as zeros (zeroed memory is a block of zeros).
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

static inline int8_t spw_q8_enc_m(float m, float s)
{
	float x = spw_q8_of_bits(spw_q8_absbits(m));
	int q = spw_q8_clamp(rintf(sqrtf(x / s) * 127.0f), 127.0f);

	return (int8_t)(signbit(m) ? -q : q);
}

static inline uint8_t spw_q8_enc_v(float v, float s)
{
	return (uint8_t)spw_q8_clamp(rintf(sqrtf(sqrtf(v / s)) * 255.0f), 255.0f);
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
		float m[SPW_Q8_BLOCK], v[SPW_Q8_BLOCK], sm = ms[blk], sv = vs[blk];
		uint32_t mmax = 0, vmax = 0;

		for (size_t j = 0; j < e; j++) {
			size_t i = b + j;
			float gi = spw_q8_load_g(g, gt, i) * K.grad_scale;
			float pi = p[i] * K.decay;
			float m0 = spw_q8_dec_m(mq[i], sm), v0 = spw_q8_dec_v(vq[i], sv);
			float mi = m0 + K.one_minus_beta1 * (gi - m0);
			float vi = v0 * K.beta2 + K.one_minus_beta2 * gi * gi;
			float d = sqrtf(vi) * K.inv_bc2_sqrt + K.eps;

			pi = pi + K.neg_step_size * (mi / d);
			p[i] = pi;
			spw_q8_store_copy(c, ct, i, pi);
			m[j] = mi;
			v[j] = vi;
			if (spw_q8_absbits(mi) > mmax)
				mmax = spw_q8_absbits(mi);
			if (spw_q8_absbits(vi) > vmax)
				vmax = spw_q8_absbits(vi);
		}
		sm = ms[blk] = spw_q8_of_bits(mmax);
		sv = vs[blk] = spw_q8_of_bits(vmax);
		for (size_t j = 0; j < e; j++) {
			mq[b + j] = spw_q8_enc_m(m[j], sm);
			vq[b + j] = spw_q8_enc_v(v[j], sv);
		}
	}
}

#endif
