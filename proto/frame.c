/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <unistd.h>
#include <sys/uio.h>

#include "spw-proto.h"
#include "util/unixsock.h"

_Static_assert(SPW_PROTO_MAX_FDS <= FDPASS_MAX, "a frame's descriptors fit one fd_sendmsg()");

int spw_proto_send(int fd, const void *payload, uint32_t len, const int *fds, unsigned nfds)
{
	struct spw_proto_frame_hdr hdr = { .len = len, .flags = 0 };
	struct iovec iov[2] = {
		{ .iov_base = &hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct iovec *v = iov;
	size_t nv = 2, total = sizeof(hdr) + len, done = 0;

	if (len == 0 || len > SPW_PROTO_MAX_FRAME || nfds > SPW_PROTO_MAX_FDS)
		return -EMSGSIZE;

	while (done < total) {
		ssize_t r = fd_sendmsg(fd, v, nv, fds, nfds, 0);

		if (r < 0)
			return (int)r;
		done += (size_t)r;
		/* The descriptors rode on the first byte; later partial writes
		 * carry only the rest of the payload. */
		nfds = 0;
		while (r > 0 && nv > 0) {
			if ((size_t)r >= v[0].iov_len) {
				r -= (ssize_t)v[0].iov_len;
				v++;
				nv--;
			} else {
				v[0].iov_base = (char *)v[0].iov_base + r;
				v[0].iov_len -= (size_t)r;
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

/* Reads exactly len bytes; the first call may also collect descriptors
 * (fd_recvmsg() closes those beyond cap_fds, and every one on MSG_CTRUNC). */
static int read_full(int fd, void *buf, size_t len, int *fds, unsigned *nfds, unsigned cap_fds, int *eof_at_start)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = fd_recvmsg(fd, (char *)buf + done, len - done, 0, fds, nfds, cap_fds, NULL);

		if (r < 0)
			return (int)r;
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
