/* SPDX-License-Identifier: MIT */
/*
 * test-restart: a daemon restart loses no persistent session (issue 11,
 * persist.state_dir). A trainer on a persistent session is running when
 * spillwayd gets SIGTERM: the daemon saves the session at its next commit
 * point into the state directory and exits 0; the trainer gets the
 * "daemon went away" error. A new spillwayd on the same state directory
 * restores the session as an orphan (the saved copy stays: what a crash
 * before the next save restores); the restarted trainer takes it over at
 * the saved step and ends bit-identical to an uninterrupted run. A session
 * that ends with a detach leaves nothing in the state directory.
 *
 * The stopping daemon's save writes only what is in memory: the swap
 * pages stay where they are, in the session's swap files hard-linked into
 * the save (format version 3, "links" and "refs"), and the next daemon
 * reads them from there (its status's backed_bytes) until the trainer's
 * write-backs take them to the session's own swap files. A byte of such a
 * page changed on disk before the next start ("corrupt"): the session is
 * back all the same, and the resumed trainer fails at that page's first
 * read, its CRC refused, its bytes never handed out; the session is
 * damaged from then on, that page named. The save
 * stays whole while the resumed trainer rewrites every page ("crash"): a
 * kill -9 of the daemon then brings the session back at the saved step,
 * read from the links as before, and it still ends bit-identical.
 *
 *   test-restart TIER [PAUSE_US [MODE [corrupt|crash]]]  (the trainer's pause between
 *                         steps, 20 ms, and mode, exact; overlapped with a short pause
 *                         lands SIGTERM inside a step's updates, where the save waits for
 *                         its commit)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "child-io.h"
#include "test.h"
#include "util/command.h"

#define STEPS "60"

static struct spw_test_daemon d;
static const char *tier, *pause_between = "20000", *mode = "exact";
static char state[64] = "/tmp/spw-state-XXXXXX";
static char config[1024];

static pid_t spawn(const char *session, const char *persistent, const char *pause_us, const char *out, int *fd)
{
	struct trainer_args a = { .socket = d.control, .session = session, .mode = mode, .tier = tier,
				  .steps = STEPS, .pause_us = pause_us, .persistent = persistent, .out = out };

	return trainer_spawn(&a, fd);
}

/* The session's entry in the status document (the caller frees it), or
 * NULL when there is no such session. */
static cJSON *session_entry(const char *name)
{
	char *json = NULL;
	cJSON *doc, *s, *e = NULL;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			e = cJSON_Duplicate(s, true);
	}
	cJSON_Delete(doc);
	return e;
}

/* A number of the session's entry, or of its object obj ("tier"; NULL:
 * the entry itself) (-1: no such session), and its state into st. */
static double session_field(const char *name, const char *obj, const char *key, char *st, size_t stlen)
{
	cJSON *s = session_entry(name);
	double v = -1;

	if (s) {
		v = cJSON_GetObjectItem(obj ? cJSON_GetObjectItem(s, obj) : s, key)->valuedouble;
		if (st)
			snprintf(st, stlen, "%s", cJSON_GetObjectItem(s, "state")->valuestring);
	}
	cJSON_Delete(s);
	return v;
}

/*
 * The save's pages left in linked swap files (refs), and the first of them
 * (its tensor, page, link path and offset) for corrupt(). Only a version 3
 * save has any; then each link is a file in the save.
 */
struct kept {
	unsigned version, links, refs, page_size;
	char tensor[256], link[512];
	unsigned page;
	long long off;
};

/* The session's tier.backed_bytes: what it still reads from a save's links. */
static double backed_bytes(const char *name)
{
	return session_field(name, "tier", "backed_bytes", NULL, 0);
}

/* A new daemon on the state directory: the session back as an orphan at
 * step, its kept pages read from the links. */
static void start_and_find(unsigned long long step, const struct kept *k)
{
	char st[64] = "";

	ASSERT_OK(spw_test_daemon_start(&d, config));
	for (int i = 0; i < 500 && session_field("rs/run", NULL, "committed_step", st, sizeof(st)) < 0; i++)
		usleep(10 * 1000);
	for (int i = 0; i < 500 && strcmp(st, "orphaned"); i++) {
		usleep(10 * 1000);
		session_field("rs/run", NULL, "committed_step", st, sizeof(st));
	}
	ASSERT_STREQ(st, "orphaned");
	ASSERT_EQ(session_field("rs/run", NULL, "committed_step", NULL, 0), (double)step);
	ASSERT_EQ(backed_bytes("rs/run"), (double)k->refs * k->page_size);
}

static unsigned state_entries(char *first, size_t len)
{
	DIR *dd = opendir(state);
	struct dirent *e;
	unsigned n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd))) {
		if (e->d_name[0] == '.')
			continue;
		if (first && !n)
			snprintf(first, len, "%s", e->d_name);
		n++;
	}
	closedir(dd);
	return n;
}

static unsigned long long saved_step(const char *entry)
{
	char path[512];
	unsigned long long step;
	size_t n;
	char *text;
	cJSON *m;

	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, entry);
	text = file_load(path, &n);
	m = cJSON_ParseWithLength(text, n);
	ASSERT_TRUE(m != NULL);
	ASSERT_STREQ(cJSON_GetObjectItem(m, "session")->valuestring, "rs/run");
	step = (unsigned long long)cJSON_GetObjectItem(m, "committed_step")->valuedouble;
	cJSON_Delete(m);
	free(text);
	return step;
}

static void kept_pages(const char *entry, struct kept *k)
{
	char path[512];
	const cJSON *t, *r;
	cJSON *m;
	size_t n;
	char *text;

	memset(k, 0, sizeof(*k));
	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, entry);
	text = file_load(path, &n);
	m = cJSON_ParseWithLength(text, n);
	free(text);
	ASSERT_TRUE(m != NULL);
	k->version = (unsigned)cJSON_GetObjectItem(m, "version")->valuedouble;
	k->page_size = (unsigned)cJSON_GetObjectItem(m, "page_size")->valuedouble;
	k->links = (unsigned)cJSON_GetArraySize(cJSON_GetObjectItem(m, "links"));
	for (unsigned i = 0; i < k->links; i++) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s/%s", state, entry,
			 cJSON_GetArrayItem(cJSON_GetObjectItem(m, "links"), (int)i)->valuestring);
		ASSERT_OK(stat(path, &st));
		ASSERT_TRUE(S_ISREG(st.st_mode));
	}
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(m, "tensors")) {
		cJSON_ArrayForEach(r, cJSON_GetObjectItem(t, "refs")) {
			if (!k->refs++) {
				snprintf(k->tensor, sizeof(k->tensor), "%s", cJSON_GetObjectItem(t, "name")->valuestring);
				k->page = (unsigned)cJSON_GetArrayItem(r, 0)->valuedouble;
				snprintf(k->link, sizeof(k->link), "%s/%s/%s", state, entry,
					 cJSON_GetArrayItem(cJSON_GetObjectItem(m, "links"),
							    (int)cJSON_GetArrayItem(r, 1)->valuedouble)->valuestring);
				k->off = (long long)cJSON_GetArrayItem(r, 2)->valuedouble;
			}
		}
	}
	cJSON_Delete(m);
}

/* The first of the session's damaged pages (its tensor into name), or
 * -1 when it is not damaged. */
static int first_bad_page(const char *session, char *name, size_t len)
{
	cJSON *s = session_entry(session);
	const cJSON *bad = s ? cJSON_GetArrayItem(cJSON_GetObjectItem(s, "bad_pages"), 0) : NULL;
	int page = -1;

	if (bad && cJSON_IsTrue(cJSON_GetObjectItem(s, "damaged"))) {
		snprintf(name, len, "%s", cJSON_GetObjectItem(bad, "tensor")->valuestring);
		page = (int)cJSON_GetObjectItem(bad, "page")->valuedouble;
	}
	cJSON_Delete(s);
	return page;
}

/* A page left in a link changed on disk before the start: the session
 * comes back at once (pages in links are not read at start), and the
 * trainer that resumes it fails at that page's first read, its CRC-32C
 * refused; its bytes are never handed out. */
static void corrupt_then_resume(const char *entry, unsigned long long step, const char *run)
{
	struct trainer_args a = { .socket = d.control, .session = "rs/run", .mode = mode, .tier = tier,
				  .steps = STEPS, .pause_us = "0", .persistent = "1", .out = run, .stderr_too = true };
	char buf[4096], want[256];
	struct kept k;
	int fd, tfd;
	pid_t pid;

	kept_pages(entry, &k);
	fd = open(k.link, O_RDWR);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(pwrite(fd, "\x5a\xa5", 2, k.off + 100), 2);
	close(fd);
	start_and_find(step, &k);
	ASSERT_EQ(session_field("rs/run", "tier", "checksum_errors", NULL, 0), 0);
	pid = trainer_spawn(&a, &tfd);
	ASSERT_NE(child_reap(pid, tfd, buf, sizeof(buf)), 0);
	printf("# %s page %u changed in %s; the resumed trainer: %s", k.tensor, k.page, k.link, buf);
	/* The engine's pin names role, page and tensor; the read of the
	 * weights back at takeover, tensor id and page. */
	ASSERT_CONTAINS(buf, ": Checksum mismatch: the page's bytes on disk are not what spillwayd wrote");
	snprintf(want, sizeof(want), "page %u: Checksum", k.page);
	if (!strstr(buf, want))
		snprintf(want, sizeof(want), "page %u of tensor ", k.page);
	ASSERT_CONTAINS(buf, want);
	ASSERT_TRUE(session_field("rs/run", "tier", "checksum_errors", NULL, 0) >= 1);
	/* Marked damaged from then on, that page named: the next trainer's
	 * optimizer refuses the session and says what to do. */
	ASSERT_EQ(first_bad_page("rs/run", want, sizeof(want)), (int)k.page);
	ASSERT_STREQ(want, k.tensor);
	pid = trainer_spawn(&a, &tfd);
	ASSERT_EQ(child_reap(pid, tfd, buf, sizeof(buf)), 1);
	ASSERT_CONTAINS(buf, "Load the last checkpoint");
}

int main(int argc, char **argv)
{
	char ref[512], run[512], buf[4096], entry[256];
	bool corrupt = argc > 4 && !strcmp(argv[4], "corrupt"), crash = argc > 4 && !strcmp(argv[4], "crash");
	unsigned long long step;
	struct kept k;
	double committed = 0;
	int fd, rc;
	pid_t pid;

	if (argc < 2 || argc > 5)
		TEST_FAIL("usage: test-restart resident|swappable [PAUSE_US [MODE [corrupt]]]");
	tier = argv[1];
	if (argc > 2)
		pause_between = argv[2];
	if (argc > 3)
		mode = argv[3];
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_TRUE(mkdtemp(state) != NULL);
	persist_config(config, sizeof(config), state, 0);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	snprintf(ref, sizeof(ref), "%s.ref.bin", state);
	snprintf(run, sizeof(run), "%s.run.bin", state);

	/* The uninterrupted run; a detached session is not saved. */
	pid = spawn("rs/ref", "0", "0", ref, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);

	/* SIGTERM while a trainer trains, once it has committed 10 steps. */
	pid = spawn("rs/run", "1", pause_between, run, &fd);
	for (int i = 0; i < 2000 && committed < 10; i++) {
		usleep(10 * 1000);
		committed = session_field("rs/run", NULL, "committed_step", NULL, 0);
	}
	ASSERT_TRUE(committed >= 10);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	rc = child_reap(pid, fd, buf, sizeof(buf));
	ASSERT_EQ(rc, 1); /* the daemon went away under it */
	ASSERT_EQ(state_entries(entry, sizeof(entry)), 1u);
	ASSERT_STREQ(entry, "rs+run");
	step = saved_step(entry);
	printf("# saved at step %llu (%.0f committed when SIGTERM came)\n", step, committed);
	ASSERT_TRUE(step >= (unsigned long long)committed);
	ASSERT_TRUE(step < 60);
	/* Swap pages stay in the linked swap files: the save wrote only
	 * what was in memory. */
	kept_pages(entry, &k);
	printf("# version %u, %u links, %u pages left in them\n", k.version, k.links, k.refs);
	if (!strcmp(tier, "swappable")) {
		ASSERT_EQ(k.version, 3u);
		ASSERT_TRUE(k.links >= 1);
		ASSERT_TRUE(k.refs >= 1);
	} else {
		ASSERT_TRUE(k.version < 3);
		ASSERT_EQ(k.links, 0u);
	}
	if (corrupt) {
		corrupt_then_resume(entry, step, run);
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		snprintf(buf, sizeof(buf), "rm -rf %s %s %s", state, ref, run);
		ASSERT_EQ(system(buf), 0);
		printf("ok\n");
		return 0;
	}

	/* A new daemon: the session is back, orphaned; the saved copy stays. */
	start_and_find(step, &k);
	ASSERT_EQ(state_entries(NULL, 0), 1u); /* until the session ends */
	if (crash) {
		/* The resumed trainer rewrites its pages (home, not into the
		 * links) for 10 steps; a kill -9 then loses them, not the save. */
		pid = spawn("rs/run", "1", pause_between, run, &fd);
		committed = 0;
		for (int i = 0; i < 2000 && committed < (double)step + 10; i++) {
			usleep(10 * 1000);
			committed = session_field("rs/run", NULL, "committed_step", NULL, 0);
		}
		ASSERT_TRUE(committed >= (double)step + 10);
		ASSERT_TRUE(backed_bytes("rs/run") < (double)k.refs * k.page_size);
		spw_test_daemon_kill(&d);
		ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 1);
		start_and_find(step, &k);
		printf("# killed at step %.0f: back at step %llu from the same save\n", committed, step);
		/* Stopped again while every page is still read from the
		 * links: the new save links the old save's files in turn. */
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		kept_pages(entry, &k);
		ASSERT_EQ(k.version, 3u);
		start_and_find(step, &k);
	}
	if (k.version == 3 && getenv("SPILLWAYCTL")) {
		char cmd[1024];

		/* Not a checkpoint: a restore of it by hand is refused. */
		snprintf(cmd, sizeof(cmd), "%s --socket-dir %s restore rs/copy %s/%s 2>&1", getenv("SPILLWAYCTL"), d.dir,
			 state, entry);
		ASSERT_NE(command_output(cmd, buf, sizeof(buf)), 0);
		ASSERT_CONTAINS(buf, "not a checkpoint");
	}

	pid = spawn("rs/run", "1", "0", run, &fd);
	rc = child_reap(pid, fd, buf, sizeof(buf));
	ASSERT_EQ(rc, 0);
	ASSERT_TRUE(strstr(buf, "resumed ") != NULL);
	ASSERT_EQ(strtoull(strstr(buf, "resumed ") + 8, NULL, 10), step);
	state_files_same(ref, run, "across the restart");
	/* It detached at its end: its save went, nothing to save. */
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_EQ(state_entries(NULL, 0), 0u);
	unlink(ref);
	unlink(run);
	ASSERT_OK(rmdir(state));
	printf("ok\n");
	return 0;
}
