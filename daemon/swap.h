/* SPDX-License-Identifier: MIT */
/*
 * swap.h: one session's swap files, one per configured swap directory (one
 * directory per NVMe drive), with the session's pages striped across them.
 *
 * The files are created at attach with fallocate, so the space is reserved
 * up front and a full drive refuses the attach instead of failing a write
 * in the middle of a training step; they are opened O_DIRECT (the region is
 * the cache, the page cache would only be a second copy), registered with
 * the daemon's io_uring, and unlinked when the session ends.
 *
 * Nothing here logs: failures return -errno and a sentence for a person in
 * err, which the daemon logs or sends back to the client.
 */
#ifndef SPW_DAEMON_SWAP_H
#define SPW_DAEMON_SWAP_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

struct uring;

/* One entry of the config's swap.dirs. */
struct swap_dir {
	const char *path;
	/* Cap on what all spillway swap files in this directory may take
	 * together (every session's, measured from the files themselves);
	 * 0 = only the filesystem's free space limits it. */
	uint64_t max_bytes;
	/* The directory as the daemon locked it (swap-lock.c), when it could:
	 * swap files are made and removed through this descriptor, so a path
	 * swapped for a symlink later leads nowhere else. Otherwise by path. */
	bool have_fd;
	int fd;
};

struct swap;

/* Creates the session's swap files: room for at least `bytes` of pages of
 * page_size, split evenly across the ndirs directories, each file named
 * <dir>/spillway-<session, '/' and odd characters made '_'>-<8 hex>.swap,
 * preallocated, opened O_DIRECT and registered with u.
 *
 * Returns 0, or -errno with *ret untouched and a sentence in err naming the
 * directory, the figures and what to change:
 *   -ENOSPC      not enough free space, or max_bytes would be exceeded;
 *   -EINVAL      the filesystem refuses O_DIRECT (tmpfs before Linux 6.6),
 *                or bad arguments;
 *   -EOPNOTSUPP  the filesystem cannot preallocate;
 *   others       from open/fallocate/uring_file_register. */
int swap_new(const struct swap_dir *dirs, unsigned ndirs, const char *session, uint32_t page_size,
	     uint64_t bytes, struct uring *u, char *err, size_t errlen, struct swap **ret);

/* Whether files in the directory (dirfd, named dir in messages) can be
 * opened O_DIRECT, asked once at start so that a daemon whose swap could
 * never work says so then, not at each attach: 0, or -EINVAL with the
 * sentence swap_new would give in err. Other failures are left to
 * swap_new (0). */
int swap_dir_probe_direct(int dirfd, const char *dir, char *err, size_t errlen);

/* Unregisters, closes and removes every file. The caller has no I/O in
 * flight on them. Accepts NULL; returns NULL. */
struct swap *swap_free(struct swap *s);

/* Pages the files hold in all (>= bytes / page_size). */
uint64_t swap_npages(const struct swap *s);
unsigned swap_nfiles(const struct swap *s);

/* Where swap page `disk` lives: consecutive pages go to consecutive
 * directories, so a tensor's pages are read from every drive at once.
 * Returns the uring file index and sets *off. */
int swap_locate(const struct swap *s, uint64_t disk, uint64_t *off);

/* The same, with the file's own descriptor (O_DIRECT), for copies the
 * daemon makes outside the ring (a checkpoint). */
int swap_page_fd(const struct swap *s, uint64_t disk, uint64_t *off);

/* Path of the file holding swap page `disk` (for messages), or of file i. */
const char *swap_page_path(const struct swap *s, uint64_t disk);
const char *swap_file_path(const struct swap *s, unsigned i);
int swap_file_index(const struct swap *s, unsigned i);

/* Bytes taken on disk by every spillway swap file in dir (all sessions,
 * stale ones from a crashed daemon included): what max_bytes is checked
 * against. Returns -errno when dir cannot be read. */
int64_t swap_dir_used(const char *dir);

/* The swap a session gets when its attach names none: want
 * (swap.session_bytes), or less when the ndirs directories have less room
 * (free space, and what their max_bytes leaves), in whole pages split
 * evenly: a drive short of space would otherwise refuse an attach that
 * never asked for swap. 0 when not even one page per directory fits. Sets
 * *room to the smallest directory's room (1% kept for fallocate's
 * metadata) and *short_dir to that directory, for the caller's message. */
uint64_t swap_default_bytes(const struct swap_dir *dirs, unsigned ndirs, uint32_t page_size, uint64_t want,
			    uint64_t *room, const char **short_dir);

#endif
