/* SPDX-License-Identifier: MIT */
/*
 * util/fdio.h: whole reads and writes on a descriptor, retried on EINTR
 * and continued after short transfers. Each returns 0, -errno, or -EIO
 * when the file ended (a read) or the kernel took nothing (a write).
 */
#ifndef SPW_UTIL_FDIO_H
#define SPW_UTIL_FDIO_H

#include <stddef.h>
#include <stdint.h>

int fd_write_all(int fd, const void *buf, size_t n);
int fd_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
int fd_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* Whether files made in the directory dirfd can be opened O_DIRECT
 * (ramfs, and tmpfs before Linux 6.6, refuse it with EINVAL at open):
 * 1, 0 when refused, or -errno when no probe file could be made there. */
int fd_dir_takes_direct(int dirfd);

#endif
