/* SPDX-License-Identifier: MIT */
/*
 * tests/harness.h: a real spillwayd on a temporary directory, for the
 * integration tests.
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

#include <sys/types.h>

struct spw_test_daemon {
	char dir[256];      /* temporary directory, mode 0755, removed by stop */
	char config[320];   /* dir/spillwayd.json */
	char control[320];  /* dir/control.sock */
	char status[320];   /* dir/status.sock */
	pid_t pid;
};

/* The default config: sockets in dir (mode 0666 so other uids can reach
 * them and be refused by ownership rules, not by file modes), a 1 GiB pool,
 * 256 MiB per session, require_locked false so it runs under any
 * RLIMIT_MEMLOCK, log level debug. */
extern const char spw_test_default_config[];

/* Writes config_json (NULL for the default) to dir/spillwayd.json, with
 * every "@DIR@" replaced by the temporary directory, starts spillwayd
 * --config on it and waits up to 10 s until the control socket accepts.
 * Returns 0 or a negative errno (-ETIMEDOUT when it never came up,
 * -ECHILD when it exited). */
int spw_test_daemon_start(struct spw_test_daemon *d, const char *config_json);

/* Same, without waiting: returns the daemon's exit status once it exits
 * (for configs that must be refused), or -ETIMEDOUT after 10 s. The
 * temporary directory is removed. */
int spw_test_daemon_run_to_exit(struct spw_test_daemon *d, const char *config_json,
				const char *const *extra_args);

/* SIGTERM, wait up to 10 s: returns the exit status (0 for a clean
 * shutdown), 128+signal when killed by one, or -ETIMEDOUT (then SIGKILLs).
 * Removes the temporary directory. */
int spw_test_daemon_stop(struct spw_test_daemon *d);

/* SIGKILL now and reap; the directory stays until spw_test_daemon_cleanup(). */
void spw_test_daemon_kill(struct spw_test_daemon *d);
void spw_test_daemon_cleanup(struct spw_test_daemon *d);

/* Connects a blocking unix stream socket to path; returns the fd or -errno. */
int spw_test_connect(const char *path);

#endif
