/* SPDX-License-Identifier: MIT */
/*
 * status.c: fetching the daemon's status document. The status socket
 * answers one frame on connect and closes; we send nothing.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "client-private.h"
#include "util/unixsock.h"

#define STATUS_TIMEOUT_MS 5000

SPW_EXPORT int spw_status_fetch(const char *path, char **ret_json)
{
	char defpath[108];
	struct timeval tv = { .tv_sec = STATUS_TIMEOUT_MS / 1000 };
	struct pollfd pfd = { .events = POLLIN };
	char *buf = NULL, *out;
	unsigned nfds = 0;
	int fd, r;

	if (!ret_json)
		return -EINVAL;
	if (!path) {
		r = spw_socket_path(SPW_SOCKET_STATUS, defpath, sizeof(defpath));
		if (r < 0)
			return r;
		path = defpath;
	}
	fd = unix_connect(path);
	if (fd < 0)
		return fd;
	/* The poll bounds the wait for the frame to start, SO_RCVTIMEO a
	 * daemon that stops in the middle of one. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	pfd.fd = fd;
	do
		r = poll(&pfd, 1, STATUS_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r <= 0) {
		r = r == 0 ? -ETIMEDOUT : -errno;
		goto out;
	}
	buf = malloc(SPW_PROTO_MAX_FRAME + 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	/* nfds = 0: any descriptor the daemon attaches is closed on receipt. */
	r = spw_proto_recv(fd, buf, SPW_PROTO_MAX_FRAME + 1, NULL, &nfds);
	if (r == 0)
		r = -EPROTO; /* closed without a document */
	if (r == -EAGAIN || r == -EWOULDBLOCK)
		r = -ETIMEDOUT;
	if (r < 0)
		goto out;
	out = strdup(buf);
	if (!out) {
		r = -ENOMEM;
		goto out;
	}
	*ret_json = out;
	r = 0;
out:
	free(buf);
	close(fd);
	return r;
}
