/* SPDX-License-Identifier: MIT */
/*
 * SIGTERM with a persistent session inside a step's updates (between its
 * trainer's OPEN n and COMMIT n): the save into persist.state_dir waits
 * for the commit point, as long as persist.commit_wait_s says, and tells
 * the service manager meanwhile (EXTEND_TIMEOUT_USEC, so TimeoutStopSec
 * does not kill a daemon whose trainer is in a long step, and a STATUS
 * saying what it waits for). A commit inside the wait is saved at that
 * step; none within it: not saved, the log naming the key. The trainer
 * here is the raw protocol: MARK OPEN and COMMIT by hand.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

static int mark(struct raw_session *s, uint8_t flags, uint64_t step)
{
	static uint64_t ud = 1;
	struct spw_sqe sqe = { .opcode = SPW_OP_MARK, .flags = flags, .arg = step, .user_data = ++ud };
	struct spw_cqe cqe;

	raw_submit(s, &sqe);
	ASSERT_OK(raw_reap(s, &cqe, 5000));
	ASSERT_UEQ(cqe.user_data, ud);
	return cqe.res;
}

static unsigned entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	ASSERT_TRUE(d != NULL);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* One SIGTERM with session job/long inside step 2's updates; commit:
 * whether the trainer commits it during the wait. */
static void shutdown_inside_step(bool commit)
{
	struct spw_test_daemon d;
	struct raw_session s;
	char state[64] = "/tmp/spw-shutsave-XXXXXX", cfg[512], sock[128], log[320], *text;
	pid_t reader;
	int nfd, st = -1, tid;

	ASSERT_TRUE(mkdtemp(state) != NULL);
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\"}, \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"persist\": {\"state_dir\": \"%s\", \"commit_wait_s\": 3}, \"log\": {\"level\": \"info\"}}",
		 state);
	nfd = raw_notify_listen(sock, sizeof(sock), &reader);
	setenv("NOTIFY_SOCKET", sock, 1);
	snprintf(log, sizeof(log), "%s.log", state);
	raw_start_logged(&d, cfg, log, NULL);
	unsetenv("NOTIFY_SOCKET");
	raw_guard(&d);
	ASSERT_TRUE(raw_notify_wait(nfd, "READY=1", 5000));

	ASSERT_OK(raw_attach_persistent(d.control, "job/long", 8 * MiB, MiB, &s));
	tid = raw_register(&s, "p", 2 * MiB, NULL);
	ASSERT_GE(tid, 0);
	ASSERT_EQ(mark(&s, SPW_MARK_OPEN, 1), 0);
	ASSERT_EQ(mark(&s, SPW_MARK_COMMIT, 1), 0);
	ASSERT_EQ(mark(&s, SPW_MARK_OPEN, 2), 0); /* a long step begins */

	ASSERT_EQ(kill(d.pid, SIGTERM), 0);
	/* Told at once, and again while it waits: more time, and why. */
	ASSERT_TRUE(raw_notify_wait(nfd, "STOPPING=1", 2000));
	ASSERT_TRUE(raw_notify_wait(nfd,
				    "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=shutdown: saving 1 persistent session into "
				    "persist.state_dir: 1 waiting for a commit point (persist.commit_wait_s)",
				    2000));
	if (commit)
		ASSERT_EQ(mark(&s, SPW_MARK_COMMIT, 2), 0);
	ASSERT_EQ(waitpid(d.pid, &st, 0), d.pid);
	d.pid = -1;
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	text = raw_read_file(log);
	if (commit) {
		ASSERT_CONTAINS(text, "shutdown: session job/long saved in persist.state_dir");
		ASSERT_UEQ(entries(state), 1);
	} else {
		ASSERT_CONTAINS(text, "shutdown: session job/long reached no commit point in 3 s (step 2 open); not saved "
				      "(persist.commit_wait_s)");
		ASSERT_UEQ(entries(state), 0);
	}
	raw_session_close(&s);
	spw_test_daemon_cleanup(&d);
	kill(reader, SIGKILL);
	waitpid(reader, NULL, 0);
	close(nfd);
	unlink(sock);
	unlink(log);
	snprintf(cfg, sizeof(cfg), "rm -rf '%s'", state);
	ASSERT_EQ(system(cfg), 0);
}

int main(void)
{
	shutdown_inside_step(true);
	shutdown_inside_step(false);
	printf("ok\n");
	return 0;
}
