/* SPDX-License-Identifier: MIT */
/*
 * kernels/kernels.h: the pure-compute kernels libspillway runs on CPU threads.
 *
 * Nothing here does I/O, starts threads or allocates. Every function works on
 * one span of n elements, any n (0 included) and any element-aligned start;
 * the thread pool (client/pool.h) cuts big spans into tiles and calls these.
 *
 * Variants: "avx512" (AVX-512F/BW/VL, plus AVX512_BF16 conversions where the
 * CPU has them), "avx2" (AVX2+FMA+F16C) and "c" (plain C). One is chosen
 * once per process from the CPU's features; SPILLWAY_KERNELS=c|avx2|avx512
 * forces one. All variants produce bit-identical results for every function
 * (the operation order below is fixed, no FMA contraction, sqrt and division
 * are IEEE correctly rounded everywhere), so a result never depends on which
 * machine, variant, tiling or thread count produced it.
 */
#ifndef SPW_KERNELS_H
#define SPW_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "sr.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The values index the tables in struct spw_kernels. */
enum spw_dtype {
	SPW_DTYPE_F32 = 0,
	SPW_DTYPE_BF16 = 1,
	SPW_DTYPE_F16 = 2,
	SPW_DTYPE_COUNT,
	/* Only as the copy-out type of an AdamW update: no copy is written. */
	SPW_DTYPE_NONE = SPW_DTYPE_COUNT,
};

/* Bytes per element (0 for SPW_DTYPE_NONE). */
static inline size_t spw_dtype_size(enum spw_dtype t)
{
	return t == SPW_DTYPE_F32 ? 4 : t < SPW_DTYPE_COUNT ? 2 : 0;
}

/*
 * AdamW hyperparameters for one step, as torch.optim.AdamW takes them.
 *
 * grad_scale multiplies every gradient before anything else: set it to
 * clip_coef / loss_scale so unscaling and global-norm clipping cost no extra
 * pass over memory (1.0f for neither).
 */
struct spw_adamw_hparams {
	float lr;
	float beta1;
	float beta2;
	float eps;
	float weight_decay;
	float grad_scale;
	uint64_t step;          /* 1 for the first update (torch's state['step'] after += 1) */
};

/*
 * Per-call constants derived once from the hyperparameters by
 * spw_adamw_prepare(), so bias corrections cost nothing per element.
 * Treat as opaque; the fields are listed so callers can keep it on the stack.
 */
struct spw_adamw_consts {
	float grad_scale;
	float beta1, one_minus_beta1;
	float beta2, one_minus_beta2;
	float decay;            /* 1 - lr * weight_decay */
	float neg_step_size;    /* -lr / (1 - beta1^step) */
	float inv_bc2_sqrt;     /* 1 / sqrt(1 - beta2^step) */
	float eps;
	uint32_t reserved;
};
#ifdef __cplusplus
static_assert(sizeof(struct spw_adamw_consts) == 40, "spw_adamw_consts layout");
#else
_Static_assert(sizeof(struct spw_adamw_consts) == 40, "spw_adamw_consts layout");
#endif

/*
 * Computes the per-call constants. Returns 0, or -EINVAL when step is 0,
 * a beta is outside [0, 1), or lr, eps, weight_decay or grad_scale is
 * negative or not finite.
 *
 * The update, per element, in exactly this order and rounding (every
 * operation one IEEE fp32 operation, none fused), follows torch.optim.AdamW
 * (torch/optim/adamw.py, _single_tensor_adamw, torch 2.x, foreach=False,
 * capturable=False, amsgrad=False, maximize=False):
 *
 *   g     = grad * grad_scale
 *   p     = p * decay                          param.mul_(1 - lr * weight_decay)
 *   m     = m + one_minus_beta1 * (g - m)      exp_avg.lerp_(grad, 1 - beta1)
 *   v     = v * beta2 + one_minus_beta2 * g * g
 *                                              exp_avg_sq.mul_(beta2)
 *                                                .addcmul_(grad, grad, value=1 - beta2)
 *                                              ((1 - beta2) * g first, then * g)
 *   denom = sqrt(v) * inv_bc2_sqrt + eps       (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 *   p     = p + neg_step_size * (m / denom)    param.addcdiv_(exp_avg, denom, value=-step_size)
 *   copy  = round_to_nearest_even(p) in bf16 or fp16, if a copy is asked for
 *
 * Bias corrections 1 - beta^step are computed in double, as Python does
 * for torch, then rounded to float once. The one departure from torch's
 * rounding: torch divides by bias_correction2_sqrt, we multiply by its
 * reciprocal (computed in double, rounded once), which can move denom by an
 * ulp. A second division per element made the kernel divider-bound on the
 * machines we measured (Zen 3: 2.0 vs 2.8 Gparam/s per core in cache), below
 * memory speed with a bf16 copy-out; the formula is the same.
 */
int spw_adamw_prepare(const struct spw_adamw_hparams *hp, struct spw_adamw_consts *ret);

/*
 * One variant's functions. Index the typed tables with enum spw_dtype.
 * Pointers may be unaligned (element-aligned); in-place spans must be the
 * same pointer or not overlap.
 */
struct spw_kernels {
	const char *name;       /* "avx512", "avx2" or "c" */

	/*
	 * adamw[grad_dtype][copy_dtype]: updates param, exp_avg and exp_avg_sq
	 * (fp32, in place) from grad, and when copy_dtype is not
	 * SPW_DTYPE_NONE also writes the updated params to copy (bf16 or fp16;
	 * the fp32 entry copy_dtype == SPW_DTYPE_F32 is a plain fp32 copy).
	 */
	void (*adamw[SPW_DTYPE_COUNT][SPW_DTYPE_COUNT + 1])(
		const struct spw_adamw_consts *k, float *param, float *exp_avg,
		float *exp_avg_sq, const void *grad, void *copy, size_t n);

	/*
	 * adamw_m16[grad_dtype][copy_dtype]: the same update with the moments
	 * stored as bf16 (SPW_STATE_BF16): exp_avg[i] and exp_avg_sq[i] are
	 * widened to fp32 (exact), m, v, denom and p computed exactly as
	 * above in fp32 (p from the unrounded fp32 m and v), then m and v
	 * stored back rounded to nearest even (spw_f32_to_bf16()). One pass,
	 * the same bits in every variant.
	 */
	void (*adamw_m16[SPW_DTYPE_COUNT][SPW_DTYPE_COUNT + 1])(
		const struct spw_adamw_consts *k, float *param, uint16_t *exp_avg,
		uint16_t *exp_avg_sq, const void *grad, void *copy, size_t n);

	/*
	 * adamw_q8[grad_dtype][copy_dtype]: the same update with 8-bit
	 * blockwise moments (q8.h has the codes): per block of SPW_Q8_BLOCK
	 * elements, the codes m_code[i], v_code[i] are decoded with the
	 * block's scales m_scale[b], v_scale[b], m, v, denom and p computed
	 * as above in fp32 (p from the unrounded moments), then the block's
	 * new scales (largest |m| and v) and codes stored. The span must
	 * start on a block boundary (element 0 of its scales); its last block
	 * may be short. The same bits in every variant.
	 */
	void (*adamw_q8[SPW_DTYPE_COUNT][SPW_DTYPE_COUNT + 1])(
		const struct spw_adamw_consts *k, float *param, int8_t *m_code, float *m_scale,
		uint8_t *v_code, float *v_scale, const void *grad, void *copy, size_t n);

	/*
	 * Sum of x[i]^2 in double. Each square is exact in double; they are
	 * added into 32 lanes (element i of the span into lane i % 32) and the
	 * lanes folded pairwise, the same order in every variant. Not finite
	 * exactly when some x[i] is inf or nan (no finite fp32/bf16/fp16
	 * square sum can overflow a double).
	 */
	double (*sumsq[SPW_DTYPE_COUNT])(const void *x, size_t n);

	/* True when some x[i] is inf or nan. */
	bool (*nonfinite[SPW_DTYPE_COUNT])(const void *x, size_t n);

	/*
	 * cast[dst][src]: dst[i] = src[i]. To bf16/fp16: round to nearest,
	 * ties to even, overflow to inf, subnormals kept; a nan stays a nan
	 * (quiet, sign and top payload bits kept). To fp32: exact (a bf16 or
	 * fp16 nan keeps its payload; a signalling fp16 nan comes out quiet).
	 * dst and src must not overlap. cast[t][t] is a plain copy.
	 */
	void (*cast[SPW_DTYPE_COUNT][SPW_DTYPE_COUNT])(void *dst, const void *src, size_t n);

	/* acc[i] += g[i] (fp32 accumulator), for gradient accumulation. */
	void (*acc[SPW_DTYPE_COUNT])(float *acc, const void *g, size_t n);

	/* x[i] *= s in place: the separate unscale pass other optimizers run. */
	void (*scale_f32)(float *x, float s, size_t n);

	/*
	 * dst[i] = spw_f32_to_bf16_sr(x[i], key, index + i) for i in [0, n):
	 * fp32 to bf16 with stochastic rounding (sr.h), for bf16 master
	 * weights. index is the span's first element's index in the whole
	 * tensor, so the bits do not depend on how the tensor is cut. dst and
	 * x must not overlap. The same bits in every variant.
	 */
	void (*round_sr)(uint16_t *dst, const float *x, size_t n, uint32_t key, uint64_t index);
};

/*
 * The chosen variant. The first call picks it (SPILLWAY_KERNELS, else the
 * best the CPU runs); if SPILLWAY_KERNELS names one this CPU cannot run or
 * an unknown one, the plain C variant is used until spw_kernels_init()
 * reports the error. Thread-safe.
 */
const struct spw_kernels *spw_kernels(void);

/* Name of the chosen variant. */
const char *spw_kernels_name(void);

/*
 * Chooses the variant once per process and reports a refused
 * SPILLWAY_KERNELS. Returns 0; -EINVAL when SPILLWAY_KERNELS names no
 * variant; -ENOTSUP when this CPU lacks what the named variant needs. On
 * error, when err is not NULL, writes a sentence a person can act on
 * (the variable, what is missing, which variants this CPU runs).
 */
int spw_kernels_init(char *err, size_t errlen);

/*
 * Forces a variant (tests, benchmarks). Returns 0, -EINVAL for an unknown
 * name, -ENOTSUP when this CPU cannot run it.
 */
int spw_kernels_select(const char *name);

/*
 * A specific variant's table, whether or not it is the chosen one, so tests
 * can compare every variant. Returns 0 and sets *ret, -EINVAL for an unknown
 * name, -ENOTSUP when this CPU cannot run it (or it was not compiled in).
 */
int spw_kernels_variant(const char *name, const struct spw_kernels **ret);

/* Every variant name this build knows, best first, NULL-terminated. */
extern const char *const spw_kernels_all[];

/* Scalar conversions, the definitions every variant's casts agree with. */
static inline float spw_bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } x;

	x.u = (uint32_t)h << 16;
	return x.f;
}

static inline uint16_t spw_f32_to_bf16(float f)
{
	union { float f; uint32_t u; } x;

	x.f = f;
	return spw_f32_bits_to_bf16(x.u);
}

float spw_f16_to_f32(uint16_t h);
uint16_t spw_f32_to_f16(float f);

/* Per-variant tables (kernels/adamw-*.c); use spw_kernels_variant(). */
extern const struct spw_kernels spw__kernels_c;
extern const struct spw_kernels spw__kernels_avx2;
extern const struct spw_kernels spw__kernels_avx512;

#ifdef __cplusplus
}
#endif

#endif
