/* SPDX-License-Identifier: MIT */
/*
 * test-checkpoint-cow: a checkpoint is copy-on-write (issue 11: the
 * trainer stalls for at most the commit, never for the copy). The copy is
 * slowed (SPILLWAY_CHECKPOINT_STALL_MS, a fault-injection build's nap
 * after each page), so the session certainly changes pages the copy has
 * not reached: with a resident tensor and a swappable one bigger than the
 * region (slots evicted, pages written back over their swap homes while
 * the copy reads them), a step committed during the copy rewrites every
 * page, and the checkpoint still holds every byte of the step it was
 * taken at, the session every byte of the new one.
 *
 *   BUDGET  the daemon's checkpoint.cow_bytes: "0" (every change waits for
 *           the copy: the deferral path), "2MiB" (a few side buffers, then
 *           waits), "256MiB" (all saved aside)
 *
 * Then the hostile cases: a client that pins and unpins in a tight loop
 * during a copy (no marks) gets no more side buffers than the budget and
 * does not stop the copy, and the checkpoint still holds the commit
 * point's bytes; an unregister during the copy is refused (EAGAIN); a
 * trainer SIGKILLed mid-copy leaves an orphan whose checkpoint completes,
 * a drop meanwhile is refused (EBUSY) and works after; nothing is left;
 * a SIGTERM mid-copy ends the daemon cleanly.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "client-private.h"
#include "config.h"
#include "harness.h"
#include "test.h"
#include "test-client.h"

#define MiB (1024u * 1024u)
#define PAGE MiB
#define REGION (16ull * MiB)
#define R_PAGES 6u
#define S_PAGES 24u /* more than the 10 slots the resident tensor leaves */

static struct spw_test_daemon d;
static uint64_t budget;

static uint8_t pattern(uint32_t tensor, uint32_t page, uint32_t i, uint8_t version)
{
	return (uint8_t)(tensor * 131u + page * 31u + i * 7u + (i >> 12) + version * 101u);
}

static int attach(spw_client *c, const char *name)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = REGION, .page_size = PAGE,
				     .persistent = true, .lease_s = 60 };

	return spw_client_attach(c, &a);
}

static int fill(spw_client *c, uint32_t t, uint32_t tensor, uint32_t page, uint8_t version)
{
	uint8_t *p;
	int r = spw_pin(c, t, page, (void **)&p);

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < PAGE; i++)
		p[i] = pattern(tensor, page, i, version);
	return spw_unpin(c, t, page, SPW_DIRTY);
}

/* Every page of both tensors rewritten as version v. */
static int fill_all(spw_client *c, uint32_t r_id, uint32_t s_id, uint8_t v)
{
	int r = 0;

	for (uint32_t p = 0; r == 0 && p < R_PAGES; p++)
		r = fill(c, r_id, 0, p, v);
	for (uint32_t p = 0; r == 0 && p < S_PAGES; p++)
		r = fill(c, s_id, 1, p, v);
	return r;
}

static void check_page(spw_client *c, uint32_t t, uint32_t tensor, uint32_t page, uint8_t version)
{
	uint8_t *p;

	ASSERT_OK(spw_pin(c, t, page, (void **)&p));
	for (uint32_t i = 0; i < PAGE; i++)
		if (p[i] != pattern(tensor, page, i, version))
			TEST_FAIL("session: tensor %u page %u byte %u: %u, expected %u (version %u)", tensor, page, i, p[i],
				  pattern(tensor, page, i, version), version);
	ASSERT_OK(spw_unpin(c, t, page, SPW_CLEAN));
}

/* The data file of tensor `tensor` holds pages of version v, all. */
static void check_file(const char *dir, uint32_t tensor, uint32_t pages, uint8_t v)
{
	char path[512];
	uint8_t *b;
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/t%05u.bin", dir, tensor);
	f = fopen(path, "rb");
	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	ASSERT_EQ(n, (long)pages * PAGE);
	b = malloc((size_t)n);
	ASSERT_TRUE(b != NULL);
	ASSERT_EQ(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	for (long k = 0; k < n; k++) {
		uint32_t page = (uint32_t)(k / PAGE), i = (uint32_t)(k % PAGE);

		if (b[k] != pattern(tensor, page, i, v))
			TEST_FAIL("%s byte %ld (page %u): %u, expected %u: not the bytes of the commit point (version %u)",
				  path, k, page, b[k], pattern(tensor, page, i, v), v);
	}
	free(b);
}

static cJSON *status_doc(void)
{
	char *json = NULL;
	cJSON *doc;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	return doc;
}

/* The session's "checkpoint" field in the status document ("" if none). */
/* The session's "checkpoint" field, and in *done (when not NULL) its
 * checkpoint_bytes_done. */
static void checkpoint_field_done(const char *name, char *out, size_t len, double *done)
{
	cJSON *doc = status_doc(), *s;

	out[0] = '\0';
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions"))
		if (!strcmp(cJSON_GetObjectItem(s, "name")->valuestring, name)) {
			snprintf(out, len, "%s", cJSON_GetObjectItem(s, "checkpoint")->valuestring);
			if (done)
				*done = cJSON_GetObjectItem(s, "checkpoint_bytes_done")->valuedouble;
		}
	cJSON_Delete(doc);
}

static void checkpoint_field(const char *name, char *out, size_t len)
{
	checkpoint_field_done(name, out, len, NULL);
}

/* Waits (5 s at most) until the session's checkpoint copies and wrote a
 * page: the copier has begun (its first page is a swap page where there
 * is one, and from then on it saves what the session reads from swap). */
static void wait_copying(const char *name)
{
	char field[32];
	double done = 0;

	for (int i = 0; i < 500; i++) {
		checkpoint_field_done(name, field, sizeof(field), &done);
		if (!strcmp(field, "copying") && done > 0)
			return;
		usleep(10 * 1000);
	}
	TEST_FAIL("session %s: its checkpoint never showed \"copying\" with a page written (last: \"%s\", %.0f bytes)",
		  name, field, done);
}

static double pool_used(int *sessions)
{
	cJSON *doc = status_doc();
	double v = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "pool"), "used_bytes")->valuedouble;

	*sessions = cJSON_GetArraySize(cJSON_GetObjectItem(doc, "sessions"));
	cJSON_Delete(doc);
	return v;
}

struct ask {
	const char *session;
	char dir[512];
	struct spw_checkpoint_result res;
	int r;
	char err[1024];
	pthread_t th;
};

static void *ask_thread(void *arg)
{
	struct ask *a = arg;
	spw_client *c = test_client(d.control);

	a->res.size = sizeof(a->res);
	a->r = spw_client_checkpoint(c, a->session, a->dir, &a->res);
	snprintf(a->err, sizeof(a->err), "%s", spw_client_last_error(c));
	spw_client_free(c);
	return NULL;
}

static void ask_start(struct ask *a, const char *session, const char *name)
{
	a->session = session;
	snprintf(a->dir, sizeof(a->dir), "%s/%s", d.dir, name);
	ASSERT_OK(pthread_create(&a->th, NULL, ask_thread, a));
}

static void ask_end(struct ask *a)
{
	pthread_join(a->th, NULL);
	if (a->r < 0)
		TEST_FAIL("checkpoint of %s: %s", a->session, a->err);
	printf("# %s: step %llu, %llu bytes in %.3f s; %llu steps committed meanwhile, %llu bytes saved aside "
	       "(%llu as reads brought them in; %llu at most at once), %llu pages waited for the copy, the ring held "
	       "%.6f s\n", a->dir,
	       (unsigned long long)a->res.committed_step, (unsigned long long)a->res.bytes, a->res.seconds,
	       (unsigned long long)a->res.steps_during_copy, (unsigned long long)a->res.cow_bytes,
	       (unsigned long long)a->res.cow_from_reads_bytes,
	       (unsigned long long)a->res.cow_peak_bytes, (unsigned long long)a->res.cow_waits,
	       a->res.stall_seconds);
	/* Never more side buffers than the budget. */
	ASSERT_TRUE(a->res.cow_peak_bytes <= budget);
}

/* A step committed during the copy rewrites every page; the checkpoint
 * holds the step before, the session the new one. */
static void train_through(spw_client *a, uint32_t r_id, uint32_t s_id)
{
	struct ask ask = { 0 };
	char field[32];

	ASSERT_OK(spw__mark_sync(a, SPW_MARK_OPEN, 1));
	ASSERT_OK(fill_all(a, r_id, s_id, 1));
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_COMMIT, 1));
	ask_start(&ask, "cow/a", "ck1");
	wait_copying("cow/a");
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_OPEN, 2));
	ASSERT_OK(fill_all(a, r_id, s_id, 2));
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_COMMIT, 2));
	/* A whole step went through while the copy (30 pages, 40 ms after
	 * each) is still running: a session paused for the copy could not
	 * have committed it yet. */
	checkpoint_field("cow/a", field, sizeof(field));
	ASSERT_STREQ(field, "copying");
	ask_end(&ask);
	ASSERT_UEQ(ask.res.committed_step, 1);
	/* Step 2 was committed while the copy ran: the session was not
	 * held for it. */
	ASSERT_UEQ(ask.res.steps_during_copy, 1);
	if (budget == 0) {
		ASSERT_UEQ(ask.res.cow_bytes, 0);
		ASSERT_GT(ask.res.cow_waits, 0ull);
	} else {
		ASSERT_GT(ask.res.cow_bytes, 0ull);
	}
	ASSERT_TRUE(ask.res.cow_from_reads_bytes <= ask.res.cow_bytes);
	/* The swappable tensor's pages on disk at the commit point were read
	 * back by step 2's PINs long before the slowed copy reached them:
	 * with room in the budget, saved aside as they came in, so the copy
	 * wrote them without reading the swap file again, and their
	 * write-backs went to their homes without waiting or moving. (Where
	 * the swap files reflink, XFS or btrfs, nothing needs saving.) */
	if (budget >= 64 * MiB && ask.res.copied_bytes == 0)
		ASSERT_GT(ask.res.cow_from_reads_bytes, 0ull);
	check_file(ask.dir, 0, R_PAGES, 1);
	check_file(ask.dir, 1, S_PAGES, 1);
	for (uint32_t p = 0; p < R_PAGES; p++)
		check_page(a, r_id, 0, p, 2);
	for (uint32_t p = 0; p < S_PAGES; p++)
		check_page(a, s_id, 1, p, 2);
}

/* No marks, pins and unpins as fast as the ring takes them, writing
 * garbage: the checkpoint holds step 2's bytes, the side buffers stay
 * under the budget, and an unregister is refused meanwhile. */
static void hostile_loop(spw_client *a, uint32_t r_id, uint32_t s_id)
{
	struct ask ask = { 0 };
	unsigned n = 0;

	ask_start(&ask, "cow/a", "ck2");
	wait_copying("cow/a");
	ASSERT_EQ(spw_tensor_unregister(a, s_id), -EAGAIN);
	printf("# %s\n", spw_client_last_error(a));
	ASSERT_CONTAINS(spw_client_last_error(a), "checkpoint");
	for (; n < 3000; n++) {
		uint32_t page = n % (R_PAGES + S_PAGES);
		uint8_t *p;

		if (page < R_PAGES) {
			ASSERT_OK(spw_pin(a, r_id, page, (void **)&p));
			memset(p, 0xee, 4096);
			ASSERT_OK(spw_unpin(a, r_id, page, SPW_DIRTY));
		} else {
			ASSERT_OK(spw_pin(a, s_id, page - R_PAGES, (void **)&p));
			memset(p, 0xee, 4096);
			ASSERT_OK(spw_unpin(a, s_id, page - R_PAGES, SPW_DIRTY));
		}
	}
	ask_end(&ask);
	ASSERT_UEQ(ask.res.committed_step, 2);
	check_file(ask.dir, 0, R_PAGES, 2);
	check_file(ask.dir, 1, S_PAGES, 2);
}

/* A trainer that trains step after step until it is killed mid-copy: the
 * orphan's checkpoint completes with every page of its step; a drop
 * waits for it (EBUSY), then works. */
static void killed_mid_copy(spw_client *b)
{
	struct ask ask = { 0 };
	int pfd[2], st, sessions;
	uint32_t r_id, s_id;
	pid_t pid;
	char ch;

	ASSERT_OK(pipe(pfd));
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		spw_client *c = test_client(d.control);

		close(pfd[0]);
		if (attach(c, "cow/k") < 0 || spw_tensor_register(c, "r", R_PAGES * PAGE, SPW_TENSOR_RESIDENT,
								   &r_id, NULL) < 0 ||
		    spw_tensor_register(c, "s", S_PAGES * PAGE, SPW_TENSOR_SWAPPABLE, &s_id, NULL) < 0)
			_exit(1);
		for (uint64_t step = 1;; step++) {
			if (spw__mark_sync(c, SPW_MARK_OPEN, step) < 0 || fill_all(c, r_id, s_id, (uint8_t)step) < 0 ||
			    spw__mark_sync(c, SPW_MARK_COMMIT, step) < 0)
				_exit(1);
			if (step == 1 && write(pfd[1], "x", 1) != 1)
				_exit(1);
		}
	}
	close(pfd[1]);
	ASSERT_EQ(read(pfd[0], &ch, 1), 1);
	close(pfd[0]);
	ask_start(&ask, "cow/k", "ck3");
	wait_copying("cow/k");
	usleep(50 * 1000);
	kill(pid, SIGKILL);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(st));
	ASSERT_EQ(spw_client_drop(b, "cow/k"), -EBUSY);
	ask_end(&ask);
	ASSERT_GT(ask.res.committed_step, 0ull);
	check_file(ask.dir, 0, R_PAGES, (uint8_t)ask.res.committed_step);
	check_file(ask.dir, 1, S_PAGES, (uint8_t)ask.res.committed_step);
	ASSERT_OK(spw_client_drop(b, "cow/k"));
	ASSERT_EQ(pool_used(&sessions), 0.0);
	ASSERT_EQ(sessions, 0);
}

/* SIGTERM while a checkpoint copies and its trainer trains on: the
 * daemon ends cleanly (exit 0: under the sanitizers, no leak and no use
 * after free of the snapshot the copier still held) and the checkpoint
 * is refused. */
static void stop_mid_copy(spw_client *b)
{
	struct ask ask = { 0 };
	uint32_t r_id, s_id;

	ASSERT_OK(attach(b, "cow/s"));
	ASSERT_OK(spw_tensor_register(b, "r", R_PAGES * PAGE, SPW_TENSOR_RESIDENT, &r_id, NULL));
	ASSERT_OK(spw_tensor_register(b, "s", S_PAGES * PAGE, SPW_TENSOR_SWAPPABLE, &s_id, NULL));
	ASSERT_OK(spw__mark_sync(b, SPW_MARK_OPEN, 1));
	ASSERT_OK(fill_all(b, r_id, s_id, 1));
	ASSERT_OK(spw__mark_sync(b, SPW_MARK_COMMIT, 1));
	ask_start(&ask, "cow/s", "ck4");
	wait_copying("cow/s");
	ASSERT_OK(spw__mark_sync(b, SPW_MARK_OPEN, 2));
	ASSERT_OK(fill_all(b, r_id, s_id, 2));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	pthread_join(ask.th, NULL);
	printf("# checkpoint at the daemon's stop: %d: %s\n", ask.r, ask.err);
	ASSERT_TRUE(ask.r < 0);
}

int main(int argc, char **argv)
{
	char conf[1024];
	spw_client *a, *b;
	uint32_t r_id, s_id;

	if (argc != 2)
		TEST_FAIL("usage: test-checkpoint-cow BUDGET (checkpoint.cow_bytes)");
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
#if !SPW_FAULT_INJECTION
	SKIP("built without fault_injection: the copy cannot be slowed for the trainer to meet it");
#endif
	budget = strtoull(argv[1], NULL, 10) << (strstr(argv[1], "MiB") ? 20 : 0);
	snprintf(conf, sizeof(conf),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		 " \"checkpoint\": {\"cow_bytes\": \"%s\"}, \"log\": {\"level\": \"info\"}}", argv[1]);
	/* 40 ms after each page of 1 MiB: the copy of 30 pages takes over a
	 * second; what the session does meanwhile takes a few ms a page. */
	setenv("SPILLWAY_CHECKPOINT_STALL_MS", "40", 1);
	ASSERT_OK(spw_test_daemon_start(&d, conf));
	unsetenv("SPILLWAY_CHECKPOINT_STALL_MS");

	a = test_client(d.control);
	ASSERT_OK(attach(a, "cow/a"));
	ASSERT_OK(spw_tensor_register(a, "r", R_PAGES * PAGE, SPW_TENSOR_RESIDENT, &r_id, NULL));
	ASSERT_OK(spw_tensor_register(a, "s", S_PAGES * PAGE, SPW_TENSOR_SWAPPABLE, &s_id, NULL));
	train_through(a, r_id, s_id);
	hostile_loop(a, r_id, s_id);
	ASSERT_OK(spw_client_detach(a));
	spw_client_free(a);

	b = test_client(d.control);
	killed_mid_copy(b);
	stop_mid_copy(b);
	spw_client_free(b);
	printf("ok\n");
	return 0;
}
