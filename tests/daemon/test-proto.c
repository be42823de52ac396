/* SPDX-License-Identifier: MIT */
/*
 * proto/ without a daemon: frames over socketpair() (payload, descriptors,
 * reserved flags, oversized, truncated, EOF), ring layout and entry checks,
 * name and page-size validators.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "spw-proto.h"
#include "spw-ring.h"
#include "test.h"

static char buf[SPW_PROTO_MAX_FRAME + 1];

static void pair(int sv[2])
{
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void test_roundtrip(void)
{
	int sv[2], fds[SPW_PROTO_MAX_FDS], p[2];
	unsigned n = SPW_PROTO_MAX_FDS;
	const char *msg = "{\"type\":\"hello\"}";

	pair(sv);
	ASSERT_EQ(pipe(p), 0);
	ASSERT_OK(spw_proto_send(sv[0], msg, (uint32_t)strlen(msg), p, 2));
	ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), fds, &n), (int)strlen(msg));
	ASSERT_STREQ(buf, msg);
	ASSERT_EQ(n, 2);
	ASSERT_TRUE(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	/* The received read end works: the pipe went across. */
	ASSERT_EQ(write(p[1], "x", 1), 1);
	ASSERT_EQ(read(fds[0], buf, 1), 1);
	close(fds[0]);
	close(fds[1]);
	close(p[0]);
	close(p[1]);

	/* A frame of exactly the maximum size passes. */
	{
		static char big[SPW_PROTO_MAX_FRAME];
		memset(big, 'b', sizeof(big));
		int st = -1;
		pid_t pid = fork();
		if (pid == 0) {
			_exit(spw_proto_send(sv[0], big, SPW_PROTO_MAX_FRAME, NULL, 0) == 0 ? 0 : 1);
		}
		ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), NULL, NULL), (int)SPW_PROTO_MAX_FRAME);
		ASSERT_EQ(buf[SPW_PROTO_MAX_FRAME - 1], 'b');
		ASSERT_EQ(buf[SPW_PROTO_MAX_FRAME], '\0');
		ASSERT_EQ(waitpid(pid, &st, 0), pid);
		ASSERT_EQ(st, 0);
	}
	close(sv[0]);
	ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), NULL, NULL), 0); /* orderly EOF */
	close(sv[1]);
}

static void test_send_limits(void)
{
	int sv[2];

	pair(sv);
	ASSERT_EQ(spw_proto_send(sv[0], "", 0, NULL, 0), -EMSGSIZE);
	ASSERT_EQ(spw_proto_send(sv[0], buf, SPW_PROTO_MAX_FRAME + 1, NULL, 0), -EMSGSIZE);
	close(sv[1]);
	ASSERT_EQ(spw_proto_send(sv[0], "{}", 2, NULL, 0), -EPIPE);
	close(sv[0]);
}

static void test_bad_frames(void)
{
	struct spw_proto_frame_hdr h;
	int sv[2], fds[4], p[2];
	unsigned n;

	/* reserved flags */
	pair(sv);
	h = (struct spw_proto_frame_hdr){ .len = 2, .flags = 1 };
	ASSERT_EQ(write(sv[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	ASSERT_EQ(write(sv[0], "{}", 2), 2);
	ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), NULL, NULL), -EPROTO);
	close(sv[0]);
	close(sv[1]);

	/* oversized */
	pair(sv);
	h = (struct spw_proto_frame_hdr){ .len = SPW_PROTO_MAX_FRAME + 1 };
	ASSERT_EQ(write(sv[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), NULL, NULL), -EMSGSIZE);
	close(sv[0]);
	close(sv[1]);

	/* zero length */
	pair(sv);
	h = (struct spw_proto_frame_hdr){ .len = 0 };
	ASSERT_EQ(write(sv[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), NULL, NULL), -EPROTO);
	close(sv[0]);
	close(sv[1]);

	/* a buffer too small for the frame */
	pair(sv);
	ASSERT_OK(spw_proto_send(sv[0], "{\"a\":1}", 7, NULL, 0));
	ASSERT_EQ(spw_proto_recv(sv[1], buf, 4, NULL, NULL), -EMSGSIZE);
	close(sv[0]);
	close(sv[1]);

	/* truncated: EOF inside the payload, and the descriptor that came
	 * with the header is closed, not leaked */
	ASSERT_EQ(pipe(p), 0);
	pair(sv);
	h = (struct spw_proto_frame_hdr){ .len = 100 };
	{
		char frame[sizeof(h) + 10];
		memcpy(frame, &h, sizeof(h));
		memcpy(frame + sizeof(h), "{\"type\":\"h", 10);
		struct iovec iov = { .iov_base = frame, .iov_len = sizeof(frame) };
		union {
			char b[CMSG_SPACE(sizeof(int))];
			struct cmsghdr a;
		} ctl;
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &p[1], sizeof(int));
		ASSERT_EQ(sendmsg(sv[0], &m, 0), (ssize_t)sizeof(frame));
	}
	close(sv[0]);
	close(p[1]);
	n = 4;
	ASSERT_EQ(spw_proto_recv(sv[1], buf, sizeof(buf), fds, &n), -EPROTO);
	ASSERT_EQ(n, 0);
	/* Every write end is closed now (ours and the one received), so the
	 * read end sees EOF: nothing leaked. */
	ASSERT_EQ(read(p[0], buf, 1), 0);
	close(p[0]);
	close(sv[1]);
}

static void test_ring_layout(void)
{
	struct spw_ring_layout l;

	ASSERT_OK(spw_ring_layout(256, 512, &l));
	ASSERT_EQ(l.sq_hdr_off, 0);
	ASSERT_EQ(l.cq_hdr_off, 192);
	ASSERT_EQ(l.sqes_off, 384);
	ASSERT_EQ(l.cqes_off, 384 + 256 * 32);
	ASSERT_EQ(l.bytes % 4096, 0);
	ASSERT_GE(l.bytes, l.cqes_off + 512 * 16);
	ASSERT_EQ(l.sqes_off % 64, 0);
	ASSERT_OK(spw_ring_layout(8, 8, &l));
	ASSERT_OK(spw_ring_layout(4096, 4096, &l));
	ASSERT_EQ(spw_ring_layout(4, 8, &l), -EINVAL);
	ASSERT_EQ(spw_ring_layout(8192, 8192, &l), -EINVAL);
	ASSERT_EQ(spw_ring_layout(100, 128, &l), -EINVAL);
	ASSERT_EQ(spw_ring_layout(256, 128, &l), -EINVAL);
	ASSERT_EQ(spw_ring_layout(0, 0, &l), -EINVAL);
}

static void test_sqe_check(void)
{
	struct spw_sqe s;

	for (unsigned op = 0; op < SPW_OP__COUNT; op++) {
		s = (struct spw_sqe){ .opcode = (uint8_t)op };
		if (op == SPW_OP_MARK) /* a mark names its step */
			s = (struct spw_sqe){ .opcode = (uint8_t)op, .flags = SPW_MARK_OPEN, .arg = 1 };
		ASSERT_OK(spw_sqe_check(&s));
		ASSERT_TRUE(strcmp(spw_op_name(op), "unknown") != 0);
	}
	ASSERT_STREQ(spw_op_name(SPW_OP_PIN), "pin");
	ASSERT_STREQ(spw_op_name(200), "unknown");
	s = (struct spw_sqe){ .opcode = SPW_OP__COUNT };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = 255 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_NOP, .reserved0 = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_NOP, .reserved1 = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_NOP, .arg = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	/* MARK: exactly one of OPEN, COMMIT and STATS, a step from 1; only a
	 * COMMIT carries the loss scale and good steps. */
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_COMMIT, .arg = 7, .tensor = 0x47800000u, .page = 3 };
	ASSERT_OK(spw_sqe_check(&s));
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_COMMIT };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_OPEN | SPW_MARK_COMMIT, .arg = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	/* An OPEN's page says who opened the step: an update (0) or
	 * spw_optimizer_write (SPW_MARK_BY_WRITE); nothing else. */
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_OPEN, .arg = 1, .page = SPW_MARK_BY_WRITE };
	ASSERT_OK(spw_sqe_check(&s));
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_OPEN, .arg = 1, .page = 2 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_OPEN, .arg = 1, .tensor = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .arg = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	/* STATS: the step's clip coefficient and kernel time, any bits (the
	 * daemon only shows them); never with another flag or step 0. */
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_STATS, .arg = 2, .tensor = 0x3f800000u, .page = 9 };
	ASSERT_OK(spw_sqe_check(&s));
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_STATS | SPW_MARK_COMMIT, .arg = 2 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_MARK, .flags = SPW_MARK_STATS };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	/* PIN takes OVERWRITE (bit 0, the same bit as UNPIN's DIRTY) and
	 * nothing else; NOP takes no flag. */
	s = (struct spw_sqe){ .opcode = SPW_OP_PIN, .flags = SPW_PIN_OVERWRITE };
	ASSERT_OK(spw_sqe_check(&s));
	s = (struct spw_sqe){ .opcode = SPW_OP_PIN, .flags = 2 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_NOP, .flags = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_UNPIN, .flags = SPW_UNPIN_DIRTY };
	ASSERT_OK(spw_sqe_check(&s));
	s = (struct spw_sqe){ .opcode = SPW_OP_UNPIN, .flags = 4 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_UNPIN, .flags = SPW_UNPIN_DIRTY, .arg = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL); /* arg only with COPY_OF */
	/* COPY_OF names the page copied in arg (tensor << 32 | page), and
	 * comes with DIRTY: a copy is new data. */
	s = (struct spw_sqe){ .opcode = SPW_OP_UNPIN, .flags = SPW_UNPIN_DIRTY | SPW_UNPIN_COPY_OF,
			      .arg = (uint64_t)3 << 32 | 7 };
	ASSERT_OK(spw_sqe_check(&s));
	s = (struct spw_sqe){ .opcode = SPW_OP_UNPIN, .flags = SPW_UNPIN_DIRTY | SPW_UNPIN_COPY_OF };
	ASSERT_OK(spw_sqe_check(&s)); /* tensor 0 page 0 */
	s = (struct spw_sqe){ .opcode = SPW_OP_UNPIN, .flags = SPW_UNPIN_COPY_OF, .arg = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
	s = (struct spw_sqe){ .opcode = SPW_OP_PIN, .flags = SPW_PIN_OVERWRITE, .arg = 1 };
	ASSERT_EQ(spw_sqe_check(&s), -EINVAL);
}

static void test_names(void)
{
	char longname[SPW_PROTO_MAX_SESSION_NAME + 2];

	ASSERT_TRUE(spw_proto_session_name_valid("job/0"));
	ASSERT_TRUE(spw_proto_session_name_valid("a.b-c_d/17"));
	ASSERT_TRUE(!spw_proto_session_name_valid(""));
	ASSERT_TRUE(!spw_proto_session_name_valid(NULL));
	ASSERT_TRUE(!spw_proto_session_name_valid("/abs"));
	ASSERT_TRUE(!spw_proto_session_name_valid(".hidden"));
	ASSERT_TRUE(!spw_proto_session_name_valid("a/../b"));
	ASSERT_TRUE(!spw_proto_session_name_valid("sp ace"));
	ASSERT_TRUE(!spw_proto_session_name_valid("quo\"te"));
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ASSERT_TRUE(!spw_proto_session_name_valid(longname));
	longname[SPW_PROTO_MAX_SESSION_NAME] = '\0';
	ASSERT_TRUE(spw_proto_session_name_valid(longname));
	ASSERT_TRUE(spw_proto_tensor_name_valid("layer.0.weight exp_avg"));
	ASSERT_TRUE(!spw_proto_tensor_name_valid("tab\there"));
	ASSERT_TRUE(!spw_proto_tensor_name_valid(""));
	ASSERT_TRUE(spw_proto_page_size_valid(64 * 1024));
	ASSERT_TRUE(spw_proto_page_size_valid(64u << 20));
	ASSERT_TRUE(!spw_proto_page_size_valid(32 * 1024));
	ASSERT_TRUE(!spw_proto_page_size_valid(128u << 20));
	ASSERT_TRUE(!spw_proto_page_size_valid(3u << 20));
	ASSERT_TRUE(!spw_proto_page_size_valid(0));
}

int main(void)
{
	test_roundtrip();
	test_send_limits();
	test_bad_frames();
	test_ring_layout();
	test_sqe_check();
	test_names();
	return 0;
}
