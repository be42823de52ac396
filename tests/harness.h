/* SPDX-License-Identifier: MIT */
/*
 * tests/harness.h: a real spillwayd on a temporary directory, for the
 * integration tests. The tests' names for util/localdaemon.h, which the
 * benchmarks share (see there for what each call returns).
 *
 *   struct spw_test_daemon d;
 *   ASSERT_OK(spw_test_daemon_start(&d, NULL));       // default test config
 *   ... connect to d.control ...
 *   ASSERT_EQ(spw_test_daemon_stop(&d), 0);           // SIGTERM, exit status 0
 *
 * The binary comes from $SPILLWAYD (set by meson). Its stderr is the test's.
 */
#ifndef SPW_TEST_HARNESS_H
#define SPW_TEST_HARNESS_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/fs.h>

#include "util/localdaemon.h"

#define spw_test_daemon              local_daemon
#define spw_test_default_config      local_daemon_default_config
#define spw_test_daemon_start        local_daemon_start
#define spw_test_daemon_run_to_exit  local_daemon_run_to_exit
#define spw_test_daemon_stop         local_daemon_stop
#define spw_test_daemon_kill         local_daemon_kill
#define spw_test_daemon_cleanup      local_daemon_cleanup
#define spw_test_connect             unix_connect

/* Whether files in dir can share blocks (a reflink: XFS, btrfs), which
 * is when a checkpoint copies swap pages in the kernel (and not on ext4
 * or tmpfs, where it reads them). */
static inline bool spw_test_dir_reflinks(const char *dir)
{
	char a[4096], b[4096], page[65536];
	int fa, fb;
	bool yes = false;

	snprintf(a, sizeof(a), "%s/.reflink-a", dir);
	snprintf(b, sizeof(b), "%s/.reflink-b", dir);
	memset(page, 0x5a, sizeof(page));
	fa = open(a, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	fb = open(b, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fa >= 0 && fb >= 0 && write(fa, page, sizeof(page)) == (ssize_t)sizeof(page) && fsync(fa) == 0)
		yes = ioctl(fb, FICLONE, fa) == 0;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	unlink(a);
	unlink(b);
	return yes;
}

#endif
