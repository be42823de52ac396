/* SPDX-License-Identifier: MIT */
/*
 * test-death: when spillwayd dies, the client says so quickly and clearly.
 * A call blocked on the completion ring, and every call after, must return
 * -ECONNRESET well within a second of the SIGKILL. The 1.5 s bound below is
 * a hang-freedom check with slack for a loaded machine, not a benchmark.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"

static struct spw_test_daemon d;
static double killed_at;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *killer(void *arg)
{
	usleep(300 * 1000);
	killed_at = now_s();
	spw_test_daemon_kill(&d);
	return NULL;
}

static spw_client *open_session(const char *name)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = 8u << 20 };
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(NULL, &c));
	if (spw_client_connect(c, d.control) < 0 || spw_client_attach(c, &a) < 0)
		TEST_FAIL("%s", spw_client_last_error(c));
	return c;
}

/* Noticed, not timed out: well inside the 30 s reply timeout (a tighter
 * bound would fail a loaded machine, not a hang). */
#define ASSERT_FAST(t0) ASSERT_LT((now_s() - (t0)) * 1000, 10000) /* ms */

/* Blocked in spw_reap without a timeout when the daemon is killed. */
static void test_blocked_call(void)
{
	struct spw_completion comp;
	pthread_t th;
	uint32_t t;
	double t0;
	spw_client *c;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = open_session("job/0");
	ASSERT_OK(spw_tensor_register(c, "w", 1u << 20, SPW_TENSOR_RESIDENT, &t, NULL));
	ASSERT_GE(spw_pin(c, t, 0, NULL), 0);

	ASSERT_EQ(pthread_create(&th, NULL, killer, NULL), 0);
	ASSERT_EQ(spw_reap(c, &comp, 1, -1), -ECONNRESET);
	ASSERT_FAST(killed_at);
	pthread_join(th, NULL);
	fprintf(stderr, "blocked reap returned %.1f ms after SIGKILL: %s\n", (now_s() - killed_at) * 1000,
		spw_client_last_error(c));
	ASSERT_CONTAINS(spw_client_last_error(c), "closed the connection");

	/* Every later call fails the same way, at once. */
	t0 = now_s();
	ASSERT_EQ(spw_nop(c), -ECONNRESET);
	ASSERT_EQ(spw_unpin(c, t, 0, SPW_DIRTY), -ECONNRESET);
	ASSERT_EQ(spw_tensor_register(c, "x", 1, SPW_TENSOR_RESIDENT, &t, NULL), -ECONNRESET);
	ASSERT_EQ(spw_client_detach(c), -ECONNRESET);
	ASSERT_FAST(t0);
	c = spw_client_free(c);
	spw_test_daemon_cleanup(&d);
}

/* Killed between calls: the next data-plane call and the next control
 * call, on clients that have not noticed yet, fail quickly. */
static void test_next_call(void)
{
	spw_client *a, *b;
	uint32_t t;
	double t0;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	a = open_session("job/a");
	b = open_session("job/b");
	spw_test_daemon_kill(&d);

	t0 = now_s();
	ASSERT_EQ(spw_nop(a), -ECONNRESET);
	ASSERT_FAST(t0);
	fprintf(stderr, "next nop: %s\n", spw_client_last_error(a));

	t0 = now_s();
	ASSERT_EQ(spw_tensor_register(b, "w", 1u << 20, SPW_TENSOR_RESIDENT, &t, NULL), -ECONNRESET);
	ASSERT_FAST(t0);
	fprintf(stderr, "next register: %s\n", spw_client_last_error(b));

	/* And a new client gets the "no daemon" message naming the path. */
	{
		spw_client *c = NULL;

		ASSERT_OK(spw_client_new(NULL, &c));
		ASSERT_LT(spw_client_connect(c, d.control), 0);
		ASSERT_CONTAINS(spw_client_last_error(c), d.control);
		c = spw_client_free(c);
	}
	a = spw_client_free(a);
	b = spw_client_free(b);
	spw_test_daemon_cleanup(&d);
}

/* A stopped daemon (SIGSTOP, a wedged process): a synchronous ring call
 * gives up after reply_timeout_ms with -ETIMEDOUT naming the session, and
 * the client is abandoned (its operation may still complete later), so
 * every later call fails at once. The daemon itself goes on. */
static void test_stopped_daemon(void)
{
	/* Not much less: the connect, attach and register before the stop
	 * run under the same timeout, and a loaded machine may keep a running
	 * daemon from answering for a while. */
	struct spw_client_opts o = { .size = sizeof(o), .reply_timeout_ms = 2000 };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "job/stopped", .region_bytes = 8u << 20 };
	spw_client *c = NULL;
	uint32_t t;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	ASSERT_OK(spw_client_new(&o, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "w", 1u << 20, SPW_TENSOR_RESIDENT, &t, NULL));
	ASSERT_EQ(kill(d.pid, SIGSTOP), 0);
	ASSERT_EQ(spw_pin(c, t, 0, NULL), -ETIMEDOUT);
	fprintf(stderr, "pin on a stopped daemon: %s\n", spw_client_last_error(c));
	ASSERT_CONTAINS(spw_client_last_error(c), "job/stopped");
	ASSERT_CONTAINS(spw_client_last_error(c), "2000 ms");
	ASSERT_EQ(kill(d.pid, SIGCONT), 0);
	ASSERT_EQ(spw_nop(c), -ETIMEDOUT);
	c = spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(void)
{
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	test_blocked_call();
	test_next_call();
	test_stopped_daemon();
	printf("ok\n");
	return 0;
}
