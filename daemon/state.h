/* SPDX-License-Identifier: MIT */
/*
 * state.h: persistent sessions across a daemon restart (state.c, the
 * config key persist.state_dir).
 */
#ifndef SPW_DAEMON_STATE_H
#define SPW_DAEMON_STATE_H

#include <stdbool.h>
#include <stddef.h>

struct daemon;

/* At start: opens (creating it, mode 0700) and checks the state
 * directory, and restores every checkpoint in it as an orphan. Returns 0
 * (also when it is off), or -errno for a directory that cannot be used
 * (logged). */
int state_start(struct daemon *d);
/* At SIGTERM: a checkpoint of every persistent session into the state
 * directory at its next commit point. true: then(d) runs once they are
 * done (or given up); false: nothing to wait for, then is not called. */
bool state_save_all(struct daemon *d, void (*then)(struct daemon *d));
void state_stop(struct daemon *d);
/* The periodic flush (persist.flush_interval_s) stops: at shutdown and in
 * the teardown of a failed start. */
void state_flush_stop(void);
/* s ends for good (a detach, a drop, its lease): its last save in the
 * state directory goes, so that no crash or restart brings it back. Not
 * at shutdown, whose saves are what the next start restores. */
struct session;
void state_forget(struct session *s);
/* Where session's save goes: <state_dir>/<name with '/' made '+'>. */
void state_entry_path(const struct daemon *d, const char *session, char *buf, size_t len);
/* Between state_save_all() and its then(): the sessions still run. */
bool state_saving(void);

#endif
