/* SPDX-License-Identifier: MIT */
/*
 * client/device-host.c: the host device backend. "Device" memory is host
 * memory; each stream is a FIFO of operations that its own copy thread runs
 * in order; events are counters.
 *
 * Why one thread per stream rather than one for all: a stream waiting on an
 * event must not hold up the other streams (CUDA's semantics, and the
 * pipeline depends on it: the H2D stream waits on Adam while the D2H stream
 * keeps draining gradients). With a thread per stream that wait is a plain
 * condvar sleep; a shared thread would need a scheduler that parks blocked
 * streams. The pipeline has two or three streams, so the threads are few,
 * and two copy threads move more bytes than one (a core does ~50 GB/s of
 * streaming copy here; two do 80-100).
 *
 * Lock order: device lock before stream lock; a stream lock and an event
 * lock are never held together (the copy thread drops the stream lock
 * before it runs an operation, and producers take the event lock only
 * before they take the stream lock, never while holding it).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

/* Operations a stream can hold before producers block. A power of two. */
#define RING_OPS 1024u
#define DEV_ALIGN 256   /* what cudaMalloc guarantees; callers may rely on it */

enum op_kind { OP_COPY, OP_SET, OP_FN, OP_RECORD, OP_WAIT };

struct host_event;

struct op {
	enum op_kind kind;
	union {
		struct { void *dst; const void *src; size_t n; } copy;
		struct { void *dst; int value; size_t n; } set;
		struct { spw__host_fn fn; void *arg; } fn;
		/* RECORD: seq is now complete. WAIT: block until it is. */
		struct { struct host_event *ev; uint64_t seq; } ev;
	} u;
};

struct host_stream {
	struct spw__node node;          /* first: the device's list, under the device lock */
	struct host_device *dev;
	uint64_t id;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work;            /* the copy thread: ring not empty, or stopping */
	pthread_cond_t space;           /* producers: ring not full */
	pthread_cond_t idle;            /* stream_sync: completed advanced */
	uint32_t head, tail;            /* free-running; head - tail ops queued */
	uint64_t submitted, completed;  /* ops ever enqueued / ever finished */
	unsigned sync_waiters;          /* threads in stream_sync */
	bool stopping;
	struct op ring[RING_OPS];
};

/*
 * An event is a counter pair: recorded counts event_record calls, done is
 * the highest record whose marker has run. Complete means done >= recorded
 * as of the question. Records and waits queued on streams hold a reference
 * so that destroying the event with work pending is safe.
 */
struct host_event {
	struct spw__node node;          /* first: the device's list while the caller holds it */
	pthread_mutex_t lock;
	pthread_cond_t cond;            /* done advanced */
	uint64_t recorded, done;
	uint64_t last_stream;           /* id of the stream of the latest record */
	atomic_uint refs;
};

struct host_region {
	uintptr_t base;
	size_t len;
	struct host_region *next;
};

struct host_device {
	struct spw__device base;        /* first: spw__device pointers are ours; its lock
					 * guards the lists below and next_id */
	struct spw__node *streams;      /* struct host_stream */
	struct spw__node *events;       /* struct host_event */
	struct host_region *regions;
	uint64_t next_id;
};

/* The stream whose copy thread this is, to refuse calls that would wait
 * for the calling thread itself. */
static _Thread_local struct host_stream *tls_stream;

static struct host_device *hdev(struct spw__device *d)
{
	return (struct host_device *)d;
}

static void event_unref(struct host_event *ev)
{
	/* acq_rel: the last holder must see every write made under the other
	 * holders' references before it frees. */
	if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_cond_destroy(&ev->cond);
	pthread_mutex_destroy(&ev->lock);
	free(ev);
}

static void event_ref(struct host_event *ev)
{
	/* relaxed: the caller already holds a reference, so ev stays alive;
	 * the op carrying the new one is published under the stream lock. */
	atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
}

static void run_op(const struct op *op)
{
	struct host_event *ev;

	switch (op->kind) {
	case OP_COPY:
		if (op->u.copy.n)
			memcpy(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
		break;
	case OP_SET:
		if (op->u.set.n)
			memset(op->u.set.dst, op->u.set.value, op->u.set.n);
		break;
	case OP_FN:
		op->u.fn.fn(op->u.fn.arg);
		break;
	case OP_RECORD:
		ev = op->u.ev.ev;
		pthread_mutex_lock(&ev->lock);
		if (ev->done < op->u.ev.seq)
			ev->done = op->u.ev.seq;
		pthread_cond_broadcast(&ev->cond);
		pthread_mutex_unlock(&ev->lock);
		event_unref(ev);
		break;
	case OP_WAIT:
		ev = op->u.ev.ev;
		pthread_mutex_lock(&ev->lock);
		while (ev->done < op->u.ev.seq)
			pthread_cond_wait(&ev->cond, &ev->lock);
		pthread_mutex_unlock(&ev->lock);
		event_unref(ev);
		break;
	}
}

static void *stream_main(void *arg)
{
	struct host_stream *s = arg;
	struct op op;

	tls_stream = s;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (s->head == s->tail && !s->stopping)
			pthread_cond_wait(&s->work, &s->lock);
		/* Stopping only once the ring is empty: destroy drains. */
		if (s->head == s->tail)
			break;
		op = s->ring[s->tail % RING_OPS];
		s->tail++;
		/* Broadcast: producers wait for different amounts of room, and
		 * the one a signal picked might not fit while another would. */
		pthread_cond_broadcast(&s->space);
		pthread_mutex_unlock(&s->lock);

		run_op(&op);

		pthread_mutex_lock(&s->lock);
		s->completed++;
		/* Each sync waits for its own target, and producers may keep
		 * the stream from ever going idle: wake them on every step. */
		if (s->sync_waiters)
			pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/*
 * Puts n (1 or 2) ops on s in order, blocking while the ring is full.
 * Both go in under one hold of the lock, so no other producer's op can
 * land between a record's wait and its marker.
 */
static int stream_push(struct host_device *d, struct host_stream *s, const struct op *ops,
		       unsigned n)
{
	unsigned i;

	pthread_mutex_lock(&s->lock);
	while (s->head - s->tail + n > RING_OPS) {
		if (tls_stream == s) {
			/* Only this thread could make room: waiting would hang. */
			pthread_mutex_unlock(&s->lock);
			return spw__device_fail(&d->base, -EDEADLK,
						"host device: a host function enqueued onto its "
						"own full stream (host functions must not call "
						"into the device)");
		}
		pthread_cond_wait(&s->space, &s->lock);
	}
	if (s->stopping) {
		pthread_mutex_unlock(&s->lock);
		return spw__device_fail(&d->base, -ESHUTDOWN,
					"host device: stream used while being destroyed");
	}
	for (i = 0; i < n; i++)
		s->ring[(s->head + i) % RING_OPS] = ops[i];
	s->head += n;
	s->submitted += n;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int host_memcpy_async(struct spw__device *dev, void *dst, const void *src, size_t n,
			     struct spw__stream *stream, const char *what)
{
	struct host_device *d = hdev(dev);
	struct op op = { .kind = OP_COPY, .u.copy = { dst, src, n } };

	if (n && (!dst || !src))
		return spw__device_fail(dev, -EINVAL, "host device: %s of %zu bytes with a NULL "
					"pointer", what, n);
	return stream_push(d, (struct host_stream *)stream, &op, 1);
}

static int host_h2d(struct spw__device *dev, void *dst_dev, const void *src_host, size_t n,
		    struct spw__stream *s)
{
	return host_memcpy_async(dev, dst_dev, src_host, n, s, "memcpy_h2d_async");
}

static int host_d2h(struct spw__device *dev, void *dst_host, const void *src_dev, size_t n,
		    struct spw__stream *s)
{
	return host_memcpy_async(dev, dst_host, src_dev, n, s, "memcpy_d2h_async");
}

static int host_memset(struct spw__device *dev, void *dst, int value, size_t n,
		       struct spw__stream *stream)
{
	struct host_device *d = hdev(dev);
	struct op op = { .kind = OP_SET, .u.set = { dst, value, n } };

	if (n && !dst)
		return spw__device_fail(dev, -EINVAL, "host device: memset_async of %zu bytes "
					"with a NULL pointer", n);
	return stream_push(d, (struct host_stream *)stream, &op, 1);
}

static int host_launch_fn(struct spw__device *dev, struct spw__stream *stream, spw__host_fn fn,
			  void *arg)
{
	struct host_device *d = hdev(dev);
	struct op op = { .kind = OP_FN, .u.fn = { fn, arg } };

	return stream_push(d, (struct host_stream *)stream, &op, 1);
}

static int host_stream_sync(struct spw__device *dev, struct spw__stream *stream)
{
	struct host_stream *s = (struct host_stream *)stream;
	uint64_t target;

	if (tls_stream == s)
		return spw__device_fail(dev, -EDEADLK, "host device: stream_sync from a host "
					"function on the same stream");
	pthread_mutex_lock(&s->lock);
	/* Only what was enqueued before the call: later producers must not
	 * keep a sync waiting forever. */
	target = s->submitted;
	s->sync_waiters++;
	while (s->completed < target)
		pthread_cond_wait(&s->idle, &s->lock);
	s->sync_waiters--;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int host_stream_create(struct spw__device *dev, struct spw__stream **ret)
{
	struct host_device *d = hdev(dev);
	struct host_stream *s;
	sigset_t all, old;
	char name[16];
	int r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return spw__device_fail(dev, -ENOMEM, "host device: out of memory for a stream");
	s->dev = d;
	if ((r = pthread_mutex_init(&s->lock, NULL)) != 0)
		goto fail_free;
	if ((r = pthread_cond_init(&s->work, NULL)) != 0)
		goto fail_lock;
	if ((r = pthread_cond_init(&s->space, NULL)) != 0)
		goto fail_work;
	if ((r = pthread_cond_init(&s->idle, NULL)) != 0)
		goto fail_space;

	pthread_mutex_lock(&d->base.lock);
	s->id = ++d->next_id;
	pthread_mutex_unlock(&d->base.lock);

	/* The trainer's signal handlers must not run on our threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&s->thread, NULL, stream_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0)
		goto fail_idle;
	snprintf(name, sizeof(name), "spw-copy-%u", (unsigned)(s->id % 1000));
	pthread_setname_np(s->thread, name);

	pthread_mutex_lock(&d->base.lock);
	spw__node_push(&d->streams, &s->node);
	pthread_mutex_unlock(&d->base.lock);
	*ret = (struct spw__stream *)s;
	return 0;

fail_idle:
	pthread_cond_destroy(&s->idle);
fail_space:
	pthread_cond_destroy(&s->space);
fail_work:
	pthread_cond_destroy(&s->work);
fail_lock:
	pthread_mutex_destroy(&s->lock);
fail_free:
	free(s);
	return spw__device_fail(dev, -r, "host device: cannot start a copy thread: %s",
				strerror(r));
}

/* Drains and frees s, which is already off the device list. */
static void stream_free(struct host_stream *s)
{
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->idle);
	pthread_cond_destroy(&s->space);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void host_stream_destroy(struct spw__device *dev, struct spw__stream *stream)
{
	struct host_device *d = hdev(dev);
	struct host_stream *s = (struct host_stream *)stream;

	/* From its own copy thread it would join itself: refuse silently,
	 * the stream stays alive and close() reaps it. */
	if (tls_stream == s)
		return;
	pthread_mutex_lock(&d->base.lock);
	spw__node_unlink(&d->streams, &s->node);
	pthread_mutex_unlock(&d->base.lock);
	stream_free(s);
}

static int host_stream_borrow(struct spw__device *dev, void *native, struct spw__stream **ret)
{
	struct host_device *d = hdev(dev);
	struct spw__node *s;

	/* Compared by address only: a pointer that is no stream of ours is
	 * refused without being read. */
	pthread_mutex_lock(&d->base.lock);
	for (s = d->streams; s && (void *)s != native; s = s->next)
		;
	pthread_mutex_unlock(&d->base.lock);
	if (!s)
		return spw__device_fail(dev, -ENOENT, "host device: stream_borrow: %p is not a stream "
					"of this device", native);
	*ret = (struct spw__stream *)s;
	return 0;
}

static int host_event_create(struct spw__device *dev, struct spw__event **ret)
{
	struct host_device *d = hdev(dev);
	struct host_event *ev;
	pthread_condattr_t ca;
	int r;

	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return spw__device_fail(dev, -ENOMEM, "host device: out of memory for an event");
	if ((r = pthread_mutex_init(&ev->lock, NULL)) != 0)
		goto fail_free;
	/* event_sync's deadline must not jump with the wall clock. */
	if ((r = pthread_condattr_init(&ca)) != 0)
		goto fail_lock;
	r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (r == 0)
		r = pthread_cond_init(&ev->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (r != 0)
		goto fail_lock;
	atomic_init(&ev->refs, 1);

	pthread_mutex_lock(&d->base.lock);
	spw__node_push(&d->events, &ev->node);
	pthread_mutex_unlock(&d->base.lock);
	*ret = (struct spw__event *)ev;
	return 0;

fail_lock:
	pthread_mutex_destroy(&ev->lock);
fail_free:
	free(ev);
	return spw__device_fail(dev, -r, "host device: cannot create an event: %s", strerror(r));
}

static void host_event_destroy(struct spw__device *dev, struct spw__event *event)
{
	struct host_device *d = hdev(dev);
	struct host_event *ev = (struct host_event *)event;

	pthread_mutex_lock(&d->base.lock);
	spw__node_unlink(&d->events, &ev->node);
	pthread_mutex_unlock(&d->base.lock);
	/* Queued records and waits keep it alive until they have run. */
	event_unref(ev);
}

static int host_event_record(struct spw__device *dev, struct spw__event *event,
			     struct spw__stream *stream)
{
	struct host_device *d = hdev(dev);
	struct host_event *ev = (struct host_event *)event;
	struct host_stream *s = (struct host_stream *)stream;
	struct op ops[2];
	unsigned n = 0;
	uint64_t seq;
	int r;

	pthread_mutex_lock(&ev->lock);
	seq = ++ev->recorded;
	/* Markers on one stream run in order, so done only ever steps
	 * forward one record at a time. When the previous record is still
	 * pending on another stream, this marker first waits for it; that
	 * keeps "done >= k" meaning "records 1..k all ran", which a wait
	 * captured for an earlier record relies on. It never deadlocks: it
	 * waits only for a marker enqueued before it. */
	if (ev->done < seq - 1 && ev->last_stream != s->id) {
		event_ref(ev);
		ops[n++] = (struct op){ .kind = OP_WAIT, .u.ev = { ev, seq - 1 } };
	}
	ev->last_stream = s->id;
	event_ref(ev);
	ops[n++] = (struct op){ .kind = OP_RECORD, .u.ev = { ev, seq } };
	pthread_mutex_unlock(&ev->lock);

	r = stream_push(d, s, ops, n);
	if (r < 0) {
		/* Nothing was queued. Undo the record when no other came
		 * after it; otherwise nobody may wait for a marker that will
		 * never run, so count it complete. */
		pthread_mutex_lock(&ev->lock);
		if (ev->recorded == seq)
			ev->recorded--;
		else if (ev->done < seq)
			ev->done = seq;
		pthread_cond_broadcast(&ev->cond);
		pthread_mutex_unlock(&ev->lock);
		while (n--)
			event_unref(ev);
	}
	return r;
}

static int host_stream_wait_event(struct spw__device *dev, struct spw__stream *stream,
				  struct spw__event *event)
{
	struct host_device *d = hdev(dev);
	struct host_event *ev = (struct host_event *)event;
	struct op op;
	uint64_t seq;
	int r;

	pthread_mutex_lock(&ev->lock);
	seq = ev->recorded;
	if (ev->done >= seq) {
		/* Already complete: nothing to wait for on the stream. */
		pthread_mutex_unlock(&ev->lock);
		return 0;
	}
	event_ref(ev);
	pthread_mutex_unlock(&ev->lock);
	op = (struct op){ .kind = OP_WAIT, .u.ev = { ev, seq } };
	r = stream_push(d, (struct host_stream *)stream, &op, 1);
	if (r < 0)
		event_unref(ev);
	return r;
}

static int host_event_query(struct spw__device *dev, struct spw__event *event)
{
	struct host_event *ev = (struct host_event *)event;
	int done;

	pthread_mutex_lock(&ev->lock);
	done = ev->done >= ev->recorded;
	pthread_mutex_unlock(&ev->lock);
	return done;
}

static int host_event_sync(struct spw__device *dev, struct spw__event *event, int timeout_ms)
{
	struct host_event *ev = (struct host_event *)event;
	struct timespec deadline;
	uint64_t seq;
	int r = 0;

	if (timeout_ms > 0) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&ev->lock);
	seq = ev->recorded;
	while (ev->done < seq) {
		if (timeout_ms == 0) {
			r = ETIMEDOUT;
			break;
		}
		if (timeout_ms < 0) {
			pthread_cond_wait(&ev->cond, &ev->lock);
			continue;
		}
		r = pthread_cond_timedwait(&ev->cond, &ev->lock, &deadline);
		if (r == ETIMEDOUT && ev->done >= seq)
			r = 0;
		if (r != 0)
			break;
	}
	pthread_mutex_unlock(&ev->lock);
	return -r;
}

static int host_register(struct spw__device *dev, void *base, size_t len)
{
	struct host_device *d = hdev(dev);
	struct host_region *g, *it;
	uintptr_t b = (uintptr_t)base;

	if (!base || len == 0 || b + len < b)
		return spw__device_fail(dev, -EINVAL, "host device: host_register of %p+%zu: "
					"not a memory range", base, len);
	g = malloc(sizeof(*g));
	if (!g)
		return spw__device_fail(dev, -ENOMEM, "host device: out of memory");
	*g = (struct host_region){ .base = b, .len = len };
	pthread_mutex_lock(&d->base.lock);
	/* Refuse overlaps, as cudaHostRegister does, so code that works
	 * here does not fail only on a GPU. */
	for (it = d->regions; it; it = it->next) {
		if (b < it->base + it->len && it->base < b + len) {
			pthread_mutex_unlock(&d->base.lock);
			free(g);
			return spw__device_fail(dev, -EEXIST, "host device: host_register of "
						"%p+%zu overlaps a registered range", base, len);
		}
	}
	g->next = d->regions;
	d->regions = g;
	pthread_mutex_unlock(&d->base.lock);
	return 0;
}

static int host_unregister(struct spw__device *dev, void *base)
{
	struct host_device *d = hdev(dev);
	struct host_region **pp, *g;

	pthread_mutex_lock(&d->base.lock);
	for (pp = &d->regions; (g = *pp); pp = &g->next) {
		if (g->base == (uintptr_t)base) {
			*pp = g->next;
			pthread_mutex_unlock(&d->base.lock);
			free(g);
			return 0;
		}
	}
	pthread_mutex_unlock(&d->base.lock);
	return spw__device_fail(dev, -ENOENT, "host device: host_unregister of %p: not "
				"registered", base);
}

static int host_dev_alloc(struct spw__device *dev, size_t len, void **ret)
{
	void *p;
	int r;

	if (len == 0)
		return spw__device_fail(dev, -EINVAL, "host device: dev_alloc of 0 bytes");
	r = posix_memalign(&p, DEV_ALIGN, len);
	if (r != 0)
		return spw__device_fail(dev, -r, "host device: dev_alloc of %zu bytes: %s", len,
					strerror(r));
	*ret = p;
	return 0;
}

static void host_dev_free(struct spw__device *dev, void *p)
{
	free(p);
}

static void host_close(struct spw__device *dev)
{
	struct host_device *d = hdev(dev);
	struct spw__node *n;
	struct host_region *g;

	/* Streams first: once they have drained, no queued op holds an event. */
	for (;;) {
		pthread_mutex_lock(&d->base.lock);
		n = spw__node_pop(&d->streams);
		pthread_mutex_unlock(&d->base.lock);
		if (!n)
			break;
		stream_free((struct host_stream *)n);
	}
	while ((n = spw__node_pop(&d->events)))
		event_unref((struct host_event *)n);
	while ((g = d->regions)) {
		d->regions = g->next;
		free(g);
	}
	spw__device_free(&d->base);
}

static const struct spw__device_ops host_ops = {
	.name = "host",
	.close = host_close,
	.host_register = host_register,
	.host_unregister = host_unregister,
	.dev_alloc = host_dev_alloc,
	.dev_free = host_dev_free,
	.stream_create = host_stream_create,
	.stream_destroy = host_stream_destroy,
	.stream_borrow = host_stream_borrow,
	.stream_sync = host_stream_sync,
	.stream_wait_event = host_stream_wait_event,
	.memcpy_h2d_async = host_h2d,
	.memcpy_d2h_async = host_d2h,
	.memset_async = host_memset,
	.launch_host_fn = host_launch_fn,
	.event_create = host_event_create,
	.event_destroy = host_event_destroy,
	.event_record = host_event_record,
	.event_query = host_event_query,
	.event_sync = host_event_sync,
};

int spw__device_host_open(struct spw__device **ret, char *err, size_t errlen)
{
	return spw__device_new(sizeof(struct host_device), &host_ops, "host device", ret, err, errlen);
}
