/* SPDX-License-Identifier: MIT */
/*
 * test-orphan-save: a trainer killed inside a step's updates leaves an
 * orphan that mixes two steps (the tile journal says which units are
 * which). That orphan must survive a restart of spillwayd as it is, so
 * that the next trainer's takeover finishes or redoes the step exactly as
 * it would have without the restart.
 *
 *   test-orphan-save MODE TIER restart|crash|periodic|shutdown
 *
 * A persist-trainer is killed by the library half way through its 300th
 * journal unit update (SPILLWAY_TEST_KILL_AT_TILE). The status shows the
 * orphan with its step open; a checkpoint of it is refused, naming why and
 * what to do (take it over first). Then:
 *
 *   restart  spillwayd gets SIGTERM: the orphan is saved in
 *            persist.state_dir, its manifest naming the open step;
 *   crash    the orphan is flushed (spw_client_flush), then spillwayd is
 *            SIGKILLed: the flush is what comes back.
 *   periodic persist.flush_interval_s 1 flushes the orphan unasked (its
 *            state changed since the last flush: a step opened), then
 *            spillwayd is SIGKILLed;
 *   shutdown the trainer is stopped (SIGSTOP) inside a step's updates,
 *            spillwayd gets SIGTERM (its save waits for the commit), then
 *            the trainer is SIGKILLed: the orphan it leaves is saved as it
 *            is, and spillwayd exits.
 *
 * A new spillwayd on the same state directory brings the orphan back with
 * the same marks (committed step, step open); a new trainer takes it over
 * ("resumed N mid-update") and ends with master weights and moments
 * bit-identical to an uninterrupted run's. Its detach at the end leaves
 * nothing in the state directory.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
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
#include "session-figure.h"
#include "test.h"

#define STEPS "40"
#define SESSION "os/run"
#define ENTRY "os+run"

static struct spw_test_daemon d;
static const char *mode, *tier;
static char state[64] = "/tmp/spw-orphan-XXXXXX";
static char config[1024];

static pid_t spawn(const char *session, const char *persistent, const char *kill_tile, const char *delay_us,
		   const char *out, int *fd)
{
	char kill_at[64], delay[64];
	struct trainer_args a = { .socket = d.control, .session = session, .mode = mode, .tier = tier,
				  .steps = STEPS, .persistent = persistent, .out = out };
	int n = 0;

	if (kill_tile) {
		snprintf(kill_at, sizeof(kill_at), "SPILLWAY_TEST_KILL_AT_TILE=%s", kill_tile);
		a.env[n++] = kill_at;
	}
	if (delay_us) { /* each unit update takes longer: a step's updates last a while */
		snprintf(delay, sizeof(delay), "SPILLWAY_TEST_TILE_DELAY_US=%s", delay_us);
		a.env[n++] = delay;
	}
	return trainer_spawn(&a, fd);
}

/* The saves in the state directory. A daemon killed while a flush
 * replaced the one before leaves that one beside it as NAME.tmp-PID (the
 * next start removes it): not counted. */
static unsigned state_entries(void)
{
	DIR *dd = opendir(state);
	struct dirent *e;
	unsigned n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd)))
		n += e->d_name[0] != '.' && !strstr(e->d_name, ".tmp-");
	closedir(dd);
	return n;
}

/* Whether the state directory holds the session's save (a whole one:
 * it is renamed into place). */
static bool saved_entry(void)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, ENTRY);
	return access(path, F_OK) == 0;
}

/* A number of the saved entry's manifest; -1 when it has no such field. */
static double manifest_field(const char *key)
{
	char path[512];
	const cJSON *v;
	double r = -1;
	size_t n;
	char *text;
	cJSON *m;

	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, ENTRY);
	text = file_load(path, &n);
	m = cJSON_ParseWithLength(text, n);
	ASSERT_TRUE(m != NULL);
	ASSERT_STREQ(cJSON_GetObjectItem(m, "session")->valuestring, SESSION);
	v = cJSON_GetObjectItem(m, key);
	if (cJSON_IsNumber(v))
		r = v->valuedouble;
	cJSON_Delete(m);
	free(text);
	return r;
}

/* Stops the trainer (SIGSTOP) inside a step's updates, after its first
 * commit: it opened a step, and nothing of it can commit now. A stop
 * that came after the trainer's last ring entry of a step committed it
 * is undone (SIGCONT) and tried again. */
static void stop_inside_updates(pid_t pid, double *committed)
{
	char st[64];
	bool open;

	for (int tries = 0; tries < 1000; tries++) {
		session_marks(d.status, SESSION, st, sizeof(st), committed, &open);
		if (*committed < 1 || !open) {
			usleep(1000);
			continue;
		}
		ASSERT_OK(kill(pid, SIGSTOP));
		/* What it put on its ring before the stop is served. */
		usleep(200 * 1000);
		session_marks(d.status, SESSION, st, sizeof(st), committed, &open);
		if (open)
			return;
		ASSERT_OK(kill(pid, SIGCONT));
	}
	TEST_FAIL("the trainer was never stopped inside a step's updates");
}

static spw_client *connect_daemon(void)
{
	spw_client *c;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	return c;
}

int main(int argc, char **argv)
{
	char ref[512], run[512], ckpt[512], buf[4096];
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	double committed, again;
	bool open, crash, periodic, shutdown;
	char what[96];
	spw_client *c;
	int fd;
	pid_t pid;

	if (argc != 4 || (strcmp(argv[3], "restart") && strcmp(argv[3], "crash") && strcmp(argv[3], "periodic") &&
			  strcmp(argv[3], "shutdown")))
		TEST_FAIL("usage: test-orphan-save overlapped|exact resident|swappable restart|crash|periodic|shutdown");
	mode = argv[1];
	tier = argv[2];
	crash = !strcmp(argv[3], "crash");
	periodic = !strcmp(argv[3], "periodic");
	shutdown = !strcmp(argv[3], "shutdown");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_TRUE(mkdtemp(state) != NULL);
	persist_config(config, sizeof(config), state, periodic);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	snprintf(ref, sizeof(ref), "%s.ref.bin", state);
	snprintf(run, sizeof(run), "%s.run.bin", state);
	snprintf(ckpt, sizeof(ckpt), "%s.ckpt", state);

	/* The uninterrupted run (not persistent: nothing saved). */
	pid = spawn("os/ref", "0", NULL, NULL, ref, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);

	if (shutdown) {
		/* Inside a step's updates when SIGTERM comes: the save waits
		 * for the commit, which never comes: the trainer dies. */
		pid = spawn(SESSION, "1", NULL, "2000", run, &fd);
		stop_inside_updates(pid, &committed);
		printf("# stopped inside step %.0f's updates\n", committed + 1);
		ASSERT_OK(kill(d.pid, SIGTERM));
		usleep(100 * 1000);
		ASSERT_OK(kill(pid, SIGKILL));
		ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), -1);
		ASSERT_EQ(spw_test_daemon_stop(&d), 0); /* it exits once the orphan is saved */
		goto saved;
	}
	/* Killed half way through its 300th unit update: an orphan inside
	 * a step's updates. */
	pid = spawn(SESSION, "1", "300", NULL, run, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), -1);
	session_wait_orphaned(d.status, SESSION, &committed, &open);
	ASSERT_TRUE(open);
	ASSERT_TRUE(committed >= 1);
	printf("# killed inside step %.0f's updates\n", committed + 1);

	/* A checkpoint holds a committed step only: refused, saying why and
	 * what to do. */
	c = connect_daemon();
	ASSERT_EQ(spw_client_checkpoint(c, SESSION, ckpt, &res), -ESTALE);
	ASSERT_CONTAINS(spw_client_last_error(c), "inside step");
	ASSERT_CONTAINS(spw_client_last_error(c), "take it over");
	ASSERT_TRUE(access(ckpt, F_OK) < 0);

	if (periodic) {
		/* Flushed within a second or two, unasked: the flush of the
		 * orphan as it is replaces any of a commit point before. */
		spw_client_free(c);
		for (int i = 0; i < 1000 && !(saved_entry() && manifest_field("opened_step") == committed + 1); i++)
			usleep(10 * 1000);
		spw_test_daemon_kill(&d);
	} else if (crash) {
		/* The flush saves the orphan as it is; the crash loses
		 * nothing after it (nothing changes an orphan's pages). */
		ASSERT_OK(spw_client_flush(c, SESSION, &res));
		ASSERT_EQ((double)res.committed_step, committed);
		spw_client_free(c);
		spw_test_daemon_kill(&d);
	} else {
		spw_client_free(c);
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	}
saved:
	/* Saved with both marks: the step committed and the one open. */
	ASSERT_EQ(state_entries(), 1u);
	ASSERT_EQ(manifest_field("committed_step"), committed);
	ASSERT_EQ(manifest_field("opened_step"), committed + 1);

	/* Back as the same orphan: same committed step, step still open. */
	ASSERT_OK(spw_test_daemon_start(&d, config));
	session_wait_orphaned(d.status, SESSION, &again, &open);
	ASSERT_EQ(again, committed);
	ASSERT_TRUE(open);

	/* Taken over as if the daemon had never restarted. */
	pid = spawn(SESSION, "1", NULL, NULL, run, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);
	printf("# %s", buf);
	ASSERT_CONTAINS(buf, " mid-update");
	snprintf(what, sizeof(what), "across the kill (%s)", argv[3]);
	state_files_same(ref, run, what);

	/* It detached at its end: its save went with it, and the start
	 * removed any temporary a kill left (rmdir: nothing is left). */
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(ref);
	unlink(run);
	ASSERT_OK(rmdir(state));
	printf("ok\n");
	return 0;
}
