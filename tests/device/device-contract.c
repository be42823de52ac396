/* SPDX-License-Identifier: MIT */
/*
 * tests/device/device-contract.c: client/device.h's contract, checked the
 * same way on every backend. Everything here must hold on a GPU as well as
 * on the host backend, so host buffers are registered (an unregistered
 * D2H on CUDA may block the caller, which a gated stream would deadlock)
 * and work is held back with gates (blocking host functions), never with
 * sleeps.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "device-contract.h"

void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

void gate_init(struct gate *g)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->open = false;
	atomic_init(&g->entered, 0);
}

void gate_fini(struct gate *g)
{
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
}

void gate_fn(void *arg)
{
	struct gate *g = arg;

	atomic_fetch_add(&g->entered, 1);
	pthread_mutex_lock(&g->lock);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

struct later {
	struct gate *g;
	int ms;
};

static void *opener(void *arg)
{
	struct later *l = arg;

	sleep_ms(l->ms);
	gate_open(l->g);
	free(l);
	return NULL;
}

pthread_t gate_open_later(struct gate *g, int ms)
{
	struct later *l = malloc(sizeof(*l));
	pthread_t t;

	ASSERT_TRUE(l);
	*l = (struct later){ g, ms };
	ASSERT_EQ(pthread_create(&t, NULL, opener, l), 0);
	return t;
}

void *contract_host_alloc(struct spw__device *dev, size_t n)
{
	size_t len = (n + 4095) & ~(size_t)4095;
	void *p = aligned_alloc(4096, len ? len : 4096);

	ASSERT_TRUE(p);
	memset(p, 0, len ? len : 4096);
	ASSERT_OK(spw__host_register(dev, p, len ? len : 4096));
	return p;
}

void contract_host_free(struct spw__device *dev, void *p)
{
	ASSERT_OK(spw__host_unregister(dev, p));
	free(p);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (uint8_t)(x >> 24);
	}
}

/* Round trips of many sizes and misalignments through device memory on one
 * stream with no sync between the copies: in-stream order makes each D2H
 * see its H2D. */
static void test_copies(contract_open_fn open_dev)
{
	static const size_t sizes[] = { 0, 1, 2, 3, 7, 64, 255, 4095, 4096, 4097, 65537,
					(1u << 20) + 13 };
	static const size_t offs[] = { 0, 1, 3, 256 };
	const size_t cap = (1u << 20) + 4096;
	struct spw__device *dev = open_dev();
	struct spw__stream *s;
	uint8_t *src, *dst, *d;
	size_t i, j;

	src = contract_host_alloc(dev, cap);
	dst = contract_host_alloc(dev, cap);
	ASSERT_OK(spw__dev_alloc(dev, cap, (void **)&d));
	ASSERT_OK(spw__stream_create(dev, &s));
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (j = 0; j < sizeof(offs) / sizeof(offs[0]); j++) {
			size_t n = sizes[i], o = offs[j];

			fill(src + o, n, (unsigned)(i * 7 + j));
			memset(dst, 0x5a, cap);
			ASSERT_OK(spw__memcpy_h2d_async(dev, d + o, src + o, n, s));
			ASSERT_OK(spw__memcpy_d2h_async(dev, dst + o, d + o, n, s));
			ASSERT_OK(spw__stream_sync(dev, s));
			if (memcmp(dst + o, src + o, n) != 0)
				TEST_FAIL("round trip of %zu bytes at offset %zu differs", n, o);
			/* Nothing outside the span was touched. */
			ASSERT_EQ(dst[o + n], 0x5a);
			if (o)
				ASSERT_EQ(dst[o - 1], 0x5a);
		}
	}
	spw__stream_destroy(dev, s);
	spw__dev_free(dev, d);
	contract_host_free(dev, src);
	contract_host_free(dev, dst);
	spw__device_close(dev);
}

static void test_memset(contract_open_fn open_dev)
{
	const size_t n = 100000;
	struct spw__device *dev = open_dev();
	struct spw__stream *s;
	uint8_t *src, *dst, *d;
	size_t i;

	src = contract_host_alloc(dev, n);
	dst = contract_host_alloc(dev, n);
	ASSERT_OK(spw__dev_alloc(dev, n, (void **)&d));
	ASSERT_OK(spw__stream_create(dev, &s));
	fill(src, n, 42);
	ASSERT_OK(spw__memcpy_h2d_async(dev, d, src, n, s));
	ASSERT_OK(spw__memset_async(dev, d + 1000, 0xab, 5001, s));
	ASSERT_OK(spw__memset_async(dev, d, 0, 0, s));
	ASSERT_OK(spw__memcpy_d2h_async(dev, dst, d, n, s));
	ASSERT_OK(spw__stream_sync(dev, s));
	for (i = 0; i < n; i++) {
		uint8_t want = i >= 1000 && i < 6001 ? 0xab : src[i];

		if (dst[i] != want)
			TEST_FAIL("byte %zu: %#x, want %#x", i, dst[i], want);
	}
	spw__stream_destroy(dev, s);
	spw__dev_free(dev, d);
	contract_host_free(dev, src);
	contract_host_free(dev, dst);
	spw__device_close(dev);
}

/* Host functions run in order, each after the copies before it landed. */
struct landing {
	const uint8_t *got, *want;
	size_t n;
	int index;
	int *log;
	atomic_int *nlog;
	atomic_int *bad;
};

static void landed(void *arg)
{
	struct landing *l = arg;
	int k = atomic_fetch_add(l->nlog, 1);

	l->log[k] = l->index;
	if (memcmp(l->got, l->want, l->n) != 0)
		atomic_fetch_add(l->bad, 1);
}

static void test_callbacks(contract_open_fn open_dev)
{
	enum { N = 64, CHUNK = 8192 };
	struct spw__device *dev = open_dev();
	struct spw__stream *s;
	struct landing ls[N];
	int log[N];
	atomic_int nlog, bad;
	struct gate g;
	uint8_t *src, *dst, *d;
	int i;

	atomic_init(&nlog, 0);
	atomic_init(&bad, 0);
	gate_init(&g);
	src = contract_host_alloc(dev, N * CHUNK);
	dst = contract_host_alloc(dev, N * CHUNK);
	ASSERT_OK(spw__dev_alloc(dev, N * CHUNK, (void **)&d));
	fill(src, N * CHUNK, 7);
	ASSERT_OK(spw__stream_create(dev, &s));
	ASSERT_OK(spw__launch_host_fn(dev, s, gate_fn, &g));
	for (i = 0; i < N; i++) {
		size_t o = (size_t)i * CHUNK;

		ls[i] = (struct landing){ dst + o, src + o, CHUNK, i, log, &nlog, &bad };
		ASSERT_OK(spw__memcpy_h2d_async(dev, d + o, src + o, CHUNK, s));
		ASSERT_OK(spw__memcpy_d2h_async(dev, dst + o, d + o, CHUNK, s));
		ASSERT_OK(spw__launch_host_fn(dev, s, landed, &ls[i]));
	}
	/* The gate holds everything behind it. */
	sleep_ms(20);
	ASSERT_EQ(atomic_load(&nlog), 0);
	gate_open(&g);
	ASSERT_OK(spw__stream_sync(dev, s));
	ASSERT_EQ(atomic_load(&nlog), N);
	ASSERT_EQ(atomic_load(&bad), 0);
	for (i = 0; i < N; i++)
		ASSERT_EQ(log[i], i);
	ASSERT_EQ(atomic_load(&g.entered), 1);

	spw__stream_destroy(dev, s);
	spw__dev_free(dev, d);
	contract_host_free(dev, src);
	contract_host_free(dev, dst);
	gate_fini(&g);
	spw__device_close(dev);
}

static void test_event_query_sync(contract_open_fn open_dev)
{
	struct spw__device *dev = open_dev();
	struct spw__stream *s;
	struct spw__event *ev;
	struct gate g;

	gate_init(&g);
	ASSERT_OK(spw__stream_create(dev, &s));
	ASSERT_OK(spw__event_create(dev, &ev));
	/* Never recorded: complete. */
	ASSERT_EQ(spw__event_query(dev, ev), 1);
	ASSERT_EQ(spw__event_sync(dev, ev, 0), 0);
	ASSERT_EQ(spw__event_sync(dev, ev, -1), 0);

	ASSERT_OK(spw__launch_host_fn(dev, s, gate_fn, &g));
	ASSERT_OK(spw__event_record(dev, ev, s));
	ASSERT_EQ(spw__event_query(dev, ev), 0);
	ASSERT_EQ(spw__event_sync(dev, ev, 0), -ETIMEDOUT);
	ASSERT_EQ(spw__event_sync(dev, ev, 30), -ETIMEDOUT);
	gate_open(&g);
	ASSERT_EQ(spw__event_sync(dev, ev, -1), 0);
	ASSERT_EQ(spw__event_query(dev, ev), 1);
	/* Recording again on idle work completes at once (eventually). */
	ASSERT_OK(spw__event_record(dev, ev, s));
	ASSERT_EQ(spw__event_sync(dev, ev, 10000), 0);
	ASSERT_EQ(spw__event_query(dev, ev), 1);

	spw__event_destroy(dev, ev);
	spw__stream_destroy(dev, s);
	gate_fini(&g);
	spw__device_close(dev);
}

static void mark(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

/* s2 reads what s1 wrote, joined only by an event. */
static void test_cross_stream(contract_open_fn open_dev)
{
	const size_t n = 4u << 20;
	struct spw__device *dev = open_dev();
	struct spw__stream *s1, *s2, *s3;
	struct spw__event *ev;
	uint8_t *src, *dst, *d;
	atomic_int done;
	struct gate g;

	atomic_init(&done, 0);
	gate_init(&g);
	src = contract_host_alloc(dev, n);
	dst = contract_host_alloc(dev, n);
	ASSERT_OK(spw__dev_alloc(dev, n, (void **)&d));
	fill(src, n, 99);
	ASSERT_OK(spw__stream_create(dev, &s1));
	ASSERT_OK(spw__stream_create(dev, &s2));
	ASSERT_OK(spw__stream_create(dev, &s3));
	ASSERT_OK(spw__event_create(dev, &ev));

	ASSERT_OK(spw__launch_host_fn(dev, s1, gate_fn, &g));
	ASSERT_OK(spw__memcpy_h2d_async(dev, d, src, n, s1));
	ASSERT_OK(spw__event_record(dev, ev, s1));
	ASSERT_OK(spw__stream_wait_event(dev, s2, ev));
	ASSERT_OK(spw__memcpy_d2h_async(dev, dst, d, n, s2));
	ASSERT_OK(spw__launch_host_fn(dev, s2, mark, &done));
	/* A later record elsewhere does not release the wait captured above. */
	ASSERT_OK(spw__event_record(dev, ev, s3));
	sleep_ms(20);
	ASSERT_EQ(atomic_load(&done), 0);
	gate_open(&g);
	ASSERT_OK(spw__stream_sync(dev, s2));
	ASSERT_EQ(atomic_load(&done), 1);
	ASSERT_TRUE(memcmp(dst, src, n) == 0);
	ASSERT_EQ(spw__event_sync(dev, ev, -1), 0);

	/* Waiting on a complete (or never recorded) event costs nothing. */
	ASSERT_OK(spw__stream_wait_event(dev, s2, ev));
	ASSERT_OK(spw__stream_sync(dev, s2));

	spw__event_destroy(dev, ev);
	spw__stream_destroy(dev, s3);
	spw__stream_destroy(dev, s2);
	spw__stream_destroy(dev, s1);
	spw__dev_free(dev, d);
	contract_host_free(dev, src);
	contract_host_free(dev, dst);
	gate_fini(&g);
	spw__device_close(dev);
}

/* Far more operations than a stream holds at once, with events crossing
 * between two streams: nothing deadlocks and nothing is lost. */
static void test_many_ops(contract_open_fn open_dev)
{
	enum { N = 6000, EVERY = 50 };
	struct spw__device *dev = open_dev();
	struct spw__stream *s1, *s2;
	struct spw__event *ev;
	atomic_int n1, n2;
	uint8_t *h, *d;
	int i;

	atomic_init(&n1, 0);
	atomic_init(&n2, 0);
	h = contract_host_alloc(dev, 4096);
	ASSERT_OK(spw__dev_alloc(dev, 4096, (void **)&d));
	ASSERT_OK(spw__stream_create(dev, &s1));
	ASSERT_OK(spw__stream_create(dev, &s2));
	ASSERT_OK(spw__event_create(dev, &ev));
	for (i = 0; i < N; i++) {
		ASSERT_OK(spw__memcpy_h2d_async(dev, d + (i % 64) * 64, h, 64, s1));
		ASSERT_OK(spw__launch_host_fn(dev, s1, mark, &n1));
		if (i % EVERY == EVERY - 1) {
			ASSERT_OK(spw__event_record(dev, ev, s1));
			ASSERT_OK(spw__stream_wait_event(dev, s2, ev));
			ASSERT_OK(spw__launch_host_fn(dev, s2, mark, &n2));
		}
	}
	ASSERT_OK(spw__stream_sync(dev, s2));
	ASSERT_GE(atomic_load(&n1), N - EVERY + 1);
	ASSERT_OK(spw__stream_sync(dev, s1));
	ASSERT_EQ(atomic_load(&n1), N);
	ASSERT_EQ(atomic_load(&n2), N / EVERY);

	spw__event_destroy(dev, ev);
	spw__stream_destroy(dev, s2);
	spw__stream_destroy(dev, s1);
	spw__dev_free(dev, d);
	contract_host_free(dev, h);
	spw__device_close(dev);
}

/* stream_destroy and device close wait for pending work; an event may be
 * destroyed while a record and a wait on it are pending. */
static void test_destroy_pending(contract_open_fn open_dev)
{
	enum { N = 100 };
	struct spw__device *dev = open_dev();
	struct spw__stream *s1, *s2;
	struct spw__event *ev;
	atomic_int n;
	struct gate g;
	pthread_t t;
	int i;

	atomic_init(&n, 0);
	gate_init(&g);
	ASSERT_OK(spw__stream_create(dev, &s1));
	ASSERT_OK(spw__stream_create(dev, &s2));
	ASSERT_OK(spw__event_create(dev, &ev));
	ASSERT_OK(spw__launch_host_fn(dev, s1, gate_fn, &g));
	for (i = 0; i < N; i++)
		ASSERT_OK(spw__launch_host_fn(dev, s1, mark, &n));
	ASSERT_OK(spw__event_record(dev, ev, s1));
	ASSERT_OK(spw__stream_wait_event(dev, s2, ev));
	ASSERT_OK(spw__launch_host_fn(dev, s2, mark, &n));
	spw__event_destroy(dev, ev);
	t = gate_open_later(&g, 30);
	spw__stream_destroy(dev, s2);   /* waits through s1's gate */
	ASSERT_EQ(atomic_load(&n), N + 1);
	spw__stream_destroy(dev, s1);
	pthread_join(t, NULL);
	gate_fini(&g);

	/* Close with a stream and an event left over, work still pending. */
	atomic_store(&n, 0);
	gate_init(&g);
	ASSERT_OK(spw__stream_create(dev, &s1));
	ASSERT_OK(spw__event_create(dev, &ev));
	ASSERT_OK(spw__launch_host_fn(dev, s1, gate_fn, &g));
	for (i = 0; i < N; i++)
		ASSERT_OK(spw__launch_host_fn(dev, s1, mark, &n));
	ASSERT_OK(spw__event_record(dev, ev, s1));
	t = gate_open_later(&g, 30);
	spw__device_close(dev);
	ASSERT_EQ(atomic_load(&n), N);
	pthread_join(t, NULL);
	gate_fini(&g);
}

static void test_register_and_errors(contract_open_fn open_dev)
{
	struct spw__device *dev = open_dev();
	struct spw__stream *s;
	char msg[SPW__DEVICE_ERRMAX];
	atomic_int n;
	void *p = aligned_alloc(4096, 65536), *d = NULL;

	atomic_init(&n, 0);
	ASSERT_TRUE(p);
	ASSERT_OK(spw__host_register(dev, p, 65536));
	ASSERT_EQ(spw__host_register(dev, p, 65536), -EEXIST);
	ASSERT_TRUE(*spw__device_errmsg(dev, msg, sizeof(msg)) != '\0');
	ASSERT_OK(spw__host_unregister(dev, p));
	ASSERT_EQ(spw__host_unregister(dev, p), -ENOENT);
	ASSERT_EQ(spw__host_register(dev, NULL, 100), -EINVAL);
	free(p);

	ASSERT_EQ(spw__dev_alloc(dev, 0, &d), -EINVAL);
	ASSERT_TRUE(d == NULL);
	spw__dev_free(dev, NULL);

	/* A call that fails never runs its function. */
	ASSERT_EQ(spw__launch_host_fn(dev, NULL, mark, &n), -EINVAL);
	ASSERT_EQ(spw__memcpy_h2d_async(dev, msg, msg, 1, NULL), -EINVAL);
	ASSERT_OK(spw__stream_create(dev, &s));
	ASSERT_EQ(spw__launch_host_fn(dev, s, NULL, NULL), -EINVAL);
	ASSERT_OK(spw__stream_sync(dev, s));
	ASSERT_EQ(atomic_load(&n), 0);
	spw__stream_destroy(dev, s);
	spw__stream_destroy(dev, NULL);
	spw__event_destroy(dev, NULL);
	ASSERT_TRUE(spw__device_close(dev) == NULL);
	ASSERT_TRUE(spw__device_close(NULL) == NULL);
}

void device_contract_run(contract_open_fn open_dev)
{
	static const struct {
		const char *name;
		void (*fn)(contract_open_fn);
	} tests[] = {
		{ "copies", test_copies },
		{ "memset", test_memset },
		{ "callbacks", test_callbacks },
		{ "event_query_sync", test_event_query_sync },
		{ "cross_stream", test_cross_stream },
		{ "many_ops", test_many_ops },
		{ "destroy_pending", test_destroy_pending },
		{ "register_and_errors", test_register_and_errors },
	};
	size_t i;

	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fprintf(stderr, "contract: %s\n", tests[i].name);
		tests[i].fn(open_dev);
	}
}
