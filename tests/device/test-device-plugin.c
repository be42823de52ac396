/* SPDX-License-Identifier: MIT */
/*
 * tests/device/test-device-plugin.c: finding and checking the cuda plugin
 * (client/device.c) with stand-ins that need no GPU (fake-plugin.c): what
 * is said when it is missing or wrong, that automatic choice falls back
 * to host quietly only when there is no plugin at all, and that a plugin
 * of the right ABI is the one asked. argv: a path with no file, then the
 * fakes of modes 1 to 4.
 */
#include <errno.h>
#include <stdlib.h>

#include "test.h"
#include "device.h"

static char err[1024];

static int open_with(const char *plugin, const char *device, struct spw__device **ret)
{
	setenv("SPILLWAY_CUDA_PLUGIN", plugin, 1);
	if (device)
		setenv("SPILLWAY_DEVICE", device, 1);
	else
		unsetenv("SPILLWAY_DEVICE");
	snprintf(err, sizeof(err), "(untouched)");
	return spw__device_open(NULL, ret, err, sizeof(err));
}

int main(int argc, char **argv)
{
	struct spw__device *dev = NULL, *untouched = (struct spw__device *)&err;
	char why[512];

	ASSERT_EQ(argc, 6);

	/* No file: asking for cuda names the path, the loader's words and
	 * the fix; automatic choice is host, quietly. */
	dev = untouched;
	ASSERT_EQ(open_with(argv[1], "cuda", &dev), -ENODEV);
	ASSERT_TRUE(dev == untouched);
	ASSERT_CONTAINS(err, "SPILLWAY_DEVICE=cuda: cannot load the cuda plugin ");
	ASSERT_CONTAINS(err, argv[1]);
	ASSERT_CONTAINS(err, "cannot open shared object file");
	ASSERT_CONTAINS(err, "set SPILLWAY_CUDA_PLUGIN");
	ASSERT_CONTAINS(err, "unset it to use the host backend");
	fprintf(stderr, "missing: %s\n", err);
	ASSERT_OK(open_with(argv[1], NULL, &dev));
	ASSERT_STREQ(spw__device_name(dev), "host");
	ASSERT_STREQ(err, "(untouched)");
	dev = spw__device_close(dev);
	ASSERT_EQ(spw__device_cuda_count(why, sizeof(why)), 0);
	ASSERT_CONTAINS(why, argv[1]);

	/* A library without the entry point. */
	ASSERT_EQ(open_with(argv[2], "cuda:0", &dev), -ENODEV);
	ASSERT_CONTAINS(err, "is not a spillway cuda plugin");
	ASSERT_CONTAINS(err, SPW__CUDA_PLUGIN_ENTRY);
	fprintf(stderr, "no entry: %s\n", err);

	/* Plugins of another device ABI, refusing us or refused by us; a
	 * broken install is an error even for automatic choice. */
	ASSERT_EQ(open_with(argv[3], "cuda", &dev), -ENODEV);
	ASSERT_CONTAINS(err, "does not match this libspillway");
	fprintf(stderr, "refusing: %s\n", err);
	ASSERT_EQ(open_with(argv[4], "cuda", &dev), -ENODEV);
	ASSERT_CONTAINS(err, "spillway 0.0.0-fake, device ABI");
	ASSERT_CONTAINS(err, "install the libspillway-cuda.so built with it");
	fprintf(stderr, "stale: %s\n", err);
	dev = untouched;
	ASSERT_EQ(open_with(argv[4], NULL, &dev), -ENODEV);
	ASSERT_TRUE(dev == untouched);
	ASSERT_CONTAINS(err, "automatic device choice: ");
	ASSERT_CONTAINS(err, "SPILLWAY_DEVICE=host");

	/* A plugin of the right ABI is asked: its device count bounds the
	 * ordinal, and its open gets the ordinal asked for (-1: the current
	 * device, for automatic choice when it reports devices). */
	ASSERT_EQ(spw__device_cuda_count(NULL, 0), 0); /* still the stale one */
	setenv("SPILLWAY_CUDA_PLUGIN", argv[5], 1);
	ASSERT_EQ(spw__device_cuda_count(why, sizeof(why)), 2);
	ASSERT_EQ(open_with(argv[5], "cuda:2", &dev), -ENODEV);
	ASSERT_CONTAINS(err, "CUDA device 2 does not exist (this host has 2)");
	ASSERT_EQ(open_with(argv[5], "cuda:1", &dev), -EIO);
	ASSERT_CONTAINS(err, "SPILLWAY_DEVICE=cuda:1: fake plugin: open of ordinal 1 refused");
	ASSERT_EQ(open_with(argv[5], NULL, &dev), -EIO);
	ASSERT_CONTAINS(err, "automatic device choice (cuda): fake plugin: open of ordinal -1");
	/* Once loaded, the plugin stays: the variable is read no more. */
	ASSERT_EQ(open_with(argv[1], "cuda:0", &dev), -EIO);
	ASSERT_OK(open_with(argv[1], "host", &dev));
	dev = spw__device_close(dev);
	unsetenv("SPILLWAY_DEVICE");
	unsetenv("SPILLWAY_CUDA_PLUGIN");
	return 0;
}
