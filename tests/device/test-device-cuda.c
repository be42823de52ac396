/* SPDX-License-Identifier: MIT */
/*
 * tests/device/test-device-cuda.c: the cuda backend against the device
 * contract. Built when the build has CUDA; skips (77) with the reason when
 * this machine has no usable GPU.
 */
#include "test.h"
#include "device-contract.h"

static struct spw__device *open_cuda(void)
{
	struct spw__device *dev = NULL;
	char err[512];

	if (spw__device_open("cuda", &dev, err, sizeof(err)) < 0)
		TEST_FAIL("cuda open: %s", err);
	ASSERT_STREQ(spw__device_name(dev), "cuda");
	return dev;
}

int main(void)
{
	char why[256] = "";

	if (spw__device_cuda_count(why, sizeof(why)) <= 0)
		SKIP("no CUDA device: %s", why);
	device_contract_run(open_cuda);
	return 0;
}
