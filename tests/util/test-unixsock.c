/* SPDX-License-Identifier: MIT */
/*
 * util/unixsock.h over socketpair(): descriptors arrive, extras are closed,
 * refused ones are closed, and a truncated control message closes every
 * one and fails with -EPROTO. "Closed" is checked the honest way: each
 * descriptor sent is a pipe's write end; once every copy is closed, the
 * read end sees end of file.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "test.h"
#include "util/unixsock.h"

#define NPIPES (FDPASS_MAX + 4)

static int rd[NPIPES], wr[NPIPES];

static void make_pipes(void)
{
	for (int i = 0; i < NPIPES; i++) {
		int p[2];

		ASSERT_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
		rd[i] = p[0];
		wr[i] = p[1];
	}
}

/* Closes our write ends of the first n pipes, then checks each read end:
 * end of file (no copy of the write end open anywhere) from pipe
 * first_closed on, a copy still open before it. */
static void expect_closed(int n, int first_closed)
{
	char c;

	for (int i = 0; i < n; i++) {
		close(wr[i]);
		if (i >= first_closed)
			ASSERT_EQ(read(rd[i], &c, 1), 0);
		else
			ASSERT_EQ(read(rd[i], &c, 1), -1); /* EAGAIN: a copy lives */
	}
}

static void close_reads(int n)
{
	for (int i = 0; i < n; i++)
		close(rd[i]);
}

static void pair(int sv[2])
{
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void test_round_trip(void)
{
	int sv[2], got[4];
	unsigned n = 0, closed = 0;
	char buf[8] = { 0 };
	struct iovec iov = { .iov_base = "hello", .iov_len = 5 };

	make_pipes();
	pair(sv);
	ASSERT_EQ(fd_sendmsg(sv[0], &iov, 1, wr, 3, 0), 5);
	/* Room for two: the third is closed and counted. */
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), 0, got, &n, 2, &closed), 5);
	ASSERT_STREQ(buf, "hello");
	ASSERT_EQ(n, 2);
	ASSERT_EQ(closed, 1);
	for (unsigned i = 0; i < n; i++) {
		ASSERT_TRUE(got[i] != wr[i]);
		ASSERT_EQ(fcntl(got[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
		/* The received one writes into the same pipe. */
		ASSERT_EQ(write(got[i], "x", 1), 1);
		ASSERT_EQ(read(rd[i], buf, 1), 1);
	}
	expect_closed(3, 2); /* pipes 0 and 1 still have got[] open */
	close(got[0]);
	close(got[1]);
	ASSERT_EQ(read(rd[0], buf, 1), 0);
	close_reads(NPIPES);
	for (int i = 3; i < NPIPES; i++)
		close(wr[i]);

	/* No descriptors, EOF, and a bad count. */
	ASSERT_EQ(fd_sendmsg(sv[0], &iov, 1, NULL, 0, 0), 5);
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), 0, NULL, NULL, 0, NULL), 5);
	ASSERT_EQ(fd_sendmsg(sv[0], &iov, 1, wr, FDPASS_MAX + 1, 0), -EINVAL);
	close(sv[0]);
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), 0, NULL, NULL, 0, NULL), 0);
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL, 0, NULL), 0);
	close(sv[1]);
}

static void test_refused(void)
{
	int sv[2];
	unsigned closed = 0;
	char buf[8];
	struct iovec iov = { .iov_base = "ab", .iov_len = 2 };

	make_pipes();
	pair(sv);
	ASSERT_EQ(fd_sendmsg(sv[0], &iov, 1, wr, FDPASS_MAX, 0), 2);
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), 0, NULL, NULL, 0, &closed), 2);
	ASSERT_EQ(closed, FDPASS_MAX);
	expect_closed(NPIPES, 0);
	close_reads(NPIPES);
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL, 0, NULL), -EAGAIN);
	close(sv[0]);
	close(sv[1]);
}

/* More descriptors than fd_recvmsg() has room for, sent by hand: the
 * kernel truncates, and every one that did arrive is closed, the ones
 * stored for the caller too. */
static void test_truncated(void)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * NPIPES)];
		struct cmsghdr a;
	} ctl;
	struct iovec iov = { .iov_base = "cd", .iov_len = 2 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *c;
	int sv[2], got[NPIPES] = { -1 };
	unsigned n = 1; /* one slot already used by an earlier call: kept */
	char buf[8];

	make_pipes();
	pair(sv);
	memset(&ctl, 0, sizeof(ctl));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * NPIPES);
	memcpy(CMSG_DATA(c), wr, sizeof(int) * NPIPES);
	ASSERT_EQ(sendmsg(sv[0], &m, 0), 2);
	ASSERT_EQ(fd_recvmsg(sv[1], buf, sizeof(buf), 0, got, &n, NPIPES, NULL), -EPROTO);
	ASSERT_EQ(n, 1);
	expect_closed(NPIPES, 0);
	close_reads(NPIPES);
	close(sv[0]);
	close(sv[1]);
}

static void test_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[] = "/tmp/spw-util-XXXXXX", path[sizeof(sa.sun_path) + 8];
	int l, c, a;

	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	ASSERT_EQ(unix_connect(path), -ENOENT);

	l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_TRUE(l >= 0);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	ASSERT_EQ(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* Bound but not listening: refused. */
	ASSERT_EQ(unix_connect(path), -ECONNREFUSED);
	ASSERT_EQ(listen(l, 1), 0);
	c = unix_connect(path);
	ASSERT_TRUE(c >= 0);
	ASSERT_EQ(fcntl(c, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	a = accept(l, NULL, NULL);
	ASSERT_TRUE(a >= 0);
	ASSERT_EQ(write(c, "k", 1), 1);
	ASSERT_EQ(read(a, path + 0, 1), 1);
	ASSERT_EQ(path[0], 'k');
	close(a);
	close(c);
	close(l);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	unlink(path);
	rmdir(dir);

	/* sizeof(sun_path) bytes: no room left for the NUL. */
	memset(path, 'p', sizeof(sa.sun_path));
	path[0] = '/';
	path[sizeof(sa.sun_path)] = '\0';
	ASSERT_EQ(unix_connect(path), -ENAMETOOLONG);
}

int main(void)
{
	test_connect();
	test_round_trip();
	test_refused();
	test_truncated();
	return 0;
}
