/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-cuda.c: the CUDA kernels against the CPU ones. Skips
 * (exit 77) with the CUDA error where no GPU can be used.
 */
#include <stdlib.h>
#include <cuda_runtime_api.h>

#include "kernels-cuda.h"
#include "kt.h"

#define N (1 << 20) + 77

#define CU_OK(x)                                                                     \
	do {                                                                         \
		cudaError_t e_ = (x);                                                \
		if (e_ != cudaSuccess)                                               \
			TEST_FAIL("%s: %s", #x, cudaGetErrorString(e_));             \
	} while (0)

int main(void)
{
	const struct spw_kernels *k = &spw__kernels_c;
	static float f[N], back[N];
	static uint16_t h[N], hd[N], hc[N];
	void *dx, *dy, *scratch;
	double *dsum, sum, sum_cpu = 0;
	unsigned int *dflag, flag = 0;
	uint64_t seed = 3;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess || count == 0)
		SKIP("no usable GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");

	for (size_t i = 0; i < N; i++)
		f[i] = kt_uniform(&seed, -70000, 70000) *
			(i % 5 ? 1.0f : 1e-40f);
	f[17] = NAN;
	f[18] = -INFINITY;
	CU_OK(cudaMalloc(&dx, N * 4));
	CU_OK(cudaMalloc(&dy, N * 4));
	CU_OK(cudaMalloc(&scratch, spw_cuda_sumsq_scratch_bytes()));
	CU_OK(cudaMalloc((void **)&dsum, sizeof(double)));
	CU_OK(cudaMalloc((void **)&dflag, sizeof(unsigned)));
	CU_OK(cudaMemcpy(dx, f, N * 4, cudaMemcpyHostToDevice));

	/* casts: fp32 -> bf16/fp16 and back, same bits as the CPU */
	for (int t = SPW_DTYPE_BF16; t <= SPW_DTYPE_F16; t++) {
		ASSERT_OK(spw_cuda_cast(t, dy, SPW_DTYPE_F32, dx, N, 0));
		CU_OK(cudaMemcpy(hd, dy, N * 2, cudaMemcpyDeviceToHost));
		k->cast[t][SPW_DTYPE_F32](hc, f, N);
		ASSERT_EQ(memcmp(hd, hc, N * 2), 0);
		ASSERT_OK(spw_cuda_cast(SPW_DTYPE_F32, dx, t, dy, N, 0));
		CU_OK(cudaMemcpy(back, dx, N * 4, cudaMemcpyDeviceToHost));
		k->cast[SPW_DTYPE_F32][t](f, hc, N); /* f is only reused as scratch from here */
		ASSERT_EQ(memcmp(back, f, N * 4), 0);
		memcpy(h, hc, sizeof(h));

		/* sum of squares and the inf/nan check on the 16-bit copy */
		ASSERT_OK(spw_cuda_sumsq(t, dy, N, scratch, dsum, 0));
		CU_OK(cudaMemcpy(&sum, dsum, sizeof(sum), cudaMemcpyDeviceToHost));
		ASSERT_TRUE(!isfinite(sum));
		CU_OK(cudaMemset(dflag, 0, sizeof(unsigned)));
		ASSERT_OK(spw_cuda_nonfinite(t, dy, N, dflag, 0));
		CU_OK(cudaMemcpy(&flag, dflag, sizeof(flag), cudaMemcpyDeviceToHost));
		ASSERT_EQ(flag, 1);
		/* finite part: compare with the CPU's double sum */
		ASSERT_OK(spw_cuda_sumsq(t, (uint16_t *)dy + 64, N - 64, scratch, dsum, 0));
		CU_OK(cudaMemcpy(&sum, dsum, sizeof(sum), cudaMemcpyDeviceToHost));
		sum_cpu = k->sumsq[t](h + 64, N - 64);
		ASSERT_TRUE(fabs(sum - sum_cpu) <= 1e-12 * sum_cpu);
		CU_OK(cudaMemset(dflag, 0, sizeof(unsigned)));
		ASSERT_OK(spw_cuda_nonfinite(t, (uint16_t *)dy + 64, N - 64, dflag, 0));
		CU_OK(cudaMemcpy(&flag, dflag, sizeof(flag), cudaMemcpyDeviceToHost));
		ASSERT_EQ(flag, (unsigned)k->nonfinite[t](h + 64, N - 64));
		CU_OK(cudaMemcpy(dx, back, N * 4, cudaMemcpyHostToDevice));
	}
	ASSERT_EQ(spw_cuda_cast(7, dy, SPW_DTYPE_F32, dx, 1, 0), -EINVAL);
	cudaFree(dx);
	cudaFree(dy);
	cudaFree(scratch);
	cudaFree(dsum);
	cudaFree(dflag);
	fprintf(stderr, "cuda kernels agree with the CPU\n");
	return 0;
}
