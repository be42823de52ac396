/* SPDX-License-Identifier: MIT */
/*
 * swap-lock.h: a swap directory belongs to one spillwayd at a time.
 *
 * Each daemon holds an flock on <dir>/spillway.lock for its whole life; the
 * file says which pid (and socket.dir) holds it. A second daemon pointed at
 * the same directory is refused with that pid instead of deleting the
 * first one's live swap files as stale. Only after taking the lock does a
 * daemon remove leftover swap files: the lock being free proves their
 * owner is dead (the kernel drops an flock with its last descriptor, so a
 * SIGKILLed daemon frees it too).
 */
#ifndef SPW_DAEMON_SWAP_LOCK_H
#define SPW_DAEMON_SWAP_LOCK_H

#include <stddef.h>

#define SWAP_LOCK_NAME "spillway.lock"

struct swap_lock;

/* Opens and checks dir (safedir_open: owner, mode), then takes its lock
 * without waiting. Returns 0 and *ret, or -errno with a sentence in err:
 *   -EBUSY    another live spillwayd holds it (its pid and socket.dir named);
 *   -EPERM    the directory or the lock file is unsafe (owner, mode);
 *   others    from open/flock. */
int swap_lock_take(const char *dir, const char *socket_dir, struct swap_lock **ret, char *err, size_t errlen);

/* The locked directory's descriptor (for openat/unlinkat), valid until
 * swap_lock_release. */
int swap_lock_dirfd(const struct swap_lock *l);

/* Removes every spillway-*.swap regular file in the locked directory (left
 * by a holder that died) and logs each. Returns how many were removed. */
int swap_lock_remove_stale(struct swap_lock *l);

/* Removes the lock file and drops the lock (clean shutdown; no swap file of
 * this daemon may remain). Accepts NULL; returns NULL. */
struct swap_lock *swap_lock_release(struct swap_lock *l);

#endif
