/* SPDX-License-Identifier: MIT */
/*
 * client/device-cuda.c: the cuda device backend (libcudart), built as the
 * plugin libspillway-cuda.so that libspillway dlopen()s (device.h), only
 * when the build has CUDA. Its one exported symbol is spw__cuda_plugin().
 *
 * The device is fixed at open. CUDA's current device is per thread and
 * belongs to the trainer, so calls that create things (streams, events,
 * allocations, registrations) switch to our device and switch back; the
 * stream-ordered calls on the hot path need no switch, because a stream
 * carries its own device.
 *
 * Errors are copied into the device's error buffer and then cleared from
 * CUDA's per-thread "last error", so the trainer's next
 * cudaGetLastError() (PyTorch checks it after every kernel launch) does
 * not blame our failure on its kernel. Sticky errors (a faulted context)
 * cannot be cleared and keep failing every call, as they should.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include <spillway/version.h>

#include "device.h"

struct cuda_stream {
	struct spw__node node;          /* first: the device's list */
	cudaStream_t s;
};

struct cuda_event {
	struct spw__node node;          /* first: the device's list */
	cudaEvent_t e;
};

struct cuda_device {
	struct spw__device base;        /* first: spw__device pointers are ours; its
					 * lock guards the lists */
	int ordinal;
	struct spw__node *streams;      /* struct cuda_stream */
	struct spw__node *borrowed;     /* trainers' streams: wrappers only, never destroyed */
	struct spw__node *events;       /* struct cuda_event */
};

static struct cuda_device *cdev(struct spw__device *d)
{
	return (struct cuda_device *)d;
}

static int map_error(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorStubLibrary:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorDevicesUnavailable:
		return -ENODEV;
	case cudaErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case cudaErrorHostMemoryNotRegistered:
		return -ENOENT;
	case cudaErrorNotSupported:
		return -ENOTSUP;
	case cudaErrorNotReady:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

static int cuda_fail(struct cuda_device *d, cudaError_t e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int cuda_fail(struct cuda_device *d, cudaError_t e, const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	(void)cudaGetLastError();
	return spw__device_fail(&d->base, map_error(e), "cuda device %d: %s: %s (%s)", d->ordinal,
				what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Makes our device current for a creating call; *prev is what to restore. */
static cudaError_t bind(struct cuda_device *d, int *prev)
{
	cudaError_t e = cudaGetDevice(prev);

	if (e != cudaSuccess)
		return e;
	return *prev == d->ordinal ? cudaSuccess : cudaSetDevice(d->ordinal);
}

static void unbind(struct cuda_device *d, int prev)
{
	if (prev != d->ordinal)
		(void)cudaSetDevice(prev);
}

static cudaStream_t cs(struct spw__stream *s)
{
	return ((struct cuda_stream *)s)->s;
}

static int cuda_host_register(struct spw__device *dev, void *base, size_t len)
{
	struct cuda_device *d = cdev(dev);
	cudaError_t e;
	int prev;

	if (!base || len == 0)
		return spw__device_fail(dev, -EINVAL, "cuda device %d: host_register of %p+%zu: "
					"not a memory range", d->ordinal, base, len);
	if ((e = bind(d, &prev)) != cudaSuccess)
		return cuda_fail(d, e, "cudaSetDevice");
	/* Portable: the pipeline's threads may have another device current. */
	e = cudaHostRegister(base, len, cudaHostRegisterDefault | cudaHostRegisterPortable);
	unbind(d, prev);
	if (e != cudaSuccess)
		return cuda_fail(d, e, "cudaHostRegister(%p, %zu bytes)", base, len);
	return 0;
}

static int cuda_host_unregister(struct spw__device *dev, void *base)
{
	struct cuda_device *d = cdev(dev);
	cudaError_t e;
	int prev;

	if ((e = bind(d, &prev)) != cudaSuccess)
		return cuda_fail(d, e, "cudaSetDevice");
	e = cudaHostUnregister(base);
	unbind(d, prev);
	if (e != cudaSuccess)
		return cuda_fail(d, e, "cudaHostUnregister(%p)", base);
	return 0;
}

static int cuda_dev_alloc(struct spw__device *dev, size_t len, void **ret)
{
	struct cuda_device *d = cdev(dev);
	cudaError_t e;
	void *p = NULL;
	int prev;

	if (len == 0)
		return spw__device_fail(dev, -EINVAL, "cuda device %d: dev_alloc of 0 bytes",
					d->ordinal);
	if ((e = bind(d, &prev)) != cudaSuccess)
		return cuda_fail(d, e, "cudaSetDevice");
	e = cudaMalloc(&p, len);
	unbind(d, prev);
	if (e != cudaSuccess)
		return cuda_fail(d, e, "cudaMalloc(%zu bytes)", len);
	*ret = p;
	return 0;
}

static void cuda_dev_free(struct spw__device *dev, void *p)
{
	struct cuda_device *d = cdev(dev);
	int prev;

	if (!p || bind(d, &prev) != cudaSuccess)
		return;
	if (cudaFree(p) != cudaSuccess)
		(void)cudaGetLastError();
	unbind(d, prev);
}

static int cuda_stream_create(struct spw__device *dev, struct spw__stream **ret)
{
	struct cuda_device *d = cdev(dev);
	struct cuda_stream *s;
	cudaError_t e;
	int prev;

	s = calloc(1, sizeof(*s));
	if (!s)
		return spw__device_fail(dev, -ENOMEM, "cuda device %d: out of memory", d->ordinal);
	if ((e = bind(d, &prev)) != cudaSuccess) {
		free(s);
		return cuda_fail(d, e, "cudaSetDevice");
	}
	/* Non-blocking: our copies must not serialise with the trainer's
	 * work on the legacy default stream. */
	e = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
	unbind(d, prev);
	if (e != cudaSuccess) {
		free(s);
		return cuda_fail(d, e, "cudaStreamCreateWithFlags");
	}
	pthread_mutex_lock(&d->base.lock);
	spw__node_push(&d->streams, &s->node);
	pthread_mutex_unlock(&d->base.lock);
	*ret = (struct spw__stream *)s;
	return 0;
}

static int cuda_stream_borrow(struct spw__device *dev, void *native, struct spw__stream **ret)
{
	struct cuda_device *d = cdev(dev);
	struct spw__node *n;
	struct cuda_stream *s = NULL;

	/* One wrapper per native stream for the device's life: a trainer
	 * uses a handful of streams, and the hot path then allocates nothing. */
	pthread_mutex_lock(&d->base.lock);
	for (n = d->borrowed; n && (void *)((struct cuda_stream *)n)->s != native; n = n->next)
		;
	if (n) {
		s = (struct cuda_stream *)n;
	} else if ((s = calloc(1, sizeof(*s)))) {
		s->s = (cudaStream_t)native;
		spw__node_push(&d->borrowed, &s->node);
	}
	pthread_mutex_unlock(&d->base.lock);
	if (!s)
		return spw__device_fail(dev, -ENOMEM, "cuda device %d: out of memory", d->ordinal);
	*ret = (struct spw__stream *)s;
	return 0;
}

static void stream_free(struct cuda_stream *s)
{
	/* CUDA would destroy at once and finish the work later; we promise
	 * that buffers may be freed once destroy returns, so drain first. */
	if (cudaStreamSynchronize(s->s) != cudaSuccess)
		(void)cudaGetLastError();
	if (cudaStreamDestroy(s->s) != cudaSuccess)
		(void)cudaGetLastError();
	free(s);
}

static void cuda_stream_destroy(struct spw__device *dev, struct spw__stream *stream)
{
	struct cuda_device *d = cdev(dev);
	struct cuda_stream *s = (struct cuda_stream *)stream;

	pthread_mutex_lock(&d->base.lock);
	spw__node_unlink(&d->streams, &s->node);
	pthread_mutex_unlock(&d->base.lock);
	stream_free(s);
}

static int cuda_stream_sync(struct spw__device *dev, struct spw__stream *s)
{
	cudaError_t e;

	e = cudaStreamSynchronize(cs(s));
	if (e != cudaSuccess)
		return cuda_fail(cdev(dev), e, "cudaStreamSynchronize");
	return 0;
}

static int cuda_stream_wait_event(struct spw__device *dev, struct spw__stream *s,
				  struct spw__event *ev)
{
	cudaError_t e;

	e = cudaStreamWaitEvent(cs(s), ((struct cuda_event *)ev)->e, 0);
	if (e != cudaSuccess)
		return cuda_fail(cdev(dev), e, "cudaStreamWaitEvent");
	return 0;
}

static int cuda_memcpy(struct spw__device *dev, void *dst, const void *src, size_t n,
		       enum cudaMemcpyKind kind, struct spw__stream *s, const char *what)
{
	cudaError_t e;

	if (n == 0)
		return 0;
	e = cudaMemcpyAsync(dst, src, n, kind, cs(s));
	if (e != cudaSuccess)
		return cuda_fail(cdev(dev), e, "cudaMemcpyAsync(%s, %p <- %p, %zu bytes)", what, dst,
				 src, n);
	return 0;
}

static int cuda_h2d(struct spw__device *dev, void *dst_dev, const void *src_host, size_t n,
		    struct spw__stream *s)
{
	return cuda_memcpy(dev, dst_dev, src_host, n, cudaMemcpyHostToDevice, s, "h2d");
}

static int cuda_d2h(struct spw__device *dev, void *dst_host, const void *src_dev, size_t n,
		    struct spw__stream *s)
{
	return cuda_memcpy(dev, dst_host, src_dev, n, cudaMemcpyDeviceToHost, s, "d2h");
}

static int cuda_memset(struct spw__device *dev, void *dst, int value, size_t n,
		       struct spw__stream *s)
{
	cudaError_t e;

	if (n == 0)
		return 0;
	e = cudaMemsetAsync(dst, value, n, cs(s));
	if (e != cudaSuccess)
		return cuda_fail(cdev(dev), e, "cudaMemsetAsync(%p, %zu bytes)", dst, n);
	return 0;
}

static int cuda_launch_fn(struct spw__device *dev, struct spw__stream *s, spw__host_fn fn,
			  void *arg)
{
	cudaError_t e;

	/* spw__host_fn and cudaHostFn_t are both void (*)(void *) here
	 * (CUDART_CB is empty outside Windows). */
	e = cudaLaunchHostFunc(cs(s), fn, arg);
	if (e != cudaSuccess)
		return cuda_fail(cdev(dev), e, "cudaLaunchHostFunc");
	return 0;
}

static int cuda_event_create(struct spw__device *dev, struct spw__event **ret)
{
	struct cuda_device *d = cdev(dev);
	struct cuda_event *ev;
	cudaError_t e;
	int prev;

	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return spw__device_fail(dev, -ENOMEM, "cuda device %d: out of memory", d->ordinal);
	if ((e = bind(d, &prev)) != cudaSuccess) {
		free(ev);
		return cuda_fail(d, e, "cudaSetDevice");
	}
	/* No timing: timed events cost a device timestamp per record. */
	e = cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming);
	unbind(d, prev);
	if (e != cudaSuccess) {
		free(ev);
		return cuda_fail(d, e, "cudaEventCreateWithFlags");
	}
	pthread_mutex_lock(&d->base.lock);
	spw__node_push(&d->events, &ev->node);
	pthread_mutex_unlock(&d->base.lock);
	*ret = (struct spw__event *)ev;
	return 0;
}

static void event_free(struct cuda_event *ev)
{
	/* CUDA keeps a pending record and waits on it valid after destroy. */
	if (cudaEventDestroy(ev->e) != cudaSuccess)
		(void)cudaGetLastError();
	free(ev);
}

static void cuda_event_destroy(struct spw__device *dev, struct spw__event *event)
{
	struct cuda_device *d = cdev(dev);
	struct cuda_event *ev = (struct cuda_event *)event;

	pthread_mutex_lock(&d->base.lock);
	spw__node_unlink(&d->events, &ev->node);
	pthread_mutex_unlock(&d->base.lock);
	event_free(ev);
}

static int cuda_event_record(struct spw__device *dev, struct spw__event *ev,
			     struct spw__stream *s)
{
	cudaError_t e;

	e = cudaEventRecord(((struct cuda_event *)ev)->e, cs(s));
	if (e != cudaSuccess)
		return cuda_fail(cdev(dev), e, "cudaEventRecord");
	return 0;
}

static int cuda_event_query(struct spw__device *dev, struct spw__event *ev)
{
	cudaError_t e;

	e = cudaEventQuery(((struct cuda_event *)ev)->e);
	if (e == cudaSuccess)
		return 1;
	if (e == cudaErrorNotReady) {
		/* Not an error; clear it as PyTorch does after a query. */
		(void)cudaGetLastError();
		return 0;
	}
	return cuda_fail(cdev(dev), e, "cudaEventQuery");
}

static int cuda_event_sync(struct spw__device *dev, struct spw__event *ev, int timeout_ms)
{
	struct timespec start, now, nap = { 0, 20000 };
	cudaError_t e;
	long elapsed_ms;
	int r;

	if (timeout_ms < 0) {
		e = cudaEventSynchronize(((struct cuda_event *)ev)->e);
		if (e != cudaSuccess)
			return cuda_fail(cdev(dev), e, "cudaEventSynchronize");
		return 0;
	}
	/* CUDA has no timed wait: poll, backing off from 20 us to 1 ms so a
	 * long wait costs next to no CPU and a short one little latency. */
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		r = cuda_event_query(dev, ev);
		if (r != 0)
			return r < 0 ? r : 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		elapsed_ms = (now.tv_sec - start.tv_sec) * 1000L +
			     (now.tv_nsec - start.tv_nsec) / 1000000L;
		if (elapsed_ms >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
		if (nap.tv_nsec < 1000000L)
			nap.tv_nsec *= 2;
	}
}

static void cuda_close(struct spw__device *dev)
{
	struct cuda_device *d = cdev(dev);
	struct spw__node *n;

	/* Never cudaDeviceReset: the context is the trainer's too. */
	while ((n = spw__node_pop(&d->streams)))
		stream_free((struct cuda_stream *)n);
	/* The trainer's own streams stay: only our wrappers go. */
	while ((n = spw__node_pop(&d->borrowed)))
		free(n);
	while ((n = spw__node_pop(&d->events)))
		event_free((struct cuda_event *)n);
	spw__device_free(&d->base);
}

static const struct spw__device_ops cuda_ops = {
	.name = "cuda",
	.close = cuda_close,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.dev_alloc = cuda_dev_alloc,
	.dev_free = cuda_dev_free,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_borrow = cuda_stream_borrow,
	.stream_sync = cuda_stream_sync,
	.stream_wait_event = cuda_stream_wait_event,
	.memcpy_h2d_async = cuda_h2d,
	.memcpy_d2h_async = cuda_d2h,
	.memset_async = cuda_memset,
	.launch_host_fn = cuda_launch_fn,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.event_sync = cuda_event_sync,
};

int spw__device_cuda_probe(char *why, size_t whylen)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (why && whylen)
			snprintf(why, whylen, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return map_error(e);
	}
	if (n <= 0 && why && whylen)
		snprintf(why, whylen, "cudaGetDeviceCount: no devices");
	return n;
}

int spw__device_cuda_open(int ordinal, struct spw__device **ret, char *err, size_t errlen)
{
	struct spw__device *dev;
	cudaError_t e;
	int prev, r;

	if (ordinal < 0) {
		e = cudaGetDevice(&ordinal);
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			if (err && errlen)
				snprintf(err, errlen, "cudaGetDevice: %s", cudaGetErrorString(e));
			return map_error(e);
		}
	}
	r = spw__device_new(sizeof(struct cuda_device), &cuda_ops, "cuda device", &dev, err, errlen);
	if (r < 0)
		return r;
	cdev(dev)->ordinal = ordinal;
	/* Create the primary context now, so a device that cannot be used
	 * (exclusive mode, out of memory) fails here with its reason rather
	 * than on the first copy. */
	e = bind(cdev(dev), &prev);
	if (e == cudaSuccess) {
		e = cudaFree(NULL);
		unbind(cdev(dev), prev);
	}
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (err && errlen)
			snprintf(err, errlen, "cuda device %d: cannot initialise: %s", ordinal,
				 cudaGetErrorString(e));
		spw__device_free(dev);
		return map_error(e);
	}
	*ret = dev;
	return 0;
}

static const struct spw__cuda_plugin cuda_plugin = {
	.abi = SPW__DEVICE_ABI,
	.device_size = sizeof(struct spw__device),
	.ops_size = sizeof(struct spw__device_ops),
	.version = SPW_VERSION_STRING,
	.probe = spw__device_cuda_probe,
	.open = spw__device_cuda_open,
};

/* The plugin's entry point; the only symbol it exports
 * (libspillway-cuda.map). Refuses a library of another device ABI, whose
 * structs this plugin would misread. */
__attribute__((visibility("default"))) const struct spw__cuda_plugin *spw__cuda_plugin(uint32_t abi);

__attribute__((visibility("default"))) const struct spw__cuda_plugin *spw__cuda_plugin(uint32_t abi)
{
	return abi == SPW__DEVICE_ABI ? &cuda_plugin : NULL;
}
