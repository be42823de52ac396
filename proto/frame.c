/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "spw-proto.h"

int spw_proto_send(int fd, const void *payload, uint32_t len, const int *fds, unsigned nfds)
{
	struct spw_proto_frame_hdr hdr = { .len = len, .flags = 0 };
	union {
		char buf[CMSG_SPACE(sizeof(int) * SPW_PROTO_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov[2] = {
		{ .iov_base = &hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	size_t total = sizeof(hdr) + len, done = 0;

	if (len == 0 || len > SPW_PROTO_MAX_FRAME || nfds > SPW_PROTO_MAX_FDS)
		return -EMSGSIZE;

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

	/* The descriptors ride on the first byte; later partial writes carry
	 * only the rest of the payload. */
	while (done < total) {
		ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)r;
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		while (r > 0 && msg.msg_iovlen > 0) {
			if ((size_t)r >= msg.msg_iov[0].iov_len) {
				r -= (ssize_t)msg.msg_iov[0].iov_len;
				msg.msg_iov++;
				msg.msg_iovlen--;
			} else {
				msg.msg_iov[0].iov_base = (char *)msg.msg_iov[0].iov_base + r;
				msg.msg_iov[0].iov_len -= (size_t)r;
				r = 0;
			}
		}
	}
	return 0;
}

static void close_all(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* Reads exactly len bytes; the first call may also collect descriptors. */
static int read_full(int fd, void *buf, size_t len, int *fds, unsigned *nfds, unsigned cap_fds, int *eof_at_start)
{
	size_t done = 0;

	while (done < len) {
		union {
			char buf[CMSG_SPACE(sizeof(int) * SPW_PROTO_MAX_FDS)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { .iov_base = (char *)buf + done, .iov_len = len - done };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
		ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			unsigned n = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *in = (int *)CMSG_DATA(c);
			for (unsigned i = 0; i < n; i++) {
				if (fds && *nfds < cap_fds)
					fds[(*nfds)++] = in[i];
				else
					close(in[i]); /* more than asked for: never leak */
			}
		}
		if (msg.msg_flags & MSG_CTRUNC)
			return -EPROTO;
		if (r == 0) {
			if (done == 0 && eof_at_start)
				*eof_at_start = 1;
			return -EPROTO;
		}
		done += (size_t)r;
		eof_at_start = NULL;
	}
	return 0;
}

int spw_proto_recv(int fd, char *buf, size_t cap, int *fds, unsigned *nfds)
{
	struct spw_proto_frame_hdr hdr;
	unsigned cap_fds = nfds ? *nfds : 0, got = 0;
	int eof = 0, r;

	r = read_full(fd, &hdr, sizeof(hdr), fds, &got, cap_fds, &eof);
	if (r < 0) {
		if (eof && got == 0)
			r = 0;
		goto fail;
	}
	if (hdr.flags != 0 || hdr.len == 0) {
		r = -EPROTO;
		goto fail;
	}
	if (hdr.len > SPW_PROTO_MAX_FRAME || hdr.len + 1 > cap) {
		r = -EMSGSIZE;
		goto fail;
	}
	r = read_full(fd, buf, hdr.len, fds, &got, cap_fds, NULL);
	if (r < 0)
		goto fail;
	buf[hdr.len] = '\0';
	if (nfds)
		*nfds = got;
	return (int)hdr.len;
fail:
	if (fds)
		close_all(fds, got);
	if (nfds)
		*nfds = 0;
	return r;
}
