/* SPDX-License-Identifier: MIT */
/*
 * util/unixsock.h: unix stream sockets: connecting, and sendmsg/recvmsg
 * with descriptors (SCM_RIGHTS), the one place that builds and reads the
 * control messages.
 *
 * Receiving never leaks: every descriptor that arrives is either handed
 * to the caller or closed here, including when the kernel had to cut the
 * control data short (MSG_CTRUNC), which fails the call with -EPROTO.
 */
#ifndef SPW_UTIL_UNIXSOCK_H
#define SPW_UTIL_UNIXSOCK_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Connects a blocking unix stream socket (O_CLOEXEC) to path, retrying
 * on EINTR; returns the fd, -ENAMETOOLONG when path does not fit a
 * sockaddr_un, or another negative errno (-ENOENT, -ECONNREFUSED when
 * nothing listens). */
int unix_connect(const char *path);

/* The most descriptors one call sends, or receives before MSG_CTRUNC. */
#define FDPASS_MAX 16

/* sendmsg(sock, iov) with nfds descriptors attached, flags | MSG_NOSIGNAL,
 * retried on EINTR. The descriptors travel with the first byte written: a
 * caller finishing a partial write passes nfds 0. Returns the bytes
 * written or a negative errno (-EINVAL when nfds > FDPASS_MAX, -EAGAIN
 * for a full socket under MSG_DONTWAIT, -EPIPE when the peer is gone). */
ssize_t fd_sendmsg(int sock, const struct iovec *iov, size_t iovcnt, const int *fds, unsigned nfds,
		   int flags);

/* recvmsg(sock) of up to len bytes into buf, flags | MSG_CMSG_CLOEXEC,
 * retried on EINTR. Descriptors that came are stored at fds[*nfds] onward
 * while *nfds < cap (*nfds advanced); the rest are closed (all of them
 * when fds is NULL or cap 0: the way to refuse descriptors), and *nclosed,
 * when not NULL, grows by their number.
 * Returns the bytes read (0 at end of file) or a negative errno; -EPROTO
 * when the control data was truncated, after closing every descriptor this
 * call received, those put in fds too (*nfds is back to its value on
 * entry). nfds may be NULL when fds is. */
ssize_t fd_recvmsg(int sock, void *buf, size_t len, int flags, int *fds, unsigned *nfds, unsigned cap,
		   unsigned *nclosed);

#endif
