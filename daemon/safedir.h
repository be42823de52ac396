/* SPDX-License-Identifier: MIT */
/*
 * safedir.h: a directory the daemon creates files in (socket.dir, each
 * swap.dirs entry), opened once and checked on the open descriptor, so
 * the check and every later use are about the same directory: files are
 * then made, found, re-moded and removed relative to that descriptor
 * (openat, fstatat, fchmodat, unlinkat), never again by name.
 */
#ifndef SPW_DAEMON_SAFEDIR_H
#define SPW_DAEMON_SAFEDIR_H

#include <stddef.h>
#include <sys/stat.h>

/* Whether a directory with this owner and mode is safe for the daemon
 * (running as euid) to keep its files in: a directory, owned by the
 * daemon's user or root, and writable by nobody else unless it is sticky
 * (then others can add files but not remove or rename the daemon's).
 * Returns 0, or -EPERM with a sentence in err naming `what` (the config
 * key), path, owner and mode and the fix. */
int safedir_check(const struct stat *st, uid_t euid, const char *what, const char *path, char *err,
		  size_t errlen);

/* Opens path as a directory (O_DIRECTORY, close-on-exec) and runs
 * safedir_check on fstat of the descriptor. Returns the descriptor, or
 * -errno with a sentence in err (-EPERM from the check). */
int safedir_open(const char *what, const char *path, char *err, size_t errlen);

#endif
