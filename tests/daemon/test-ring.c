/* SPDX-License-Identifier: MIT */
/*
 * The data plane against a real daemon: batches, every kind of invalid
 * entry answered -EINVAL, a garbage flood and a ring overflow and a CQ head
 * that runs ahead each end the session (and free its region), a full CQ
 * that holds entries back until the client reaps, and the NOP round trip
 * (printed, never asserted).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

static struct spw_test_daemon d;

static const char config[] =
	"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
	" \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
	" \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 16, \"max_garbage\": 50},"
	" \"log\": {\"level\": \"info\"}}";

static void expect_gone(struct raw_session *s, const char *name, double used_after)
{
	cJSON *st;

	ASSERT_TRUE(raw_wait_eof(s->ctl, 5000));
	st = raw_status(d.status);
	ASSERT_TRUE(raw_status_session(st, name) == NULL);
	ASSERT_EQ(raw_num(st, "pool.used_bytes"), used_after);
	cJSON_Delete(st);
	raw_session_close(s);
}

static void test_invalid_entries(void)
{
	struct raw_session s;
	struct spw_sqe bad[] = {
		{ .opcode = 200 },
		{ .opcode = SPW_OP__COUNT },
		{ .opcode = SPW_OP_NOP, .reserved0 = 1 },
		{ .opcode = SPW_OP_NOP, .reserved1 = 0xffffffff },
		{ .opcode = SPW_OP_NOP, .arg = 1 },
		{ .opcode = SPW_OP_NOP, .flags = 1 },
		{ .opcode = SPW_OP_UNPIN, .flags = 0x80 },
		{ .opcode = SPW_OP_PIN, .tensor = 0xffffffff },
		{ .opcode = SPW_OP_PIN, .tensor = 0, .page = 1000 },
		{ .opcode = SPW_OP_UNPIN, .tensor = 0, .page = 0 }, /* not pinned */
	};
	struct spw_cqe cqe;
	cJSON *st;
	int t;

	ASSERT_OK(raw_attach(d.control, "ring/0", 4 * MiB, 0, &s));
	ASSERT_EQ(s.l.sq_entries, 16);
	t = raw_register(&s, "t", 2 * MiB, NULL);
	ASSERT_EQ(t, 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		bad[i].user_data = 0xdead0000 + i;
		raw_submit(&s, &bad[i]);
		ASSERT_OK(raw_reap(&s, &cqe, 5000));
		ASSERT_UEQ(cqe.user_data, 0xdead0000 + i);
		if (cqe.res != -EINVAL)
			TEST_FAIL("bad entry %zu answered %d, not -EINVAL", i, cqe.res);
	}
	/* A batch of valid entries, published with one tail store. */
	for (uint32_t i = 0; i < 16; i++) {
		struct spw_sqe e = { .opcode = i % 2 ? SPW_OP_UNPIN : SPW_OP_PIN, .tensor = 0, .page = 1, .user_data = i };
		s.sqes[s.sq_tail & 15] = e;
		s.sq_tail++;
	}
	raw_publish(&s);
	for (uint32_t i = 0; i < 16; i++) {
		ASSERT_OK(raw_reap(&s, &cqe, 5000));
		ASSERT_UEQ(cqe.user_data, i);
		ASSERT_EQ(cqe.res, i % 2 ? 0 : 1); /* page 1 of the first tensor: slot 1 */
	}
	st = raw_status(d.status);
	ASSERT_EQ(raw_num(raw_status_session(st, "ring/0"), "ring.errors"), 10);
	ASSERT_EQ(raw_num(raw_status_session(st, "ring/0"), "ring.ops"), 26);
	ASSERT_EQ(raw_num(raw_status_session(st, "ring/0"), "pages_pinned"), 0);
	cJSON_Delete(st);
	raw_session_close(&s);
}

static void test_cq_full(void)
{
	struct raw_session s;
	struct spw_cqe cqe;
	uint32_t next = 0;

	ASSERT_OK(raw_attach(d.control, "ring/full", 1 * MiB, 0, &s));
	ASSERT_EQ(s.l.cq_entries, 32);
	/* Three SQ-fulls of NOPs without reaping: the CQ holds two. */
	for (int batch = 0; batch < 3; batch++) {
		for (int w = 0; w < 5000 && s.sq_tail - __atomic_load_n(&s.sqh->head, __ATOMIC_ACQUIRE) > 0; w++)
			usleep(1000);
		ASSERT_EQ(s.sq_tail, __atomic_load_n(&s.sqh->head, __ATOMIC_ACQUIRE));
		for (int i = 0; i < 16; i++) {
			s.sqes[s.sq_tail & 15] = (struct spw_sqe){ .opcode = SPW_OP_NOP, .user_data = next++ };
			s.sq_tail++;
		}
		raw_publish(&s);
		if (batch == 2)
			break;
	}
	/* The second batch's completions: the daemon publishes them just
	 * after the SQ head the loop above waited for. */
	for (int w = 0; w < 5000 && __atomic_load_n(&s.cqh->tail, __ATOMIC_ACQUIRE) < 32; w++)
		usleep(1000);
	usleep(50000);
	/* The third batch waits: the daemon never overwrites an unreaped CQE
	 * (however long it is given). */
	ASSERT_EQ(__atomic_load_n(&s.cqh->tail, __ATOMIC_ACQUIRE), 32);
	ASSERT_EQ(__atomic_load_n(&s.sqh->head, __ATOMIC_ACQUIRE), 32);
	for (uint32_t i = 0; i < 48; i++) {
		ASSERT_OK(raw_reap(&s, &cqe, 5000));
		ASSERT_UEQ(cqe.user_data, i);
		ASSERT_EQ(cqe.res, 0);
	}
	raw_session_close(&s);
}

static void test_flood(void)
{
	struct raw_session s, other;
	struct spw_cqe cqe;
	int done = 0;

	ASSERT_OK(raw_attach(d.control, "ring/flood", 1 * MiB, 0, &s));
	ASSERT_OK(raw_attach(d.control, "ring/bystander", 1 * MiB, 0, &other));
	for (int i = 0; i < 1000; i++) {
		struct spw_sqe e = { .opcode = 99, .user_data = (uint64_t)i };
		int r;

		raw_submit(&s, &e);
		/* No answer in a second: the session ended, unless the daemon
		 * only has not got to it yet (a loaded machine) and still holds
		 * the connection. */
		for (int waited = 0; (r = raw_reap(&s, &cqe, 1000)) == -ETIMEDOUT && waited < 10; waited++)
			if (raw_wait_eof(s.ctl, 10))
				break;
		if (r < 0)
			break;
		ASSERT_EQ(cqe.res, -EINVAL);
		done++;
	}
	/* 50 are tolerated (session.max_garbage), the 51st ends the session. */
	ASSERT_LE(done, 51);
	ASSERT_GE(done, 50);
	expect_gone(&s, "ring/flood", 1.0 * MiB);
	/* The bystander never noticed. */
	ASSERT_EQ(raw_op(&other, SPW_OP_NOP, 0, 0, 0), 0);
	raw_session_close(&other);
}

static void test_overflow(void)
{
	struct raw_session s;
	uint64_t one = 1;

	ASSERT_OK(raw_attach(d.control, "ring/over", 1 * MiB, 0, &s));
	/* A tail 17 ahead of the head of a 16-entry ring. */
	__atomic_store_n(&s.sqh->tail, 17, __ATOMIC_RELEASE);
	ASSERT_EQ(write(s.fds[SPW_ATTACH_FD_SQ_EVT], &one, sizeof(one)), (ssize_t)sizeof(one));
	expect_gone(&s, "ring/over", 0);

	ASSERT_OK(raw_attach(d.control, "ring/cqhead", 1 * MiB, 0, &s));
	/* A CQ head past the tail the daemon posted. */
	__atomic_store_n(&s.cqh->head, 5, __ATOMIC_RELEASE);
	raw_submit(&s, &(struct spw_sqe){ .opcode = SPW_OP_NOP });
	expect_gone(&s, "ring/cqhead", 0);

	ASSERT_OK(raw_attach(d.control, "ring/back", 1 * MiB, 0, &s));
	ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
	ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
	/* The daemon reads the head (2) when it takes this entry... */
	ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
	/* ...so a CQ head moved back behind that is caught. */
	__atomic_store_n(&s.cqh->head, 1, __ATOMIC_RELEASE);
	raw_submit(&s, &(struct spw_sqe){ .opcode = SPW_OP_NOP });
	expect_gone(&s, "ring/back", 0);
}

/* Without SPW_FEAT_RING_POLL the daemon sleeps right after each drain:
 * every submission rings, and none is lost. */
static void test_no_poll(void)
{
	struct raw_session s;

	raw_hello_features = SPW_FEAT_SWAP | SPW_FEAT_PERSISTENT; /* neither is granted */
	ASSERT_OK(raw_attach(d.control, "ring/nopoll", 1 * MiB, 0, &s));
	raw_hello_features = SPW_FEAT_RING_POLL;
	for (int i = 0; i < 2000; i++)
		ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
	/* The daemon sets the flag just after posting the last completion. */
	for (int w = 0; w < 1000 && !(__atomic_load_n(&s.sqh->flags, __ATOMIC_ACQUIRE) & SPW_RING_NEED_WAKEUP); w++)
		usleep(1000);
	ASSERT_TRUE(__atomic_load_n(&s.sqh->flags, __ATOMIC_ACQUIRE) & SPW_RING_NEED_WAKEUP);
	raw_session_close(&s);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_latency(void)
{
	enum { N = 20000 };
	static uint64_t ns[N];
	struct raw_session s;

	ASSERT_OK(raw_attach(d.control, "ring/lat", 1 * MiB, 0, &s));
	for (int i = 0; i < N; i++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns[i] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)(b.tv_nsec - a.tv_nsec);
	}
	qsort(ns, N, sizeof(ns[0]), cmp_u64);
	printf("NOP round trip (back to back, ASan build if sanitized): p50 %.2f us, p99 %.2f us\n", ns[N / 2] / 1e3,
	       ns[N * 99 / 100] / 1e3);
	raw_session_close(&s);
}

int main(void)
{
	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	test_invalid_entries();
	test_cq_full();
	test_flood();
	test_overflow();
	test_no_poll();
	test_latency();
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
