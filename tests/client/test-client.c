/* SPDX-License-Identifier: MIT */
/*
 * test-client: the client API against a real spillwayd, read top to bottom
 * as a tour: connect, attach, register a tensor, pin a page, write through
 * the returned pointer, unpin it dirty, pin it again and find the data;
 * sessions never see each other's memory; the daemon's refusals reach
 * spw_client_last_error(); the status document lists the session.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"

#define MiB (1024u * 1024u)

static struct spw_test_daemon d;

/* Connect and attach a session of region_bytes; fails the test on error. */
static spw_client *open_session(const char *name, uint64_t region_bytes)
{
	struct spw_client_opts o = { .size = sizeof(o) };
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = region_bytes };
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(&o, &c));
	if (spw_client_connect(c, d.control) < 0 || spw_client_attach(c, &a) < 0)
		TEST_FAIL("session %s: %s", name, spw_client_last_error(c));
	return c;
}

static void fill(void *p, size_t n, uint32_t seed)
{
	uint32_t *w = p;

	for (size_t i = 0; i < n / 4; i++)
		w[i] = seed ^ (uint32_t)(i * 2654435761u);
}

static int check(const void *p, size_t n, uint32_t seed)
{
	const uint32_t *w = p;

	for (size_t i = 0; i < n / 4; i++)
		if (w[i] != (seed ^ (uint32_t)(i * 2654435761u)))
			return 0;
	return 1;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

static void test_round_trip(void)
{
	struct spw_session_info info = { .size = sizeof(info) };
	struct spw_completion comp[4];
	spw_client *c = open_session("job/0", 64 * MiB);
	uint32_t w, pages;
	void *p;
	int slot, n;

	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_UEQ(info.page_size, 4 * MiB); /* the default */
	ASSERT_UEQ(info.slots, 16);

	/* 2.5 pages of data make a 3-page tensor. */
	ASSERT_OK(spw_tensor_register(c, "layer0.weight", 10 * MiB, SPW_TENSOR_RESIDENT, &w, &pages));
	ASSERT_UEQ(pages, 3);

	/* Write page 0 through the mapping, hand it back dirty. */
	slot = spw_pin(c, w, 0, &p);
	ASSERT_GE(slot, 0);
	ASSERT_TRUE(p == spw_slot_ptr(c, (uint32_t)slot));
	fill(p, 4 * MiB, 0xA0);
	ASSERT_OK(spw_unpin(c, w, 0, SPW_DIRTY));

	/* Another page in between, so the next pin is not a no-op. */
	ASSERT_GE(spw_pin(c, w, 2, &p), 0);
	fill(p, 2 * MiB, 0xA2);
	ASSERT_OK(spw_unpin(c, w, 2, SPW_DIRTY));

	ASSERT_GE(spw_pin(c, w, 0, &p), 0);
	ASSERT_TRUE(check(p, 4 * MiB, 0xA0));
	ASSERT_OK(spw_unpin(c, w, 0, SPW_CLEAN));

	/* The same through the async calls: user_data identifies each. */
	ASSERT_OK(spw_submit_pin(c, w, 2, 42));
	ASSERT_OK(spw_submit_nop(c, 43));
	n = 0;
	while (n < 2) {
		int r = spw_reap(c, comp + n, 4, 5000);
		ASSERT_GT(r, 0);
		n += r;
	}
	for (int i = 0; i < 2; i++) {
		if (comp[i].user_data == 42) {
			ASSERT_GE(comp[i].res, 0);
			ASSERT_TRUE(check(spw_slot_ptr(c, (uint32_t)comp[i].res), 2 * MiB, 0xA2));
		} else {
			ASSERT_UEQ(comp[i].user_data, 43);
			ASSERT_EQ(comp[i].res, 0);
		}
	}
	ASSERT_OK(spw_submit_unpin(c, w, 2, SPW_CLEAN, 44));
	ASSERT_EQ(spw_reap(c, comp, 4, 5000), 1);
	ASSERT_UEQ(comp[0].user_data, 44);
	ASSERT_EQ(comp[0].res, 0);

	/* The daemon checks what it is asked: a page past the tensor's end
	 * and an unknown tensor fail their operation, not the session. */
	ASSERT_LT(spw_pin(c, w, 3, NULL), 0);
	ASSERT_CONTAINS(spw_client_last_error(c), "pin tensor");
	ASSERT_LT(spw_pin(c, w + 1000, 0, NULL), 0);
	ASSERT_OK(spw_nop(c));

	ASSERT_OK(spw_tensor_unregister(c, w));
	ASSERT_LT(spw_pin(c, w, 0, NULL), 0);
	ASSERT_OK(spw_client_detach(c));
	c = spw_client_free(c);
}

/* Two sessions at once: separate memory, fresh memory is zero, and a
 * region released by one session is zero when the next one gets it. */
static void test_isolation(void)
{
	spw_client *a = open_session("job/a", 16 * MiB), *b = open_session("job/b", 16 * MiB), *c;
	uint32_t ta, tb, tc;
	void *pa, *pb, *pc;

	ASSERT_OK(spw_tensor_register(a, "w", 4 * MiB, SPW_TENSOR_RESIDENT, &ta, NULL));
	ASSERT_OK(spw_tensor_register(b, "w", 4 * MiB, SPW_TENSOR_RESIDENT, &tb, NULL));
	ASSERT_GE(spw_pin(a, ta, 0, &pa), 0);
	ASSERT_GE(spw_pin(b, tb, 0, &pb), 0);
	ASSERT_TRUE(all_zero(pb, 4 * MiB));
	fill(pa, 4 * MiB, 0x5A);
	ASSERT_TRUE(all_zero(pb, 4 * MiB));
	fill(pb, 4 * MiB, 0x5B);
	ASSERT_TRUE(check(pa, 4 * MiB, 0x5A));
	ASSERT_OK(spw_unpin(a, ta, 0, SPW_DIRTY));
	ASSERT_OK(spw_unpin(b, tb, 0, SPW_DIRTY));

	/* A session is attached by one client at a time. */
	{
		struct spw_attach_opts o = { .size = sizeof(o), .session = "job/a", .region_bytes = 16 * MiB };
		spw_client *again = NULL;

		ASSERT_OK(spw_client_new(NULL, &again));
		ASSERT_OK(spw_client_connect(again, d.control));
		ASSERT_LT(spw_client_attach(again, &o), 0);
		ASSERT_CONTAINS(spw_client_last_error(again), "spillwayd refused attach");
		again = spw_client_free(again);
	}

	ASSERT_OK(spw_client_detach(a));
	a = spw_client_free(a);
	c = open_session("job/c", 16 * MiB);
	ASSERT_OK(spw_tensor_register(c, "w", 16 * MiB, SPW_TENSOR_RESIDENT, &tc, NULL));
	for (uint32_t page = 0; page < 4; page++) {
		ASSERT_GE(spw_pin(c, tc, page, &pc), 0);
		ASSERT_TRUE(all_zero(pc, 4 * MiB));
		ASSERT_OK(spw_unpin(c, tc, page, SPW_CLEAN));
	}
	b = spw_client_free(b);
	c = spw_client_free(c);
}

/* A refusal carries the daemon's sentence, and the connection survives. */
static void test_refusal_message(void)
{
	struct spw_attach_opts big = { .size = sizeof(big), .session = "job/big", .region_bytes = 512 * MiB };
	/* 6 MiB rounds up to two 4 MiB pages. */
	struct spw_attach_opts ok = { .size = sizeof(ok), .session = "job/big", .region_bytes = 6 * MiB };
	struct spw_session_info info = { .size = sizeof(info) };
	spw_client *c = NULL;
	uint32_t t;
	int r;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	r = spw_client_attach(c, &big);
	ASSERT_EQ(r, -EDQUOT); /* over pool.session_max_bytes */
	fprintf(stderr, "attach 512 MiB over a 256 MiB cap: %s (%s)\n", spw_client_last_error(c), spw_strerror(r));
	ASSERT_CONTAINS(spw_client_last_error(c), "spillwayd refused attach: ");
	ASSERT_CONTAINS(spw_client_last_error(c), "job/big");
	/* Checked here, before the daemon is asked. */
	ASSERT_EQ(spw_client_attach(c, &(struct spw_attach_opts){ .size = sizeof(big), .session = "../x",
								     .region_bytes = 8 * MiB }),
		  -EINVAL);
	ASSERT_OK(spw_client_attach(c, &ok));
	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_UEQ(info.region_bytes, 8 * MiB);
	ASSERT_UEQ(info.slots, 2);
	r = spw_tensor_register(c, "too-big", 64 * MiB, SPW_TENSOR_RESIDENT, &t, NULL);
	ASSERT_EQ(r, -ENOSPC);
	fprintf(stderr, "register 64 MiB in an 8 MiB region: %s\n", spw_client_last_error(c));
	ASSERT_CONTAINS(spw_client_last_error(c), "spillwayd refused register: ");
	ASSERT_OK(spw_nop(c));
	c = spw_client_free(c);
}

/* Both doorbells against the real daemon: a client that never spins
 * sleeps on every completion, and pauses longer than the daemon's poll
 * window make the daemon sleep too. A lost wakeup on either side would
 * show as -ETIMEDOUT here instead of a hang. */
static void test_doorbells(void)
{
	struct spw_client_opts o = { .size = sizeof(o), .spin_us = SPW_SPIN_NEVER };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "job/bell", .region_bytes = 4 * MiB };
	struct spw_completion comp;
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(&o, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	for (int i = 0; i < 3000; i++) {
		if (i % 3 == 0)
			usleep((useconds_t)(i % 7) * 40); /* 0..240 us: around the 50 us poll window */
		ASSERT_OK(spw_submit_nop(c, (uint64_t)i));
		ASSERT_EQ(spw_reap(c, &comp, 1, 5000), 1);
		ASSERT_UEQ(comp.user_data, (uint64_t)i);
	}
	c = spw_client_free(c);
}

static void test_status_lists_session(void)
{
	spw_client *c = open_session("job/status", 8 * MiB);
	cJSON *doc, *s;
	char *json = NULL;
	int found = 0;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *name = cJSON_GetObjectItem(s, "name");
		if (cJSON_IsString(name) && !strcmp(name->valuestring, "job/status")) {
			found = 1;
			ASSERT_EQ(cJSON_GetObjectItem(s, "region_bytes")->valuedouble, 8 * MiB);
			ASSERT_EQ(cJSON_GetObjectItem(s, "pid")->valuedouble, getpid());
		}
	}
	ASSERT_TRUE(found);
	cJSON_Delete(doc);
	free(json);
	c = spw_client_free(c);
	ASSERT_EQ(spw_status_fetch("/nonexistent/status.sock", &json), -ENOENT);
}

int main(void)
{
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	test_round_trip();
	test_isolation();
	test_refusal_message();
	test_doorbells();
	test_status_lists_session();
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
