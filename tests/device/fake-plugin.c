/* SPDX-License-Identifier: MIT */
/*
 * tests/device/fake-plugin.c: stand-ins for libspillway-cuda.so that need
 * no GPU, built once per FAKE_MODE, so test-device-plugin can check how
 * libspillway treats each kind of plugin file:
 *
 *   1  no entry point (some other library)
 *   2  an entry point that refuses the library's device ABI (returns NULL)
 *   3  a stale plugin that answers with another device ABI
 *   4  a plugin of the right ABI that claims two GPUs and fails every open
 *      with a sentence naming the ordinal, so the test sees which call
 *      reached it
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "device.h"

#if FAKE_MODE == 1
__attribute__((visibility("default"))) int fake_not_a_plugin(void);

__attribute__((visibility("default"))) int fake_not_a_plugin(void)
{
	return 0;
}
#else
static int fake_probe(char *why, size_t whylen)
{
	if (FAKE_MODE != 4)
		abort(); /* libspillway must not call a plugin it refused */
	if (why && whylen)
		snprintf(why, whylen, "fake plugin: 2 devices");
	return 2;
}

static int fake_open(int ordinal, struct spw__device **ret, char *err, size_t errlen)
{
	(void)ret;
	if (FAKE_MODE != 4)
		abort();
	snprintf(err, errlen, "fake plugin: open of ordinal %d refused", ordinal);
	return -EIO;
}

static const struct spw__cuda_plugin fake = {
	.abi = FAKE_MODE == 3 ? SPW__DEVICE_ABI + 1 : SPW__DEVICE_ABI,
	.device_size = sizeof(struct spw__device),
	.ops_size = sizeof(struct spw__device_ops),
	.version = "0.0.0-fake",
	.probe = fake_probe,
	.open = fake_open,
};

__attribute__((visibility("default"))) const struct spw__cuda_plugin *spw__cuda_plugin(uint32_t abi);

__attribute__((visibility("default"))) const struct spw__cuda_plugin *spw__cuda_plugin(uint32_t abi)
{
	if (FAKE_MODE == 2 && abi == SPW__DEVICE_ABI)
		return NULL;
	return &fake;
}
#endif
