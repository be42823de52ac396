/* SPDX-License-Identifier: MIT */
/*
 * test-crash: a kill -9 of spillwayd loses only what came after the last
 * flush (issue 11). A trainer on a persistent session of a daemon with
 * persist.state_dir flushes after step 10 (spw_client_flush) and trains
 * on; the daemon is SIGKILLed once 15 steps are committed. A new spillwayd
 * on the same state directory brings the session back as an orphan at
 * step 10, not damaged; a new trainer resumes it there and ends
 * bit-identical to an uninterrupted run.
 *
 * The same again with one byte of a page changed on disk before the
 * restart: the session comes back marked damaged, its status naming the
 * tensor and page; a trainer's spw_optimizer_new refuses it (-EBADMSG)
 * naming that page and the advice to load the last checkpoint; a PIN of
 * that page fails -EBADMSG (its bytes are never handed out) while its
 * other pages pin.
 *
 * And with persist.flush_interval_s 1 and no flush asked for: killed
 * once a periodic flush holds step 5 or later, the session comes back at
 * the step the last flush holds, and resumes bit-identical. A session
 * that ends with a detach leaves nothing in the state directory.
 *
 *   test-crash TIER
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "child-io.h"
#include "test.h"
#include "util/command.h"

#define STEPS "40"
#define PAGE (64u * 1024u)

static struct spw_test_daemon d;
static const char *tier;
static char state[64] = "/tmp/spw-state-XXXXXX";
static char config[1024];

static pid_t spawn(const char *session, const char *persistent, const char *pause_us, const char *flush_at,
		   const char *out, int *fd)
{
	char flush[64];
	struct trainer_args a = { .socket = d.control, .session = session, .tier = tier, .steps = STEPS,
				  .pause_us = pause_us, .persistent = persistent, .out = out, .stderr_too = 1 };

	if (flush_at) {
		snprintf(flush, sizeof(flush), "PERSIST_FLUSH_AT=%s", flush_at);
		a.env[0] = flush;
	}
	return trainer_spawn(&a, fd);
}

/* One line of what the trainer prints (stdout and stderr). */
static bool read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;
	char ch;

	while (n + 1 < len && read(fd, &ch, 1) == 1) {
		if (ch == '\n')
			break;
		buf[n++] = ch;
	}
	buf[n] = '\0';
	return n > 0;
}

/* The session's entry in the status document (NULL: none), to free. */
static cJSON *session_status(const char *name)
{
	char *json = NULL;
	cJSON *doc, *s, *found = NULL;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			found = cJSON_Duplicate(s, 1);
	}
	cJSON_Delete(doc);
	return found;
}

static double committed(const char *name)
{
	cJSON *s = session_status(name);
	double v = s ? cJSON_GetObjectItem(s, "committed_step")->valuedouble : -1;

	cJSON_Delete(s);
	return v;
}

/* Back as an orphan (the restore done); its status entry, to free. */
static cJSON *wait_orphan(const char *name)
{
	for (int i = 0; i < 1000; i++) {
		cJSON *s = session_status(name);

		if (s && !strcmp(cJSON_GetObjectItem(s, "state")->valuestring, "orphaned"))
			return s;
		cJSON_Delete(s);
		usleep(10 * 1000);
	}
	TEST_FAIL("session %s did not come back", name);
}

/* Trains session with a flush after step 10, and kills -9 the daemon once
 * 15 steps are committed; the trainer is left to fail. */
static void flush_then_crash(const char *session, const char *out)
{
	char line[512], buf[8192];
	int fd;
	pid_t pid = spawn(session, "1", "20000", "10", out, &fd);

	do
		ASSERT_TRUE(read_line(fd, line, sizeof(line)));
	while (strncmp(line, "flushed ", 8));
	ASSERT_STREQ(line, "flushed 10");
	for (int i = 0; i < 2000 && committed(session) < 15; i++)
		usleep(10 * 1000);
	if (committed(session) < 15) {
		spw_test_daemon_kill(&d);
		child_reap(pid, fd, buf, sizeof(buf));
		TEST_FAIL("%s did not commit 15 steps; the trainer said: %s", session, buf);
	}
	spw_test_daemon_kill(&d);
	spw_test_daemon_cleanup(&d);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 1);
}

/* The step the entry's manifest holds; 0 while there is none. */
static double flushed_step(const char *entry)
{
	char path[512];
	double step = 0;
	cJSON *m;
	size_t n;
	char *text;

	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, entry);
	if (access(path, F_OK) < 0)
		return 0;
	text = file_load(path, &n);
	m = cJSON_Parse(text);
	free(text);
	ASSERT_TRUE(m != NULL);
	step = cJSON_GetObjectItem(m, "committed_step")->valuedouble;
	cJSON_Delete(m);
	return step;
}

static void same_state(const char *ref, const char *run)
{
	state_files_same(ref, run, "across the crash");
}

/* The first moment tensor (".exp_avg") of the entry's manifest with two
 * pages or more: its name, bytes and kind; one byte of its page 1 changed
 * in its data file. */
static void corrupt(const char *entry, char *name, size_t len, uint64_t *bytes, bool *swappable)
{
	char path[512];
	const cJSON *t;
	cJSON *m;
	size_t n;
	char *text;
	int fd;

	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, entry);
	text = file_load(path, &n);
	m = cJSON_Parse(text);
	free(text);
	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(cJSON_GetObjectItem(m, "committed_step")->valuedouble, 10);
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(m, "tensors")) {
		const char *tn = cJSON_GetObjectItem(t, "name")->valuestring;

		if (cJSON_GetArraySize(cJSON_GetObjectItem(t, "crc32c")) < 2 || strlen(tn) < 8 ||
		    strcmp(tn + strlen(tn) - 8, ".exp_avg"))
			continue;
		snprintf(name, len, "%s", cJSON_GetObjectItem(t, "name")->valuestring);
		*bytes = (uint64_t)cJSON_GetObjectItem(t, "bytes")->valuedouble;
		*swappable = !strcmp(cJSON_GetObjectItem(t, "kind")->valuestring, "swappable");
		snprintf(path, sizeof(path), "%s/%s/%s", state, entry, cJSON_GetObjectItem(t, "file")->valuestring);
		break;
	}
	cJSON_Delete(m);
	ASSERT_TRUE(name[0] != '\0');
	fd = open(path, O_RDWR);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(pwrite(fd, "\x5a\xa5", 2, PAGE + 1000), 2);
	close(fd);
}

int main(int argc, char **argv)
{
	char ref[512], run[512], buf[8192], tname[256] = "", want[512];
	struct spw_attach_opts a = { .size = sizeof(a), .session = "cr/dmg", .page_size = PAGE, .persistent = 1,
				     .lease_s = 120 };
	struct spw_session_info info = { .size = sizeof(info) };
	uint64_t tbytes = 0;
	bool swappable = false;
	spw_client *c = NULL;
	uint32_t id;
	cJSON *s, *bad;
	void *p;
	int fd;
	pid_t pid;

	if (argc != 2)
		TEST_FAIL("usage: test-crash resident|swappable");
	tier = argv[1];
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_TRUE(mkdtemp(state) != NULL);
	persist_config(config, sizeof(config), state, 0);
	snprintf(ref, sizeof(ref), "%s.ref.bin", state);
	snprintf(run, sizeof(run), "%s.run.bin", state);
	/* persist-trainer's geometry: an attach of another is refused. */
	a.region_bytes = !strcmp(tier, "swappable") ? 3u << 20 : 16u << 20;

	ASSERT_OK(spw_test_daemon_start(&d, config));
	pid = spawn("cr/ref", "0", "0", NULL, ref, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);

	/* Committed and flushed at 10, killed at 15 or later: back at 10. */
	flush_then_crash("cr/run", run);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	s = wait_orphan("cr/run");
	ASSERT_EQ(cJSON_GetObjectItem(s, "committed_step")->valuedouble, 10);
	ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(s, "damaged")));
	cJSON_Delete(s);
	if (getenv("SPILLWAYCTL")) {
		/* The operator's flush: the orphan saved again, whole. */
		char cmd[1024];

		snprintf(cmd, sizeof(cmd), "%s --socket-dir %s flush cr/run 2>&1", getenv("SPILLWAYCTL"), d.dir);
		ASSERT_EQ(command_output(cmd, buf, sizeof(buf)), 0);
		ASSERT_CONTAINS(buf, "flushed cr/run at step 10");
		ASSERT_EQ(flushed_step("cr+run"), 10);
	}
	pid = spawn("cr/run", "1", "0", NULL, run, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);
	ASSERT_CONTAINS(buf, "resumed 10\n");
	same_state(ref, run);

	/* A byte changed on disk after the flush: damaged, never handed out. */
	flush_then_crash("cr/dmg", run);
	corrupt("cr+dmg", tname, sizeof(tname), &tbytes, &swappable);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	s = wait_orphan("cr/dmg");
	ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(s, "damaged")));
	bad = cJSON_GetObjectItem(s, "bad_pages");
	ASSERT_EQ(cJSON_GetArraySize(bad), 1);
	ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(bad, 0), "tensor")->valuestring, tname);
	ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(bad, 0), "page")->valuedouble, 1);
	cJSON_Delete(s);
	if (getenv("SPILLWAYCTL")) {
		char cmd[1024];

		snprintf(cmd, sizeof(cmd), "%s --socket-dir %s status 2>&1", getenv("SPILLWAYCTL"), d.dir);
		ASSERT_EQ(command_output(cmd, buf, sizeof(buf)), 0);
		ASSERT_CONTAINS(buf, "DAMAGED (1 bad pages)");
		/* Never saved again as if whole. */
		snprintf(cmd, sizeof(cmd), "%s --socket-dir %s flush cr/dmg 2>&1", getenv("SPILLWAYCTL"), d.dir);
		ASSERT_NE(command_output(cmd, buf, sizeof(buf)), 0);
		ASSERT_CONTAINS(buf, "damaged");
	}
	pid = spawn("cr/dmg", "1", "0", NULL, run, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 1);
	printf("# %s", buf);
	snprintf(want, sizeof(want), "the first: tensor %s page 1", tname);
	ASSERT_CONTAINS(buf, want);
	ASSERT_CONTAINS(buf, "Load the last checkpoint");

	/* Taken over by hand, once the refused trainer's hang-up orphaned
	 * it again: page 1 is refused, page 0 pins. */
	cJSON_Delete(wait_orphan("cr/dmg"));
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_EQ(info.reattached, 1);
	ASSERT_EQ(info.damaged_pages, 1u);
	ASSERT_OK(spw_tensor_adopt(c, tname, tbytes, swappable ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT, &id,
				   NULL));
	ASSERT_EQ(spw_pin(c, id, 1, &p), -EBADMSG);
	ASSERT_OK(spw_pin(c, id, 0, &p));
	ASSERT_OK(spw_unpin(c, id, 0, SPW_CLEAN));
	/* Not saved again as if whole. */
	ASSERT_EQ(spw_client_flush(c, "cr/dmg", NULL), -EBADMSG);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);

	ASSERT_EQ(spw_test_daemon_stop(&d), 0);

	/* Flushed every second without being asked; killed once a flush
	 * holds step 5: back at the last flush's step. */
	persist_config(config, sizeof(config), state, 1);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	pid = spawn("cr/per", "1", "100000", NULL, run, &fd);
	for (int i = 0; i < 2000 && flushed_step("cr+per") < 5; i++)
		usleep(10 * 1000);
	ASSERT_TRUE(flushed_step("cr+per") >= 5);
	spw_test_daemon_kill(&d);
	spw_test_daemon_cleanup(&d);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 1);
	{
		double step = flushed_step("cr+per");
		char want_resumed[64];

		printf("# a periodic flush held step %.0f when the daemon was killed\n", step);
		ASSERT_TRUE(step >= 5 && step < 40);
		ASSERT_OK(spw_test_daemon_start(&d, config));
		s = wait_orphan("cr/per");
		ASSERT_EQ(cJSON_GetObjectItem(s, "committed_step")->valuedouble, step);
		cJSON_Delete(s);
		pid = spawn("cr/per", "1", "0", NULL, run, &fd);
		ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);
		snprintf(want_resumed, sizeof(want_resumed), "resumed %.0f\n", step);
		ASSERT_CONTAINS(buf, want_resumed);
		same_state(ref, run);
	}
	/* It detached: its last flush went with it. */
	ASSERT_EQ(flushed_step("cr+per"), 0);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(ref);
	unlink(run);
	ASSERT_OK(rmdir(state));
	printf("ok\n");
	return 0;
}
