/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/kernels-cuda.cu: gradient norm, inf/nan check and casts on
 * the GPU. The conversions are convert.h's integer recipes, the CPU's own,
 * so a bf16/fp16 copy made here equals the CPU's bit for bit.
 */
#include <errno.h>
#include <stdint.h>

#include "kernels-cuda.h"

#define SUMSQ_BLOCKS 1024
#define SUMSQ_THREADS 256

__device__ static inline float f32_of(const void *x, int t, size_t i)
{
	if (t == SPW_DTYPE_F32)
		return ((const float *)x)[i];
	uint16_t h = ((const uint16_t *)x)[i];
	if (t == SPW_DTYPE_BF16)
		return __uint_as_float((uint32_t)h << 16);
	return __uint_as_float(spw_f16_bits_to_f32_bits(h));
}

__device__ static inline uint16_t bf16_of(float f)
{
	return spw_f32_bits_to_bf16(__float_as_uint(f));
}

__device__ static inline uint16_t f16_of(float f)
{
	return spw_f32_bits_to_f16(__float_as_uint(f));
}

/* Tree sum of a block's values in shared memory; fixed order. */
__device__ static double block_sum(double v, double *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (unsigned w = blockDim.x / 2; w; w /= 2) {
		if (threadIdx.x < w)
			sh[threadIdx.x] += sh[threadIdx.x + w];
		__syncthreads();
	}
	return sh[0];
}

__global__ static void sumsq_partial(int t, const void *x, size_t n, double *partial)
{
	__shared__ double sh[SUMSQ_THREADS];
	double s = 0.0;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		double d = f32_of(x, t, i);
		s += d * d;
	}
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

__global__ static void sumsq_final(const double *partial, double *out)
{
	__shared__ double sh[SUMSQ_THREADS];
	double s = 0.0;

	for (unsigned i = threadIdx.x; i < SUMSQ_BLOCKS; i += blockDim.x)
		s += partial[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		*out = s;
}

__global__ static void nonfinite_k(int t, const void *x, size_t n, unsigned int *flag)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		bool bad;
		if (t == SPW_DTYPE_F32)
			bad = (((const uint32_t *)x)[i] & 0x7f800000u) == 0x7f800000u;
		else if (t == SPW_DTYPE_BF16)
			bad = (((const uint16_t *)x)[i] & 0x7f80u) == 0x7f80u;
		else
			bad = (((const uint16_t *)x)[i] & 0x7c00u) == 0x7c00u;
		if (bad)
			*flag = 1; /* racing writers all write 1: no atomic needed */
	}
}

__global__ static void cast_k(int dt, void *d, int st, const void *s, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float f = f32_of(s, st, i);
		if (dt == SPW_DTYPE_F32)
			((float *)d)[i] = f;
		else if (dt == st) /* same 16-bit type: copy bits, nans untouched */
			((uint16_t *)d)[i] = ((const uint16_t *)s)[i];
		else if (dt == SPW_DTYPE_BF16)
			((uint16_t *)d)[i] = bf16_of(f);
		else
			((uint16_t *)d)[i] = f16_of(f);
	}
}

static unsigned grid_for(size_t n)
{
	size_t b = (n + 255) / 256;
	return b == 0 ? 1 : b > 4096 ? 4096 : (unsigned)b;
}

static bool dtype_ok(int t)
{
	return t == SPW_DTYPE_F32 || t == SPW_DTYPE_BF16 || t == SPW_DTYPE_F16;
}

extern "C" size_t spw_cuda_sumsq_scratch_bytes(void)
{
	return SUMSQ_BLOCKS * sizeof(double);
}

extern "C" int spw_cuda_sumsq(enum spw_dtype t, const void *d_x, size_t n, void *d_scratch,
			      double *d_out, cudaStream_t stream)
{
	if (!dtype_ok(t) || !d_scratch || !d_out || (n && !d_x))
		return -EINVAL;
	/* Fixed grid, not sized to the GPU: the order of additions depends on n alone. */
	sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, stream>>>(t, d_x, n, (double *)d_scratch);
	sumsq_final<<<1, SUMSQ_THREADS, 0, stream>>>((const double *)d_scratch, d_out);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int spw_cuda_nonfinite(enum spw_dtype t, const void *d_x, size_t n,
				  unsigned int *d_flag, cudaStream_t stream)
{
	if (!dtype_ok(t) || !d_flag || (n && !d_x))
		return -EINVAL;
	if (n == 0)
		return 0;
	nonfinite_k<<<grid_for(n), 256, 0, stream>>>(t, d_x, n, d_flag);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int spw_cuda_cast(enum spw_dtype dst_t, void *d_dst, enum spw_dtype src_t,
			     const void *d_src, size_t n, cudaStream_t stream)
{
	if (!dtype_ok(dst_t) || !dtype_ok(src_t) || (n && (!d_dst || !d_src)))
		return -EINVAL;
	if (n == 0)
		return 0;
	cast_k<<<grid_for(n), 256, 0, stream>>>(dst_t, d_dst, src_t, d_src, n);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
