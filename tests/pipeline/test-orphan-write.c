/* SPDX-License-Identifier: MIT */
/*
 * test-orphan-write: a trainer killed inside spw_optimizer_write (what
 * load_state_dict calls) on a persistent session. The state is then part
 * the loaded checkpoint and part the state before it, and nothing says
 * which: no journal covers a write. It must neither be resumed as if it
 * were a committed step nor wedge the session.
 *
 *   test-orphan-write MODE TIER direct|restart|update
 *
 * A persist-trainer trains 5 steps, then loads a checkpoint made of its
 * own state (weights halved, moments scaled: PERSIST_LOAD_AT) and is
 * killed by the library after the 30th of its about 75 pages written
 * (SPILLWAY_TEST_KILL_AT_WRITE_PAGE). The status shows the orphan with
 * step 6 open; a checkpoint of it is refused, naming the write. Then
 *
 *   direct   a new trainer attaches: accepted (before, spw_optimizer_new
 *            refused it, -ESTALE, until spillwayctl drop), as a fresh
 *            session: nothing resumed, and the session info says the
 *            orphan was released for a write that died at step 6
 *            ("released write 6"). Its restart code loads the checkpoint
 *            again ("reloaded 5") and trains on;
 *   restart  spillwayd gets SIGTERM first: the orphan is saved with its
 *            marks and "opened_by_write", comes back the same, and the
 *            new trainer is treated as in direct;
 *   update   no kill in the write: the load is whole, and the trainer is
 *            killed inside step 6's updates instead. The step the write
 *            opened is an update's now: the tile journal resumes it
 *            ("resumed N mid-update"), nothing released, no reload.
 *
 * Each ends with master weights and moments bit-identical to an
 * uninterrupted run that did the same load.
 */
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

#define STEPS "12"
#define LOAD_AT "5"
#define SESSION "ow/run"
#define ENTRY "ow+run"

static struct spw_test_daemon d;
static const char *mode, *tier;
static char state[64] = "/tmp/spw-orphanw-XXXXXX";
static char config[1024], loadfile[512];

/* A persist-trainer that loads its checkpoint after step LOAD_AT; kill:
 * the environment variable that has the library kill it, and its value. */
static pid_t spawn(const char *session, const char *persistent, const char *kill_env, const char *kill_at,
		   const char *out, int *fd)
{
	char file[600], kill[128];
	struct trainer_args a = { .socket = d.control, .session = session, .mode = mode, .tier = tier,
				  .steps = STEPS, .persistent = persistent, .out = out,
				  .env = { "PERSIST_LOAD_AT=" LOAD_AT, file } };

	snprintf(file, sizeof(file), "PERSIST_LOAD_FILE=%s", loadfile);
	if (kill_env) {
		snprintf(kill, sizeof(kill), "%s=%s", kill_env, kill_at);
		a.env[2] = kill;
	}
	return trainer_spawn(&a, fd);
}

/* The saved entry's manifest field key: 1 true, 0 false or absent. */
static int manifest_flag(const char *key)
{
	char path[512];
	size_t n;
	char *text;
	cJSON *m;
	int r;

	snprintf(path, sizeof(path), "%s/%s/manifest.json", state, ENTRY);
	text = file_load(path, &n);
	m = cJSON_ParseWithLength(text, n);
	ASSERT_TRUE(m != NULL);
	r = cJSON_IsTrue(cJSON_GetObjectItem(m, key));
	ASSERT_EQ(cJSON_GetObjectItem(m, "opened_step")->valuedouble, 6.0);
	cJSON_Delete(m);
	free(text);
	return r;
}

int main(int argc, char **argv)
{
	char ref[512], run[512], buf[4096];
	double committed;
	bool open, restart, update;
	char what[96];
	int fd;
	pid_t pid;

	if (argc != 4 || (strcmp(argv[3], "direct") && strcmp(argv[3], "restart") && strcmp(argv[3], "update")))
		TEST_FAIL("usage: test-orphan-write overlapped|exact resident|swappable direct|restart|update");
	mode = argv[1];
	tier = argv[2];
	restart = !strcmp(argv[3], "restart");
	update = !strcmp(argv[3], "update");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_TRUE(mkdtemp(state) != NULL);
	persist_config(config, sizeof(config), state, 0);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	snprintf(ref, sizeof(ref), "%s.ref.bin", state);
	snprintf(run, sizeof(run), "%s.run.bin", state);

	/* The uninterrupted run with the same load (not persistent). */
	snprintf(loadfile, sizeof(loadfile), "%s.ref.ckpt", state);
	pid = spawn("ow/ref", "0", NULL, NULL, ref, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);
	ASSERT_CONTAINS(buf, "loaded " LOAD_AT);
	unlink(loadfile);

	snprintf(loadfile, sizeof(loadfile), "%s.run.ckpt", state);
	if (update) {
		/* The load is whole; killed half way through the 20th unit
		 * update of step 6 (steps 1-5 made 46 each). */
		pid = spawn(SESSION, "1", "SPILLWAY_TEST_KILL_AT_TILE", "250", run, &fd);
	} else {
		/* Killed in the 30th page its load writes. */
		pid = spawn(SESSION, "1", "SPILLWAY_TEST_KILL_AT_WRITE_PAGE", "30", run, &fd);
	}
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), -1);
	if (!update)
		ASSERT_TRUE(strstr(buf, "loaded") == NULL); /* it died inside the load */
	session_wait_orphaned(d.status, SESSION, &committed, &open);
	ASSERT_EQ(committed, 5.0);
	ASSERT_TRUE(open);
	printf("# killed with step 6 open (%s)\n", update ? "inside its updates" : "inside the load's writes");
	if (!update) {
		/* It holds no step: a checkpoint of it is refused, saying why. */
		struct spw_checkpoint_result res = { .size = sizeof(res) };
		char ckpt[512];
		spw_client *c;

		snprintf(ckpt, sizeof(ckpt), "%s.ckdir", state);
		ASSERT_OK(spw_client_new(NULL, &c));
		ASSERT_OK(spw_client_connect(c, d.control));
		ASSERT_EQ(spw_client_checkpoint(c, SESSION, ckpt, &res), -ESTALE);
		ASSERT_CONTAINS(spw_client_last_error(c), "inside spw_optimizer_write");
		ASSERT_TRUE(access(ckpt, F_OK) < 0);
		spw_client_free(c);
	}

	if (restart) {
		/* Saved as it is, opened by the write; back the same. */
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		ASSERT_EQ(manifest_flag("opened_by_write"), 1);
		ASSERT_OK(spw_test_daemon_start(&d, config));
		session_wait_orphaned(d.status, SESSION, &committed, &open);
		ASSERT_EQ(committed, 5.0);
		ASSERT_TRUE(open);
	}

	/* The next trainer: accepted, and its run ends as the uninterrupted
	 * one's. */
	pid = spawn(SESSION, "1", NULL, NULL, run, &fd);
	ASSERT_EQ(child_reap(pid, fd, buf, sizeof(buf)), 0);
	printf("# %s", buf);
	if (update) {
		ASSERT_CONTAINS(buf, " mid-update");
		ASSERT_TRUE(strstr(buf, "released") == NULL);
		ASSERT_TRUE(strstr(buf, "reloaded") == NULL);
	} else {
		ASSERT_TRUE(strstr(buf, "resumed") == NULL); /* nothing resumed */
		ASSERT_CONTAINS(buf, "released write 6");
		ASSERT_CONTAINS(buf, "reloaded " LOAD_AT);
	}
	snprintf(what, sizeof(what), "across the kill (%s)", argv[3]);
	state_files_same(ref, run, what);

	/* It detached at its end: nothing is left in the state directory. */
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(ref);
	unlink(run);
	unlink(loadfile);
	ASSERT_OK(rmdir(state));
	printf("ok\n");
	return 0;
}
