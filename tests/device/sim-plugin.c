/* SPDX-License-Identifier: MIT */
/*
 * tests/device/sim-plugin.c: a cuda plugin with no GPU behind it, for the
 * pipeline's device paths in CI. Its one device is the host backend under
 * the name "cuda": "device" memory is host memory and the copies are
 * memcpy() on the backend's stream threads, so nothing about CUDA itself
 * is tested here (tests/device/test-device-cuda.c does that on a GPU),
 * only that the library takes the paths it takes for a device whose
 * memory the CPU kernels may not read: copies in and out where the host
 * backend would read in place.
 *
 * Its "device" addresses are host addresses plus SIM_TAG (a
 * non-canonical address: any load or store through one faults), so a
 * CPU that touches device memory instead of copying it crashes the test
 * rather than passing it by accident. A test hands the library
 * sim_device_ptr(host buffer) wherever a device pointer goes.
 *
 * Loaded as any plugin is, through SPILLWAY_CUDA_PLUGIN (tests/pipeline's
 * meson.build sets it for the tests that ask for device "cuda").
 */
#include <errno.h>
#include <stdio.h>

#include "device.h"
#include "sim-plugin.h"

static struct spw__device_ops sim_ops;
static const struct spw__device_ops *host;

static void *host_addr(const void *dev)
{
	return (void *)((uintptr_t)dev - SIM_TAG);
}

static int sim_dev_alloc(struct spw__device *dev, size_t len, void **ret)
{
	int r = host->dev_alloc(dev, len, ret);

	if (r >= 0)
		*ret = sim_device_ptr(*ret);
	return r;
}

static void sim_dev_free(struct spw__device *dev, void *p)
{
	host->dev_free(dev, p ? host_addr(p) : NULL);
}

static int sim_h2d(struct spw__device *dev, void *dst_dev, const void *src_host, size_t n, struct spw__stream *s)
{
	return host->memcpy_h2d_async(dev, host_addr(dst_dev), src_host, n, s);
}

static int sim_d2h(struct spw__device *dev, void *dst_host, const void *src_dev, size_t n, struct spw__stream *s)
{
	return host->memcpy_d2h_async(dev, dst_host, host_addr(src_dev), n, s);
}

static int sim_memset(struct spw__device *dev, void *dst_dev, int value, size_t n, struct spw__stream *s)
{
	return host->memset_async(dev, host_addr(dst_dev), value, n, s);
}

static int sim_probe(char *why, size_t whylen)
{
	if (why && whylen)
		snprintf(why, whylen, "sim plugin: 1 device (the host backend named cuda)");
	return 1;
}

static int sim_open(int ordinal, struct spw__device **ret, char *err, size_t errlen)
{
	int r;

	if (ordinal > 0) {
		snprintf(err, errlen, "sim plugin: no device %d (it has one, cuda:0)", ordinal);
		return -ENODEV;
	}
	r = spw__device_host_open(ret, err, errlen);
	if (r < 0)
		return r;
	/* The same operations under the device's other name, with device
	 * addresses tagged. */
	host = (*ret)->ops;
	sim_ops = *host;
	sim_ops.name = "cuda";
	sim_ops.dev_alloc = sim_dev_alloc;
	sim_ops.dev_free = sim_dev_free;
	sim_ops.memcpy_h2d_async = sim_h2d;
	sim_ops.memcpy_d2h_async = sim_d2h;
	sim_ops.memset_async = sim_memset;
	(*ret)->ops = &sim_ops;
	return 0;
}

static const struct spw__cuda_plugin sim = {
	.abi = SPW__DEVICE_ABI,
	.device_size = sizeof(struct spw__device),
	.ops_size = sizeof(struct spw__device_ops),
	.version = "0.0.0-sim",
	.probe = sim_probe,
	.open = sim_open,
};

__attribute__((visibility("default"))) const struct spw__cuda_plugin *spw__cuda_plugin(uint32_t abi);

__attribute__((visibility("default"))) const struct spw__cuda_plugin *spw__cuda_plugin(uint32_t abi)
{
	return abi == SPW__DEVICE_ABI ? &sim : NULL;
}
