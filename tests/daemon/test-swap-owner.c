/* SPDX-License-Identifier: MIT */
/*
 * Swap directories belong to one daemon (issue 9, item 6). Two real
 * daemons on different socket dirs and the same swap dir: the second is
 * refused with the first one's pid and deletes nothing; once the first is
 * SIGKILLed, its files are stale and the next daemon removes them (naming
 * the dead holder). A clean shutdown leaves the directory empty.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

static char swapdir[64], logpath[128];

static const char *config(char *buf, size_t len)
{
	snprintf(buf, len,
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 16},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"8MiB\"},"
		 " \"log\": {\"level\": \"info\"}}",
		 swapdir);
	return buf;
}

/* Runs fn with the daemon's stderr going to logpath. */
static int with_log(struct spw_test_daemon *d, bool to_exit)
{
	char cfg[1024];
	int fd, saved, r;

	fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
	ASSERT_GE(fd, 0);
	saved = dup(2);
	ASSERT_GE(dup2(fd, 2), 0);
	if (to_exit)
		r = spw_test_daemon_run_to_exit(d, config(cfg, sizeof(cfg)), NULL);
	else
		r = spw_test_daemon_start(d, config(cfg, sizeof(cfg)));
	dup2(saved, 2);
	close(saved);
	close(fd);
	return r;
}

static char *read_log(void)
{
	static char buf[1 << 16];
	int fd = open(logpath, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	ASSERT_GE(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

int main(void)
{
	struct spw_test_daemon a, b, c;
	struct raw_session s;
	char want[64];
	int r;

	snprintf(swapdir, sizeof(swapdir), "/var/tmp/spw-owner-XXXXXX");
	ASSERT_TRUE(mkdtemp(swapdir) != NULL);
	snprintf(logpath, sizeof(logpath), "/tmp/spw-owner-%d.log", (int)getpid());

	ASSERT_OK(with_log(&a, false));
	raw_guard(&a);
	ASSERT_OK(raw_attach(a.control, "owner/0", 4 * MiB, 1 * MiB, &s));
	ASSERT_UEQ((unsigned)raw_swap_files(swapdir), 1);

	/* Same swap dir, another socket dir: refused, naming the holder. */
	r = with_log(&b, true);
	if (r == -ETIMEDOUT)
		TEST_FAIL("a second spillwayd on swap dir %s kept running: %s", swapdir, read_log());
	ASSERT_GT(r, 0);
	snprintf(want, sizeof(want), "pid %d", (int)a.pid);
	ASSERT_CONTAINS(read_log(), "is in use by another spillwayd");
	ASSERT_CONTAINS(read_log(), want);
	ASSERT_CONTAINS(read_log(), "own swap.dirs");
	/* ... and the first daemon's live file is still there, in use. */
	ASSERT_UEQ((unsigned)raw_swap_files(swapdir), 1);
	ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);

	/* A daemon killed outright leaves its files; the lock went with it,
	 * so the next one may (and does) remove them as stale. */
	spw_test_daemon_kill(&a);
	spw_test_daemon_cleanup(&a);
	raw_session_close(&s);
	ASSERT_UEQ((unsigned)raw_swap_files(swapdir), 1);
	ASSERT_OK(with_log(&c, false));
	raw_guard(&c);
	/* Listening comes before the start is done: a status reply means the
	 * loop runs, so the stale files are dealt with. */
	cJSON_Delete(raw_status(c.status));
	ASSERT_CONTAINS(read_log(), "removed stale swap file spillway-owner_0-");
	ASSERT_CONTAINS(read_log(), want);
	ASSERT_UEQ((unsigned)raw_swap_files(swapdir), 0);
	ASSERT_EQ(spw_test_daemon_stop(&c), 0);

	/* A clean shutdown takes its lock file along: nothing is left. */
	ASSERT_EQ(rmdir(swapdir), 0);
	unlink(logpath);
	return 0;
}
