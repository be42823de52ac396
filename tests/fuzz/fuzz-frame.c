/* SPDX-License-Identifier: MIT */
/*
 * fuzz-frame: the control-frame decoder (proto/frame.c, spw_proto_recv)
 * on any byte stream, any descriptors riding on it, any receive limits.
 *
 * spw_proto_recv() reads from a descriptor, so the input goes through a
 * socketpair() of this process (no daemon, no path, nothing outside):
 *
 *   byte 0   bits 0-2: descriptors sent with the stream's first byte (0-7)
 *            bits 3-5: the caller's descriptor capacity (0-7, capped at
 *                      SPW_PROTO_MAX_FDS); bit 6: fds NULL
 *   byte 1   the receive buffer: 0-127 the full SPW_PROTO_MAX_FRAME + 1,
 *            128-255 a smaller one (64 to 64 + 127 * 512 bytes)
 *   rest     the stream, as a peer would write it
 *
 * Every call's result is checked against a model decoder written here from
 * spw-proto.h's rules, frame after frame until the first error:
 *
 *   - a whole frame: its length, its payload byte for byte, NUL after it;
 *   - 0 only at the end of the stream on a frame boundary;
 *   - -EPROTO for reserved flags, a zero length, a stream cut inside a
 *     frame; -EMSGSIZE for a length over the maximum or the buffer;
 *   - descriptors: the first frame returns min(sent, capacity) of them,
 *     open; a failed call returns none; after closing what was returned
 *     no descriptor of this process is left open that was not before.
 *
 * A broken rule calls abort(), which libFuzzer and the replay both report.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "fuzz.h"
#include "spw-proto.h"
#include "util/unixsock.h"

#define STREAM_MAX (3 * (SPW_PROTO_MAX_FRAME + 8)) /* what one socket buffer surely holds */
#define FD_SCAN 256 /* descriptors are numbered lowest first: a leak lands below this */

#define FRAME_CHECK(cond, ...)                                                           \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "fuzz-frame: invariant broken: %s: ", #cond);  \
			fprintf(stderr, __VA_ARGS__);                                   \
			fputc('\n', stderr);                                            \
			abort();                                                        \
		}                                                                       \
	} while (0)

static int open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < FD_SCAN; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* What spw_proto_recv must answer for the stream at off (len bytes left):
 * the payload length, 0 for a clean end, or the negative errno. */
static int model(const uint8_t *s, size_t left, size_t cap)
{
	struct spw_proto_frame_hdr h;

	if (left == 0)
		return 0;
	if (left < sizeof(h))
		return -EPROTO;
	memcpy(&h, s, sizeof(h));
	if (h.flags != 0 || h.len == 0)
		return -EPROTO;
	if (h.len > SPW_PROTO_MAX_FRAME || (size_t)h.len + 1 > cap)
		return -EMSGSIZE;
	if (left - sizeof(h) < h.len)
		return -EPROTO;
	return (int)h.len;
}

/* Writes the stream into sv[0] with nsend descriptors on its first byte;
 * returns how many bytes went in (all of them unless the buffer filled). */
static size_t feed(int sock, const uint8_t *s, size_t n, unsigned nsend)
{
	int sent[8], p[2] = { -1, -1 };
	size_t done = 0;

	if (n && nsend && pipe(p) == 0) {
		for (unsigned i = 0; i < nsend; i++)
			sent[i] = p[i % 2];
		struct iovec v = { .iov_base = (void *)s, .iov_len = 1 };
		FRAME_CHECK(fd_sendmsg(sock, &v, 1, sent, nsend, MSG_DONTWAIT) == 1, "descriptors with the first byte");
		done = 1;
	}
	if (p[0] >= 0) {
		close(p[0]);
		close(p[1]);
	}
	while (done < n) {
		ssize_t r = send(sock, s + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r <= 0)
			break;
		done += (size_t)r;
	}
	shutdown(sock, SHUT_WR);
	return done;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char *buf;
	int baseline;
	unsigned nsend, cap_fds;
	size_t cap, n, off = 0, sent;
	int sv[2], fds[SPW_PROTO_MAX_FDS];
	const uint8_t *s;
	int want_null;

	if (size < 2)
		return 0;
	if (!buf) {
		buf = malloc(SPW_PROTO_MAX_FRAME + 1);
		if (!buf)
			abort();
	}
	baseline = open_fds();
	nsend = data[0] & 7;
	cap_fds = (data[0] >> 3) & 7;
	if (cap_fds > SPW_PROTO_MAX_FDS)
		cap_fds = SPW_PROTO_MAX_FDS;
	want_null = (data[0] >> 6) & 1;
	cap = data[1] < 128 ? SPW_PROTO_MAX_FRAME + 1 : 64 + (size_t)(data[1] - 128) * 512;
	s = data + 2;
	n = size - 2 < STREAM_MAX ? size - 2 : STREAM_MAX;

	FRAME_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s", strerror(errno));
	{
		int big = 4 * STREAM_MAX;
		setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
		setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	}
	sent = feed(sv[0], s, n, nsend);
	/* A stream the buffer cut short ends where the writing stopped: the
	 * model sees exactly what the decoder can read. */
	for (int frame = 0;; frame++) {
		unsigned got = cap_fds;
		int expect = model(s + off, sent - off, cap);
		int r = spw_proto_recv(sv[1], buf, cap, want_null ? NULL : fds, want_null ? NULL : &got);

		FRAME_CHECK(r == expect, "frame %d at offset %zu of %zu: decoder %d, rules %d", frame, off, sent, r, expect);
		if (!want_null) {
			unsigned should = frame == 0 && r > 0 && sent > 0 ? (nsend < cap_fds ? nsend : cap_fds) : 0;

			FRAME_CHECK(got == should, "frame %d: %u descriptors returned, %u expected", frame, got, should);
			for (unsigned i = 0; i < got; i++) {
				FRAME_CHECK(fcntl(fds[i], F_GETFD) == FD_CLOEXEC, "descriptor %d returned closed or without "
					   "O_CLOEXEC", fds[i]);
				close(fds[i]);
			}
		}
		if (r <= 0)
			break;
		FRAME_CHECK(buf[r] == '\0', "payload of frame %d not NUL-terminated", frame);
		FRAME_CHECK(memcmp(buf, s + off + sizeof(struct spw_proto_frame_hdr), (size_t)r) == 0,
			   "payload of frame %d differs from the bytes sent", frame);
		off += sizeof(struct spw_proto_frame_hdr) + (size_t)r;
	}
	close(sv[0]);
	close(sv[1]);
	FRAME_CHECK(open_fds() == baseline, "%d descriptors open after the input, %d before: the decoder leaked",
		   open_fds(), baseline);
	return 0;
}
