/* SPDX-License-Identifier: MIT */
/*
 * Paths (issue 9, item 7): socket.dir and every swap dir are opened once,
 * checked on the descriptor, and refused with a message when others could
 * replace the daemon's files in them (writable by group or others without
 * the sticky bit, or owned by another user). The rule itself is checked
 * first (safedir_check), then each refusal through a real spillwayd.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "harness.h"
#include "raw.h"
#include "safedir.h"
#include "test.h"

static char base[64], logpath[128];

static void rule(mode_t mode, uid_t owner, int want, const char *needle)
{
	struct stat st = { .st_mode = S_IFDIR | mode, .st_uid = owner };
	char err[512] = "";

	ASSERT_EQ(safedir_check(&st, 1000, "swap dir", "/x", err, sizeof(err)), want);
	if (needle)
		ASSERT_CONTAINS(err, needle);
}

static void test_rule(void)
{
	struct stat file = { .st_mode = S_IFREG | 0700, .st_uid = 1000 };
	char err[256];

	rule(0700, 1000, 0, NULL);
	rule(0755, 1000, 0, NULL);
	rule(0755, 0, 0, NULL);             /* root's directory: fine */
	rule(01777, 0, 0, NULL);            /* /var/tmp: sticky, others cannot remove our files */
	rule(01770, 1000, 0, NULL);
	rule(0777, 1000, -EPERM, "writable by every user (mode 0777) and not sticky");
	rule(0775, 1000, -EPERM, "writable by its group (mode 0775)");
	rule(0757, 0, -EPERM, "chmod go-w /x");
	rule(0700, 1001, -EPERM, "belongs to uid 1001");
	rule(01777, 1001, -EPERM, "chown 1000 /x");
	ASSERT_EQ(safedir_check(&file, 1000, "socket.dir", "/f", err, sizeof(err)), -ENOTDIR);
	ASSERT_CONTAINS(err, "socket.dir /f is not a directory");
}

/* Runs a daemon on cfg to its exit; returns the exit status, the log in logpath. */
static int refused(const char *cfg)
{
	struct spw_test_daemon d;
	int fd, saved, r;

	fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ASSERT_GE(fd, 0);
	saved = dup(2);
	ASSERT_GE(dup2(fd, 2), 0);
	r = spw_test_daemon_run_to_exit(&d, cfg, NULL);
	dup2(saved, 2);
	close(saved);
	close(fd);
	return r;
}

static const char *read_log(void)
{
	static char buf[1 << 14];
	int fd = open(logpath, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	ASSERT_GE(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static void test_socket_dir(void)
{
	char dir[128], cfg[512];

	snprintf(dir, sizeof(dir), "%s/sock", base);
	ASSERT_EQ(mkdir(dir, 0700), 0);
	ASSERT_EQ(chmod(dir, 0777), 0);
	snprintf(cfg, sizeof(cfg), "{\"socket\": {\"dir\": \"%s\"}, \"pool\": {\"max_bytes\": \"64MiB\", "
		 "\"require_locked\": false}}", dir);
	ASSERT_GT(refused(cfg), 0);
	ASSERT_CONTAINS(read_log(), "socket.dir");
	ASSERT_CONTAINS(read_log(), "is writable by every user (mode 0777) and not sticky");
	/* Refused before anything was made in it. */
	ASSERT_NE(access("control.sock", F_OK), 0);
	{
		char p[160];
		snprintf(p, sizeof(p), "%s/control.sock", dir);
		ASSERT_NE(access(p, F_OK), 0);
	}
	ASSERT_EQ(chown(dir, 65534, 65534), 0);
	ASSERT_EQ(chmod(dir, 0755), 0);
	ASSERT_GT(refused(cfg), 0);
	ASSERT_CONTAINS(read_log(), "belongs to uid 65534");
	ASSERT_EQ(rmdir(dir), 0);
}

static void test_swap_dir(void)
{
	char dir[128], cfg[640], p[192];

	snprintf(dir, sizeof(dir), "%s/swap", base);
	ASSERT_EQ(mkdir(dir, 0700), 0);
	ASSERT_EQ(chmod(dir, 0770), 0);
	snprintf(cfg, sizeof(cfg), "{\"socket\": {\"dir\": \"@DIR@\"}, \"pool\": {\"max_bytes\": \"64MiB\", "
		 "\"require_locked\": false}, \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}]}}", dir);
	ASSERT_GT(refused(cfg), 0);
	ASSERT_CONTAINS(read_log(), "swap.dirs entry");
	ASSERT_CONTAINS(read_log(), "is writable by its group (mode 0770)");
	snprintf(p, sizeof(p), "%s/spillway.lock", dir);
	ASSERT_NE(access(p, F_OK), 0);
	ASSERT_EQ(rmdir(dir), 0);
}

/* A swap dir on a filesystem without direct I/O (ramfs; tmpfs before
 * Linux 6.6) is refused at start, naming it and the fix, rather than
 * failing every attach with swap later. The ramfs is mounted in a mount
 * namespace of this process's own, so nothing outlives the test. */
static void test_swap_no_direct(void)
{
	char dir[128], cfg[640];

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		SKIP("cannot make a mount namespace to mount a ramfs in: %s", strerror(errno));
	snprintf(dir, sizeof(dir), "%s/ramfs", base);
	ASSERT_EQ(mkdir(dir, 0700), 0);
	if (mount("ramfs", dir, "ramfs", 0, "mode=0700") < 0)
		SKIP("cannot mount a ramfs: %s", strerror(errno));
	snprintf(cfg, sizeof(cfg), "{\"socket\": {\"dir\": \"@DIR@\"}, \"pool\": {\"max_bytes\": \"64MiB\", "
		 "\"require_locked\": false}, \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}]}}", dir);
	ASSERT_GT(refused(cfg), 0);
	ASSERT_CONTAINS(read_log(), dir);
	ASSERT_CONTAINS(read_log(), "refuses O_DIRECT");
	ASSERT_CONTAINS(read_log(), "on a filesystem on the NVMe drive");
	/* The tests' own daemons, told to live there, go where swap works. */
	{
		struct spw_test_daemon d;

		ASSERT_EQ(setenv("TMPDIR", dir, 1), 0);
		snprintf(cfg, sizeof(cfg), "{\"socket\": {\"dir\": \"@DIR@\"}, \"pool\": {\"max_bytes\": \"64MiB\", "
			 "\"require_locked\": false}, \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}]}}");
		ASSERT_OK(spw_test_daemon_start(&d, cfg));
		ASSERT_NE(strncmp(d.dir, dir, strlen(dir)), 0);
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		unsetenv("TMPDIR");
	}
	ASSERT_EQ(umount(dir), 0);
	ASSERT_EQ(rmdir(dir), 0);
}

int main(int argc, char **argv)
{
	bool no_direct = argc > 1 && !strcmp(argv[1], "no-direct");

	if (!no_direct)
		test_rule();
	snprintf(base, sizeof(base), "/tmp/spw-dirs-XXXXXX");
	ASSERT_TRUE(mkdtemp(base) != NULL);
	snprintf(logpath, sizeof(logpath), "%s/log", base);
	if (no_direct) {
		test_swap_no_direct();
	} else {
		test_socket_dir();
		test_swap_dir();
	}
	unlink(logpath);
	ASSERT_EQ(rmdir(base), 0);
	return 0;
}
