/* SPDX-License-Identifier: MIT */
/*
 * client/device.h: the one small table of device operations the step
 * pipeline uses to move bytes between host and GPU memory, and two
 * backends behind it:
 *
 *   cuda  libcudart. Host memory is page-locked with cudaHostRegister,
 *         copies run on dedicated non-blocking streams, events are CUDA
 *         events without timing, host callbacks use cudaLaunchHostFunc.
 *   host  "device" memory is ordinary host memory. Each stream is a FIFO
 *         of operations run in order by its own copy thread; events are
 *         counters. Lets the whole pipeline run and be tested without a
 *         GPU, and serves CPU-only trainers.
 *
 * Chosen at run time by spw__device_open(): an explicit name, else
 * $SPILLWAY_DEVICE (cuda, cuda:N or host), else cuda when a device is
 * present and host otherwise.
 *
 * The cuda backend is a plugin, libspillway-cuda.so, that device.c
 * dlopen()s the first time cuda is asked for or probed, so that
 * libspillway itself needs no CUDA library to load (and brings no
 * libcudart into a process that does not use the cuda backend). It is
 * looked for at $SPILLWAY_CUDA_PLUGIN when that is set, else beside
 * libspillway.so (the build tree and the install share that layout). Its
 * one entry point, spw__cuda_plugin(), returns a struct spw__cuda_plugin;
 * both sides check SPW__DEVICE_ABI, so a plugin built from other sources
 * than this library is refused, not called. device-base.c is compiled
 * into both, which is why the shared part of a device below is part of
 * that ABI.
 *
 * Internal to libspillway (spw__ names). The semantics are CUDA's, with
 * these additions, which both backends honour:
 *
 * - Every call returns 0 (or a documented positive value) on success and a
 *   negative errno on failure, never aborts and never logs. On failure the
 *   backend leaves a sentence for a person in the device's error buffer
 *   (spw__device_errmsg()).
 * - Async operations are ordered within a stream and unordered across
 *   streams unless joined with an event (stream_wait_event).
 * - Host memory given to the async copies must be registered
 *   (host_register) for the copy to be asynchronous on the cuda backend;
 *   unregistered memory still works but the call may block until done.
 * - An event that was never recorded counts as complete. stream_wait_event
 *   and event_query/event_sync refer to the most recent event_record made
 *   before the call, as in CUDA.
 * - stream_destroy waits for the stream's pending work to finish first (the
 *   cuda backend synchronizes; CUDA itself would return at once), so
 *   buffers may be freed right after it returns. spw__device_close destroys
 *   whatever streams and events are left, the same way.
 * - A host function (launch_host_fn) runs after everything enqueued on the
 *   stream before it, on a thread the backend owns, and delays everything
 *   enqueued after it until it returns. It must not call into the device
 *   (CUDA forbids it; on the host backend it could deadlock) and should be
 *   quick: post to a queue or an eventfd and return.
 *
 * Thread safety: every operation may be called from any thread. One stream
 * may be fed from several threads; the order of their operations is then
 * the order in which the calls took the stream.
 */
#ifndef SPW_CLIENT_DEVICE_H
#define SPW_CLIENT_DEVICE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Opaque handles. Each backend casts them to its own types. */
struct spw__stream;
struct spw__event;

/* Runs on a backend thread after prior work on a stream; see above. */
typedef void (*spw__host_fn)(void *arg);

struct spw__device;

/*
 * The ABI between libspillway and its cuda plugin: struct spw__device,
 * struct spw__device_ops and struct spw__cuda_plugin. Bump it with any
 * change to one of them (the sizes are checked too, as a backstop).
 */
#define SPW__DEVICE_ABI 1u
#define SPW__CUDA_PLUGIN_FILE "libspillway-cuda.so"
#define SPW__CUDA_PLUGIN_ENTRY "spw__cuda_plugin"

struct spw__device_ops {
	const char *name;                               /* "cuda" or "host" */

	/* Destroys remaining streams (draining them) and events, frees dev. */
	void (*close)(struct spw__device *dev);

	/* Page-locks [base, base+len) for async copies. -EEXIST when part of
	 * it is registered already; unregister takes the same base. */
	int (*host_register)(struct spw__device *dev, void *base, size_t len);
	int (*host_unregister)(struct spw__device *dev, void *base);

	/* Device memory (cudaMalloc / aligned host memory). free takes NULL. */
	int (*dev_alloc)(struct spw__device *dev, size_t len, void **ret);
	void (*dev_free)(struct spw__device *dev, void *p);

	int (*stream_create)(struct spw__device *dev, struct spw__stream **ret);
	/* Waits for the stream's work, then frees it. */
	void (*stream_destroy)(struct spw__device *dev, struct spw__stream *s);
	/* A caller's own stream as a handle of this device, borrowed: valid
	 * while the native stream lives, never passed to stream_destroy (the
	 * device keeps what it needs until close). native is a cudaStream_t
	 * on cuda; on host, a stream this device created (anything else is
	 * -ENOENT, found by address, never dereferenced). Lets the pipeline
	 * order its copies after the trainer's work and the trainer's work
	 * after its copies with event_record / stream_wait_event. */
	int (*stream_borrow)(struct spw__device *dev, void *native, struct spw__stream **ret);
	/* Waits for everything enqueued on s before the call. */
	int (*stream_sync)(struct spw__device *dev, struct spw__stream *s);
	/* Work enqueued on s after this call waits until ev's most recent
	 * record (before this call) has completed. */
	int (*stream_wait_event)(struct spw__device *dev, struct spw__stream *s,
				 struct spw__event *ev);

	/* n bytes host -> device, device -> host, or a byte value into device
	 * memory, after prior work on s. */
	int (*memcpy_h2d_async)(struct spw__device *dev, void *dst_dev, const void *src_host,
				size_t n, struct spw__stream *s);
	int (*memcpy_d2h_async)(struct spw__device *dev, void *dst_host, const void *src_dev,
				size_t n, struct spw__stream *s);
	int (*memset_async)(struct spw__device *dev, void *dst_dev, int value, size_t n,
			    struct spw__stream *s);
	/* fn(arg) after prior work on s. When this fails, fn never runs. */
	int (*launch_host_fn)(struct spw__device *dev, struct spw__stream *s,
			      spw__host_fn fn, void *arg);

	int (*event_create)(struct spw__device *dev, struct spw__event **ret);
	/* Pending records and waits on ev stay valid. */
	void (*event_destroy)(struct spw__device *dev, struct spw__event *ev);
	/* ev completes once the work enqueued on s before this call has. */
	int (*event_record)(struct spw__device *dev, struct spw__event *ev, struct spw__stream *s);
	/* 1 when complete, 0 when pending, or -errno. */
	int (*event_query)(struct spw__device *dev, struct spw__event *ev);
	/* Waits for ev: 0, or -ETIMEDOUT after timeout_ms (< 0: no limit,
	 * 0: just a query), or -errno. */
	int (*event_sync)(struct spw__device *dev, struct spw__event *ev, int timeout_ms);
};

/*
 * The part of a device every backend shares; a backend's own struct begins
 * with it. Callers treat it as opaque and go through the functions below.
 */
#define SPW__DEVICE_ERRMAX 512
struct spw__device {
	const struct spw__device_ops *ops;
	pthread_mutex_t lock;           /* the backend's lists of streams, events, ... */
	pthread_mutex_t err_lock;       /* guards err: any thread may fail */
	char err[SPW__DEVICE_ERRMAX];
};

/* What the cuda plugin's entry point returns (see the top of this file). */
struct spw__cuda_plugin {
	uint32_t abi;                   /* SPW__DEVICE_ABI the plugin was built with */
	uint32_t device_size;           /* its sizeof(struct spw__device) */
	uint32_t ops_size;              /* its sizeof(struct spw__device_ops) */
	const char *version;            /* SPW_VERSION_STRING of its build, for messages */
	/* spw__device_cuda_probe / spw__device_cuda_open below. */
	int (*probe)(char *why, size_t whylen);
	int (*open)(int ordinal, struct spw__device **ret, char *err, size_t errlen);
};

/* The entry point: NULL when abi is not the plugin's SPW__DEVICE_ABI. */
typedef const struct spw__cuda_plugin *(*spw__cuda_plugin_fn)(uint32_t abi);

/* An intrusive doubly linked list node, for the backends' lists of streams
 * and events (each under the device's lock). */
struct spw__node {
	struct spw__node *next, *prev;
};

static inline void spw__node_push(struct spw__node **head, struct spw__node *n)
{
	n->prev = NULL;
	n->next = *head;
	if (*head)
		(*head)->prev = n;
	*head = n;
}

static inline void spw__node_unlink(struct spw__node **head, struct spw__node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		*head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	n->next = n->prev = NULL;
}

/* Takes the first node off the list, or NULL. */
static inline struct spw__node *spw__node_pop(struct spw__node **head)
{
	struct spw__node *n = *head;

	if (n)
		spw__node_unlink(head, n);
	return n;
}

/*
 * Opens a device backend. name: "host", "cuda" or "cuda:N" (device ordinal
 * N; plain "cuda" means the calling thread's current device), or NULL to
 * use $SPILLWAY_DEVICE, or when that is unset or empty, cuda when a CUDA
 * device is present and host otherwise (quietly host when the plugin or
 * the CUDA runtime it needs cannot be loaded).
 *
 * Returns 0 and sets *ret, or leaves *ret untouched and returns -EINVAL for
 * an unknown name; -ENODEV when cuda was asked for but cannot be used (no
 * plugin, no CUDA runtime, no driver, no GPU) or when a plugin file is
 * there but is not one for this library, even for automatic choice; -ENOMEM;
 * or another -errno from the backend. On failure, when err is not NULL,
 * writes a sentence naming the cause (the plugin path tried and the
 * loader's words, when that is the cause) and what to do.
 */
int spw__device_open(const char *name, struct spw__device **ret, char *err, size_t errlen);

/* Closes dev (see ops->close). Takes NULL; returns NULL. */
struct spw__device *spw__device_close(struct spw__device *dev);

/* Number of CUDA devices, 0 when none can be used (why, when not NULL,
 * then says why: no plugin, no driver, no GPU), never negative. */
int spw__device_cuda_count(char *why, size_t whylen);

/* Copies the last failure's sentence into buf (always NUL-terminated);
 * returns buf. "" when nothing failed yet. */
const char *spw__device_errmsg(struct spw__device *dev, char *buf, size_t len);

/* For backends: record a failure's sentence; returns r (a -errno) so a
 * backend can write `return spw__device_fail(dev, -EINVAL, "...")`. */
int spw__device_fail(struct spw__device *dev, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* For backends: allocates size bytes (a backend's struct, which begins
 * with struct spw__device) zeroed, with the shared part set up; what names
 * the device in the sentence left in err on failure. Returns 0 or -errno. */
int spw__device_new(size_t size, const struct spw__device_ops *ops, const char *what,
		    struct spw__device **ret, char *err, size_t errlen);
/* Tears down the shared part and frees dev (a backend's close, last). */
void spw__device_free(struct spw__device *dev);

/* The backends' constructors (spw__device_open picks one). */
int spw__device_host_open(struct spw__device **ret, char *err, size_t errlen);
/* In the cuda plugin (device-cuda.c), reached through struct
 * spw__cuda_plugin. ordinal < 0: the calling thread's current device.
 * probe: device count, or -errno with why set. */
int spw__device_cuda_open(int ordinal, struct spw__device **ret, char *err, size_t errlen);
int spw__device_cuda_probe(char *why, size_t whylen);

/* The wrappers' argument checks: records "<backend> device: <op>: no
 * <what>" and returns -EINVAL. */
int spw__device_noarg(struct spw__device *dev, const char *op, const char *what);

/* Calls through the table; thin enough to inline on the hot path. The
 * NULL checks every backend would make are made here, once; a backend's
 * op gets its handles non-NULL. */
static inline const char *spw__device_name(const struct spw__device *dev)
{
	return dev->ops->name;
}

static inline int spw__host_register(struct spw__device *dev, void *base, size_t len)
{
	return dev->ops->host_register(dev, base, len);
}

static inline int spw__host_unregister(struct spw__device *dev, void *base)
{
	return dev->ops->host_unregister(dev, base);
}

static inline int spw__dev_alloc(struct spw__device *dev, size_t len, void **ret)
{
	if (!ret)
		return spw__device_noarg(dev, "dev_alloc", "out-pointer");
	return dev->ops->dev_alloc(dev, len, ret);
}

static inline void spw__dev_free(struct spw__device *dev, void *p)
{
	dev->ops->dev_free(dev, p);
}

static inline int spw__stream_create(struct spw__device *dev, struct spw__stream **ret)
{
	if (!ret)
		return spw__device_noarg(dev, "stream_create", "out-pointer");
	return dev->ops->stream_create(dev, ret);
}

static inline void spw__stream_destroy(struct spw__device *dev, struct spw__stream *s)
{
	if (s)
		dev->ops->stream_destroy(dev, s);
}

static inline int spw__stream_borrow(struct spw__device *dev, void *native,
				      struct spw__stream **ret)
{
	if (!native || !ret)
		return spw__device_noarg(dev, "stream_borrow", native ? "out-pointer" : "stream");
	return dev->ops->stream_borrow(dev, native, ret);
}

static inline int spw__stream_sync(struct spw__device *dev, struct spw__stream *s)
{
	if (!s)
		return spw__device_noarg(dev, "stream_sync", "stream");
	return dev->ops->stream_sync(dev, s);
}

static inline int spw__stream_wait_event(struct spw__device *dev, struct spw__stream *s,
					 struct spw__event *ev)
{
	if (!s || !ev)
		return spw__device_noarg(dev, "stream_wait_event", s ? "event" : "stream");
	return dev->ops->stream_wait_event(dev, s, ev);
}

static inline int spw__memcpy_h2d_async(struct spw__device *dev, void *dst_dev,
					const void *src_host, size_t n, struct spw__stream *s)
{
	if (!s)
		return spw__device_noarg(dev, "memcpy_h2d_async", "stream");
	return dev->ops->memcpy_h2d_async(dev, dst_dev, src_host, n, s);
}

static inline int spw__memcpy_d2h_async(struct spw__device *dev, void *dst_host,
					const void *src_dev, size_t n, struct spw__stream *s)
{
	if (!s)
		return spw__device_noarg(dev, "memcpy_d2h_async", "stream");
	return dev->ops->memcpy_d2h_async(dev, dst_host, src_dev, n, s);
}

static inline int spw__memset_async(struct spw__device *dev, void *dst_dev, int value,
				    size_t n, struct spw__stream *s)
{
	if (!s)
		return spw__device_noarg(dev, "memset_async", "stream");
	return dev->ops->memset_async(dev, dst_dev, value, n, s);
}

static inline int spw__launch_host_fn(struct spw__device *dev, struct spw__stream *s,
				      spw__host_fn fn, void *arg)
{
	if (!s || !fn)
		return spw__device_noarg(dev, "launch_host_fn", s ? "function" : "stream");
	return dev->ops->launch_host_fn(dev, s, fn, arg);
}

static inline int spw__event_create(struct spw__device *dev, struct spw__event **ret)
{
	if (!ret)
		return spw__device_noarg(dev, "event_create", "out-pointer");
	return dev->ops->event_create(dev, ret);
}

static inline void spw__event_destroy(struct spw__device *dev, struct spw__event *ev)
{
	if (ev)
		dev->ops->event_destroy(dev, ev);
}

static inline int spw__event_record(struct spw__device *dev, struct spw__event *ev,
				    struct spw__stream *s)
{
	if (!s || !ev)
		return spw__device_noarg(dev, "event_record", s ? "event" : "stream");
	return dev->ops->event_record(dev, ev, s);
}

static inline int spw__event_query(struct spw__device *dev, struct spw__event *ev)
{
	if (!ev)
		return spw__device_noarg(dev, "event_query", "event");
	return dev->ops->event_query(dev, ev);
}

static inline int spw__event_sync(struct spw__device *dev, struct spw__event *ev, int timeout_ms)
{
	if (!ev)
		return spw__device_noarg(dev, "event_sync", "event");
	return dev->ops->event_sync(dev, ev, timeout_ms);
}

#endif
