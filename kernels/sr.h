/* SPDX-License-Identifier: MIT */
/*
 * kernels/sr.h: fp32 -> bf16 with stochastic rounding, as scalar
 * definitions every variant's round_sr agrees with bit for bit.
 *
 * Stored as bf16, a master weight loses every update smaller than half its
 * ulp when rounded to nearest; rounded up with probability (dropped bits) /
 * 2^16 instead, it keeps them on average: E[result] = x. The 16 random bits
 * for an element are a pure function of (key, element index): a 32-bit
 * integer finalizer of key + index * 0x9e3779b9 (the golden ratio, so
 * neighbouring indices start far apart). So the bits never depend on the
 * variant, the thread count or how a tensor is cut into spans, and the
 * caller changes the key (per step, per tensor) to draw fresh ones: a
 * key d apart is the index shifted by d / 0x9e3779b9 (mod 2^32), so an
 * element gets some other element's bits, never its own again. Only
 * the low 32 bits of the index count: elements 2^32 apart share their
 * bits, which only matters for one tensor of more than 4 Gi elements.
 *
 * Rounding: the 16 random bits are added to x's bits and the low 16
 * dropped. A bf16-representable x has zero low bits and stays exactly as
 * it is (inf too); any other x becomes its truncation or the next bf16
 * away from zero, never anything else; a finite x above bf16's largest
 * finite value may round up to inf. A nan comes out as spw_f32_bits_to_bf16()
 * makes it (quiet, sign and top payload kept): truncated, a signalling nan
 * can become inf, and the added bits can carry a nan into the sign bit.
 */
#ifndef SPW_KERNELS_SR_H
#define SPW_KERNELS_SR_H

#include <stdint.h>

#include "convert.h"

SPW_CONVERT_FN uint32_t spw_sr_mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x21f0aaadu;
	x ^= x >> 15;
	x *= 0x735a2d97u;
	x ^= x >> 15;
	return x;
}

/* The 16 random bits of element index under key; index mod 2^32. */
SPW_CONVERT_FN uint32_t spw_sr_bits(uint32_t key, uint64_t index)
{
	return spw_sr_mix(key + (uint32_t)index * 0x9e3779b9u) >> 16;
}

/* The key of a tensor's update in a step: tensor is its place among the
 * optimizer's tensors (the order they were added), so a run taken over or
 * resumed draws the bits an uninterrupted one would, and each step and
 * tensor fresh ones. */
SPW_CONVERT_FN uint32_t spw_sr_key(uint32_t tensor, uint64_t step)
{
	return spw_sr_mix(spw_sr_mix(tensor ^ 0x9b1f6c2du) + (uint32_t)step) ^ (uint32_t)(step >> 32);
}

SPW_CONVERT_FN uint16_t spw_f32_to_bf16_sr(float x, uint32_t key, uint64_t index)
{
	union { float f; uint32_t u; } b;

	b.f = x;
	if ((b.u & 0x7fffffffu) > 0x7f800000u)
		return spw_f32_bits_to_bf16(b.u);
	/* At most 0xff800000 + 0xffff: no wrap. */
	return (uint16_t)((b.u + spw_sr_bits(key, index)) >> 16);
}

#endif
