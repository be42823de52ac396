/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "safedir.h"

int safedir_check(const struct stat *st, uid_t euid, const char *what, const char *path, char *err,
		  size_t errlen)
{
	mode_t m = st->st_mode & 07777;

	if (!S_ISDIR(st->st_mode)) {
		snprintf(err, errlen, "%s %s is not a directory; point %s at a directory", what, path, what);
		return -ENOTDIR;
	}
	/* Another user who owns the directory can chmod it at will, so no
	 * mode check would mean anything. */
	if (st->st_uid != euid && st->st_uid != 0) {
		snprintf(err, errlen,
			 "%s %s belongs to uid %u, not to spillwayd's uid %u or root: that user could replace the "
			 "daemon's files; chown %u %s, or use another directory",
			 what, path, (unsigned)st->st_uid, (unsigned)euid, (unsigned)euid, path);
		return -EPERM;
	}
	if ((m & (S_IWGRP | S_IWOTH)) && !(m & S_ISVTX)) {
		snprintf(err, errlen,
			 "%s %s is writable by %s (mode %04o) and not sticky: they could remove or replace the daemon's "
			 "files; chmod go-w %s (or chmod +t for a shared directory), or use another directory",
			 what, path, m & S_IWOTH ? "every user" : "its group", (unsigned)m, path);
		return -EPERM;
	}
	return 0;
}

int safedir_open(const char *what, const char *path, char *err, size_t errlen)
{
	struct stat st;
	int fd, r;

	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "%s %s: cannot open it: %s (create it or fix %s)", what, path, strerror(-r),
			 what);
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s %s: cannot stat it: %s", what, path, strerror(-r));
		close(fd);
		return r;
	}
	r = safedir_check(&st, geteuid(), what, path, err, errlen);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}
