/* SPDX-License-Identifier: MIT */
/*
 * bench/bench-adam.c: the fused CPU AdamW kernel against, on the same
 * buffers and threads, in the same run, alternating each repetition:
 *
 *   roofline  a memory-only twin: reads p, m, v, g and writes p, m, v and the
 *             copy exactly as the kernel does (p += g, m += g, v += g, copy =
 *             top half of p), vectorised and tiled the same way: the ceiling.
 *   unfused   what DeepSpeed does today with spillway's own kernels: an
 *             unscale pass when a loss scale is set, Adam, then a pass that
 *             casts the fp32 params to bf16.
 *   scalar    a plain C loop, compiled -O3 (and, as in most builds, without
 *             -fno-math-errno), run through the same pool.
 *
 * With --state int8 the moments are 8-bit blockwise codes (adamw_q8,
 * kernels/q8.h): the fused kernel is adamw_q8, the roofline twin reads and
 * writes the same bytes (p, both codes, both blocks' scales, g, the copy)
 * with no math, unfused is the unscale pass, adamw_q8 and the cast pass,
 * and scalar is q8.h's portable loop (the c variant's). With --state bf16
 * the moments are bf16 (adamw_m16): the twin reads and writes their two
 * bytes each, unchanged, and scalar is the plain loop widening and
 * rounding them.
 *
 * Each figure is the median of --runs (>= 7) timed repetitions after a
 * warm-up, with min and max; buffers are hugepage-advised and prefaulted.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <immintrin.h>
#include <sys/mman.h>

#include "bench.h"
#include "kernels.h"
#include "pool.h"
#include "q8.h"

struct bufs {
	size_t n;
	float *p, *m, *v;
	void *g;
	uint16_t *copy;
	int8_t *mq;             /* int8 moments: codes and block scales */
	uint8_t *vq;
	float *ms, *vs;
	size_t bytes;
};

struct cfg {
	size_t n;
	unsigned threads;
	enum spw_dtype grad, copy;
	float loss_scale;       /* 0: none */
	bool q8;                /* int8 moments */
	bool m16;               /* bf16 moments */
};

struct job {
	const struct bufs *b;
	enum spw_dtype grad, copy;
	struct spw_adamw_consts k;
	float inv_scale;
	bool q8, m16;
};

static void *map_prefaulted(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE); /* first touch of 4 KiB pages costs ~11 us each here */
	memset(p, 0, bytes);
	return p;
}

static int bufs_alloc(struct bufs *b, size_t n)
{
	uint64_t s = 12345;

	b->n = n;
	b->bytes = n * (3 * 4 + 4 + 2);
	b->p = map_prefaulted(n * 4);
	b->m = map_prefaulted(n * 4);
	b->v = map_prefaulted(n * 4);
	b->g = map_prefaulted(n * 4);
	b->copy = map_prefaulted(n * 2);
	b->mq = map_prefaulted(n);
	b->vq = map_prefaulted(n);
	b->ms = map_prefaulted(n / SPW_Q8_BLOCK * 4 + 4);
	b->vs = map_prefaulted(n / SPW_Q8_BLOCK * 4 + 4);
	if (!b->p || !b->m || !b->v || !b->g || !b->copy || !b->mq || !b->vq || !b->ms || !b->vs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		b->p[i] = (float)(s >> 40) * 0x1p-24f - 0.5f;
		b->m[i] = 0.0f;
		b->v[i] = 1e-6f;
		/* positive, so the roofline's v += g never makes Adam take sqrt of < 0 */
		((float *)b->g)[i] = 1e-4f + (float)(s >> 52) * 0x1p-12f * 1e-3f;
	}
	return 0;
}

static void bufs_free(struct bufs *b)
{
	void *const ps[] = { b->p, b->m, b->v, b->g, b->copy, b->mq, b->vq, b->ms, b->vs };
	const size_t sz[] = { 4 * b->n, 4 * b->n, 4 * b->n, 4 * b->n, 2 * b->n, b->n, b->n,
			      b->n / SPW_Q8_BLOCK * 4 + 4, b->n / SPW_Q8_BLOCK * 4 + 4 };

	for (size_t i = 0; i < 9; i++)
		if (ps[i])
			munmap(ps[i], sz[i]);
}

/* Gradient storage as dtype t (bf16 rewritten in place into the low half of g). */
static void bufs_grad_as(struct bufs *b, enum spw_dtype t, const float *f32_saved)
{
	if (t == SPW_DTYPE_BF16)
		spw_kernels()->cast[SPW_DTYPE_BF16][SPW_DTYPE_F32](b->g, f32_saved, b->n);
	else
		memcpy(b->g, f32_saved, b->n * 4);
}

/* ---- the memory-only twin ---- */

static void twin_c(float *p, float *m, float *v, const void *g, uint16_t *c, size_t n,
		   enum spw_dtype gt, bool copy)
{
	for (size_t i = 0; i < n; i++) {
		float gi = gt == SPW_DTYPE_BF16 ? spw_bf16_to_f32(((const uint16_t *)g)[i]) : ((const float *)g)[i];
		p[i] += gi;
		m[i] += gi;
		v[i] += gi;
		if (copy) {
			uint32_t u;
			memcpy(&u, &p[i], 4);
			c[i] = (uint16_t)(u >> 16);
		}
	}
}

__attribute__((target("avx2")))
static void twin_avx2(float *p, float *m, float *v, const void *g, uint16_t *c, size_t n,
		      enum spw_dtype gt, bool copy)
{
	bool nt = copy && ((uintptr_t)c & 31) == 0;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 g0, g1, p0, p1;

		if (gt == SPW_DTYPE_BF16) {
			__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
			g0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
			g1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
		} else {
			g0 = _mm256_loadu_ps((const float *)g + i);
			g1 = _mm256_loadu_ps((const float *)g + i + 8);
		}
		/* Same order as the kernel: the block's loads, then each array's line. */
		{
			__m256 q0 = _mm256_loadu_ps(p + i), q1 = _mm256_loadu_ps(p + i + 8);
			__m256 m0 = _mm256_loadu_ps(m + i), m1 = _mm256_loadu_ps(m + i + 8);
			__m256 v0 = _mm256_loadu_ps(v + i), v1 = _mm256_loadu_ps(v + i + 8);

			p0 = _mm256_add_ps(q0, g0);
			p1 = _mm256_add_ps(q1, g1);
			_mm256_storeu_ps(p + i, p0);
			_mm256_storeu_ps(p + i + 8, p1);
			_mm256_storeu_ps(m + i, _mm256_add_ps(m0, g0));
			_mm256_storeu_ps(m + i + 8, _mm256_add_ps(m1, g1));
			_mm256_storeu_ps(v + i, _mm256_add_ps(v0, g0));
			_mm256_storeu_ps(v + i + 8, _mm256_add_ps(v1, g1));
		}
		if (copy) {
			__m256i w = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(p0), 16),
							_mm256_srli_epi32(_mm256_castps_si256(p1), 16));

			w = _mm256_permute4x64_epi64(w, 0xd8);
			/* Stored as the kernel stores it: around the cache when aligned. */
			if (nt)
				_mm256_stream_si256((__m256i *)(c + i), w);
			else
				_mm256_storeu_si256((__m256i *)(c + i), w);
		}
	}
	if (nt)
		_mm_sfence();
	/* The last n % 16 elements the scalar way. */
	twin_c(p + i, m + i, v + i, (const char *)g + i * (gt == SPW_DTYPE_BF16 ? 2 : 4), copy ? c + i : NULL, n - i, gt, copy);
}

static bool use_avx2_twin;

/* The int8 twin: the bytes adamw_q8 moves, in its order (a block's
 * loads and stores, then its codes and scales), no math to speak of. */
__attribute__((target("avx2")))
static void twin_q8(float *p, int8_t *mq, float *ms, uint8_t *vq, float *vs, const void *g, uint16_t *c,
		    size_t n, enum spw_dtype gt, bool copy)
{
	for (size_t b = 0; b < n; b += SPW_Q8_BLOCK) {
		size_t e = n - b < SPW_Q8_BLOCK ? n - b : SPW_Q8_BLOCK;
		float m[SPW_Q8_BLOCK], sm = ms[b / SPW_Q8_BLOCK], sv = vs[b / SPW_Q8_BLOCK];

		for (size_t j = 0; j < e; j++) {
			size_t i = b + j;
			float gi = gt == SPW_DTYPE_BF16 ? spw_bf16_to_f32(((const uint16_t *)g)[i]) : ((const float *)g)[i];
			float pi = p[i] + gi;

			p[i] = pi;
			m[j] = (float)mq[i] * sm + (float)vq[i] * sv + gi;
			if (copy) {
				uint32_t u;

				memcpy(&u, &pi, 4);
				c[i] = (uint16_t)(u >> 16);
			}
		}
		for (size_t j = 0; j < e; j++) {
			int32_t q = (int32_t)m[j];

			mq[b + j] = (int8_t)q;
			vq[b + j] = (uint8_t)q;
		}
		ms[b / SPW_Q8_BLOCK] = m[0];
		vs[b / SPW_Q8_BLOCK] = m[e - 1];
	}
}

/* The bf16-moment twin: p += g, the moments' two bytes each read and
 * written back as they were (xor with a zero the compiler cannot see, so
 * the stores stay), the copy as twin_avx2 makes it. */
static uint16_t twin_flip; /* always 0 */

__attribute__((target("avx2")))
static void twin_m16(float *p, uint16_t *m, uint16_t *v, const void *g, uint16_t *c, size_t n,
		     enum spw_dtype gt, bool copy)
{
	uint16_t flip = __atomic_load_n(&twin_flip, __ATOMIC_RELAXED);

	for (size_t i = 0; i < n; i++) {
		float gi = gt == SPW_DTYPE_BF16 ? spw_bf16_to_f32(((const uint16_t *)g)[i]) : ((const float *)g)[i];
		float pi = p[i] + gi;

		p[i] = pi;
		m[i] ^= flip;
		v[i] ^= flip;
		if (copy) {
			uint32_t u;

			memcpy(&u, &pi, 4);
			c[i] = (uint16_t)(u >> 16);
		}
	}
}

static void twin_tile(void *arg, size_t tile, size_t b, size_t e)
{
	const struct job *j = arg;
	const struct bufs *B = j->b;
	const void *g = (const char *)B->g + b * spw_dtype_size(j->grad);
	bool copy = j->copy != SPW_DTYPE_NONE;

	if (j->m16)
		twin_m16(B->p + b, (uint16_t *)B->m + b, (uint16_t *)B->v + b, g, B->copy + b, e - b, j->grad, copy);
	else if (j->q8)
		twin_q8(B->p + b, B->mq + b, B->ms + b / SPW_Q8_BLOCK, B->vq + b, B->vs + b / SPW_Q8_BLOCK, g,
			B->copy + b, e - b, j->grad, copy);
	else if (use_avx2_twin)
		twin_avx2(B->p + b, B->m + b, B->v + b, g, B->copy + b, e - b, j->grad, copy);
	else
		twin_c(B->p + b, B->m + b, B->v + b, g, B->copy + b, e - b, j->grad, copy);
}

/* ---- the plain C loop ---- */

static void scalar_tile(void *arg, size_t tile, size_t b, size_t e)
{
	const struct job *j = arg;
	const struct spw_adamw_consts *k = &j->k;
	const struct bufs *B = j->b;
	float *p = B->p, *m = B->m, *v = B->v;

	if (j->q8) {
		const void *g = (const char *)B->g + b * spw_dtype_size(j->grad);
		void *c = j->copy == SPW_DTYPE_BF16 ? B->copy + b : NULL;
		int8_t *mq = B->mq + b;
		uint8_t *vq = B->vq + b;
		float *ms = B->ms + b / SPW_Q8_BLOCK, *vs = B->vs + b / SPW_Q8_BLOCK;

		/* Constant dtypes, so each call is the c variant's loop. */
		if (j->grad == SPW_DTYPE_BF16 && c)
			spw_q8_adamw_portable(k, p + b, mq, ms, vq, vs, g, c, e - b, SPW_DTYPE_BF16, SPW_DTYPE_BF16);
		else if (j->grad == SPW_DTYPE_BF16)
			spw_q8_adamw_portable(k, p + b, mq, ms, vq, vs, g, c, e - b, SPW_DTYPE_BF16, SPW_DTYPE_NONE);
		else if (c)
			spw_q8_adamw_portable(k, p + b, mq, ms, vq, vs, g, c, e - b, SPW_DTYPE_F32, SPW_DTYPE_BF16);
		else
			spw_q8_adamw_portable(k, p + b, mq, ms, vq, vs, g, c, e - b, SPW_DTYPE_F32, SPW_DTYPE_NONE);
		return;
	}
	if (j->m16) {
		for (size_t i = b; i < e; i++) {
			uint16_t *mh = (uint16_t *)m, *vh = (uint16_t *)v;
			float g = (j->grad == SPW_DTYPE_BF16 ? spw_bf16_to_f32(((const uint16_t *)B->g)[i])
							       : ((const float *)B->g)[i]) * k->grad_scale;
			float pi = p[i] * k->decay, mi = spw_bf16_to_f32(mh[i]), vi = spw_bf16_to_f32(vh[i]), d;

			mi = mi + k->one_minus_beta1 * (g - mi);
			vi = vi * k->beta2 + k->one_minus_beta2 * g * g;
			d = sqrtf(vi) * k->inv_bc2_sqrt + k->eps;
			p[i] = pi + k->neg_step_size * (mi / d);
			mh[i] = spw_f32_to_bf16(mi);
			vh[i] = spw_f32_to_bf16(vi);
			if (j->copy == SPW_DTYPE_BF16)
				B->copy[i] = spw_f32_to_bf16(p[i]);
		}
		return;
	}
	for (size_t i = b; i < e; i++) {
		float g = (j->grad == SPW_DTYPE_BF16 ? spw_bf16_to_f32(((const uint16_t *)B->g)[i])
						      : ((const float *)B->g)[i]) * k->grad_scale;
		float d;

		p[i] *= k->decay;
		m[i] = m[i] + k->one_minus_beta1 * (g - m[i]);
		v[i] = v[i] * k->beta2 + k->one_minus_beta2 * g * g;
		d = sqrtf(v[i]) * k->inv_bc2_sqrt + k->eps;
		p[i] = p[i] + k->neg_step_size * (m[i] / d);
		if (j->copy == SPW_DTYPE_BF16)
			B->copy[i] = spw_f32_to_bf16(p[i]);
	}
}

struct scale_arg {
	float *x;
	float s;
};

static void scale_tile(void *arg, size_t tile, size_t b, size_t e)
{
	const struct scale_arg *a = arg;

	spw_kernels()->scale_f32(a->x + b, a->s, e - b);
}

/*
 * The plain loop runs 20-50x slower; on the whole of a 256M span its seven
 * runs alone would take minutes. Its rate is measured on the first 16M
 * params of the same buffers (still far out of cache) and reported as such.
 */
#define SCALAR_MAX_N ((size_t)16 << 20)

static size_t scalar_n(size_t n)
{
	return n < SCALAR_MAX_N ? n : SCALAR_MAX_N;
}

/* ---- timing ---- */

enum { FUSED, ROOF, UNFUSED, SCALAR, KINDS };
static const char *const kind_names[KINDS] = { "", "roofline_", "unfused_", "scalar_" };

/* An AdamW call on the job's bf16 or int8 moments, when it has them. */
static void q8_kcall(struct spw__pool_kcall *kc, const struct job *j)
{
	if (j->m16)
		kc->state_dtype = SPW_DTYPE_BF16;
	if (!j->q8)
		return;
	kc->q8 = true;
	kc->exp_avg = j->b->mq;
	kc->exp_avg_sq = j->b->vq;
	kc->m_scale = j->b->ms;
	kc->v_scale = j->b->vs;
}

static double run_once(struct spw__pool *pool, int kind, struct job *j)
{
	const struct bufs *B = j->b;
	struct spw__pool_kcall kc;
	struct spw__pool_call c;
	uint64_t t0 = now_ns();

	switch (kind) {
	case FUSED:
		kc = (struct spw__pool_kcall){
			.op = SPW_POOL_ADAMW, .n = B->n, .src = B->g, .src_dtype = j->grad, .consts = j->k,
			.param = B->p, .exp_avg = B->m, .exp_avg_sq = B->v,
			.copy = j->copy == SPW_DTYPE_NONE ? NULL : B->copy, .copy_dtype = j->copy,
		};
		q8_kcall(&kc, j);
		if (j->inv_scale != 1.0f)
			kc.consts.grad_scale = j->inv_scale;
		spw__pool_kernel_submit(pool, &kc);
		spw__pool_wait(pool, &kc.call);
		break;
	case UNFUSED:
		if (j->inv_scale != 1.0f) {
			/* The unscale pass over fp32 grads. Alternate 1/S and S so the
			 * gradients do not shrink run after run. */
			static bool up;
			struct scale_arg sa = { (float *)B->g, up ? 1.0f / j->inv_scale : j->inv_scale };

			up = !up;
			c = (struct spw__pool_call){ .fn = scale_tile, .arg = &sa, .n = B->n,
						     .tile = SPW_POOL_ADAMW_TILE };
			spw__pool_submit(pool, &c);
			spw__pool_wait(pool, &c);
		}
		kc = (struct spw__pool_kcall){
			.op = SPW_POOL_ADAMW, .n = B->n, .src = B->g, .src_dtype = j->grad, .consts = j->k,
			.param = B->p, .exp_avg = B->m, .exp_avg_sq = B->v, .copy_dtype = SPW_DTYPE_NONE,
		};
		q8_kcall(&kc, j);
		spw__pool_kernel_submit(pool, &kc);
		spw__pool_wait(pool, &kc.call);
		if (j->copy != SPW_DTYPE_NONE) {
			kc = (struct spw__pool_kcall){ .op = SPW_POOL_CAST, .n = B->n, .src = B->p,
						       .src_dtype = SPW_DTYPE_F32, .dst = B->copy,
						       .dst_dtype = j->copy };
			spw__pool_kernel_submit(pool, &kc);
			spw__pool_wait(pool, &kc.call);
		}
		break;
	case ROOF:
	case SCALAR:
		c = (struct spw__pool_call){ .fn = kind == ROOF ? twin_tile : scalar_tile, .arg = j,
					     .n = kind == SCALAR ? scalar_n(B->n) : B->n,
					     .tile = SPW_POOL_ADAMW_TILE };
		spw__pool_submit(pool, &c);
		spw__pool_wait(pool, &c);
		break;
	}
	return (double)(now_ns() - t0) * 1e-9;
}

static double median_min_max(double *v, size_t n, double *mn, double *mx)
{
	double med = bench_median(v, n); /* sorts */

	*mn = v[0];
	*mx = v[n - 1];
	return med;
}

static const char *dtype_name(enum spw_dtype t)
{
	return t == SPW_DTYPE_F32 ? "fp32" : t == SPW_DTYPE_BF16 ? "bf16" : t == SPW_DTYPE_F16 ? "fp16" : "none";
}

static void run_cfg(struct spw__pool *pool, struct bufs *b, const float *g32, const struct cfg *c,
		    unsigned runs, bool json)
{
	struct spw_adamw_hparams hp = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					.weight_decay = 0.01f, .grad_scale = 1.0f, .step = 10 };
	struct job j = { .b = b, .grad = c->grad, .copy = c->copy, .q8 = c->q8, .m16 = c->m16 };
	struct bench_progress pg;
	double t[KINDS][64], pps[KINDS], mn[KINDS], mx[KINDS];
	/* Moments: read and written, 4 bytes each, 2 in bf16, or an int8
	 * code each and a 4-byte scale a block (rounded down here: 1/32 of a
	 * byte). */
	size_t mom = c->q8 ? 2 * 2 : c->m16 ? 2 * 4 : 2 * 8;
	const char *state = c->q8 ? "int8" : c->m16 ? "bf16" : "fp32";
	size_t bpp = 8 + mom + spw_dtype_size(c->grad) + spw_dtype_size(c->copy);
	/* The unfused path's bytes: Adam's, plus the unscale pass (read and
	 * write the gradient) and the cast pass (read p, write the copy).
	 * Memory-bound, the speedup fusion can reach is their ratio. */
	size_t unfused_bpp = 8 + mom + spw_dtype_size(c->grad) +
			     (c->loss_scale > 0 ? 2 * spw_dtype_size(c->grad) : 0) +
			     (c->copy != SPW_DTYPE_NONE ? 4 + spw_dtype_size(c->copy) : 0);
	double ceiling = (double)unfused_bpp / (double)bpp;
	size_t saved_n = b->n;

	b->n = c->n;
	bufs_grad_as(b, c->grad, g32);
	if (c->m16) /* bf16 moments in the fp32 ones' memory: m = 0, v = 1e-6 */
		for (size_t i = 0; i < b->n; i++) {
			((uint16_t *)b->m)[i] = 0;
			((uint16_t *)b->v)[i] = spw_f32_to_bf16(1e-6f);
		}
	spw_adamw_prepare(&hp, &j.k);
	j.inv_scale = c->loss_scale > 0 ? 1.0f / c->loss_scale : 1.0f;
	bench_progress_init(&pg, "adam", (unsigned)(runs + 1) * KINDS);
	for (int k = 0; k < KINDS; k++) {
		run_once(pool, k, &j); /* warm-up */
		bench_progress_step(&pg, "run");
	}
	/* Alternate the four every repetition: this machine drifts between runs. */
	for (unsigned r = 0; r < runs; r++)
		for (int q = 0; q < KINDS; q++) {
			int k = (q + (int)r) % KINDS; /* rotate who goes first */

			t[k][r] = (double)(k == SCALAR ? scalar_n(c->n) : c->n) / run_once(pool, k, &j);
			bench_progress_step(&pg, "run");
		}
	bench_progress_end(&pg);
	for (int k = 0; k < KINDS; k++)
		pps[k] = median_min_max(t[k], runs, &mn[k], &mx[k]);

	if (json) {
		printf("{\"bench\":\"adam\",\"variant\":\"%s\",\"params\":%zu,\"threads\":%u,\"grad\":\"%s\","
		       "\"copy\":\"%s\",\"state\":\"%s\",\"loss_scale\":%g,\"runs\":%u,\"bytes_per_param\":%zu,",
		       spw_kernels_name(), c->n, spw__pool_threads(pool), dtype_name(c->grad),
		       dtype_name(c->copy), state, c->loss_scale, runs, bpp);
		for (int k = 0; k < KINDS; k++)
			printf("\"%sparams_per_s\":%.4g,\"%sparams_per_s_min\":%.4g,\"%sparams_per_s_max\":%.4g,",
			       kind_names[k], pps[k], kind_names[k], mn[k], kind_names[k], mx[k]);
		printf("\"scalar_params\":%zu,\"gbytes_per_s\":%.2f,\"roofline_gbytes_per_s\":%.2f,\"roofline_fraction\":%.3f,"
		       "\"speedup_vs_unfused\":%.3f,\"fusion_ceiling\":%.3f,\"of_fusion_ceiling\":%.3f,"
		       "\"speedup_vs_scalar\":%.2f}\n",
		       scalar_n(c->n), pps[FUSED] * (double)bpp * 1e-9, pps[ROOF] * (double)bpp * 1e-9, pps[FUSED] / pps[ROOF],
		       pps[FUSED] / pps[UNFUSED], ceiling, pps[FUSED] / pps[UNFUSED] / ceiling, pps[FUSED] / pps[SCALAR]);
	} else {
		printf("adam %s n=%zu threads=%u grad=%s copy=%s state=%s: %.3f Gparam/s (%.1f GB/s), "
		       "roofline %.3f (%.2f), unfused %.3f (x%.2f), scalar %.3f (x%.1f)\n",
		       spw_kernels_name(), c->n, spw__pool_threads(pool), dtype_name(c->grad),
		       dtype_name(c->copy), state, pps[FUSED] * 1e-9, pps[FUSED] * (double)bpp * 1e-9,
		       pps[ROOF] * 1e-9, pps[FUSED] / pps[ROOF], pps[UNFUSED] * 1e-9,
		       pps[FUSED] / pps[UNFUSED], pps[SCALAR] * 1e-9, pps[FUSED] / pps[SCALAR]);
	}
	fflush(stdout);
	b->n = saved_n;
}

static int parse_size(const char *s, size_t *ret)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return -EINVAL;
	if (*end == 'k' || *end == 'K')
		v *= 1024, end++;
	else if (*end == 'm' || *end == 'M')
		v *= 1024 * 1024, end++;
	else if (*end == 'g' || *end == 'G')
		v *= 1024.0 * 1024 * 1024, end++;
	if (*end || v < 1)
		return -EINVAL;
	*ret = (size_t)v;
	return 0;
}

static int parse_dtype(const char *s, bool copy, enum spw_dtype *ret)
{
	if (!strcmp(s, "fp32") && !copy)
		*ret = SPW_DTYPE_F32;
	else if (!strcmp(s, "bf16"))
		*ret = SPW_DTYPE_BF16;
	else if (!strcmp(s, "none") && copy)
		*ret = SPW_DTYPE_NONE;
	else
		return -EINVAL;
	return 0;
}

static const char usage[] =
	"usage: spillway-bench adam [--json] [--quick] [--params N] [--threads T]\n"
	"                           [--grad fp32|bf16] [--copy none|bf16] [--loss-scale S] [--runs R]\n"
	"                           [--state fp32|bf16|int8]\n"
	"  Without --params/--threads/--grad/--copy it runs every combination of\n"
	"  64M and (memory allowing) 256M params, fp32 and bf16 grads, no copy and a\n"
	"  bf16 copy, 1 thread and all threads of the node. --quick: 4M params, 7 runs.\n"
	"  --loss-scale: S > 0 unscales fp32 grads (fused: in the kernel; unfused: a\n"
	"  separate pass first); 0 for none. Default: 65536 with fp32 grads (fp16 AMP),\n"
	"  none with bf16 grads.\n"
	"  N takes K/M/G suffixes (powers of 1024). T=0 means all cores of the node.\n"
	"  --state bf16: bf16 moments (adamw_m16); int8: 8-bit blockwise moments\n"
	"  (adamw_q8); default fp32.\n";

int bench_adam(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },     { "quick", no_argument, NULL, 'q' },
		{ "params", required_argument, NULL, 'n' }, { "threads", required_argument, NULL, 't' },
		{ "grad", required_argument, NULL, 'g' }, { "copy", required_argument, NULL, 'c' },
		{ "loss-scale", required_argument, NULL, 's' }, { "runs", required_argument, NULL, 'r' },
		{ "state", required_argument, NULL, 'S' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	size_t sizes[2] = { 64u << 20, 256u << 20 }, nsizes = 2, maxn;
	enum spw_dtype grads[2] = { SPW_DTYPE_F32, SPW_DTYPE_BF16 }, copies[2] = { SPW_DTYPE_NONE, SPW_DTYPE_BF16 };
	size_t ngrads = 2, ncopies = 2;
	int threads_opt = -1, c, r;
	unsigned runs = 7;
	float loss_scale = -1; /* -1: 65536 with fp32 grads (fp16 AMP), none with bf16 */
	bool json = false, quick = false, sized = false, q8 = false, m16 = false;
	struct spw__pool *pools[2] = { NULL, NULL };
	unsigned npools;
	struct bufs b = { 0 };
	float *g32;
	char err[256];

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'q': quick = true; break;
		case 'n':
			if (parse_size(optarg, &sizes[0]) < 0)
				goto bad;
			nsizes = 1;
			sized = true;
			break;
		case 't': threads_opt = atoi(optarg); if (threads_opt < 0) goto bad; break;
		case 'g': if (parse_dtype(optarg, false, &grads[0]) < 0) goto bad; ngrads = 1; break;
		case 'c': if (parse_dtype(optarg, true, &copies[0]) < 0) goto bad; ncopies = 1; break;
		case 's': loss_scale = strtof(optarg, NULL); if (!(loss_scale >= 0)) goto bad; break;
		case 'r': runs = (unsigned)atoi(optarg); if (runs < 7 || runs > 64) goto bad; break;
		case 'S':
			if (strcmp(optarg, "int8") && strcmp(optarg, "bf16") && strcmp(optarg, "fp32"))
				goto bad;
			q8 = !strcmp(optarg, "int8");
			m16 = !strcmp(optarg, "bf16");
			break;
		case 'h': return bench_usage(usage, "--help");
		default: goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	if (loss_scale > 0 && (ngrads != 1 || grads[0] != SPW_DTYPE_F32)) {
		fprintf(stderr, "spillway-bench adam: --loss-scale needs --grad fp32 (the unfused baseline unscales fp32 grads in place)\n");
		return 2;
	}
	if (quick && !sized) {
		sizes[0] = 4u << 20;
		nsizes = 1;
	}
	r = spw_kernels_init(err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "spillway-bench adam: %s\n", err);
		return 1;
	}
	if (!sized && nsizes == 2) {
		/* 256M only when it fits comfortably next to everyone else. */
		long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		double need = (double)sizes[1] * (3 * 4 + 4 + 2 + 4) * 1.5;

		if (pages <= 0 || (double)pages * (double)psz < need)
			nsizes = 1;
	}
	maxn = sizes[0] > sizes[nsizes - 1] ? sizes[0] : sizes[nsizes - 1];

	use_avx2_twin = __builtin_cpu_supports("avx2");
	{
		struct spw__pool_opts po = { .numa_node = -1 };

		if (threads_opt >= 0) {
			po.threads = (unsigned)threads_opt;
			r = spw__pool_new(&po, &pools[0]);
			npools = 1;
		} else {
			po.threads = 1;
			r = spw__pool_new(&po, &pools[0]);
			if (r == 0) {
				po.threads = 0;
				r = spw__pool_new(&po, &pools[1]);
			}
			npools = 2;
			if (r == 0 && spw__pool_threads(pools[1]) == 1) {
				pools[1] = spw__pool_free(pools[1]);
				npools = 1;
			}
		}
		if (r < 0) {
			fprintf(stderr, "spillway-bench adam: thread pool: %s\n", strerror(-r));
			goto out;
		}
	}
	r = bufs_alloc(&b, maxn);
	g32 = r == 0 ? map_prefaulted(maxn * 4) : NULL;
	if (r < 0 || !g32) {
		fprintf(stderr, "spillway-bench adam: cannot map %zu MiB for %zu params (try --params)\n",
			(maxn * 22) >> 20, maxn);
		r = -ENOMEM;
		goto out;
	}
	memcpy(g32, b.g, maxn * 4);

	for (size_t si = 0; si < nsizes; si++)
		for (size_t gi = 0; gi < ngrads; gi++)
			for (size_t ci = 0; ci < ncopies; ci++)
				for (unsigned pi = 0; pi < npools; pi++) {
					struct cfg cf = { .n = sizes[si], .threads = spw__pool_threads(pools[pi]),
							  .grad = grads[gi], .copy = copies[ci],
							  .loss_scale = loss_scale, .q8 = q8, .m16 = m16 };

					if (loss_scale < 0) /* fp16 AMP scales fp32 grads; bf16 needs no scale */
						cf.loss_scale = grads[gi] == SPW_DTYPE_F32 ? 65536.0f : 0.0f;
					run_cfg(pools[pi], &b, g32, &cf, runs, json);
				}
	munmap(g32, maxn * 4);
	r = 0;
out:
	bufs_free(&b);
	for (unsigned i = 0; i < 2; i++)
		spw__pool_free(pools[i]);
	return r < 0 ? 1 : 0;
bad:
	return bench_usage(usage, NULL);
}
