/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "log.h"
#include "safedir.h"
#include "swap-lock.h"

struct swap_lock {
	char *dir;
	int dirfd;
	int fd;
	char previous[160]; /* what the lock file said before we took it */
};

/* What a holder wrote: "pid N\nsocket.dir PATH\n", read for messages
 * only, as one line ("pid N, socket.dir PATH") of printable ASCII. */
static void read_holder(int fd, char *buf, size_t len)
{
	char raw[160];
	ssize_t n = pread(fd, raw, sizeof(raw) - 1, 0);
	size_t o = 0;

	for (ssize_t i = 0; i < n && o + 3 < len; i++) {
		unsigned char c = (unsigned char)raw[i];

		if (c == '\n') {
			if (i + 1 < n) {
				buf[o++] = ',';
				buf[o++] = ' ';
			}
		} else {
			buf[o++] = c >= 0x20 && c <= 0x7e ? (char)c : '?';
		}
	}
	buf[o] = '\0';
}

/* Takes the lock on the file the name points to now. A releasing daemon
 * unlinks the file while it holds the lock, so a lock taken on an inode
 * that is no longer the one named is worthless: compare and try again. */
static int lock_file(struct swap_lock *l, char *err, size_t errlen)
{
	for (int tries = 0; tries < 16; tries++) {
		struct stat a, b;
		int fd = openat(l->dirfd, SWAP_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

		if (fd < 0) {
			int r = -errno;
			snprintf(err, errlen, "swap dir %s: cannot open %s: %s (check the directory is writable)",
				 l->dir, SWAP_LOCK_NAME, strerror(-r));
			return r;
		}
		if (fstat(fd, &a) < 0 || !S_ISREG(a.st_mode) || a.st_uid != geteuid()) {
			snprintf(err, errlen, "swap dir %s: %s is not a regular file of spillwayd's user; remove it",
				 l->dir, SWAP_LOCK_NAME);
			close(fd);
			return -EPERM;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int r = -errno;
			char holder[160];

			read_holder(fd, holder, sizeof(holder));
			close(fd);
			if (r == -EWOULDBLOCK) {
				snprintf(err, errlen,
					 "swap dir %s is in use by another spillwayd (%s): stop it, or give each daemon "
					 "its own swap.dirs",
					 l->dir, holder[0] ? holder : "pid unknown: it is still starting");
				return -EBUSY;
			}
			snprintf(err, errlen, "swap dir %s: cannot lock %s: %s", l->dir, SWAP_LOCK_NAME,
				 strerror(-r));
			return r;
		}
		if (fstatat(l->dirfd, SWAP_LOCK_NAME, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino) {
			l->fd = fd;
			return 0;
		}
		close(fd);
	}
	snprintf(err, errlen, "swap dir %s: %s keeps being replaced; is another spillwayd starting and stopping?",
		 l->dir, SWAP_LOCK_NAME);
	return -EBUSY;
}

int swap_lock_take(const char *dir, const char *socket_dir, struct swap_lock **ret, char *err, size_t errlen)
{
	struct swap_lock *l = calloc(1, sizeof(*l));
	char line[320];
	int r, n;

	if (!l || !(l->dir = strdup(dir))) {
		free(l);
		snprintf(err, errlen, "swap dir %s: out of memory", dir);
		return -ENOMEM;
	}
	l->fd = -1;
	l->dirfd = safedir_open("swap.dirs entry", dir, err, errlen);
	if (l->dirfd < 0) {
		r = l->dirfd;
		l->dirfd = -1;
		goto fail;
	}
	r = lock_file(l, err, errlen);
	if (r < 0)
		goto fail;
	read_holder(l->fd, l->previous, sizeof(l->previous));
	n = snprintf(line, sizeof(line), "pid %d\nsocket.dir %s\n", (int)getpid(), socket_dir ? socket_dir : "?");
	if (ftruncate(l->fd, 0) < 0 || pwrite(l->fd, line, (size_t)n, 0) != n)
		log_warn("swap dir %s: cannot write this daemon's pid into %s: %s (the lock holds all the same)", dir,
			 SWAP_LOCK_NAME, strerror(errno));
	*ret = l;
	return 0;
fail:
	swap_lock_release(l);
	return r;
}

int swap_lock_dirfd(const struct swap_lock *l)
{
	return l->dirfd;
}

int swap_lock_remove_stale(struct swap_lock *l)
{
	int n = 0, fd = dup(l->dirfd);
	DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!dp) {
		log_warn("swap dir %s: cannot read it: %s; stale swap files stay", l->dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 0;
	}
	rewinddir(dp);
	while ((de = readdir(dp))) {
		size_t len = strlen(de->d_name);
		struct stat st;

		if (strncmp(de->d_name, "spillway-", 9) || len < 14 || strcmp(de->d_name + len - 5, ".swap"))
			continue;
		if (fstatat(l->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (unlinkat(l->dirfd, de->d_name, 0) < 0) {
			log_warn("swap dir %s: cannot remove stale swap file %s: %s", l->dir, de->d_name, strerror(errno));
			continue;
		}
		n++;
		log_info("swap dir %s: removed stale swap file %s (%lld bytes), left by a spillwayd that did not shut "
			 "down (%s)", l->dir, de->d_name, (long long)st.st_blocks * 512,
			 l->previous[0] ? l->previous : "no lock file");
	}
	closedir(dp);
	return n;
}

struct swap_lock *swap_lock_release(struct swap_lock *l)
{
	if (!l)
		return NULL;
	/* Unlinked while still held: a daemon that opened the old file
	 * meanwhile sees the name moved on and tries again (lock_file). */
	if (l->fd >= 0) {
		unlinkat(l->dirfd, SWAP_LOCK_NAME, 0);
		close(l->fd);
	}
	if (l->dirfd >= 0)
		close(l->dirfd);
	free(l->dir);
	free(l);
	return NULL;
}
