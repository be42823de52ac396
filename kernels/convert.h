/* SPDX-License-Identifier: MIT */
/*
 * kernels/convert.h: the bf16 and fp16 conversions as integer recipes on
 * the bit patterns. One definition for the CPU kernels (kernels.h wraps
 * them for floats) and the CUDA ones (compiled for the device there), so a
 * low-precision copy made on either side has the same bits. Every SIMD
 * variant's casts must agree with these too (tests/kernels checks all
 * 65536 patterns).
 */
#ifndef SPW_KERNELS_CONVERT_H
#define SPW_KERNELS_CONVERT_H

#include <stdint.h>

#ifdef __CUDACC__
#define SPW_CONVERT_FN static inline __host__ __device__
#else
#define SPW_CONVERT_FN static inline
#endif

/* fp32 bits -> bf16, round to nearest even; a nan stays a (quiet) nan,
 * which truncation alone could turn into inf. */
SPW_CONVERT_FN uint16_t spw_f32_bits_to_bf16(uint32_t u)
{
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* fp16 bits -> fp32 bits, exact. */
SPW_CONVERT_FN uint32_t spw_f16_bits_to_f32_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0x1f) /* F16C quiets a signalling nan on the way up; so do we. */
		return sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0);
	if (e == 0) {
		if (!m)
			return sign;
		/* Subnormal half: normalise; every one is a normal fp32. */
		e = 113;
		while (!(m & 0x400u)) {
			m <<= 1;
			e--;
		}
		return sign | (e << 23) | ((m & 0x3ffu) << 13);
	}
	return sign | ((e + 112) << 23) | (m << 13);
}

/* fp32 bits -> fp16, round to nearest even. */
SPW_CONVERT_FN uint16_t spw_f32_bits_to_f16(uint32_t u)
{
	uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;

	if (a > 0x7f800000u) /* nan: keep the top payload bits, force quiet */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520, the midpoint above 65504, ties to even = inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* a normal half: rebias, round the 13 dropped bits */
		a -= 112u << 23;
		return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
	}
	if (a < 0x33000000u) /* below 2^-25, half the smallest subnormal: zero */
		return (uint16_t)sign;
	{
		uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; /* 14..24: m * 2^-shift in units of 2^-24 */
		uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);

		if (rem > half || (rem == half && (q & 1u)))
			q++; /* may carry into 0x400, the smallest normal: still right */
		return (uint16_t)(sign | q);
	}
}

#endif
