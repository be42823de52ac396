/* SPDX-License-Identifier: MIT */
/*
 * tests/device/test-device-select.c: choosing the backend at run time
 * (SPILLWAY_DEVICE, an explicit name, automatic), and the sentences a
 * refused choice leaves.
 */
#include <errno.h>
#include <stdlib.h>

#include "test.h"
#include "device.h"

static char err[512];

static int open_env(const char *value, struct spw__device **ret)
{
	if (value)
		setenv("SPILLWAY_DEVICE", value, 1);
	else
		unsetenv("SPILLWAY_DEVICE");
	err[0] = '\0';
	return spw__device_open(NULL, ret, err, sizeof(err));
}

int main(void)
{
	struct spw__device *dev = NULL, *untouched = (struct spw__device *)&err;
	char why[256] = "";
	int ncuda = spw__device_cuda_count(why, sizeof(why));

	fprintf(stderr, "CUDA devices: %d%s%s\n", ncuda, ncuda ? "" : ": ", ncuda ? "" : why);

	ASSERT_OK(open_env("host", &dev));
	ASSERT_STREQ(spw__device_name(dev), "host");
	dev = spw__device_close(dev);

	/* Automatic: cuda when a device is present, else host. */
	ASSERT_OK(open_env(NULL, &dev));
	ASSERT_STREQ(spw__device_name(dev), ncuda > 0 ? "cuda" : "host");
	dev = spw__device_close(dev);
	ASSERT_OK(open_env("", &dev));
	ASSERT_STREQ(spw__device_name(dev), ncuda > 0 ? "cuda" : "host");
	dev = spw__device_close(dev);

	/* Unknown names are refused with what to use instead; *ret untouched. */
	dev = untouched;
	ASSERT_EQ(open_env("bogus", &dev), -EINVAL);
	ASSERT_TRUE(dev == untouched);
	ASSERT_CONTAINS(err, "SPILLWAY_DEVICE=bogus");
	ASSERT_CONTAINS(err, "cuda, cuda:N or host");
	fprintf(stderr, "bogus: %s\n", err);
	ASSERT_EQ(open_env("cuda:x", &dev), -EINVAL);
	ASSERT_EQ(open_env("cuda:", &dev), -EINVAL);
	ASSERT_EQ(open_env("cudax", &dev), -EINVAL);
	ASSERT_EQ(open_env("HOST", &dev), -EINVAL);

	/* An explicit name wins over the variable. */
	ASSERT_OK(spw__device_open("host", &dev, err, sizeof(err)));
	ASSERT_STREQ(spw__device_name(dev), "host");
	dev = spw__device_close(dev);
	ASSERT_EQ(spw__device_open("nope", &dev, err, sizeof(err)), -EINVAL);
	ASSERT_CONTAINS(err, "device \"nope\"");

	if (ncuda > 0) {
		ASSERT_OK(open_env("cuda", &dev));
		ASSERT_STREQ(spw__device_name(dev), "cuda");
		dev = spw__device_close(dev);
		ASSERT_OK(open_env("cuda:0", &dev));
		dev = spw__device_close(dev);
		ASSERT_EQ(open_env("cuda:4096", &dev), -ENODEV);
		ASSERT_CONTAINS(err, "does not exist");
	} else {
		/* No GPU: asking for cuda fails, saying why and what to do. */
		dev = untouched;
		ASSERT_EQ(open_env("cuda", &dev), -ENODEV);
		ASSERT_TRUE(dev == untouched);
		ASSERT_CONTAINS(err, "SPILLWAY_DEVICE=cuda: ");
		ASSERT_CONTAINS(err, "unset it to use the host backend");
		fprintf(stderr, "cuda: %s\n", err);
		ASSERT_EQ(open_env("cuda:0", &dev), -ENODEV);
		ASSERT_CONTAINS(err, "SPILLWAY_DEVICE=cuda:0: ");
		ASSERT_EQ(spw__device_open("cuda", &dev, err, sizeof(err)), -ENODEV);
		ASSERT_CONTAINS(err, "ask for \"host\"");
	}
	/* NULL err is allowed. */
	ASSERT_EQ(spw__device_open("bogus", &dev, NULL, 0), -EINVAL);
	ASSERT_EQ(spw__device_open("host", NULL, NULL, 0), -EINVAL);
	unsetenv("SPILLWAY_DEVICE");
	return 0;
}
