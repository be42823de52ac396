/* SPDX-License-Identifier: MIT */
/*
 * kernels/variant.h: the glue every variant file (adamw-<isa>.c) shares.
 * A variant writes its span functions, each taking the element types as
 * arguments (adamw_span, sumsq_span, acc_span, cast_span), and these
 * macros stamp out one function per type combination, with the types
 * constant, so each is a tight loop of its own, and the table that
 * dispatch.c picks from. Only the outer code is shared: the loops, and so
 * the bits and the speed, stay the variant's.
 */
#ifndef SPW_KERNELS_VARIANT_H
#define SPW_KERNELS_VARIANT_H

#include <string.h>

#include "kernels.h"
#include "q8.h"

/* adamw_<grad>_<copy> for every pair, from adamw_span(k, p, m, v, g, c, n,
 * gt, ct, mt) with fp32 moments (mt SPW_DTYPE_F32), and adamw_m16_<grad>_<copy>
 * with bf16 moments (mt SPW_DTYPE_BF16). */
#define VARIANT_ADAMW_FN(gn, gt, cn, ct)                                                      \
	static void adamw_##gn##_##cn(const struct spw_adamw_consts *k, float *p, float *m,     \
				      float *v, const void *g, void *c, size_t n)                \
	{                                                                                     \
		adamw_span(k, p, m, v, g, c, n, gt, ct, SPW_DTYPE_F32);                       \
	}                                                                                     \
	static void adamw_m16_##gn##_##cn(const struct spw_adamw_consts *k, float *p, uint16_t *m, \
					  uint16_t *v, const void *g, void *c, size_t n)         \
	{                                                                                     \
		adamw_span(k, p, m, v, g, c, n, gt, ct, SPW_DTYPE_BF16);                      \
	}
/* adamw_q8_<grad>_<copy> from q8.h's portable loop (the c variant). */
#define VARIANT_Q8_FN(gn, gt, cn, ct)                                                                  \
	static void adamw_q8_##gn##_##cn(const struct spw_adamw_consts *k, float *p, int8_t *mq, float *ms, \
					 uint8_t *vq, float *vs, const void *g, void *c, size_t n)      \
	{                                                                                              \
		spw_q8_adamw_portable(k, p, mq, ms, vq, vs, g, c, n, gt, ct);                          \
	}
#define VARIANT_Q8_ROW(gn, gt)                               \
	VARIANT_Q8_FN(gn, gt, f32, SPW_DTYPE_F32)            \
	VARIANT_Q8_FN(gn, gt, bf16, SPW_DTYPE_BF16)          \
	VARIANT_Q8_FN(gn, gt, f16, SPW_DTYPE_F16)            \
	VARIANT_Q8_FN(gn, gt, none, SPW_DTYPE_NONE)
#define VARIANT_Q8_FNS()                             \
	VARIANT_Q8_ROW(f32, SPW_DTYPE_F32)           \
	VARIANT_Q8_ROW(bf16, SPW_DTYPE_BF16)         \
	VARIANT_Q8_ROW(f16, SPW_DTYPE_F16)

#define VARIANT_ADAMW_ROW(gn, gt)                            \
	VARIANT_ADAMW_FN(gn, gt, f32, SPW_DTYPE_F32)         \
	VARIANT_ADAMW_FN(gn, gt, bf16, SPW_DTYPE_BF16)       \
	VARIANT_ADAMW_FN(gn, gt, f16, SPW_DTYPE_F16)         \
	VARIANT_ADAMW_FN(gn, gt, none, SPW_DTYPE_NONE)
#define VARIANT_ADAMW_FNS()                          \
	VARIANT_ADAMW_ROW(f32, SPW_DTYPE_F32)        \
	VARIANT_ADAMW_ROW(bf16, SPW_DTYPE_BF16)      \
	VARIANT_ADAMW_ROW(f16, SPW_DTYPE_F16)

/* cast_<dst>_<src> for every pair of different types, from
 * cast_span(d, dt, s, st, n); copy_f32 and copy_16 for the same type. */
#define VARIANT_CAST_FN(dn, dt, sn, st)                                    \
	static void cast_##dn##_##sn(void *d, const void *s, size_t n)    \
	{                                                                 \
		cast_span(d, dt, s, st, n);                               \
	}
#define VARIANT_CAST_FNS()                                              \
	VARIANT_CAST_FN(bf16, SPW_DTYPE_BF16, f32, SPW_DTYPE_F32)       \
	VARIANT_CAST_FN(f16, SPW_DTYPE_F16, f32, SPW_DTYPE_F32)         \
	VARIANT_CAST_FN(f32, SPW_DTYPE_F32, bf16, SPW_DTYPE_BF16)       \
	VARIANT_CAST_FN(f32, SPW_DTYPE_F32, f16, SPW_DTYPE_F16)         \
	VARIANT_CAST_FN(f16, SPW_DTYPE_F16, bf16, SPW_DTYPE_BF16)       \
	VARIANT_CAST_FN(bf16, SPW_DTYPE_BF16, f16, SPW_DTYPE_F16)
#define VARIANT_COPY_FNS()                                                              \
	static void copy_f32(void *d, const void *s, size_t n) { memcpy(d, s, n * 4); } \
	static void copy_16(void *d, const void *s, size_t n) { memcpy(d, s, n * 2); }

/* sumsq_<t> from sumsq_span(x, n, t) and acc_<t> from acc_span(a, g, n, t). */
#define VARIANT_BY_TYPE_FNS(tn, t)                                                                      \
	static double sumsq_##tn(const void *x, size_t n) { return sumsq_span(x, n, t); }              \
	static void acc_##tn(float *a, const void *g, size_t n) { acc_span(a, g, n, t); }
#define VARIANT_SUMSQ_ACC_FNS()                              \
	VARIANT_BY_TYPE_FNS(f32, SPW_DTYPE_F32)              \
	VARIANT_BY_TYPE_FNS(bf16, SPW_DTYPE_BF16)            \
	VARIANT_BY_TYPE_FNS(f16, SPW_DTYPE_F16)

/* The table, from the functions above plus the variant's nonfinite_<t>,
 * scale_f32 and round_sr. nat names a suffix (or nothing) of the functions that
 * write bf16 (the bf16 copy-outs, and every update with bf16 moments), for a
 * second table that uses native bf16 instructions. */
#define VARIANT_TABLE(sym, isa, nat)                                                                   \
	const struct spw_kernels sym = {                                                               \
		.name = isa,                                                                           \
		.adamw = {                                                                             \
			[SPW_DTYPE_F32] = { adamw_f32_f32, adamw_f32_bf16##nat, adamw_f32_f16, adamw_f32_none },     \
			[SPW_DTYPE_BF16] = { adamw_bf16_f32, adamw_bf16_bf16##nat, adamw_bf16_f16, adamw_bf16_none }, \
			[SPW_DTYPE_F16] = { adamw_f16_f32, adamw_f16_bf16##nat, adamw_f16_f16, adamw_f16_none },     \
		},                                                                                     \
		.adamw_m16 = {                                                                         \
			[SPW_DTYPE_F32] = { adamw_m16_f32_f32##nat, adamw_m16_f32_bf16##nat,           \
					    adamw_m16_f32_f16##nat, adamw_m16_f32_none##nat },         \
			[SPW_DTYPE_BF16] = { adamw_m16_bf16_f32##nat, adamw_m16_bf16_bf16##nat,        \
					     adamw_m16_bf16_f16##nat, adamw_m16_bf16_none##nat },      \
			[SPW_DTYPE_F16] = { adamw_m16_f16_f32##nat, adamw_m16_f16_bf16##nat,           \
					    adamw_m16_f16_f16##nat, adamw_m16_f16_none##nat },         \
		},                                                                                     \
		.adamw_q8 = {                                                                          \
			[SPW_DTYPE_F32] = { adamw_q8_f32_f32##nat, adamw_q8_f32_bf16##nat,             \
					    adamw_q8_f32_f16##nat, adamw_q8_f32_none##nat },           \
			[SPW_DTYPE_BF16] = { adamw_q8_bf16_f32##nat, adamw_q8_bf16_bf16##nat,          \
					     adamw_q8_bf16_f16##nat, adamw_q8_bf16_none##nat },        \
			[SPW_DTYPE_F16] = { adamw_q8_f16_f32##nat, adamw_q8_f16_bf16##nat,             \
					    adamw_q8_f16_f16##nat, adamw_q8_f16_none##nat },           \
		},                                                                                     \
		.sumsq = { sumsq_f32, sumsq_bf16, sumsq_f16 },                                         \
		.nonfinite = { nonfinite_f32, nonfinite_bf16, nonfinite_f16 },                         \
		.cast = {                                                                              \
			[SPW_DTYPE_F32] = { copy_f32, cast_f32_bf16, cast_f32_f16 },                   \
			[SPW_DTYPE_BF16] = { cast_bf16_f32##nat, copy_16, cast_bf16_f16##nat },         \
			[SPW_DTYPE_F16] = { cast_f16_f32, cast_f16_bf16, copy_16 },                    \
		},                                                                                     \
		.acc = { acc_f32, acc_bf16, acc_f16 },                                                 \
		.scale_f32 = scale_f32,                                                                \
		.round_sr = round_sr,                                                                  \
	}

#endif
