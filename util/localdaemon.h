/* SPDX-License-Identifier: MIT */
/*
 * util/localdaemon.h: a spillwayd of this build run on a temporary
 * directory, for the integration tests and the benchmarks (which share
 * this, so neither reaches into the other's folder).
 *
 *   struct local_daemon d;
 *   r = local_daemon_start(&d, NULL);   // the default config below
 *   ... connect to d.control ...
 *   r = local_daemon_stop(&d);          // SIGTERM; the exit status
 *
 * The binary is $SPILLWAYD (meson sets it for tests; local_daemon_locate()
 * sets it for an installed or in-tree bench), else spillwayd from PATH.
 * The daemon's stderr is its parent's. Nothing here is in libspillway.
 */
#ifndef SPW_UTIL_LOCALDAEMON_H
#define SPW_UTIL_LOCALDAEMON_H

#include <sys/types.h>

struct local_daemon {
	char dir[256];      /* temporary directory, mode 0755, removed by stop:
			     * under $TMPDIR, /tmp or /var/tmp, the first
			     * that takes O_DIRECT (configs put swap in it) */
	char config[320];   /* dir/spillwayd.json */
	char control[320];  /* dir/control.sock */
	char status[320];   /* dir/status.sock */
	pid_t pid;
};

/* The default config: sockets in dir (mode 0666 so other uids can reach
 * them and be refused by ownership rules, not by file modes), a 1 GiB pool,
 * 256 MiB per session, require_locked false so it runs under any
 * RLIMIT_MEMLOCK, log level debug. */
extern const char local_daemon_default_config[];

/* Writes config_json (NULL for the default) to dir/spillwayd.json, with
 * every "@DIR@" replaced by the temporary directory, starts spillwayd
 * --config on it and waits up to 10 s until the control socket accepts and
 * the status socket answers (the daemon's loop runs).
 * Returns 0 or a negative errno (-ETIMEDOUT when it never came up,
 * -ECHILD when it exited). */
int local_daemon_start(struct local_daemon *d, const char *config_json);

/* Same, without waiting: returns the daemon's exit status once it exits
 * (for configs that must be refused), or -ETIMEDOUT after 10 s. The
 * temporary directory is removed. */
int local_daemon_run_to_exit(struct local_daemon *d, const char *config_json, const char *const *extra_args);

/* SIGTERM, wait up to 10 s: returns the exit status (0 for a clean
 * shutdown), 128+signal when killed by one, or -ETIMEDOUT (then SIGKILLs).
 * Removes the temporary directory. -ECHILD when none runs. */
int local_daemon_stop(struct local_daemon *d);

/* SIGKILL now and reap; the directory stays until local_daemon_cleanup(). */
void local_daemon_kill(struct local_daemon *d);
void local_daemon_cleanup(struct local_daemon *d);

/* Points $SPILLWAYD, unless it is set, at the daemon beside this
 * program: ../daemon/spillwayd from a build tree's bench/ or tests/x/,
 * ../sbin/spillwayd from an install's bin/. Leaves it unset when there is
 * none (then PATH decides). */
void local_daemon_locate(void);

/* unix_connect() (util/unixsock.h) connects to d.control and d.status. */
#include "util/unixsock.h"

#endif
