/* SPDX-License-Identifier: MIT */
/*
 * test-checkpoint-kill: a checkpoint survives a kill -9 of spillwayd at
 * any instant (issue 11). A persistent session (a resident tensor and a
 * swappable one with pages on disk) is checkpointed once into "prev".
 * Then 20 times: a fresh spillwayd restores the session from "prev" (its
 * CRCs checked: the earlier checkpoint is intact), a second client asks
 * for a checkpoint into "next", and the daemon is SIGKILLed at a random
 * instant between the request and a little past the copy's usual length.
 * After each kill "next" is either absent or complete: every data file
 * holds exactly the session's bytes, and a restore of it in the next
 * daemon accepts every page's CRC. A temporary ("next.tmp-<pid>") a kill
 * left behind is removed by the next copy into that name: only killed
 * daemons' temporaries are ever seen, never more than two (this kill's,
 * and the last one's when this kill came before its copy began), and none
 * after a final checkpoint that runs to its end.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "client-private.h"
#include "harness.h"
#include "child-io.h"
#include "test.h"
#include "test-client.h"

#define MiB (1024u * 1024u)
#define PAGE MiB
#define REGION (48ull * MiB)
#define R_PAGES 32u
#define S_PAGES 64u /* more than the 16 slots the resident tensor leaves */
#define KILLS 20

static const char config[] =
	"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
	" \"pool\": {\"max_bytes\": \"512MiB\", \"session_max_bytes\": \"128MiB\", \"require_locked\": false},"
	" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"2GiB\"}], \"session_bytes\": \"256MiB\"},"
	" \"log\": {\"level\": \"info\"}}";

static struct spw_test_daemon d;
static char parent[64] = "/tmp/spw-ckkill-XXXXXX";

static uint8_t pattern(uint32_t tensor, uint32_t page, uint32_t i)
{
	return (uint8_t)(tensor * 131u + page * 31u + i * 7u + (i >> 12));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The data file of tensor `tensor` holds pages pages of the pattern. */
static void check_file(const char *dir, uint32_t tensor, uint32_t pages)
{
	char path[512];
	uint8_t *buf = malloc(PAGE);
	FILE *f;

	snprintf(path, sizeof(path), "%s/t%05u.bin", dir, tensor);
	f = fopen(path, "rb");
	ASSERT_TRUE(f != NULL && buf != NULL);
	for (uint32_t p = 0; p < pages; p++) {
		ASSERT_EQ(fread(buf, 1, PAGE, f), PAGE);
		for (uint32_t i = 0; i < PAGE; i++)
			if (buf[i] != pattern(tensor, p, i))
				TEST_FAIL("%s page %u byte %u: %u, expected %u", path, p, i, buf[i], pattern(tensor, p, i));
	}
	ASSERT_EQ(fread(buf, 1, 1, f), 0u); /* not a byte more */
	fclose(f);
	free(buf);
}

static long killed[KILLS];
static int nkilled;

/* How many "next.tmp-*" the parent holds; each must be the temporary of
 * a daemon this test killed (*last: one is the last killed's). */
static unsigned temporaries(bool *last)
{
	DIR *dd = opendir(parent);
	struct dirent *e;
	unsigned n = 0;
	int k;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd))) {
		long pid;

		if (strncmp(e->d_name, "next.tmp-", 9))
			continue;
		pid = strtol(e->d_name + 9, NULL, 10);
		n++;
		*last |= nkilled && pid == killed[nkilled - 1];
		for (k = 0; k < nkilled && killed[k] != pid; k++)
			;
		if (k == nkilled)
			TEST_FAIL("%s/%s is no killed daemon's temporary", parent, e->d_name);
	}
	closedir(dd);
	return n;
}

struct ask {
	const char *dir;
	struct spw_checkpoint_result res;
	int r;
};

/* Asks for a checkpoint. The kill may come before the client's hello is
 * answered, so a failed connect is an answer here, not a test failure. */
static void *ask_thread(void *arg)
{
	struct ask *a = arg;
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(NULL, &c));
	a->res.size = sizeof(a->res);
	a->r = spw_client_connect(c, d.control);
	if (a->r == 0)
		a->r = spw_client_checkpoint(c, "kill/a", a->dir, &a->res);
	spw_client_free(c);
	return NULL;
}

/* The session kill/a, written and committed at step 1. */
static void first_session(spw_client *c)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "kill/a", .region_bytes = REGION,
				     .page_size = PAGE, .persistent = 1, .lease_s = 60 };
	uint32_t t[2];
	uint8_t *p;

	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "r", (uint64_t)R_PAGES * PAGE, SPW_TENSOR_RESIDENT, &t[0], NULL));
	ASSERT_OK(spw_tensor_register(c, "s", (uint64_t)S_PAGES * PAGE, SPW_TENSOR_SWAPPABLE, &t[1], NULL));
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_OPEN, 1));
	for (uint32_t k = 0; k < 2; k++)
		for (uint32_t pg = 0; pg < (k ? S_PAGES : R_PAGES); pg++) {
			ASSERT_OK(spw_pin(c, t[k], pg, (void **)&p));
			for (uint32_t i = 0; i < PAGE; i++)
				p[i] = pattern(k, pg, i);
			ASSERT_OK(spw_unpin(c, t[k], pg, SPW_DIRTY));
		}
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_COMMIT, 1));
}

struct flush_ask {
	spw_client *c;
	int r;
	char err[512];
};

static void *flush_thread(void *arg)
{
	struct flush_ask *f = arg;

	f->r = spw_client_flush(f->c, "kill/a", NULL);
	snprintf(f->err, sizeof(f->err), "%s", spw_client_last_error(f->c));
	return NULL;
}

/* Whether the status document says kill/a's checkpoint is "copying". */
static bool copying(void)
{
	char *json = NULL;
	bool yes;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	yes = strstr(json, "\"checkpoint\":\"copying\"") != NULL;
	free(json);
	return yes;
}

/* SIGTERM while a flush copies into persist.state_dir: that flush is the
 * shutdown's save of the session (it finishes, answered, whole), and the
 * next daemon restores it; a drop removes it. */
static void shutdown_during_flush(const char *prev)
{
	char state[128], cfg[1024], entry[160];
	struct flush_ask f = { 0 };
	pthread_t th;
	spw_client *c;

	snprintf(state, sizeof(state), "%s/state", parent);
	snprintf(entry, sizeof(entry), "%s/kill+a", state);
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		 " \"pool\": {\"max_bytes\": \"512MiB\", \"session_max_bytes\": \"128MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"2GiB\"}], \"session_bytes\": \"256MiB\"},"
		 " \"persist\": {\"state_dir\": \"%s\"}, \"log\": {\"level\": \"info\"}}", state);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	c = test_client(d.control);
	ASSERT_OK(spw_client_restore(c, "kill/a", prev, 60, NULL));
	f.c = c;
	ASSERT_OK(pthread_create(&th, NULL, flush_thread, &f));
	for (int i = 0; i < 2000 && !copying(); i++)
		usleep(1000);
	ASSERT_TRUE(copying());
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	pthread_join(th, NULL);
	spw_client_free(c);
	if (f.r < 0)
		TEST_FAIL("the flush a shutdown met: %s", f.err);
	check_file(entry, 0, R_PAGES);
	check_file(entry, 1, S_PAGES);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	c = test_client(d.control);
	for (int i = 0; i < 500 && spw_client_drop(c, "kill/a") == -EBUSY; i++)
		usleep(10 * 1000); /* still being restored */
	spw_client_free(c);
	ASSERT_NE(access(entry, F_OK), 0);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_OK(rmdir(state));
}

int main(void)
{
	char prev[128], next[128];
	unsigned absent = 0, complete = 0, midcopy = 0;
	struct ask ask = { 0 };
	pthread_t th;
	double copy_s;
	spw_client *c;
	bool last = false;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_TRUE(mkdtemp(parent) != NULL);
	snprintf(prev, sizeof(prev), "%s/prev", parent);
	snprintf(next, sizeof(next), "%s/next", parent);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());

	/* The previous checkpoint, whole; how long a copy takes here. */
	ASSERT_OK(spw_test_daemon_start(&d, config));
	c = test_client(d.control);
	first_session(c);
	ask.dir = prev;
	copy_s = now();
	ask_thread(&ask);
	copy_s = now() - copy_s;
	ASSERT_OK(ask.r);
	printf("# a checkpoint of %u MiB takes %.3f s here\n", R_PAGES + S_PAGES, copy_s);
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);

	for (int k = 0; k < KILLS; k++) {
		struct spw_checkpoint_result res = { .size = sizeof(res) };
		bool was_complete = access(next, F_OK) == 0;
		useconds_t delay = (useconds_t)((double)rand() / RAND_MAX * copy_s * 1.3 * 1e6);
		unsigned ntmp;

		ASSERT_OK(spw_test_daemon_start(&d, config));
		killed[nkilled++] = d.pid;
		c = test_client(d.control);
		/* The earlier checkpoint is whole: every CRC checks. */
		ASSERT_OK(spw_client_restore(c, "kill/a", prev, 60, &res));
		ASSERT_UEQ(res.committed_step, 1);
		if (was_complete) {
			/* What the last kill left under the final name
			 * restores too; then it goes, for the next try. */
			ASSERT_OK(spw_client_restore(c, "kill/v", next, 60, &res));
			ASSERT_UEQ(res.committed_step, 1);
			ASSERT_OK(spw_client_drop(c, "kill/v"));
			ASSERT_OK(dir_remove(next));
		}
		spw_client_free(c);

		ask = (struct ask){ .dir = next };
		ASSERT_OK(pthread_create(&th, NULL, ask_thread, &ask));
		usleep(delay);
		spw_test_daemon_kill(&d);
		pthread_join(th, NULL);
		spw_test_daemon_cleanup(&d);

		/* At most this kill's and, when it came before the copy
		 * began, the last one's: a copy first removes those of
		 * daemons that are gone. */
		last = false;
		ntmp = temporaries(&last);
		ASSERT_LE(ntmp, 2u);
		if (access(next, F_OK) == 0) {
			/* Under its final name: whole. */
			check_file(next, 0, R_PAGES);
			check_file(next, 1, S_PAGES);
			complete++;
		} else {
			ASSERT_EQ(errno, ENOENT);
			absent++;
			midcopy += last;
		}
		printf("# kill %d after %.3f s: %s%s (checkpoint answered %d)\n", k + 1, delay / 1e6,
		       access(next, F_OK) == 0 ? "complete" : "absent", last ? ", its temporary left" : "", ask.r);
	}
	printf("# %u complete, %u absent (%u of them killed mid-copy)\n", complete, absent, midcopy);
	/* The kills landed inside copies, not only before or after them. */
	ASSERT_GE(midcopy, 1u);

	/* A last checkpoint, left to finish: no temporary remains. */
	ASSERT_OK(spw_test_daemon_start(&d, config));
	c = test_client(d.control);
	ASSERT_OK(spw_client_restore(c, "kill/a", prev, 60, NULL));
	if (access(next, F_OK) == 0) {
		ASSERT_OK(spw_client_restore(c, "kill/v", next, 60, NULL));
		ASSERT_OK(spw_client_drop(c, "kill/v"));
		ASSERT_OK(dir_remove(next));
	}
	spw_client_free(c);
	ask = (struct ask){ .dir = next };
	ask_thread(&ask);
	ASSERT_OK(ask.r);
	ASSERT_EQ(temporaries(&last), 0u);
	check_file(next, 0, R_PAGES);
	check_file(next, 1, S_PAGES);
	check_file(prev, 0, R_PAGES);
	check_file(prev, 1, S_PAGES);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_OK(dir_remove(next));

	shutdown_during_flush(prev);
	ASSERT_OK(dir_remove(prev));
	ASSERT_OK(rmdir(parent));
	printf("ok\n");
	return 0;
}
