/* SPDX-License-Identifier: MIT */
/*
 * client/device.c: choosing a device backend at run time, and the error
 * buffer every backend shares.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

int spw__device_base_init(struct spw__device *dev, const struct spw__device_ops *ops)
{
	int r;

	dev->ops = ops;
	dev->err[0] = '\0';
	r = pthread_mutex_init(&dev->err_lock, NULL);
	return -r;
}

void spw__device_base_fini(struct spw__device *dev)
{
	pthread_mutex_destroy(&dev->err_lock);
}

int spw__device_fail(struct spw__device *dev, int r, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&dev->err_lock);
	va_start(ap, fmt);
	vsnprintf(dev->err, sizeof(dev->err), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&dev->err_lock);
	return r;
}

const char *spw__device_errmsg(struct spw__device *dev, char *buf, size_t len)
{
	if (!buf || len == 0)
		return buf;
	pthread_mutex_lock(&dev->err_lock);
	snprintf(buf, len, "%s", dev->err);
	pthread_mutex_unlock(&dev->err_lock);
	return buf;
}

static void put_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void put_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int spw__device_cuda_count(char *why, size_t whylen)
{
#if SPW_HAVE_CUDA
	int n = spw__device_cuda_probe(why, whylen);

	return n > 0 ? n : 0;
#else
	put_err(why, whylen, "this libspillway was built without CUDA (meson -Dcuda=enabled)");
	return 0;
#endif
}

/* Parses "cuda" (-1: the caller's current device) or "cuda:N". */
static int parse_cuda(const char *name, int *ordinal)
{
	const char *p;
	char *end;
	long v;

	if (strncmp(name, "cuda", 4) != 0)
		return -EINVAL;
	p = name + 4;
	if (*p == '\0') {
		*ordinal = -1;
		return 0;
	}
	if (*p != ':' || p[1] < '0' || p[1] > '9')
		return -EINVAL;
	errno = 0;
	v = strtol(p + 1, &end, 10);
	if (errno || *end != '\0' || v > INT_MAX)
		return -EINVAL;
	*ordinal = (int)v;
	return 0;
}

/* what names where the choice came from; hint says how to get the host
 * backend instead, which differs for an explicit name and the variable. */
static int open_cuda(const char *what, const char *hint, int ordinal, struct spw__device **ret,
		     char *err, size_t errlen)
{
#if SPW_HAVE_CUDA
	char why[256];
	int n, r;

	n = spw__device_cuda_probe(why, sizeof(why));
	if (n <= 0) {
		put_err(err, errlen, "%s: no CUDA device (%s); %s", what, why, hint);
		return -ENODEV;
	}
	if (ordinal >= n) {
		put_err(err, errlen, "%s: CUDA device %d does not exist (this host has %d); "
			"name one from 0 to %d", what, ordinal, n, n - 1);
		return -ENODEV;
	}
	r = spw__device_cuda_open(ordinal, ret, why, sizeof(why));
	if (r < 0)
		put_err(err, errlen, "%s: %s", what, why);
	return r;
#else
	(void)ordinal;
	(void)ret;
	put_err(err, errlen, "%s: this libspillway was built without CUDA (rebuild with "
		"meson -Dcuda=enabled); %s", what, hint);
	return -ENODEV;
#endif
}

int spw__device_open(const char *name, struct spw__device **ret, char *err, size_t errlen)
{
	char what[96];
	const char *hint = "unset it to use the host backend";
	int ordinal;

	if (!ret)
		return -EINVAL;
	if (name) {
		snprintf(what, sizeof(what), "device \"%.64s\"", name);
		hint = "ask for \"host\" to use the host backend";
	} else {
		name = getenv("SPILLWAY_DEVICE");
		if (name && *name)
			snprintf(what, sizeof(what), "SPILLWAY_DEVICE=%.64s", name);
		else
			name = NULL;
	}

	if (!name) {
		/* Automatic: cuda when it can be used, quietly host otherwise;
		 * a present GPU that then fails to open is an error, because
		 * silently training through the host backend would hide it. */
		if (spw__device_cuda_count(NULL, 0) > 0)
			return open_cuda("automatic device choice (cuda)",
					 "set SPILLWAY_DEVICE=host to use the host backend",
					 -1, ret, err, errlen);
		return spw__device_host_open(ret, err, errlen);
	}
	if (strcmp(name, "host") == 0)
		return spw__device_host_open(ret, err, errlen);
	if (parse_cuda(name, &ordinal) == 0)
		return open_cuda(what, hint, ordinal, ret, err, errlen);
	put_err(err, errlen, "%s: unknown device backend; use cuda, cuda:N or host "
		"(or unset SPILLWAY_DEVICE to choose automatically)", what);
	return -EINVAL;
}

struct spw__device *spw__device_close(struct spw__device *dev)
{
	if (dev)
		dev->ops->close(dev);
	return NULL;
}
