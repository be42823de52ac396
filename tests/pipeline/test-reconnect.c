/* SPDX-License-Identifier: MIT */
/*
 * test-reconnect: two trainers ride through a daemon restart in their own
 * processes (issue 11, spw_client_reconnect). Two persist-trainers with
 * PERSIST_RECONNECT_MS train on persistent sessions of one spillwayd with
 * persist.state_dir; SIGTERM once both committed 10 steps (the first one
 * there waits, stopped, for the other): each gets the "closed the
 * connection" error, and while the daemon is down keeps dialling. A new spillwayd on the same state directory (and, through a
 * symlink the trainers dial, the same socket path) restores both; each
 * trainer takes its session over, goes on from its saved step, and ends
 * bit-identical to an uninterrupted run: the same pids, never restarted.
 *
 *   test-reconnect TIER
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
#include "test.h"

#define STEPS "60"

static struct spw_test_daemon d;
static const char *tier;
static char state[64] = "/tmp/spw-state-XXXXXX";
static char link_dir[64] = "/tmp/spw-sock-XXXXXX";
static char sock[128], config[1024];

/* The trainers of the run, SIGKILLed if the test fails: one held with
 * SIGSTOP would otherwise stay, holding meson's output pipe. */
static pid_t trainers[2];

static void kill_trainers(int sig)
{
	for (int k = 0; k < 2; k++)
		if (trainers[k] > 0)
			kill(trainers[k], SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

static pid_t spawn(const char *session, const char *persistent, const char *socket, const char *out, int *fd)
{
	struct trainer_args a = { .socket = socket, .session = session, .tier = tier, .steps = STEPS,
				  .pause_us = "20000", .persistent = persistent, .out = out,
				  .env = { "PERSIST_RECONNECT_MS=30000" } };

	return trainer_spawn(&a, fd);
}

static double committed(const char *name)
{
	char *json = NULL;
	cJSON *doc, *s;
	double v = -1;

	if (spw_status_fetch(d.status, &json) < 0)
		return -1;
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			v = cJSON_GetObjectItem(s, "committed_step")->valuedouble;
	}
	cJSON_Delete(doc);
	return v;
}

/* The socket path the trainers dial: a symlink to this daemon's socket,
 * replaced in one rename. */
static void point_socket(void)
{
	char tmp[160];

	snprintf(tmp, sizeof(tmp), "%s.new", sock);
	unlink(tmp);
	ASSERT_OK(symlink(d.control, tmp));
	ASSERT_OK(rename(tmp, sock));
}

static void same_state(const char *ref, const char *run)
{
	char what[600];

	snprintf(what, sizeof(what), "across the restart (%s)", run);
	state_files_same(ref, run, what);
}

/* spw_client_reconnect()'s refusals: a session not persistent (-EINVAL),
 * an optimizer not freed (-EBUSY), a daemon back without the session's
 * state (-ENOENT: one that never committed a step is not saved), the
 * empty session its attach made detached again. Stops the daemon. */
static void refusals(void)
{
	struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1, .device = "host" };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "rc/plain", .region_bytes = 4u << 20,
				     .page_size = 64u << 10 };
	spw_client *c = NULL, *p = NULL;
	spw_optimizer *o = NULL;
	char *json = NULL;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, sock));
	ASSERT_EQ(spw_client_reconnect(c, 100), -EINVAL); /* nothing attached */
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_EQ(spw_client_reconnect(c, 100), -EINVAL);
	ASSERT_CONTAINS(spw_client_last_error(c), "persistent");
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);

	a.session = "rc/gone";
	a.persistent = 1;
	ASSERT_OK(spw_client_new(NULL, &p));
	ASSERT_OK(spw_client_connect(p, sock));
	ASSERT_OK(spw_client_attach(p, &a));
	ASSERT_OK(spw_optimizer_new(p, &oo, &o));
	ASSERT_EQ(spw_client_reconnect(p, 100), -EBUSY);
	ASSERT_CONTAINS(spw_client_last_error(p), "spw_optimizer_free() first");
	spw_optimizer_free(o);
	/* Step 1 never committed: the restart does not keep it. */
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	point_socket();
	ASSERT_EQ(spw_client_reconnect(p, 5000), -ENOENT);
	printf("# %s\n", spw_client_last_error(p));
	ASSERT_CONTAINS(spw_client_last_error(p), "no longer holds the session's state");
	ASSERT_OK(spw_status_fetch(d.status, &json));
	ASSERT_TRUE(strstr(json, "rc/gone") == NULL);
	free(json);
	spw_client_free(p);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	static const char *const names[2] = { "rc/a", "rc/b" };
	char ref[512], run[2][512], buf[2][4096];
	bool stopped[2] = { false, false };
	int fd[2], rc, st = -1;
	pid_t pid[2];

	if (argc != 2)
		TEST_FAIL("usage: test-reconnect resident|swappable");
	tier = argv[1];
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_TRUE(mkdtemp(state) != NULL);
	ASSERT_TRUE(mkdtemp(link_dir) != NULL);
	snprintf(sock, sizeof(sock), "%s/control.sock", link_dir);
	persist_config(config, sizeof(config), state, 0);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	point_socket();
	snprintf(ref, sizeof(ref), "%s.ref.bin", state);

	pid[0] = spawn("rc/ref", "0", d.control, ref, &fd[0]);
	ASSERT_EQ(child_reap(pid[0], fd[0], buf[0], sizeof(buf[0])), 0);

	for (int k = 0; k < 2; k++) {
		snprintf(run[k], sizeof(run[k]), "%s.run%d.bin", state, k);
		pid[k] = trainers[k] = spawn(names[k], "1", sock, run[k], &fd[k]);
	}
	signal(SIGABRT, kill_trainers);
	/* Each trainer is stopped (SIGSTOP) once it committed 10 steps, until
	 * the other is there too: one that got far ahead (the other started
	 * late on a loaded machine) must not finish its 60 steps before the
	 * restart. */
	for (int i = 0; i < 2000 && !(stopped[0] && stopped[1]); i++) {
		for (int k = 0; k < 2; k++)
			if (!stopped[k] && committed(names[k]) >= 10) {
				ASSERT_EQ(kill(pid[k], SIGSTOP), 0);
				stopped[k] = true;
			}
		usleep(10 * 1000);
	}
	for (int k = 0; k < 2; k++)
		if (!stopped[k])
			TEST_FAIL("%s did not commit 10 steps (committed %.0f)", names[k], committed(names[k]));
	/* SIGTERM, and the trainers go on: the daemon goes away under them
	 * as they train. */
	ASSERT_EQ(kill(d.pid, SIGTERM), 0);
	for (int k = 0; k < 2; k++)
		ASSERT_EQ(kill(pid[k], SIGCONT), 0);
	ASSERT_EQ(waitpid(d.pid, &st, 0), d.pid);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	d.pid = -1;
	spw_test_daemon_cleanup(&d);
	/* Down a while: the trainers keep dialling a socket that is gone. */
	usleep(300 * 1000);
	for (int k = 0; k < 2; k++)
		ASSERT_EQ(waitpid(pid[k], NULL, WNOHANG), 0);
	ASSERT_OK(spw_test_daemon_start(&d, config));
	point_socket();

	for (int k = 0; k < 2; k++) {
		unsigned long long saved;

		rc = child_reap(pid[k], fd[k], buf[k], sizeof(buf[k]));
		printf("# %s: %s", names[k], buf[k]);
		trainers[k] = 0;
		ASSERT_EQ(rc, 0);
		ASSERT_CONTAINS(buf[k], "went away: ");
		ASSERT_CONTAINS(buf[k], "closed the connection");
		ASSERT_CONTAINS(buf[k], "reconnected ");
		saved = strtoull(strstr(buf[k], "reconnected ") + 12, NULL, 10);
		ASSERT_TRUE(saved >= 10 && saved < 60);
		same_state(ref, run[k]);
		unlink(run[k]);
	}
	refusals();
	unlink(ref);
	unlink(sock);
	ASSERT_OK(rmdir(link_dir));
	ASSERT_OK(rmdir(state));
	printf("ok\n");
	return 0;
}
