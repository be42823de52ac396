/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "swap.h"
#include "uring.h"
#include "util/fdio.h"
#include "util/names.h"
#include "util/bytes.h"


struct swap_file {
	char *path;        /* for messages, and for removal without a dirfd */
	const char *name;  /* inside path: the name within its directory */
	int dirfd;         /* the locked directory's (not ours to close), or -1 */
	int fd;
	int index; /* uring file index, -1 until registered */
};

struct swap {
	struct uring *u;
	uint32_t page_size;
	uint64_t pages_per_file;
	unsigned nfiles;
	struct swap_file *files;
};

int64_t swap_dir_used(const char *dir)
{
	uint64_t n, bytes;
	int r = swapfile_scan(dir, &n, &bytes);

	return r < 0 ? r : (int64_t)bytes;
}

static void no_direct(const char *dir, char *err, size_t errlen)
{
	snprintf(err, errlen,
		 "swap dir %s: the filesystem refuses O_DIRECT (ramfs does, and tmpfs before Linux 6.6); "
		 "put this swap.dirs entry on a filesystem on the NVMe drive",
		 dir);
}

int swap_dir_probe_direct(int dirfd, const char *dir, char *err, size_t errlen)
{
	/* Takes it, or cannot tell (swap_new names that failure at attach). */
	if (fd_dir_takes_direct(dirfd) != 0)
		return 0;
	no_direct(dir, err, errlen);
	return -EINVAL;
}

static int check_space(const struct swap_dir *dir, const char *session, uint64_t need, char *err,
		       size_t errlen)
{
	char a[64], b[64], c[64];
	struct statvfs vfs;
	uint64_t avail;

	if (statvfs(dir->path, &vfs) < 0) {
		int r = -errno;
		snprintf(err, errlen, "swap dir %s: cannot use it: %s (create it or fix swap.dirs)", dir->path,
			 strerror(-r));
		return r;
	}
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (need > avail) {
		snprintf(err, errlen,
			 "swap dir %s: %s free, session '%s' needs %s there "
			 "(free space on that drive, add a drive to swap.dirs, or attach with a smaller swap size)",
			 dir->path, format_bytes_exact(avail, a, sizeof(a)), session, format_bytes_exact(need, b, sizeof(b)));
		return -ENOSPC;
	}
	if (dir->max_bytes) {
		int64_t used = swap_dir_used(dir->path);

		if (used < 0)
			used = 0;
		if ((uint64_t)used + need > dir->max_bytes) {
			snprintf(err, errlen,
				 "swap dir %s: max_bytes is %s and swap files already take %s, "
				 "session '%s' needs %s more there (raise max_bytes for this dir in swap.dirs, "
				 "add a drive, or attach with a smaller swap size)",
				 dir->path, format_bytes_exact(dir->max_bytes, a, sizeof(a)),
				 format_bytes_exact((uint64_t)used, b, sizeof(b)), session, format_bytes_exact(need, c, sizeof(c)));
			return -ENOSPC;
		}
	}
	return 0;
}

static void remove_file(const struct swap_file *f)
{
	if (f->dirfd >= 0)
		unlinkat(f->dirfd, f->name, 0);
	else
		unlink(f->path);
}

static int create_file(struct swap *s, unsigned i, const struct swap_dir *dir, const char *session,
		       uint64_t bytes, char *err, size_t errlen)
{
	struct swap_file *f = &s->files[i];
	char name[SWAPFILE_NAME_MAX], a[64];
	size_t plen;
	int r;

	plen = strlen(dir->path) + 1 + SWAPFILE_NAME_MAX;
	f->path = malloc(plen);
	if (!f->path)
		return -ENOMEM;
	/* A random suffix, and O_EXCL, so two sessions with the same name
	 * (one detaching while its successor attaches) never share a file. */
	for (int tries = 0;; tries++) {
		uint32_t rnd;

		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			rnd = (uint32_t)getpid() * 2654435761u + (uint32_t)tries;
		snprintf(f->path, plen, "%s/%s", dir->path, swapfile_name(name, sizeof(name), session, rnd));
		f->name = f->path + strlen(dir->path) + 1;
		f->dirfd = dir->have_fd ? dir->fd : -1;
		f->fd = f->dirfd >= 0 ?
				openat(f->dirfd, f->name, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600) :
				open(f->path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (f->fd >= 0)
			break;
		r = -errno;
		if (r == -EEXIST && tries < 8)
			continue;
		if (r == -EINVAL) {
			/* open(O_CREAT|O_DIRECT) fails with EINVAL only when the
			 * filesystem has no direct I/O; see whether it made the
			 * file anyway, and say what is wrong with the directory. */
			remove_file(f);
			no_direct(dir->path, err, errlen);
		} else {
			snprintf(err, errlen, "swap dir %s: cannot create %s: %s (check it exists and is writable)",
				 dir->path, f->path, strerror(-r));
		}
		goto fail;
	}
	if (fallocate(f->fd, 0, 0, (off_t)bytes) < 0) {
		r = -errno;
		if (r == -EOPNOTSUPP)
			snprintf(err, errlen,
				 "swap dir %s: the filesystem cannot preallocate files (fallocate unsupported); "
				 "use ext4 or xfs for swap.dirs",
				 dir->path);
		else
			snprintf(err, errlen, "swap dir %s: reserving %s for session '%s' failed: %s%s", dir->path,
				 format_bytes_exact(bytes, a, sizeof(a)), session, strerror(-r),
				 r == -ENOSPC ? " (free space on that drive or attach with a smaller swap size)" : "");
		goto fail_unlink;
	}
	f->index = uring_file_register(s->u, f->fd);
	if (f->index < 0) {
		r = f->index;
		f->index = -1;
		snprintf(err, errlen, "swap dir %s: registering %s with io_uring failed: %s%s", dir->path, f->path,
			 strerror(-r), r == -ENOSPC ? " (too many sessions' files for the ring's file table)" : "");
		goto fail_unlink;
	}
	return 0;

fail_unlink:
	close(f->fd);
	f->fd = -1;
	remove_file(f);
fail:
	free(f->path);
	f->path = NULL;
	return r;
}

int swap_new(const struct swap_dir *dirs, unsigned ndirs, const char *session, uint32_t page_size,
	     uint64_t bytes, struct uring *u, char *err, size_t errlen, struct swap **ret)
{
	struct swap *s;
	uint64_t pages, file_bytes;
	int r;

	if (!dirs || ndirs == 0 || !session || !u || page_size < 4096 || (page_size & (page_size - 1)) ||
	    bytes == 0) {
		snprintf(err, errlen, "swap: no swap.dirs configured or bad swap size");
		return -EINVAL;
	}
	pages = (bytes + page_size - 1) / page_size;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->u = u;
	s->page_size = page_size;
	s->pages_per_file = (pages + ndirs - 1) / ndirs;
	file_bytes = s->pages_per_file * page_size;
	s->files = calloc(ndirs, sizeof(*s->files));
	if (!s->files) {
		free(s);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < ndirs; i++)
		s->files[i] = (struct swap_file){ .fd = -1, .index = -1 };

	/* Check every directory before creating anything, so a refusal
	 * leaves no files behind and names the first directory short. */
	for (unsigned i = 0; i < ndirs; i++) {
		r = check_space(&dirs[i], session, file_bytes, err, errlen);
		if (r < 0)
			goto fail;
	}
	for (unsigned i = 0; i < ndirs; i++) {
		r = create_file(s, i, &dirs[i], session, file_bytes, err, errlen);
		if (r < 0)
			goto fail;
		s->nfiles = i + 1;
	}
	*ret = s;
	return 0;

fail:
	swap_free(s);
	return r;
}

struct swap *swap_free(struct swap *s)
{
	if (!s)
		return NULL;
	for (unsigned i = 0; i < s->nfiles; i++) {
		struct swap_file *f = &s->files[i];

		if (f->index >= 0)
			uring_file_unregister(s->u, f->index);
		if (f->fd >= 0)
			close(f->fd);
		if (f->path)
			remove_file(f);
		free(f->path);
	}
	free(s->files);
	free(s);
	return NULL;
}

uint64_t swap_npages(const struct swap *s)
{
	return s->pages_per_file * s->nfiles;
}

unsigned swap_nfiles(const struct swap *s)
{
	return s->nfiles;
}

int swap_locate(const struct swap *s, uint64_t disk, uint64_t *off)
{
	*off = (disk / s->nfiles) * s->page_size;
	return s->files[disk % s->nfiles].index;
}

int swap_page_fd(const struct swap *s, uint64_t disk, uint64_t *off)
{
	*off = (disk / s->nfiles) * s->page_size;
	return s->files[disk % s->nfiles].fd;
}

const char *swap_page_path(const struct swap *s, uint64_t disk)
{
	return s->files[disk % s->nfiles].path;
}

const char *swap_file_path(const struct swap *s, unsigned i)
{
	return i < s->nfiles ? s->files[i].path : NULL;
}

int swap_file_index(const struct swap *s, unsigned i)
{
	return i < s->nfiles ? s->files[i].index : -1;
}

uint64_t swap_default_bytes(const struct swap_dir *dirs, unsigned ndirs, uint32_t page_size, uint64_t want,
			    uint64_t *room_out, const char **short_dir)
{
	uint64_t per = UINT64_MAX, unit = (uint64_t)page_size * ndirs;

	for (unsigned i = 0; i < ndirs; i++) {
		const struct swap_dir *sd = &dirs[i];
		struct statvfs v;
		uint64_t room = 0;

		if (statvfs(sd->path, &v) == 0)
			room = (uint64_t)v.f_bavail * v.f_frsize;
		if (sd->max_bytes) {
			int64_t used = swap_dir_used(sd->path);
			uint64_t left = used >= 0 && (uint64_t)used < sd->max_bytes ? sd->max_bytes - (uint64_t)used : 0;

			if (left < room)
				room = left;
		}
		if (room < per) {
			per = room;
			*short_dir = sd->path;
		}
	}
	/* Keep 1% of the smallest directory's room: fallocate needs some
	 * metadata blocks of its own. */
	per -= per / 100;
	*room_out = per;
	if (per / page_size * unit < want)
		want = per / page_size * unit;
	return want;
}
