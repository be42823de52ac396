/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/kernels-cuda.h: the kernels that belong on the GPU, over
 * device buffers, queued on a stream (nothing here synchronises).
 *
 * Each returns 0, -EINVAL for a bad argument, or -EIO when the launch
 * failed (the CUDA error is left for cudaGetLastError() to report).
 * Conversions give exactly the bits of the CPU kernels (kernels.h).
 */
#ifndef SPW_KERNELS_CUDA_H
#define SPW_KERNELS_CUDA_H

#include <stddef.h>
#include <cuda_runtime_api.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of device scratch spw_cuda_sumsq() needs (fixed, a few KiB). */
size_t spw_cuda_sumsq_scratch_bytes(void);

/*
 * *d_out (a double in device memory) = sum of x[i]^2, accumulated in
 * double in a fixed order that depends only on n, so the same gradients
 * give the same bits on every run and every GPU. Not finite exactly when
 * some x[i] is inf or nan.
 */
int spw_cuda_sumsq(enum spw_dtype t, const void *d_x, size_t n, void *d_scratch,
		   double *d_out, cudaStream_t stream);

/* Sets *d_flag (device memory) to 1 when some x[i] is inf or nan; leaves it
 * alone otherwise, so zero it first and one flag can cover many buffers. */
int spw_cuda_nonfinite(enum spw_dtype t, const void *d_x, size_t n, unsigned int *d_flag,
		       cudaStream_t stream);

/* d_dst[i] = d_src[i] converted (see struct spw_kernels.cast). */
int spw_cuda_cast(enum spw_dtype dst_t, void *d_dst, enum spw_dtype src_t, const void *d_src,
		  size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
