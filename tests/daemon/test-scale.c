/* SPDX-License-Identifier: MIT */
/*
 * Bookkeeping that scales, through a real spillwayd: one session registers
 * 65,536 small swappable tensors (session.max_tensors' default), every one
 * is accepted and shows in the status, the 65,537th is refused naming
 * session.max_tensors, a duplicate name is refused, and unregistering and
 * registering again reuses the id. The time the registrations took is
 * printed, not asserted (a test never asserts a timing): with a per-register
 * scan over every name and every tensor it was quadratic.
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

#define NTENSORS 65536
#define BATCH 256
#define PAGE (64u * 1024u)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int reg_one(int fd, unsigned i)
{
	char req[160];
	cJSON *r;
	int e;

	snprintf(req, sizeof(req), "{\"type\":\"register\",\"name\":\"layer.%u.w\",\"bytes\":4096,\"kind\":\"swappable\"}",
		 i);
	r = raw_request(fd, req);
	e = raw_reply_errno(r);
	if (e == 0)
		e = (int)raw_num(r, "tensor");
	cJSON_Delete(r);
	return e;
}

int main(void)
{
	struct spw_test_daemon d;
	char dir[64], cfg[1024], req[160];
	struct raw_session s;
	double t0, t1, cpu0;
	cJSON *st, *r;
	const cJSON *ss;
	int fd;

	if (access("/var/tmp", W_OK) < 0)
		SKIP("/var/tmp is not writable");
	snprintf(dir, sizeof(dir), "/var/tmp/spw-scale-XXXXXX");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	/* One 64 KiB swap page per tensor: 4 GiB of swap, preallocated
	 * (fallocate reserves it without writing). */
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"64MiB\", \"session_max_bytes\": \"16MiB\", \"require_locked\": false},"
		 " \"session\": {\"page_size\": \"64KiB\"},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"5GiB\"}], \"session_bytes\": \"4GiB\"},"
		 " \"log\": {\"level\": \"info\"}}", dir);
	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	ASSERT_OK(raw_attach(d.control, "scale/0", 1024 * 1024, PAGE, &s));
	fd = s.ctl;

	/* Pipelined: a batch of requests, then their replies, so the figure
	 * is the daemon's work rather than round trips. */
	st = raw_status(d.status);
	cpu0 = raw_num(st, "cpu_s");
	cJSON_Delete(st);
	t0 = now_s();
	for (unsigned i = 0; i < NTENSORS; i += BATCH) {
		for (unsigned j = i; j < i + BATCH; j++) {
			snprintf(req, sizeof(req),
				 "{\"type\":\"register\",\"name\":\"layer.%u.w\",\"bytes\":4096,\"kind\":\"swappable\"}", j);
			ASSERT_OK(raw_send(fd, req));
		}
		for (unsigned j = i; j < i + BATCH; j++) {
			r = raw_recv(fd, NULL, NULL, NULL);
			if (raw_reply_errno(r) != 0)
				TEST_FAIL("register layer.%u.w: %s", j, raw_reply_message(r));
			ASSERT_EQ(raw_num(r, "tensor"), j);
			cJSON_Delete(r);
		}
	}
	t1 = now_s();
	st = raw_status(d.status);
	fprintf(stderr, "registered %u tensors in %.3f s (%.1f us each, round trips included); the daemon spent %.3f s "
		"of CPU on them\n", NTENSORS, t1 - t0, (t1 - t0) * 1e6 / NTENSORS, raw_num(st, "cpu_s") - cpu0);
	cJSON_Delete(st);

	st = raw_status(d.status);
	ss = raw_status_session(st, "scale/0");
	ASSERT_TRUE(ss != NULL);
	ASSERT_EQ(raw_num(ss, "tensors"), NTENSORS);
	ASSERT_EQ(raw_num(ss, "tier.swap_assigned_bytes"), (double)NTENSORS * PAGE);
	ASSERT_EQ(raw_num(ss, "tier.pages.zero"), NTENSORS);
	cJSON_Delete(st);

	/* One more is refused by name; so is a duplicate. */
	r = raw_request(fd, "{\"type\":\"register\",\"name\":\"one.more\",\"bytes\":4096,\"kind\":\"swappable\"}");
	ASSERT_EQ(raw_reply_errno(r), -EMFILE);
	ASSERT_CONTAINS(raw_reply_message(r), "session.max_tensors");
	cJSON_Delete(r);
	r = raw_request(fd, "{\"type\":\"unregister\",\"tensor\":40000}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	ASSERT_EQ(reg_one(fd, 12345), -EEXIST);
	ASSERT_EQ(reg_one(fd, 40000), 40000); /* the name, the id and the swap page are free again */
	ASSERT_EQ(reg_one(fd, 40000), -EEXIST);

	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_EQ(rmdir(dir), 0);
	return 0;
}
