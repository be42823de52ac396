/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "util/fdio.h"

/* One loop for the three: off < 0 is write(), else pwrite()/pread(). */
static int whole(int fd, void *buf, size_t n, int64_t off, int reading)
{
	char *p = buf;

	while (n) {
		ssize_t r = reading ? pread(fd, p, n, (off_t)off)
			    : off < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p += r;
		n -= (size_t)r;
		if (off >= 0)
			off += r;
	}
	return 0;
}

int fd_write_all(int fd, const void *buf, size_t n)
{
	return whole(fd, (void *)buf, n, -1, 0);
}

int fd_pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	return whole(fd, (void *)buf, n, (int64_t)off, 0);
}

int fd_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	return whole(fd, buf, n, (int64_t)off, 1);
}

int fd_dir_takes_direct(int dirfd)
{
	static const char probe[] = ".spillway-direct-probe";
	int fd = openat(dirfd, probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600), r = -errno;

	/* Some filesystems make the file before they refuse the flag. */
	unlinkat(dirfd, probe, 0);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	return r == -EINVAL ? 0 : r;
}
