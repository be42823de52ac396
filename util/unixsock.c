/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "util/unixsock.h"

union fd_control {
	char buf[CMSG_SPACE(sizeof(int) * FDPASS_MAX)];
	struct cmsghdr align;
};

ssize_t fd_sendmsg(int sock, const struct iovec *iov, size_t iovcnt, const int *fds, unsigned nfds,
		   int flags)
{
	union fd_control ctl;
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = iovcnt };
	ssize_t r;

	if (nfds > FDPASS_MAX || (nfds && !fds))
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		r = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

ssize_t fd_recvmsg(int sock, void *buf, size_t len, int flags, int *fds, unsigned *nfds, unsigned cap,
		   unsigned *nclosed)
{
	union fd_control ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	unsigned first = nfds ? *nfds : 0;
	ssize_t r;

	if (!fds || !nfds)
		cap = 0;
	do
		r = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			/* CMSG_DATA need not be aligned for int. */
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (cap && *nfds < cap) {
				fds[(*nfds)++] = fd;
			} else {
				close(fd);
				if (nclosed)
					(*nclosed)++;
			}
		}
	}
	if (msg.msg_flags & MSG_CTRUNC) {
		for (; cap && *nfds > first; (*nfds)--)
			close(fds[*nfds - 1]);
		return -EPROTO;
	}
	return r;
}

int unix_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		if (e == -EINTR)
			continue;
		close(fd);
		return e;
	}
	return fd;
}
