/* SPDX-License-Identifier: MIT */
/*
 * kernels/adamw-c.c: the plain C variant, and the float forms of the fp16
 * conversions (their recipes: convert.h). Every SIMD variant must give
 * exactly these bits, so the operation order here is the contract (see
 * kernels.h), compiled with -ffp-contract=off so no multiply-add gets fused
 * behind our back.
 */
#include <math.h>
#include <string.h>

#include "variant.h"

float spw_f16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } x = { .u = spw_f16_bits_to_f32_bits(h) };

	return x.f;
}

uint16_t spw_f32_to_f16(float f)
{
	union { float f; uint32_t u; } x = { .f = f };

	return spw_f32_bits_to_f16(x.u);
}

static inline __attribute__((always_inline)) float load_g(const void *g, enum spw_dtype t, size_t i)
{
	switch (t) {
	case SPW_DTYPE_BF16:
		return spw_bf16_to_f32(((const uint16_t *)g)[i]);
	case SPW_DTYPE_F16:
		return spw_f16_to_f32(((const uint16_t *)g)[i]);
	default:
		return ((const float *)g)[i];
	}
}

static inline __attribute__((always_inline)) void store_copy(void *c, enum spw_dtype t, size_t i, float p)
{
	switch (t) {
	case SPW_DTYPE_F32:
		((float *)c)[i] = p;
		break;
	case SPW_DTYPE_BF16:
		((uint16_t *)c)[i] = spw_f32_to_bf16(p);
		break;
	case SPW_DTYPE_F16:
		((uint16_t *)c)[i] = spw_f32_to_f16(p);
		break;
	default:
		break;
	}
}

/* Moments: fp32, or bf16 widened exactly and stored rounded to nearest even. */
static inline __attribute__((always_inline)) float load_m(const void *m, enum spw_dtype t, size_t i)
{
	return t == SPW_DTYPE_BF16 ? spw_bf16_to_f32(((const uint16_t *)m)[i]) : ((const float *)m)[i];
}

static inline __attribute__((always_inline)) void store_m(void *m, enum spw_dtype t, size_t i, float x)
{
	if (t == SPW_DTYPE_BF16)
		((uint16_t *)m)[i] = spw_f32_to_bf16(x);
	else
		((float *)m)[i] = x;
}

/* gt, ct and mt are constants at every call site, so each instance is a tight loop. */
static inline __attribute__((always_inline)) void adamw_span(const struct spw_adamw_consts *k, float *restrict p,
			      void *restrict m, void *restrict v, const void *restrict g,
			      void *restrict c, size_t n, enum spw_dtype gt, enum spw_dtype ct,
			      enum spw_dtype mt)
{
	const struct spw_adamw_consts K = *k;

	for (size_t i = 0; i < n; i++) {
		float gi = load_g(g, gt, i) * K.grad_scale;
		float pi = p[i] * K.decay;
		float m0 = load_m(m, mt, i), v0 = load_m(v, mt, i);
		float mi = m0 + K.one_minus_beta1 * (gi - m0);
		float vi = v0 * K.beta2 + K.one_minus_beta2 * gi * gi;
		float d = sqrtf(vi) * K.inv_bc2_sqrt + K.eps;

		pi = pi + K.neg_step_size * (mi / d);
		p[i] = pi;
		store_m(m, mt, i, mi);
		store_m(v, mt, i, vi);
		store_copy(c, ct, i, pi);
	}
}

VARIANT_ADAMW_FNS()
VARIANT_Q8_FNS()

static inline __attribute__((always_inline)) double sumsq_span(const void *x, size_t n, enum spw_dtype t)
{
	double l[32] = { 0 };
	size_t i = 0;

	for (; i + 32 <= n; i += 32)
		for (size_t j = 0; j < 32; j++) {
			double d = load_g(x, t, i + j);
			l[j] += d * d;
		}
	for (size_t j = 0; i + j < n; j++) {
		double d = load_g(x, t, i + j);
		l[j] += d * d;
	}
	for (size_t w = 16; w; w /= 2)
		for (size_t j = 0; j < w; j++)
			l[j] += l[j + w];
	return l[0];
}

/* expo: the exponent mask; all ones is inf or nan. bytes and expo are
 * constants at each call, so each instance is a plain loop. */
static inline __attribute__((always_inline)) bool nonfinite_span(const void *x, size_t n, size_t bytes, uint32_t expo)
{
	uint32_t any = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t u = bytes == 4 ? ((const uint32_t *)x)[i] : ((const uint16_t *)x)[i];

		any |= (u & expo) == expo;
	}
	return any;
}

static bool nonfinite_f32(const void *x, size_t n) { return nonfinite_span(x, n, 4, 0x7f800000u); }
static bool nonfinite_bf16(const void *x, size_t n) { return nonfinite_span(x, n, 2, 0x7f80u); }
static bool nonfinite_f16(const void *x, size_t n) { return nonfinite_span(x, n, 2, 0x7c00u); }

VARIANT_COPY_FNS()

static void cast_bf16_f32(void *d, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint16_t *)d)[i] = spw_f32_to_bf16(((const float *)s)[i]);
}

static void cast_f16_f32(void *d, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint16_t *)d)[i] = spw_f32_to_f16(((const float *)s)[i]);
}

static void cast_f32_bf16(void *d, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((float *)d)[i] = spw_bf16_to_f32(((const uint16_t *)s)[i]);
}

static void cast_f32_f16(void *d, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((float *)d)[i] = spw_f16_to_f32(((const uint16_t *)s)[i]);
}

static void cast_f16_bf16(void *d, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint16_t *)d)[i] = spw_f32_to_f16(spw_bf16_to_f32(((const uint16_t *)s)[i]));
}

static void cast_bf16_f16(void *d, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint16_t *)d)[i] = spw_f32_to_bf16(spw_f16_to_f32(((const uint16_t *)s)[i]));
}

static inline __attribute__((always_inline)) void acc_span(float *restrict a, const void *restrict g, size_t n, enum spw_dtype t)
{
	for (size_t i = 0; i < n; i++)
		a[i] += load_g(g, t, i);
}

VARIANT_SUMSQ_ACC_FNS()

static void scale_f32(float *x, float s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

static void round_sr(uint16_t *restrict dst, const float *restrict x, size_t n, uint32_t key, uint64_t index)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = spw_f32_to_bf16_sr(x[i], key, index + i);
}

VARIANT_TABLE(spw__kernels_c, "c", );
