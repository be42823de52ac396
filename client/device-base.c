/* SPDX-License-Identifier: MIT */
/*
 * client/device-base.c: the part of a device every backend shares (its
 * locks and error buffer). Compiled into libspillway and into the cuda
 * plugin alike, so both sides treat struct spw__device the same way; its
 * layout is covered by SPW__DEVICE_ABI (device.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

int spw__device_new(size_t size, const struct spw__device_ops *ops, const char *what,
		    struct spw__device **ret, char *err, size_t errlen)
{
	struct spw__device *dev;
	int r;

	dev = calloc(1, size);
	if (!dev) {
		r = ENOMEM;
		goto fail;
	}
	dev->ops = ops;
	if ((r = pthread_mutex_init(&dev->lock, NULL)) != 0)
		goto fail_free;
	if ((r = pthread_mutex_init(&dev->err_lock, NULL)) != 0)
		goto fail_lock;
	*ret = dev;
	return 0;

fail_lock:
	pthread_mutex_destroy(&dev->lock);
fail_free:
	free(dev);
fail:
	if (err && errlen)
		snprintf(err, errlen, "%s: cannot initialise: %s", what, strerror(r));
	return -r;
}

void spw__device_free(struct spw__device *dev)
{
	pthread_mutex_destroy(&dev->err_lock);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
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

int spw__device_noarg(struct spw__device *dev, const char *op, const char *what)
{
	return spw__device_fail(dev, -EINVAL, "%s device: %s: no %s", dev->ops->name, op, what);
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
