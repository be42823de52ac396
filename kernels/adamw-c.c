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

#include "kernels.h"

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

/* gt and ct are constants at every call site, so each instance is a tight loop. */
static inline __attribute__((always_inline)) void adamw_span(const struct spw_adamw_consts *k, float *restrict p,
			      float *restrict m, float *restrict v, const void *restrict g,
			      void *restrict c, size_t n, enum spw_dtype gt, enum spw_dtype ct)
{
	const struct spw_adamw_consts K = *k;

	for (size_t i = 0; i < n; i++) {
		float gi = load_g(g, gt, i) * K.grad_scale;
		float pi = p[i] * K.decay;
		float mi = m[i] + K.one_minus_beta1 * (gi - m[i]);
		float vi = v[i] * K.beta2 + K.one_minus_beta2 * gi * gi;
		float d = sqrtf(vi) * K.inv_bc2_sqrt + K.eps;

		pi = pi + K.neg_step_size * (mi / d);
		p[i] = pi;
		m[i] = mi;
		v[i] = vi;
		store_copy(c, ct, i, pi);
	}
}

#define ADAMW_FN(gn, gt, cn, ct)                                                          \
	static void adamw_##gn##_##cn(const struct spw_adamw_consts *k, float *p, float *m, \
				      float *v, const void *g, void *c, size_t n)            \
	{                                                                                 \
		adamw_span(k, p, m, v, g, c, n, gt, ct);                                  \
	}
#define ADAMW_ROW(gn, gt)                                   \
	ADAMW_FN(gn, gt, f32, SPW_DTYPE_F32)                \
	ADAMW_FN(gn, gt, bf16, SPW_DTYPE_BF16)              \
	ADAMW_FN(gn, gt, f16, SPW_DTYPE_F16)                \
	ADAMW_FN(gn, gt, none, SPW_DTYPE_NONE)
ADAMW_ROW(f32, SPW_DTYPE_F32)
ADAMW_ROW(bf16, SPW_DTYPE_BF16)
ADAMW_ROW(f16, SPW_DTYPE_F16)

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

static double sumsq_f32(const void *x, size_t n) { return sumsq_span(x, n, SPW_DTYPE_F32); }
static double sumsq_bf16(const void *x, size_t n) { return sumsq_span(x, n, SPW_DTYPE_BF16); }
static double sumsq_f16(const void *x, size_t n) { return sumsq_span(x, n, SPW_DTYPE_F16); }

static bool nonfinite_f32(const void *x, size_t n)
{
	const uint32_t *u = x;
	uint32_t any = 0;

	for (size_t i = 0; i < n; i++)
		any |= (u[i] & 0x7f800000u) == 0x7f800000u;
	return any;
}

static bool nonfinite_bf16(const void *x, size_t n)
{
	const uint16_t *u = x;
	uint32_t any = 0;

	for (size_t i = 0; i < n; i++)
		any |= (u[i] & 0x7f80u) == 0x7f80u;
	return any;
}

static bool nonfinite_f16(const void *x, size_t n)
{
	const uint16_t *u = x;
	uint32_t any = 0;

	for (size_t i = 0; i < n; i++)
		any |= (u[i] & 0x7c00u) == 0x7c00u;
	return any;
}

static void copy_f32(void *d, const void *s, size_t n) { memcpy(d, s, n * 4); }
static void copy_16(void *d, const void *s, size_t n) { memcpy(d, s, n * 2); }

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

static void acc_f32(float *a, const void *g, size_t n) { acc_span(a, g, n, SPW_DTYPE_F32); }
static void acc_bf16(float *a, const void *g, size_t n) { acc_span(a, g, n, SPW_DTYPE_BF16); }
static void acc_f16(float *a, const void *g, size_t n) { acc_span(a, g, n, SPW_DTYPE_F16); }

static void scale_f32(float *x, float s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

const struct spw_kernels spw__kernels_c = {
	.name = "c",
	.adamw = {
		[SPW_DTYPE_F32] = { adamw_f32_f32, adamw_f32_bf16, adamw_f32_f16, adamw_f32_none },
		[SPW_DTYPE_BF16] = { adamw_bf16_f32, adamw_bf16_bf16, adamw_bf16_f16, adamw_bf16_none },
		[SPW_DTYPE_F16] = { adamw_f16_f32, adamw_f16_bf16, adamw_f16_f16, adamw_f16_none },
	},
	.sumsq = { sumsq_f32, sumsq_bf16, sumsq_f16 },
	.nonfinite = { nonfinite_f32, nonfinite_bf16, nonfinite_f16 },
	.cast = {
		[SPW_DTYPE_F32] = { copy_f32, cast_f32_bf16, cast_f32_f16 },
		[SPW_DTYPE_BF16] = { cast_bf16_f32, copy_16, cast_bf16_f16 },
		[SPW_DTYPE_F16] = { cast_f16_f32, cast_f16_bf16, copy_16 },
	},
	.acc = { acc_f32, acc_bf16, acc_f16 },
	.scale_f32 = scale_f32,
};
