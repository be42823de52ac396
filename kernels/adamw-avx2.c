/* SPDX-License-Identifier: MIT */
/*
 * kernels/adamw-avx2.c: AVX2 + FMA + F16C variant (compiled with those -m
 * flags alone; dispatch.c calls it only where the CPU has them).
 *
 * Bit-identical to adamw-c.c: the same IEEE operations in the same order,
 * no fused multiply-add in the AdamW update (sumsq uses FMA only where the
 * product is exact). Tails shorter than a block run the same vector code on
 * a zero-padded copy on the stack, so every element takes the same path.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "variant.h"

struct kv {
	__m256 gs, omb1, b2, omb2, decay, nss, ibc2s, eps;
};

static inline struct kv kv_of(const struct spw_adamw_consts *k)
{
	return (struct kv){
		.gs = _mm256_set1_ps(k->grad_scale),
		.omb1 = _mm256_set1_ps(k->one_minus_beta1),
		.b2 = _mm256_set1_ps(k->beta2),
		.omb2 = _mm256_set1_ps(k->one_minus_beta2),
		.decay = _mm256_set1_ps(k->decay),
		.nss = _mm256_set1_ps(k->neg_step_size),
		.ibc2s = _mm256_set1_ps(k->inv_bc2_sqrt),
		.eps = _mm256_set1_ps(k->eps),
	};
}

static inline __attribute__((always_inline)) __m256 ld8(const void *x, enum spw_dtype t, size_t i)
{
	if (t == SPW_DTYPE_BF16) {
		__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + i));
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	if (t == SPW_DTYPE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i)));
	return _mm256_loadu_ps((const float *)x + i);
}

/* bf16 bits in the low half of each 32-bit lane: round to nearest even, nan quiet. */
static inline __attribute__((always_inline)) __m256i bf16_of(__m256 x)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
	__m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
	__m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);

	return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, _mm256_castps_si256(nan)), 16);
}

/* Stores 16 values converted to t at x + i; nt: with non-temporal stores
 * (x + i aligned to the store's width). */
static inline __attribute__((always_inline)) void st16(void *x, enum spw_dtype t, size_t i, __m256 a, __m256 b,
						       bool nt)
{
	if (t == SPW_DTYPE_BF16) {
		__m256i w = _mm256_packus_epi32(bf16_of(a), bf16_of(b));
		/* packus interleaves 128-bit lanes: a0-3 b0-3 | a4-7 b4-7 */
		w = _mm256_permute4x64_epi64(w, 0xd8);
		if (nt)
			_mm256_stream_si256((__m256i *)((uint16_t *)x + i), w);
		else
			_mm256_storeu_si256((__m256i *)((uint16_t *)x + i), w);
	} else if (t == SPW_DTYPE_F16) {
		const int rm = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
		__m128i ha = _mm256_cvtps_ph(a, rm), hb = _mm256_cvtps_ph(b, rm);

		if (nt) {
			_mm_stream_si128((__m128i *)((uint16_t *)x + i), ha);
			_mm_stream_si128((__m128i *)((uint16_t *)x + i + 8), hb);
		} else {
			_mm_storeu_si128((__m128i *)((uint16_t *)x + i), ha);
			_mm_storeu_si128((__m128i *)((uint16_t *)x + i + 8), hb);
		}
	} else if (t == SPW_DTYPE_F32) {
		if (nt) {
			_mm256_stream_ps((float *)x + i, a);
			_mm256_stream_ps((float *)x + i + 8, b);
		} else {
			_mm256_storeu_ps((float *)x + i, a);
			_mm256_storeu_ps((float *)x + i + 8, b);
		}
	}
}

static inline __attribute__((always_inline)) __m256 upd8(const struct kv *K, __m256 *pm, __m256 *mm, __m256 *vm, __m256 g, bool scale)
{
	__m256 pi = *pm, mi = *mm, vi = *vm, d;

	if (scale) /* g * 1.0f == g exactly, so skipping it changes no bit */
		g = _mm256_mul_ps(g, K->gs);
	pi = _mm256_mul_ps(pi, K->decay);
	mi = _mm256_add_ps(mi, _mm256_mul_ps(K->omb1, _mm256_sub_ps(g, mi)));
	vi = _mm256_add_ps(_mm256_mul_ps(vi, K->b2), _mm256_mul_ps(_mm256_mul_ps(K->omb2, g), g));
	d = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), K->ibc2s), K->eps);
	pi = _mm256_add_ps(pi, _mm256_mul_ps(K->nss, _mm256_div_ps(mi, d)));
	*pm = pi;
	*mm = mi;
	*vm = vi;
	return pi;
}

/*
 * 16 elements: every load of the block before any store. The arrays are
 * often 4 MiB-aligned slots, so p[i], m[i] and v[i] share their low address
 * bits; loads issued after stores to the same offset in another array get
 * held back as if dependent (4K aliasing). Loading the whole block first and
 * storing each array's line in one go doubled the speed on Zen 3 with
 * 4 MiB-aligned buffers (in cache 0.25 -> 0.7 Gparam/s; from memory 6.7 ->
 * 13 GB/s on a busy host); with unrelated offsets it changes nothing.
 */
static inline __attribute__((always_inline)) void adamw16(const struct kv *K, float *p, void *m, void *v, const void *g,
			   void *c, size_t i, enum spw_dtype gt, enum spw_dtype ct, enum spw_dtype mt,
			   bool scale)
{
	__m256 ga = ld8(g, gt, i), gb = ld8(g, gt, i + 8);
	__m256 pa = _mm256_loadu_ps(p + i), pb = _mm256_loadu_ps(p + i + 8);
	__m256 ma = ld8(m, mt, i), mb = ld8(m, mt, i + 8);
	__m256 va = ld8(v, mt, i), vb = ld8(v, mt, i + 8);
	__m256 a = upd8(K, &pa, &ma, &va, ga, scale);
	__m256 b = upd8(K, &pb, &mb, &vb, gb, scale);

	_mm256_storeu_ps(p + i, pa);
	_mm256_storeu_ps(p + i + 8, pb);
	st16(m, mt, i, ma, mb, false);
	st16(v, mt, i, va, vb, false);
	st16(c, ct, i, a, b, false);
}

#define COPY_BLOCK 512u /* elements: 2 KiB of p, 6 KiB of the whole block's state */

/* mt: the moments' type, fp32 or bf16 (stored rounded to nearest even). */
static inline __attribute__((always_inline)) void adamw_span(const struct spw_adamw_consts *k, float *p, void *m, void *v,
			      const void *g, void *c, size_t n, enum spw_dtype gt, enum spw_dtype ct,
			      enum spw_dtype mt)
{
	const struct kv K = kv_of(k);
	size_t i = 0, gs = spw_dtype_size(gt), cs = spw_dtype_size(ct), ms = spw_dtype_size(mt), r;

	/* The copy-out is written for another reader (the device's DMA, the
	 * model), never read back here: stored around the cache, it costs
	 * its bytes once, not a line's read for ownership first, and leaves
	 * the cache to p, m and v. */
	bool nt = cs && ((uintptr_t)c & 31) == 0;
	size_t whole = n & ~(size_t)15;

	/*
	 * With a copy-out, a block of COPY_BLOCK elements at a time: the
	 * update first, then the block's copy made from p, still in L1. The
	 * memory sees the same bytes as a one-loop kernel's, but four streams
	 * at a time and then one, where one loop kept five going at once;
	 * on Zen 3 five streams move about a sixth fewer bytes a second than
	 * four (the bench's roofline twin shows it too). The copy is of what
	 * was stored in p, so the bits are the one loop's.
	 */
	while (i < whole) {
		size_t b = i, e = whole - i > COPY_BLOCK && cs ? i + COPY_BLOCK : whole;

		/* The multiply port is the busiest: drop the one that does nothing. */
		if (k->grad_scale == 1.0f)
			for (; i < e; i += 16)
				adamw16(&K, p, m, v, g, c, i, gt, SPW_DTYPE_NONE, mt, false);
		else
			for (; i < e; i += 16)
				adamw16(&K, p, m, v, g, c, i, gt, SPW_DTYPE_NONE, mt, true);
		if (nt)
			for (size_t j = b; j < e; j += 16)
				st16(c, ct, j, _mm256_loadu_ps(p + j), _mm256_loadu_ps(p + j + 8), true);
		else if (cs)
			for (size_t j = b; j < e; j += 16)
				st16(c, ct, j, _mm256_loadu_ps(p + j), _mm256_loadu_ps(p + j + 8), false);
	}
	if (nt) /* the streamed lines reach memory before the span is done */
		_mm_sfence();
	r = n - i;
	if (r) {
		float pb[16] = { 0 };
		_Alignas(32) unsigned char mb[64] = { 0 }, vb[64] = { 0 }, gb[64] = { 0 }, cb[64];

		memcpy(pb, p + i, r * 4);
		memcpy(mb, (const unsigned char *)m + i * ms, r * ms);
		memcpy(vb, (const unsigned char *)v + i * ms, r * ms);
		memcpy(gb, (const unsigned char *)g + i * gs, r * gs);
		adamw16(&K, pb, mb, vb, gb, cb, 0, gt, ct, mt, true);
		memcpy(p + i, pb, r * 4);
		memcpy((unsigned char *)m + i * ms, mb, r * ms);
		memcpy((unsigned char *)v + i * ms, vb, r * ms);
		if (cs)
			memcpy((unsigned char *)c + i * cs, cb, r * cs);
	}
}

VARIANT_ADAMW_FNS()

/*
 * ---- 8-bit blockwise moments (q8.h has the codes) ----
 * Eight lanes at a time; the last few elements of a short block take q8.h's
 * scalar functions, the same IEEE operations one at a time.
 */
static inline __attribute__((always_inline)) __m256 q8_dec_m8(const int8_t *q, size_t i, __m256 s)
{
	__m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
	/* a = q / 127 with q's sign: a * a is |a| * |a| to the bit, and the
	 * sign goes back on as q.h's dec_m puts it, from the code's own bit. */
	__m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(SPW_Q8_INV127));
	__m256 mag = _mm256_mul_ps(_mm256_mul_ps(a, a), s);
	__m256i neg = _mm256_and_si256(c, _mm256_set1_epi32((int)0x80000000u));

	return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(mag), neg));
}

static inline __attribute__((always_inline)) __m256 q8_dec_v8(const uint8_t *q, size_t i, __m256 s)
{
	__m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
	__m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(SPW_Q8_INV255));
	__m256 a2 = _mm256_mul_ps(a, a);

	return _mm256_mul_ps(_mm256_mul_ps(a2, a2), s);
}

/* Eight int32 lanes to eight bytes at p, saturated to [-128, 127] (signed)
 * or [0, 255]. */
static inline __attribute__((always_inline)) void q8_store8(void *p, __m256i q, bool is_signed)
{
	__m256i w = _mm256_packs_epi32(q, q);
	int32_t lo, hi;

	w = is_signed ? _mm256_packs_epi16(w, w) : _mm256_packus_epi16(w, w);
	lo = _mm256_extract_epi32(w, 0);
	hi = _mm256_extract_epi32(w, 4);
	memcpy(p, &lo, 4);
	memcpy((char *)p + 4, &hi, 4);
}

/* The roots of eight m and r = sqrt(v) lanes (q8.h's spw_q8_root_m and
 * spw_q8_root_v), taken in the update's pass; *am: |m|. */
static inline __attribute__((always_inline)) void q8_roots8(__m256 m, __m256 r, __m256 *xm, __m256 *xv, __m256 *am)
{
	const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));

	*am = _mm256_andnot_ps(sign, m);
	*xm = _mm256_or_ps(_mm256_sqrt_ps(*am), _mm256_and_ps(sign, m));
	*xv = _mm256_sqrt_ps(r);
}

/*
 * Eight roots of m and v to their codes as int32 lanes, in blocks of
 * multipliers km, kv. cvtps rounds to nearest even (the rounding mode in
 * force, as rintf's is) and gives INT32_MIN for a nan product, which the
 * clamp to [0, 127] makes 0; v's clamp to [0, 255] is the packs'
 * saturation (q8_store8/q8_store32). No product exceeds 128 but a nan:
 * the root is at most that of the block's scale.
 */
static inline __attribute__((always_inline)) void q8_codes8(__m256 xm, __m256 xv, __m256 km, __m256 kv, __m256i *qm,
							    __m256i *qv)
{
	__m256 am = _mm256_and_ps(xm, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
	__m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(am, km));

	q = _mm256_min_epi32(_mm256_max_epi32(q, _mm256_setzero_si256()), _mm256_set1_epi32(127));
	*qm = _mm256_sign_epi32(q, _mm256_castps_si256(xm)); /* negated where xm's sign bit is set */
	*qv = _mm256_cvtps_epi32(_mm256_mul_ps(xv, kv));
}

static inline __attribute__((always_inline)) void q8_enc8(int8_t *mq, uint8_t *vq, size_t i, __m256 m, __m256 r,
							  __m256 km, __m256 kv)
{
	__m256i qm, qv;

	q8_codes8(m, r, km, kv, &qm, &qv);
	q8_store8(mq + i, qm, true);
	q8_store8(vq + i, qv, false);
}

/* Four times eight int32 lanes to 32 bytes at p, in order, saturated as
 * q8_store8's: one store where q8_store8 takes four pairs of extracts. */
static inline __attribute__((always_inline)) void q8_store32(void *p, const __m256i q[4], bool is_signed)
{
	/* Per 128-bit half: q0[0..3] q1[0..3] q2[0..3] q3[0..3] as bytes,
	 * then q*[4..7]: dwords 0,4,1,5,2,6,3,7 put each vector's 8 together. */
	__m256i ab = _mm256_packs_epi32(q[0], q[1]), cd = _mm256_packs_epi32(q[2], q[3]);
	__m256i w = is_signed ? _mm256_packs_epi16(ab, cd) : _mm256_packus_epi16(ab, cd);

	w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)p, w);
}

/* 32 elements' codes from the block's saved roots at j. */
static inline __attribute__((always_inline)) void q8_enc32(int8_t *mq, uint8_t *vq, size_t i, const float *m,
							   const float *v, size_t j, __m256 km, __m256 kv)
{
	__m256i qm[4], qv[4];

	for (int k = 0; k < 4; k++)
		q8_codes8(_mm256_load_ps(m + j + 8 * k), _mm256_load_ps(v + j + 8 * k), km, kv, &qm[k], &qv[k]);
	q8_store32(mq + i, qm, true);
	q8_store32(vq + i, qv, false);
}

/* Eight copy-out values of type t at x + i. */
static inline __attribute__((always_inline)) void st8(void *x, enum spw_dtype t, size_t i, __m256 a)
{
	if (t == SPW_DTYPE_BF16) {
		__m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_of(a), bf16_of(a)), 0xd8);

		_mm_storeu_si128((__m128i *)((uint16_t *)x + i), _mm256_castsi256_si128(w));
	} else if (t == SPW_DTYPE_F16) {
		_mm_storeu_si128((__m128i *)((uint16_t *)x + i),
				 _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	} else if (t == SPW_DTYPE_F32) {
		_mm256_storeu_ps((float *)x + i, a);
	}
}

/*
 * Eight elements' update from their codes: p stored, the roots of the new
 * m and v into xm, xv (the block's buffers) and their magnitudes' bits
 * into the block's maxima. scale: g is multiplied by the grad scale.
 */
static inline __attribute__((always_inline)) void q8_upd8(const struct kv *K, float *p, const int8_t *mq,
							  const uint8_t *vq, const void *g, size_t i, float *xm,
							  float *xv, __m256 sm, __m256 sv, __m256i *mmax, __m256i *vmax,
							  enum spw_dtype gt, bool scale)
{
	const __m256i absm = _mm256_set1_epi32(0x7fffffff);
	__m256 gi = ld8(g, gt, i), pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), K->decay);
	__m256 mi = q8_dec_m8(mq, i, sm), vi = q8_dec_v8(vq, i, sv), ri, d, rm, rv, am;

	if (scale)
		gi = _mm256_mul_ps(gi, K->gs);
	mi = _mm256_add_ps(mi, _mm256_mul_ps(K->omb1, _mm256_sub_ps(gi, mi)));
	vi = _mm256_add_ps(_mm256_mul_ps(vi, K->b2), _mm256_mul_ps(_mm256_mul_ps(K->omb2, gi), gi));
	ri = _mm256_sqrt_ps(vi);
	d = _mm256_add_ps(_mm256_mul_ps(ri, K->ibc2s), K->eps);
	pi = _mm256_add_ps(pi, _mm256_mul_ps(K->nss, _mm256_div_ps(mi, d)));
	_mm256_storeu_ps(p + i, pi);
	q8_roots8(mi, ri, &rm, &rv, &am);
	_mm256_store_ps(xm, rm);
	_mm256_store_ps(xv, rv);
	*mmax = _mm256_max_epu32(*mmax, _mm256_castps_si256(am));
	*vmax = _mm256_max_epu32(*vmax, _mm256_and_si256(_mm256_castps_si256(vi), absm));
}

/*
 * Per block: the update of its elements 8 at a time (the roots of the new
 * moments into the block's buffers), its copy-out made from p while p is
 * in L1, then its new scales and codes. Tried and slower on Zen 3 (9.6
 * against 9.1 ns per 8 elements in cache): coding and copying block k - 1
 * interleaved with block k's update, in the hope that they would run in
 * the shadow of the update's divider.
 */
static inline __attribute__((always_inline)) void adamw_q8_span(const struct spw_adamw_consts *kc, float *p, int8_t *mq,
								float *ms, uint8_t *vq, float *vs, const void *g,
								void *c, size_t n, enum spw_dtype gt, enum spw_dtype ct,
								bool scale)
{
	const struct kv K = kv_of(kc);
	/* As adamw_span's: the copy-out is for another reader, stored around
	 * the cache where it is aligned (every block starts 32-byte aligned). */
	const bool nt = ct != SPW_DTYPE_NONE && ((uintptr_t)c & 31) == 0;

	for (size_t b = 0; b < n; b += SPW_Q8_BLOCK) {
		size_t e = n - b < SPW_Q8_BLOCK ? n - b : SPW_Q8_BLOCK, blk = b / SPW_Q8_BLOCK, j = 0;
		/* The roots of m and v, to code once the block's scales are known. */
		_Alignas(32) float m[SPW_Q8_BLOCK], v[SPW_Q8_BLOCK];
		float sm = ms[blk], sv = vs[blk], km, kv;
		__m256 smv = _mm256_set1_ps(sm), svv = _mm256_set1_ps(sv);
		__m256i mmax = _mm256_setzero_si256(), vmax = _mm256_setzero_si256();
		uint32_t mx[8], vx[8], mm = 0, vm = 0;

		for (; j + 8 <= e; j += 8)
			q8_upd8(&K, p, mq, vq, g, b + j, m + j, v + j, smv, svv, &mmax, &vmax, gt, scale);
		for (size_t h = 0; ct != SPW_DTYPE_NONE && h + 16 <= j; h += 16)
			st16(c, ct, b + h, _mm256_loadu_ps(p + b + h), _mm256_loadu_ps(p + b + h + 8), nt);
		if (j % 16)
			st8(c, ct, b + j - 8, _mm256_loadu_ps(p + b + j - 8));
		for (; j < e; j++) {
			size_t i = b + j;
			float gi = spw_q8_load_g(g, gt, i) * kc->grad_scale;
			float pi = p[i] * kc->decay;
			float m0 = spw_q8_dec_m(mq[i], sm), v0 = spw_q8_dec_v(vq[i], sv);
			float mi = m0 + kc->one_minus_beta1 * (gi - m0);
			float vi = v0 * kc->beta2 + kc->one_minus_beta2 * gi * gi;
			float ri = sqrtf(vi), d = ri * kc->inv_bc2_sqrt + kc->eps;

			pi = pi + kc->neg_step_size * (mi / d);
			p[i] = pi;
			spw_q8_store_copy(c, ct, i, pi);
			m[j] = spw_q8_root_m(mi);
			v[j] = spw_q8_root_v(ri);
			if (spw_q8_absbits(mi) > mm)
				mm = spw_q8_absbits(mi);
			if (spw_q8_absbits(vi) > vm)
				vm = spw_q8_absbits(vi);
		}
		_mm256_storeu_si256((__m256i *)mx, mmax);
		_mm256_storeu_si256((__m256i *)vx, vmax);
		for (int l = 0; l < 8; l++) {
			mm = mx[l] > mm ? mx[l] : mm;
			vm = vx[l] > vm ? vx[l] : vm;
		}
		sm = ms[blk] = spw_q8_of_bits(mm);
		sv = vs[blk] = spw_q8_of_bits(vm);
		km = spw_q8_km(sm);
		kv = spw_q8_kv(sv);
		smv = _mm256_set1_ps(km);
		svv = _mm256_set1_ps(kv);
		for (j = 0; j + 32 <= e; j += 32)
			q8_enc32(mq, vq, b + j, m, v, j, smv, svv);
		for (; j + 8 <= e; j += 8)
			q8_enc8(mq, vq, b + j, _mm256_load_ps(m + j), _mm256_load_ps(v + j), smv, svv);
		for (; j < e; j++) {
			mq[b + j] = spw_q8_enc_root_m(m[j], km);
			vq[b + j] = spw_q8_enc_root_v(v[j], kv);
		}
	}
	if (nt) /* the streamed lines reach memory before the span is done */
		_mm_sfence();
}

#define ADAMW_Q8_FN(gn, gt, cn, ct)                                                                     \
	static void adamw_q8_##gn##_##cn(const struct spw_adamw_consts *k, float *p, int8_t *mq, float *ms, \
					 uint8_t *vq, float *vs, const void *g, void *c, size_t n)      \
	{                                                                                               \
		if (k->grad_scale != 1.0f) /* g * 1.0f == g exactly: the multiply dropped */           \
			adamw_q8_span(k, p, mq, ms, vq, vs, g, c, n, gt, ct, true);                     \
		else                                                                                    \
			adamw_q8_span(k, p, mq, ms, vq, vs, g, c, n, gt, ct, false);                    \
	}
#define ADAMW_Q8_ROW(gn, gt)                               \
	ADAMW_Q8_FN(gn, gt, f32, SPW_DTYPE_F32)            \
	ADAMW_Q8_FN(gn, gt, bf16, SPW_DTYPE_BF16)          \
	ADAMW_Q8_FN(gn, gt, f16, SPW_DTYPE_F16)            \
	ADAMW_Q8_FN(gn, gt, none, SPW_DTYPE_NONE)
ADAMW_Q8_ROW(f32, SPW_DTYPE_F32)
ADAMW_Q8_ROW(bf16, SPW_DTYPE_BF16)
ADAMW_Q8_ROW(f16, SPW_DTYPE_F16)

/* 32 double lanes in a[0..7]: lane j of a block is a[j / 4][j % 4]. */
static inline __attribute__((always_inline)) void sq32(__m256d a[8], const void *x, enum spw_dtype t, size_t i)
{
	for (int q = 0; q < 4; q++) {
		__m256 f = ld8(x, t, i + 8 * (size_t)q);
		__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
		__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));

		/* The square is exact in double, so fma == mul then add. */
		a[2 * q] = _mm256_fmadd_pd(lo, lo, a[2 * q]);
		a[2 * q + 1] = _mm256_fmadd_pd(hi, hi, a[2 * q + 1]);
	}
}

static inline __attribute__((always_inline)) double sumsq_span(const void *x, size_t n, enum spw_dtype t)
{
	__m256d a[8];
	__m128d s;
	size_t i = 0, es = spw_dtype_size(t);

	for (int q = 0; q < 8; q++)
		a[q] = _mm256_setzero_pd();
	for (; i + 32 <= n; i += 32)
		sq32(a, x, t, i);
	if (i < n) {
		_Alignas(32) unsigned char b[128] = { 0 };

		memcpy(b, (const unsigned char *)x + i * es, (n - i) * es);
		sq32(a, b, t, 0);
	}
	/* Fold lanes pairwise: l[j] += l[j + w] for w = 16, 8, 4, 2, 1. */
	for (int q = 0; q < 4; q++)
		a[q] = _mm256_add_pd(a[q], a[q + 4]);
	a[0] = _mm256_add_pd(a[0], a[2]);
	a[1] = _mm256_add_pd(a[1], a[3]);
	a[0] = _mm256_add_pd(a[0], a[1]);
	s = _mm_add_pd(_mm256_castpd256_pd128(a[0]), _mm256_extractf128_pd(a[0], 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

static bool nonfinite_f32(const void *x, size_t n)
{
	const __m256i e = _mm256_set1_epi32(0x7f800000);
	const uint32_t *u = x;
	size_t i = 0;

	while (i + 8 <= n) {
		__m256i any = _mm256_setzero_si256();

		for (size_t end = n - i >= 512 ? i + 512 : n - (n - i) % 8; i < end; i += 8) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(u + i));
			any = _mm256_or_si256(any, _mm256_cmpeq_epi32(_mm256_and_si256(w, e), e));
		}
		if (!_mm256_testz_si256(any, any))
			return true;
	}
	for (; i < n; i++)
		if ((u[i] & 0x7f800000u) == 0x7f800000u)
			return true;
	return false;
}

static inline __attribute__((always_inline)) bool nonfinite_16(const uint16_t *u, size_t n, uint16_t expo)
{
	const __m256i e = _mm256_set1_epi16((short)expo);
	size_t i = 0;

	while (i + 16 <= n) {
		__m256i any = _mm256_setzero_si256();

		for (size_t end = n - i >= 1024 ? i + 1024 : n - (n - i) % 16; i < end; i += 16) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(u + i));
			any = _mm256_or_si256(any, _mm256_cmpeq_epi16(_mm256_and_si256(w, e), e));
		}
		if (!_mm256_testz_si256(any, any))
			return true;
	}
	for (; i < n; i++)
		if ((u[i] & expo) == expo)
			return true;
	return false;
}

static bool nonfinite_bf16(const void *x, size_t n) { return nonfinite_16(x, n, 0x7f80); }
static bool nonfinite_f16(const void *x, size_t n) { return nonfinite_16(x, n, 0x7c00); }

/* dst[i] = src[i] converted, 16 at a time, tail through a padded buffer. */
static inline __attribute__((always_inline)) void cast_span(void *d, enum spw_dtype dt, const void *s, enum spw_dtype st, size_t n)
{
	size_t i = 0, ds = spw_dtype_size(dt), ss = spw_dtype_size(st);

	for (; i + 16 <= n; i += 16)
		st16(d, dt, i, ld8(s, st, i), ld8(s, st, i + 8), false);
	if (i < n) {
		_Alignas(32) unsigned char sb[64] = { 0 }, db[64];

		memcpy(sb, (const unsigned char *)s + i * ss, (n - i) * ss);
		st16(db, dt, 0, ld8(sb, st, 0), ld8(sb, st, 8), false);
		memcpy((unsigned char *)d + i * ds, db, (n - i) * ds);
	}
}

VARIANT_CAST_FNS()
VARIANT_COPY_FNS()

static inline __attribute__((always_inline)) void acc_span(float *a, const void *g, size_t n, enum spw_dtype t)
{
	size_t i = 0, gs = spw_dtype_size(t);

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), ld8(g, t, i)));
	if (i < n) {
		_Alignas(32) unsigned char gb[32] = { 0 };
		float ab[8] = { 0 };

		memcpy(gb, (const unsigned char *)g + i * gs, (n - i) * gs);
		memcpy(ab, a + i, (n - i) * 4);
		_mm256_storeu_ps(ab, _mm256_add_ps(_mm256_loadu_ps(ab), ld8(gb, t, 0)));
		memcpy(a + i, ab, (n - i) * 4);
	}
}

VARIANT_SUMSQ_ACC_FNS()

static void scale_f32(float *x, float s, size_t n)
{
	const __m256 k = _mm256_set1_ps(s);
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), k));
	for (; i < n; i++)
		x[i] *= s; /* a single IEEE multiply either way */
}

/*
 * ---- stochastic rounding to bf16 (sr.h) ----
 * The same integer steps, eight lanes at a time; the last n % 8 elements
 * take sr.h's scalar function, which integer arithmetic makes the same bits.
 */

static inline __attribute__((always_inline)) __m256i sr_mix8(__m256i x)
{
	x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
	x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x21f0aaadu));
	x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
	x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x735a2d97u));
	return _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
}

/* Eight values whose elements have the low 32 index bits idx, rounded
 * under key: bf16 bits in the low half of each 32-bit lane. */
static inline __attribute__((always_inline)) __m256i sr8(__m256 x, __m256i key, __m256i idx)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i h = sr_mix8(_mm256_add_epi32(key, _mm256_mullo_epi32(idx, _mm256_set1_epi32((int)0x9e3779b9u))));
	__m256i r = _mm256_add_epi32(u, _mm256_srli_epi32(h, 16));
	__m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
	__m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);

	return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, _mm256_castps_si256(nan)), 16);
}

static void round_sr(uint16_t *dst, const float *x, size_t n, uint32_t key, uint64_t index)
{
	const __m256i kv = _mm256_set1_epi32((int)key), eight = _mm256_set1_epi32(8);
	/* Lane j holds the index of element i + j; only its low 32 bits
	 * count, so 32-bit lanes that wrap are exactly sr.h's arithmetic. */
	__m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)index),
				       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i a = sr8(_mm256_loadu_ps(x + i), kv, idx);
		__m256i b = sr8(_mm256_loadu_ps(x + i + 8), kv, _mm256_add_epi32(idx, eight));
		/* Every lane is below 2^16, so packus saturates nothing; it
		 * interleaves 128-bit lanes (a0-3 b0-3 | a4-7 b4-7), put back in order. */
		__m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);

		_mm256_storeu_si256((__m256i *)(dst + i), w);
		idx = _mm256_add_epi32(idx, _mm256_set1_epi32(16));
	}
	if (i + 8 <= n) {
		__m256i a = sr8(_mm256_loadu_ps(x + i), kv, idx);
		__m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, a), 0xd8);

		_mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(w));
		i += 8;
	}
	for (; i < n; i++)
		dst[i] = spw_f32_to_bf16_sr(x[i], key, index + i);
}

VARIANT_TABLE(spw__kernels_avx2, "avx2", );
