/* SPDX-License-Identifier: MIT */
/*
 * kernels/adamw-avx512.c: AVX-512F/BW/VL variant. Two tables: one rounds
 * to bf16 with integer arithmetic, the other with AVX512_BF16's
 * vcvtneps2bf16 (dispatch.c picks it where the CPU has AVX512_BF16).
 *
 * vcvtneps2bf16 rounds to nearest even and quiets nans exactly as
 * spw_f32_to_bf16() does, but flushes fp32 subnormal inputs to zero; the
 * rare vectors holding one take the integer path for those lanes, so both
 * tables stay bit-identical to adamw-c.c. Tails use masked loads and stores
 * with zero fill: the same instructions on the same lanes as a full vector.
 */
#include <immintrin.h>
#include <string.h>

#include "variant.h"

struct kv {
	__m512 gs, omb1, b2, omb2, decay, nss, ibc2s, eps;
};

static inline struct kv kv_of(const struct spw_adamw_consts *k)
{
	return (struct kv){
		.gs = _mm512_set1_ps(k->grad_scale),
		.omb1 = _mm512_set1_ps(k->one_minus_beta1),
		.b2 = _mm512_set1_ps(k->beta2),
		.omb2 = _mm512_set1_ps(k->one_minus_beta2),
		.decay = _mm512_set1_ps(k->decay),
		.nss = _mm512_set1_ps(k->neg_step_size),
		.ibc2s = _mm512_set1_ps(k->inv_bc2_sqrt),
		.eps = _mm512_set1_ps(k->eps),
	};
}

static inline __attribute__((always_inline)) __mmask16 tail_mask(size_t r)
{
	return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
}

static inline __attribute__((always_inline)) __m512 ld16(const void *x, enum spw_dtype t, size_t i, __mmask16 k)
{
	if (t == SPW_DTYPE_BF16) {
		__m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i);
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	if (t == SPW_DTYPE_F16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i));
	return _mm512_maskz_loadu_ps(k, (const float *)x + i);
}

static inline __attribute__((always_inline)) __m256i bf16_int(__m512 x)
{
	__m512i u = _mm512_castps_si512(x);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);

	r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
	return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

static inline __attribute__((always_inline)) __m256i bf16_native(__m512 x)
{
	__m256i h = (__m256i)_mm512_cvtneps_pbh(x);
	__m512i a = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
	/* |x| bits in [1, 0x7fffff]: a subnormal, which the instruction flushes. */
	__mmask16 sub = _mm512_cmp_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(1)),
					      _mm512_set1_epi32(0x7ffffe), _MM_CMPINT_LE);

	if (__builtin_expect(sub != 0, 0))
		h = _mm256_mask_mov_epi16(h, sub, bf16_int(x));
	return h;
}

static inline __attribute__((always_inline)) void st16(void *x, enum spw_dtype t, size_t i, __m512 a, __mmask16 k, bool native)
{
	if (t == SPW_DTYPE_BF16)
		_mm256_mask_storeu_epi16((uint16_t *)x + i, k, native ? bf16_native(a) : bf16_int(a));
	else if (t == SPW_DTYPE_F16)
		_mm256_mask_storeu_epi16((uint16_t *)x + i, k,
					 _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	else if (t == SPW_DTYPE_F32)
		_mm512_mask_storeu_ps((float *)x + i, k, a);
}

static inline __attribute__((always_inline)) void adamw16(const struct kv *K, float *p, void *m, void *v, const void *g,
			   void *c, size_t i, __mmask16 k, enum spw_dtype gt, enum spw_dtype ct,
			   enum spw_dtype mt, bool native, bool scale)
{
	__m512 gi = ld16(g, gt, i, k);
	__m512 pi = _mm512_maskz_loadu_ps(k, p + i), mi = ld16(m, mt, i, k);
	__m512 vi = ld16(v, mt, i, k), d;

	if (scale) /* g * 1.0f == g exactly, so skipping it changes no bit */
		gi = _mm512_mul_ps(gi, K->gs);
	pi = _mm512_mul_ps(pi, K->decay);
	mi = _mm512_add_ps(mi, _mm512_mul_ps(K->omb1, _mm512_sub_ps(gi, mi)));
	vi = _mm512_add_ps(_mm512_mul_ps(vi, K->b2), _mm512_mul_ps(_mm512_mul_ps(K->omb2, gi), gi));
	d = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), K->ibc2s), K->eps);
	pi = _mm512_add_ps(pi, _mm512_mul_ps(K->nss, _mm512_div_ps(mi, d)));
	_mm512_mask_storeu_ps(p + i, k, pi);
	st16(m, mt, i, mi, k, native);
	st16(v, mt, i, vi, k, native);
	st16(c, ct, i, pi, k, native);
}

/* mt: the moments' type, fp32 or bf16 (stored rounded to nearest even). */
static inline __attribute__((always_inline)) void adamw_span(const struct spw_adamw_consts *kc, float *p, void *m, void *v,
			      const void *g, void *c, size_t n, enum spw_dtype gt,
			      enum spw_dtype ct, enum spw_dtype mt, bool native)
{
	const struct kv K = kv_of(kc);
	size_t i = 0;

	if (kc->grad_scale == 1.0f)
		for (; i + 16 <= n; i += 16)
			adamw16(&K, p, m, v, g, c, i, (__mmask16)0xffff, gt, ct, mt, native, false);
	else
		for (; i + 16 <= n; i += 16)
			adamw16(&K, p, m, v, g, c, i, (__mmask16)0xffff, gt, ct, mt, native, true);
	if (i < n)
		adamw16(&K, p, m, v, g, c, i, tail_mask(n - i), gt, ct, mt, native, true);
}

#define ADAMW_FN(gn, gt, cn, ct, sfx, nat)                                                      \
	static void adamw_##gn##_##cn##sfx(const struct spw_adamw_consts *k, float *p, float *m, \
					   float *v, const void *g, void *c, size_t n)            \
	{                                                                                       \
		adamw_span(k, p, m, v, g, c, n, gt, ct, SPW_DTYPE_F32, nat);                    \
	}
#define ADAMW_M16_FN(gn, gt, cn, ct, sfx, nat)                                                      \
	static void adamw_m16_##gn##_##cn##sfx(const struct spw_adamw_consts *k, float *p, uint16_t *m, \
					       uint16_t *v, const void *g, void *c, size_t n)        \
	{                                                                                           \
		adamw_span(k, p, m, v, g, c, n, gt, ct, SPW_DTYPE_BF16, nat);                       \
	}
#define ADAMW_ROW(gn, gt, sfx, nat)                                   \
	ADAMW_FN(gn, gt, f32, SPW_DTYPE_F32, sfx, nat)                \
	ADAMW_FN(gn, gt, bf16, SPW_DTYPE_BF16, sfx, nat)              \
	ADAMW_FN(gn, gt, f16, SPW_DTYPE_F16, sfx, nat)                \
	ADAMW_FN(gn, gt, none, SPW_DTYPE_NONE, sfx, nat)
#define ADAMW_M16_ROW(gn, gt, sfx, nat)                               \
	ADAMW_M16_FN(gn, gt, f32, SPW_DTYPE_F32, sfx, nat)            \
	ADAMW_M16_FN(gn, gt, bf16, SPW_DTYPE_BF16, sfx, nat)          \
	ADAMW_M16_FN(gn, gt, f16, SPW_DTYPE_F16, sfx, nat)            \
	ADAMW_M16_FN(gn, gt, none, SPW_DTYPE_NONE, sfx, nat)
ADAMW_ROW(f32, SPW_DTYPE_F32, , false)
ADAMW_ROW(bf16, SPW_DTYPE_BF16, , false)
ADAMW_ROW(f16, SPW_DTYPE_F16, , false)
/* Only the bf16 copy-outs differ with native conversions. */
ADAMW_FN(f32, SPW_DTYPE_F32, bf16, SPW_DTYPE_BF16, _nat, true)
ADAMW_FN(bf16, SPW_DTYPE_BF16, bf16, SPW_DTYPE_BF16, _nat, true)
ADAMW_FN(f16, SPW_DTYPE_F16, bf16, SPW_DTYPE_BF16, _nat, true)
/* With bf16 moments every update writes bf16. */
ADAMW_M16_ROW(f32, SPW_DTYPE_F32, , false)
ADAMW_M16_ROW(bf16, SPW_DTYPE_BF16, , false)
ADAMW_M16_ROW(f16, SPW_DTYPE_F16, , false)
ADAMW_M16_ROW(f32, SPW_DTYPE_F32, _nat, true)
ADAMW_M16_ROW(bf16, SPW_DTYPE_BF16, _nat, true)
ADAMW_M16_ROW(f16, SPW_DTYPE_F16, _nat, true)

/* ---- 8-bit blockwise moments (q8.h has the codes) ---- */

static inline __attribute__((always_inline)) __m512 q8_dec_m(const int8_t *q, size_t i, __mmask16 k, __m512 s)
{
	__m512i c = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, q + i));
	__m512 a = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_abs_epi32(c)), _mm512_set1_ps(SPW_Q8_INV127));
	__m512 mag = _mm512_mul_ps(_mm512_mul_ps(a, a), s);
	__mmask16 neg = _mm512_cmplt_epi32_mask(c, _mm512_setzero_si512());

	return _mm512_castsi512_ps(_mm512_mask_xor_epi32(_mm512_castps_si512(mag), neg, _mm512_castps_si512(mag),
							 _mm512_set1_epi32((int)0x80000000u)));
}

static inline __attribute__((always_inline)) __m512 q8_dec_v(const uint8_t *q, size_t i, __mmask16 k, __m512 s)
{
	__m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, q + i));
	__m512 a = _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(SPW_Q8_INV255));
	__m512 a2 = _mm512_mul_ps(a, a);

	return _mm512_mul_ps(_mm512_mul_ps(a2, a2), s);
}

/* rint(f) clamped to [0, top], nan -> 0, as whole numbers in int32 lanes. */
static inline __attribute__((always_inline)) __m512i q8_clamp(__m512 f, float top)
{
	__m512 r = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__mmask16 k = _mm512_cmp_ps_mask(r, _mm512_set1_ps(1.0f), _CMP_GE_OQ);

	return _mm512_cvttps_epi32(_mm512_maskz_min_ps(k, r, _mm512_set1_ps(top)));
}

/* Sixteen m and sqrt(v) lanes to codes, in blocks of multipliers km, kv. */
static inline __attribute__((always_inline)) void q8_enc(int8_t *mq, uint8_t *vq, size_t i, __mmask16 k, __m512 m,
							 __m512 r, __m512 km, __m512 kv)
{
	__m512 am = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(m), _mm512_set1_epi32(0x7fffffff)));
	__m512i qm = q8_clamp(_mm512_mul_ps(_mm512_sqrt_ps(am), km), 127.0f);
	__m512i qv = q8_clamp(_mm512_mul_ps(_mm512_sqrt_ps(r), kv), 255.0f);
	__mmask16 neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(m), _mm512_setzero_si512()); /* sign bit */

	qm = _mm512_mask_sub_epi32(qm, neg, _mm512_setzero_si512(), qm);
	_mm_mask_storeu_epi8(mq + i, k, _mm512_cvtepi32_epi8(qm));
	_mm_mask_storeu_epi8(vq + i, k, _mm512_cvtepi32_epi8(qv));
}

static inline __attribute__((always_inline)) void adamw_q8_span(const struct spw_adamw_consts *kc, float *p, int8_t *mq,
								float *ms, uint8_t *vq, float *vs, const void *g,
								void *c, size_t n, enum spw_dtype gt, enum spw_dtype ct,
								bool native)
{
	const struct kv K = kv_of(kc);
	const __m512i absm = _mm512_set1_epi32(0x7fffffff);

	for (size_t b = 0; b < n; b += SPW_Q8_BLOCK) {
		size_t e = n - b < SPW_Q8_BLOCK ? n - b : SPW_Q8_BLOCK, blk = b / SPW_Q8_BLOCK;
		/* m and sqrt(v) of the block, to code once its scales are known. */
		_Alignas(64) float m[SPW_Q8_BLOCK], v[SPW_Q8_BLOCK];
		__m512 sm = _mm512_set1_ps(ms[blk]), sv = _mm512_set1_ps(vs[blk]);
		__m512i mmax = _mm512_setzero_si512(), vmax = _mm512_setzero_si512();

		for (size_t j = 0; j < e; j += 16) {
			size_t i = b + j;
			__mmask16 k = tail_mask(e - j);
			__m512 gi = _mm512_mul_ps(ld16(g, gt, i, k), K.gs);
			__m512 pi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), K.decay);
			__m512 mi = q8_dec_m(mq, i, k, sm), vi = q8_dec_v(vq, i, k, sv), ri, d;

			mi = _mm512_add_ps(mi, _mm512_mul_ps(K.omb1, _mm512_sub_ps(gi, mi)));
			vi = _mm512_add_ps(_mm512_mul_ps(vi, K.b2), _mm512_mul_ps(_mm512_mul_ps(K.omb2, gi), gi));
			ri = _mm512_sqrt_ps(vi);
			d = _mm512_add_ps(_mm512_mul_ps(ri, K.ibc2s), K.eps);
			pi = _mm512_add_ps(pi, _mm512_mul_ps(K.nss, _mm512_div_ps(mi, d)));
			_mm512_mask_storeu_ps(p + i, k, pi);
			st16(c, ct, i, pi, k, native);
			_mm512_store_ps(m + j, mi);
			_mm512_store_ps(v + j, ri);
			/* Lanes past the block's end: zero bits, which change no maximum. */
			mmax = _mm512_mask_max_epu32(mmax, k, mmax, _mm512_and_si512(_mm512_castps_si512(mi), absm));
			vmax = _mm512_mask_max_epu32(vmax, k, vmax, _mm512_and_si512(_mm512_castps_si512(vi), absm));
		}
		ms[blk] = spw_q8_of_bits(_mm512_reduce_max_epu32(mmax));
		vs[blk] = spw_q8_of_bits(_mm512_reduce_max_epu32(vmax));
		sm = _mm512_set1_ps(spw_q8_km(ms[blk]));
		sv = _mm512_set1_ps(spw_q8_kv(vs[blk]));
		for (size_t j = 0; j < e; j += 16)
			q8_enc(mq, vq, b + j, tail_mask(e - j), _mm512_load_ps(m + j), _mm512_load_ps(v + j), sm, sv);
	}
}

#define ADAMW_Q8_FN(gn, gt, cn, ct, sfx, nat)                                                           \
	static void adamw_q8_##gn##_##cn##sfx(const struct spw_adamw_consts *k, float *p, int8_t *mq,   \
					      float *ms, uint8_t *vq, float *vs, const void *g, void *c, \
					      size_t n)                                                   \
	{                                                                                               \
		adamw_q8_span(k, p, mq, ms, vq, vs, g, c, n, gt, ct, nat);                              \
	}
#define ADAMW_Q8_ROW(gn, gt, sfx, nat)                               \
	ADAMW_Q8_FN(gn, gt, f32, SPW_DTYPE_F32, sfx, nat)            \
	ADAMW_Q8_FN(gn, gt, bf16, SPW_DTYPE_BF16, sfx, nat)          \
	ADAMW_Q8_FN(gn, gt, f16, SPW_DTYPE_F16, sfx, nat)            \
	ADAMW_Q8_FN(gn, gt, none, SPW_DTYPE_NONE, sfx, nat)
ADAMW_Q8_ROW(f32, SPW_DTYPE_F32, , false)
ADAMW_Q8_ROW(bf16, SPW_DTYPE_BF16, , false)
ADAMW_Q8_ROW(f16, SPW_DTYPE_F16, , false)
ADAMW_Q8_ROW(f32, SPW_DTYPE_F32, _nat, true)
ADAMW_Q8_ROW(bf16, SPW_DTYPE_BF16, _nat, true)
ADAMW_Q8_ROW(f16, SPW_DTYPE_F16, _nat, true)

/* 32 double lanes in a[0..3]: lane j of a block is a[j / 8][j % 8]. */
static inline __attribute__((always_inline)) void sq32(__m512d a[4], const void *x, enum spw_dtype t, size_t i, __mmask16 k0,
			__mmask16 k1)
{
	for (int q = 0; q < 2; q++) {
		__m512 f = ld16(x, t, i + 16 * (size_t)q, q ? k1 : k0);
		__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
		__m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));

		/* The square is exact in double, so fma == mul then add. */
		a[2 * q] = _mm512_fmadd_pd(lo, lo, a[2 * q]);
		a[2 * q + 1] = _mm512_fmadd_pd(hi, hi, a[2 * q + 1]);
	}
}

static inline __attribute__((always_inline)) double sumsq_span(const void *x, size_t n, enum spw_dtype t)
{
	__m512d a[4];
	__m256d y;
	__m128d s;
	size_t i = 0;

	for (int q = 0; q < 4; q++)
		a[q] = _mm512_setzero_pd();
	for (; i + 32 <= n; i += 32)
		sq32(a, x, t, i, 0xffff, 0xffff);
	if (i < n)
		sq32(a, x, t, i, tail_mask(n - i), n - i > 16 ? tail_mask(n - i - 16) : 0);
	a[0] = _mm512_add_pd(a[0], a[2]);
	a[1] = _mm512_add_pd(a[1], a[3]);
	a[0] = _mm512_add_pd(a[0], a[1]);
	y = _mm256_add_pd(_mm512_castpd512_pd256(a[0]), _mm512_extractf64x4_pd(a[0], 1));
	s = _mm_add_pd(_mm256_castpd256_pd128(y), _mm256_extractf128_pd(y, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

static bool nonfinite_f32(const void *x, size_t n)
{
	const __m512i e = _mm512_set1_epi32(0x7f800000);
	const uint32_t *u = x;

	for (size_t i = 0; i < n; i += 16) {
		__m512i w = _mm512_maskz_loadu_epi32(tail_mask(n - i), u + i);

		if (_mm512_cmpeq_epi32_mask(_mm512_and_si512(w, e), e))
			return true;
	}
	return false;
}

static inline __attribute__((always_inline)) bool nonfinite_16(const uint16_t *u, size_t n, uint16_t expo)
{
	const __m512i e = _mm512_set1_epi16((short)expo);

	for (size_t i = 0; i < n; i += 32) {
		size_t r = n - i;
		__mmask32 k = r >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << r) - 1);
		__m512i w = _mm512_maskz_loadu_epi16(k, u + i);

		if (_mm512_cmpeq_epi16_mask(_mm512_and_si512(w, e), e))
			return true;
	}
	return false;
}

static bool nonfinite_bf16(const void *x, size_t n) { return nonfinite_16(x, n, 0x7f80); }
static bool nonfinite_f16(const void *x, size_t n) { return nonfinite_16(x, n, 0x7c00); }

static inline __attribute__((always_inline)) void cast_span(void *d, enum spw_dtype dt, const void *s, enum spw_dtype st,
			     size_t n, bool native)
{
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);

		st16(d, dt, i, ld16(s, st, i, k), k, native);
	}
}

VARIANT_COPY_FNS()
#define CAST_FN(dn, dt, sn, st, sfx, nat)                                  \
	static void cast_##dn##_##sn##sfx(void *d, const void *s, size_t n) \
	{                                                                  \
		cast_span(d, dt, s, st, n, nat);                           \
	}
CAST_FN(bf16, SPW_DTYPE_BF16, f32, SPW_DTYPE_F32, , false)
CAST_FN(f16, SPW_DTYPE_F16, f32, SPW_DTYPE_F32, , false)
CAST_FN(f32, SPW_DTYPE_F32, bf16, SPW_DTYPE_BF16, , false)
CAST_FN(f32, SPW_DTYPE_F32, f16, SPW_DTYPE_F16, , false)
CAST_FN(f16, SPW_DTYPE_F16, bf16, SPW_DTYPE_BF16, , false)
CAST_FN(bf16, SPW_DTYPE_BF16, f16, SPW_DTYPE_F16, , false)
CAST_FN(bf16, SPW_DTYPE_BF16, f32, SPW_DTYPE_F32, _nat, true)
CAST_FN(bf16, SPW_DTYPE_BF16, f16, SPW_DTYPE_F16, _nat, true)

static inline __attribute__((always_inline)) void acc_span(float *a, const void *g, size_t n, enum spw_dtype t)
{
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);

		_mm512_mask_storeu_ps(a + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i), ld16(g, t, i, k)));
	}
}

VARIANT_SUMSQ_ACC_FNS()

static void scale_f32(float *x, float s, size_t n)
{
	const __m512 c = _mm512_set1_ps(s);

	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);

		_mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), c));
	}
}

/* ---- stochastic rounding to bf16 (sr.h): the same integer steps, 16 lanes ---- */

static inline __attribute__((always_inline)) __m512i sr_mix16(__m512i x)
{
	x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
	x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x21f0aaadu));
	x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
	x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x735a2d97u));
	return _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
}

/* Sixteen values whose elements have the low 32 index bits idx, rounded
 * under key, as bf16 bits. */
static inline __attribute__((always_inline)) __m256i sr16(__m512 x, __m512i key, __m512i idx)
{
	__m512i u = _mm512_castps_si512(x);
	__m512i h = sr_mix16(_mm512_add_epi32(key, _mm512_mullo_epi32(idx, _mm512_set1_epi32((int)0x9e3779b9u))));
	__m512i r = _mm512_add_epi32(u, _mm512_srli_epi32(h, 16));
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);

	r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
	/* Every lane is below 2^16 after the shift: the truncating narrow is exact. */
	return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

static void round_sr(uint16_t *dst, const float *x, size_t n, uint32_t key, uint64_t index)
{
	const __m512i kv = _mm512_set1_epi32((int)key);
	/* Lane j holds the index of element i + j; only its low 32 bits
	 * count, so 32-bit lanes that wrap are exactly sr.h's arithmetic. */
	__m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)index),
				       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));

	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);

		_mm256_mask_storeu_epi16(dst + i, k, sr16(_mm512_maskz_loadu_ps(k, x + i), kv, idx));
		idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
	}
}

VARIANT_TABLE(spw__kernels_avx512, "avx512", );

/* Same name: to the user it is one variant that uses what the CPU has. */
VARIANT_TABLE(spw__kernels_avx512bf16, "avx512", _nat);
