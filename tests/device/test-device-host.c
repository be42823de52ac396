/* SPDX-License-Identifier: MIT */
/*
 * tests/device/test-device-host.c: the host backend against the device
 * contract, plus what only the host backend promises (refusing calls that
 * would wait for their own copy thread, idle threads using no CPU, records
 * of one event spread over streams).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "test.h"
#include "device-contract.h"

static struct spw__device *open_host(void)
{
	struct spw__device *dev = NULL;
	char err[256];

	if (spw__device_host_open(&dev, err, sizeof(err)) < 0)
		TEST_FAIL("host open: %s", err);
	ASSERT_STREQ(spw__device_name(dev), "host");
	return dev;
}

/* A host function that calls into its own stream: the full-ring enqueue
 * and the sync must be refused, not hang. */
struct selfcall {
	struct spw__device *dev;
	struct spw__stream *s;
	int push_r, sync_r, pushed;
};

static void noop(void *arg)
{
	(void)arg;
}

static void count(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void selfcall_fn(void *arg)
{
	struct selfcall *c = arg;
	int r;

	c->sync_r = spw__stream_sync(c->dev, c->s);
	for (;;) {
		r = spw__launch_host_fn(c->dev, c->s, noop, NULL);
		if (r < 0)
			break;
		c->pushed++;
	}
	c->push_r = r;
}

static void test_self_deadlock(void)
{
	struct spw__device *dev = open_host();
	struct selfcall c = { .dev = dev };
	char msg[SPW__DEVICE_ERRMAX];

	ASSERT_OK(spw__stream_create(dev, &c.s));
	ASSERT_OK(spw__launch_host_fn(dev, c.s, selfcall_fn, &c));
	ASSERT_OK(spw__stream_sync(dev, c.s));
	ASSERT_EQ(c.sync_r, -EDEADLK);
	ASSERT_EQ(c.push_r, -EDEADLK);
	ASSERT_GT(c.pushed, 0);
	ASSERT_CONTAINS(spw__device_errmsg(dev, msg, sizeof(msg)), "own full stream");
	/* The stream still works afterwards. */
	ASSERT_OK(spw__launch_host_fn(dev, c.s, noop, NULL));
	ASSERT_OK(spw__stream_sync(dev, c.s));
	spw__device_close(dev);
}

static double cpu_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Idle copy threads sleep: four idle streams burn (almost) no CPU over a
 * quarter second. A bound on CPU used, not on time taken. */
static void test_idle_sleeps(void)
{
	struct spw__device *dev = open_host();
	struct spw__stream *s[4];
	double t0, used;
	int i;

	for (i = 0; i < 4; i++) {
		ASSERT_OK(spw__stream_create(dev, &s[i]));
		ASSERT_OK(spw__launch_host_fn(dev, s[i], noop, NULL));
		ASSERT_OK(spw__stream_sync(dev, s[i]));
	}
	t0 = cpu_seconds();
	sleep_ms(250);
	used = cpu_seconds() - t0;
	if (used > 0.05)
		TEST_FAIL("idle streams used %.3f s of CPU in 0.25 s", used);
	spw__device_close(dev);
}

/* One event recorded on two streams, the first held back: it completes
 * only when both records have, and a wait for the first record is not
 * released by the second. */
static void test_rerecord_across_streams(void)
{
	struct spw__device *dev = open_host();
	struct spw__stream *s1, *s2, *s3;
	struct spw__event *ev;
	atomic_int n;
	struct gate g;

	atomic_init(&n, 0);
	gate_init(&g);
	ASSERT_OK(spw__stream_create(dev, &s1));
	ASSERT_OK(spw__stream_create(dev, &s2));
	ASSERT_OK(spw__stream_create(dev, &s3));
	ASSERT_OK(spw__event_create(dev, &ev));
	ASSERT_OK(spw__launch_host_fn(dev, s1, gate_fn, &g));
	ASSERT_OK(spw__event_record(dev, ev, s1));
	ASSERT_OK(spw__stream_wait_event(dev, s3, ev));
	ASSERT_OK(spw__event_record(dev, ev, s2));
	ASSERT_OK(spw__launch_host_fn(dev, s3, count, &n));
	sleep_ms(20);
	ASSERT_EQ(atomic_load(&n), 0);
	ASSERT_EQ(spw__event_query(dev, ev), 0);
	ASSERT_EQ(spw__event_sync(dev, ev, 10), -ETIMEDOUT);
	gate_open(&g);
	ASSERT_EQ(spw__event_sync(dev, ev, -1), 0);
	ASSERT_OK(spw__stream_sync(dev, s3));
	ASSERT_EQ(atomic_load(&n), 1);
	spw__event_destroy(dev, ev);
	spw__device_close(dev);
	gate_fini(&g);
}

/* Destroying a stream from its own host function is refused (it would
 * join itself); close reaps it. */
struct selfdestroy {
	struct spw__device *dev;
	struct spw__stream *s;
};

static void selfdestroy_fn(void *arg)
{
	struct selfdestroy *c = arg;

	spw__stream_destroy(c->dev, c->s);
}

static void test_self_destroy(void)
{
	struct spw__device *dev = open_host();
	struct selfdestroy c = { .dev = dev };

	ASSERT_OK(spw__stream_create(dev, &c.s));
	ASSERT_OK(spw__launch_host_fn(dev, c.s, selfdestroy_fn, &c));
	ASSERT_OK(spw__stream_sync(dev, c.s));
	ASSERT_OK(spw__launch_host_fn(dev, c.s, noop, NULL));
	ASSERT_OK(spw__stream_sync(dev, c.s));
	spw__device_close(dev);
}

/* Several threads feeding one stream while another syncs it. */
struct feeder {
	struct spw__device *dev;
	struct spw__stream *s;
	atomic_int *n;
};

static void *feed(void *arg)
{
	struct feeder *f = arg;
	int i;

	for (i = 0; i < 3000; i++)
		ASSERT_OK(spw__launch_host_fn(f->dev, f->s, count, f->n));
	return NULL;
}

static void test_many_producers(void)
{
	struct spw__device *dev = open_host();
	struct feeder f = { .dev = dev };
	atomic_int n;
	pthread_t t[4];
	int i;

	atomic_init(&n, 0);
	f.n = &n;
	ASSERT_OK(spw__stream_create(dev, &f.s));
	for (i = 0; i < 4; i++)
		ASSERT_EQ(pthread_create(&t[i], NULL, feed, &f), 0);
	/* A sync returns once what came before it is done, though the
	 * feeders keep the stream from ever going idle meanwhile. */
	for (i = 0; i < 20; i++)
		ASSERT_OK(spw__stream_sync(dev, f.s));
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	ASSERT_OK(spw__stream_sync(dev, f.s));
	ASSERT_EQ(atomic_load(&n), 4 * 3000);
	spw__device_close(dev);
}

int main(void)
{
	device_contract_run(open_host);
	fprintf(stderr, "host: self_deadlock\n");
	test_self_deadlock();
	fprintf(stderr, "host: idle_sleeps\n");
	test_idle_sleeps();
	fprintf(stderr, "host: rerecord_across_streams\n");
	test_rerecord_across_streams();
	fprintf(stderr, "host: self_destroy\n");
	test_self_destroy();
	fprintf(stderr, "host: many_producers\n");
	test_many_producers();
	return 0;
}
