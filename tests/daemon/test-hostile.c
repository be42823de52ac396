/* SPDX-License-Identifier: MIT */
/*
 * Hostile control clients: non-JSON, wrong types, messages before hello,
 * version and magic mismatches, second hello/attach, sizes that overflow,
 * oversized, flagged, empty and truncated frames, a half frame that must
 * not stall anyone else, descriptors sent to the daemon (closed), and a
 * client that never reads its replies. The daemon answers what it can,
 * hangs up on framing violations, and keeps serving everyone else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/time.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

static struct spw_test_daemon d;

static void expect_err(int fd, const char *json, int err, const char *needle)
{
	cJSON *r = raw_request(fd, json);

	if (!r)
		TEST_FAIL("no reply to %s", json);
	if (raw_reply_errno(r) != -err)
		TEST_FAIL("%s: expected errno %d, got %d (%s)", json, err, -raw_reply_errno(r), raw_reply_message(r));
	if (needle)
		ASSERT_CONTAINS(raw_reply_message(r), needle);
	cJSON_Delete(r);
}

static void alive(void)
{
	int fd = raw_connect_hello(d.control);
	cJSON *st = raw_status(d.status);

	ASSERT_EQ(raw_num(st, "pid"), d.pid);
	cJSON_Delete(st);
	close(fd);
}

static void send_hdr(int fd, uint32_t len, uint32_t flags)
{
	struct spw_proto_frame_hdr h = { .len = len, .flags = flags };

	ASSERT_EQ(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
}

static void test_messages(void)
{
	char hello2[128];
	int fd = spw_test_connect(d.control);

	ASSERT_OK(fd);
	expect_err(fd, "hello?", EBADMSG, "not a JSON object");
	expect_err(fd, "[1,2]", EBADMSG, "not a JSON object");
	expect_err(fd, "{\"x\":1}", EBADMSG, "\"type\"");
	expect_err(fd, "{\"type\":5}", EBADMSG, "\"type\"");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"a/0\",\"region_bytes\":1048576}", EPROTO, "send hello first");
	expect_err(fd, "{\"type\":\"register\"}", EPROTO, "before hello");
	expect_err(fd, "{\"type\":\"hello\",\"magic\":1498894419,\"major\":\"1\",\"minor\":0}", EINVAL, "\"major\" must be an integer");
	expect_err(fd, "{\"type\":\"hello\",\"magic\":1498894419,\"minor\":0}", EINVAL, "\"major\" is missing");
	expect_err(fd, "{\"type\":\"hello\",\"magic\":1,\"major\":1,\"minor\":0}", EPROTO, "magic");
	expect_err(fd, "{\"type\":\"hello\",\"magic\":1498894419,\"major\":1,\"minor\":0,\"features\":-1}", EINVAL, "features");
	expect_err(fd, "{\"type\":\"hello\",\"magic\":1498894419,\"major\":2,\"minor\":7}", EPROTONOSUPPORT, "client speaks 2.7");
	expect_err(fd, "{\"type\":\"hello\",\"magic\":1498894419,\"major\":2,\"minor\":7}", EPROTONOSUPPORT, "speaks 1.0");
	/* Deep nesting is refused by the parser's limit, not the stack. */
	{
		static char deep[60001];
		memset(deep, '[', 30000);
		memset(deep + 30000, ']', 30000);
		expect_err(fd, deep, EBADMSG, NULL);
	}
	close(fd);

	fd = raw_connect_hello(d.control);
	snprintf(hello2, sizeof(hello2), "{\"type\":\"hello\",\"magic\":%u,\"major\":1,\"minor\":0}", SPW_PROTO_MAGIC);
	expect_err(fd, hello2, EPROTO, "already said hello");
	expect_err(fd, "{\"type\":\"shout\"}", EOPNOTSUPP, "unknown message type \"shout\"");
	/* A type carrying a newline, a journald priority and an escape
	 * sequence comes back (and goes to the log) as one escaped line. */
	{
		cJSON *r = raw_request(fd, "{\"type\":\"x\\n<3>forged\\u001b[2J\"}");
		const char *m;

		ASSERT_TRUE(r != NULL);
		ASSERT_EQ(raw_reply_errno(r), -EOPNOTSUPP);
		m = raw_reply_message(r);
		ASSERT_TRUE(strchr(m, '\n') == NULL && strchr(m, '\x1b') == NULL);
		ASSERT_CONTAINS(m, "x\\n<3>forged\\x1b[2J");
		cJSON_Delete(r);
	}
	expect_err(fd, "{\"type\":\"detach\"}", ENOTCONN, NULL);
	expect_err(fd, "{\"type\":\"unregister\",\"tensor\":0}", ENOTCONN, NULL);
	/* Sizes that overflow or are not sizes at all. */
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":1e300}", EINVAL, "region_bytes");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":-1}", EINVAL, "region_bytes");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":1.5}", EINVAL, "region_bytes");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":18446744073709551616}", EINVAL, "region_bytes");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":9007199254740992}", EDQUOT, "pool.session_max_bytes");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":\"big\"}", EINVAL, "must be an integer");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":1048576,\"page_size\":1099511627776}", EINVAL, "page_size");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":1048576,\"persistent\":\"yes\"}", EINVAL, "persistent");
	expect_err(fd, "{\"type\":\"attach\",\"session\":7,\"region_bytes\":1048576}", EINVAL, "session");
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"../etc\",\"region_bytes\":1048576}", EINVAL, "session name");
	{
		cJSON *r = raw_request(fd, "{\"type\":\"attach\",\"session\":\"o/0\",\"region_bytes\":1048576}");
		ASSERT_EQ(raw_reply_errno(r), 0);
		cJSON_Delete(r);
	}
	expect_err(fd, "{\"type\":\"attach\",\"session\":\"o/1\",\"region_bytes\":1048576}", EISCONN, "already attached to session o/0");
	expect_err(fd, "{\"type\":\"register\",\"name\":\"t\",\"bytes\":1e300}", EINVAL, "bytes");
	expect_err(fd, "{\"type\":\"register\",\"name\":\"t\",\"bytes\":9007199254740992}", ENOSPC, "slots");
	expect_err(fd, "{\"type\":\"register\",\"name\":\"t\",\"bytes\":1,\"kind\":3}", EINVAL, "kind");
	expect_err(fd, "{\"type\":\"unregister\",\"tensor\":4294967296}", EINVAL, "tensor");
	expect_err(fd, "{\"type\":\"unregister\",\"tensor\":12}", ENOENT, "no tensor");
	close(fd);
	alive();
}

/* A control frame's JSON is checked as strictly as the config: what
 * cJSON alone would have read some way (ignoring trailing data, taking
 * 012 as 12, keeping raw control characters, taking the first of two
 * keys) is refused with the problem named, and the connection goes on. */
static void test_strict_json(void)
{
	int fd = raw_connect_hello(d.control);

	expect_err(fd, "{\"type\":\"detach\"} {\"type\":\"shout\"}", EBADMSG, "trailing data");
	expect_err(fd, "{\"type\":\"unregister\",\"tensor\":012}", EBADMSG, "leading zero");
	expect_err(fd, "{\"type\":\"sh\nout\"}", EBADMSG, "raw control character");
	expect_err(fd, "{\"type\":\"sh\xff\"}", EBADMSG, "invalid UTF-8");
	expect_err(fd, "{\"type\":\"detach\",\"type\":\"shout\"}", EBADMSG, "the key \"type\" twice");
	expect_err(fd, "{\"type\":\"detach\",\"x\":{\"a\":1,\"b\":2,\"a\":3}}", EBADMSG, "the key \"a\" twice");
	/* The refusals are answers, not framing errors: the same
	 * connection still works. */
	expect_err(fd, "{\"type\":\"detach\",\"x\":{\"a\":1,\"b\":2}}", ENOTCONN, NULL);
	close(fd);
	alive();
}

/* Requests sent back to back without waiting: answered one by one, in
 * order, the register after the attach it depends on. */
static void test_pipelined(void)
{
	char buf[1024];
	const char *msgs[] = {
		"{\"type\":\"hello\",\"magic\":1498894419,\"major\":1,\"minor\":0}",
		"{\"type\":\"attach\",\"session\":\"pipe/0\",\"region_bytes\":8388608}",
		"{\"type\":\"register\",\"name\":\"t\",\"bytes\":4194304}",
		"{\"type\":\"register\",\"name\":\"u\",\"bytes\":4194304}",
		"{\"type\":\"detach\"}",
	};
	const char *types[] = { "hello", "attach", "register", "register", "detach" };
	size_t o = 0;
	int fd = spw_test_connect(d.control);

	for (size_t i = 0; i < 5; i++) {
		struct spw_proto_frame_hdr h = { .len = (uint32_t)strlen(msgs[i]) };
		memcpy(buf + o, &h, sizeof(h));
		memcpy(buf + o + sizeof(h), msgs[i], h.len);
		o += sizeof(h) + h.len;
	}
	ASSERT_EQ(write(fd, buf, o), (ssize_t)o);
	for (size_t i = 0; i < 5; i++) {
		int fds[4];
		unsigned n = 4;
		cJSON *r = raw_recv(fd, fds, &n, NULL);

		ASSERT_TRUE(r != NULL);
		if (raw_reply_errno(r) != 0)
			TEST_FAIL("reply %zu: %s", i, raw_reply_message(r));
		ASSERT_STREQ(cJSON_GetObjectItem(r, "type")->valuestring, types[i]);
		ASSERT_EQ(n, i == 1 ? 4 : 0);
		for (unsigned k = 0; k < n; k++)
			close(fds[k]);
		cJSON_Delete(r);
	}
	close(fd);
}

static void test_framing(void)
{
	int fd, fds[4];
	unsigned n;
	cJSON *r;

	/* Oversized: an error reply, then the daemon hangs up. */
	fd = spw_test_connect(d.control);
	send_hdr(fd, SPW_PROTO_MAX_FRAME + 1, 0);
	n = 4;
	r = raw_recv(fd, fds, &n, NULL);
	ASSERT_EQ(raw_reply_errno(r), -EMSGSIZE);
	ASSERT_CONTAINS(raw_reply_message(r), "65537 bytes");
	cJSON_Delete(r);
	ASSERT_TRUE(raw_wait_eof(fd, 5000));
	close(fd);

	/* Reserved flags. */
	fd = spw_test_connect(d.control);
	send_hdr(fd, 2, 0x80);
	r = raw_recv(fd, NULL, NULL, NULL);
	ASSERT_EQ(raw_reply_errno(r), -EPROTO);
	ASSERT_CONTAINS(raw_reply_message(r), "reserved");
	cJSON_Delete(r);
	ASSERT_TRUE(raw_wait_eof(fd, 5000));
	close(fd);

	/* Zero length. */
	fd = spw_test_connect(d.control);
	send_hdr(fd, 0, 0);
	r = raw_recv(fd, NULL, NULL, NULL);
	ASSERT_EQ(raw_reply_errno(r), -EMSGSIZE);
	cJSON_Delete(r);
	ASSERT_TRUE(raw_wait_eof(fd, 5000));
	close(fd);

	/* Truncated, then gone: nothing to answer, nothing to leak. */
	fd = spw_test_connect(d.control);
	send_hdr(fd, 100, 0);
	ASSERT_EQ(write(fd, "{\"type\":", 8), 8);
	close(fd);
	fd = spw_test_connect(d.control);
	ASSERT_EQ(write(fd, "\x10\x00", 2), 2); /* half a header */
	close(fd);
	alive();
}

static void test_half_frame(void)
{
	const char *hello = "{\"type\":\"hello\",\"magic\":1498894419,\"major\":1,\"minor\":0}";
	size_t len = strlen(hello);
	int slow = spw_test_connect(d.control);
	cJSON *r;

	ASSERT_OK(slow);
	send_hdr(slow, (uint32_t)len, 0);
	ASSERT_EQ(write(slow, hello, 5), 5);
	/* The loop is not stuck on the slow client. */
	alive();
	alive();
	/* The rest, a byte at a time, is reassembled into one frame. */
	for (size_t i = 5; i < len; i++) {
		ASSERT_EQ(write(slow, hello + i, 1), 1);
		if (i % 16 == 0)
			usleep(1000);
	}
	r = raw_recv(slow, NULL, NULL, NULL);
	ASSERT_EQ(raw_reply_errno(r), 0);
	ASSERT_STREQ(cJSON_GetObjectItem(r, "type")->valuestring, "hello");
	cJSON_Delete(r);
	close(slow);
}

static void test_fds_closed(void)
{
	int fd = raw_connect_hello(d.control), p[2], before, after;
	cJSON *r;

	before = raw_count_fds(d.pid);
	ASSERT_GT(before, 0);
	ASSERT_EQ(pipe(p), 0);
	{
		const char *msg = "{\"type\":\"shout\"}";
		int sent[3] = { p[1], p[1], p[0] };
		ASSERT_OK(spw_proto_send(fd, msg, (uint32_t)strlen(msg), sent, 3));
	}
	r = raw_recv(fd, NULL, NULL, NULL);
	ASSERT_EQ(raw_reply_errno(r), -EOPNOTSUPP);
	cJSON_Delete(r);
	after = raw_count_fds(d.pid);
	ASSERT_EQ(after, before);
	/* With our write end closed, EOF on the read end proves the daemon
	 * kept no copy of it. */
	close(p[1]);
	ASSERT_EQ(read(p[0], &r, 1), 0);
	close(p[0]);
	close(fd);
}

static void test_never_reads(void)
{
	const char *msg = "{\"type\":\"shout\",\"pad\":\"................................................................\"}";
	int fd = raw_connect_hello(d.control), flags = 0;
	int sent = 0;

	/* Requests without ever reading a reply: the daemon holds at most one
	 * reply for this client and stops reading; the socket fills and our
	 * writes would block. Everyone else is served meanwhile. */
	{
		struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	for (int i = 0; i < 100000; i++) {
		if (spw_proto_send(fd, msg, (uint32_t)strlen(msg), NULL, 0) < 0)
			break;
		sent++;
	}
	ASSERT_LT(sent, 100000);
	(void)flags;
	alive();
	close(fd);
	alive();
}

/* More connections than the daemon has descriptors: it refuses the excess
 * without spinning on its listener, and recovers once they are gone. */
static void test_fd_exhaustion(void)
{
	struct spw_test_daemon e;
	int fds[120], n = 0, up[2], down[2], st = -1;
	double a, b;
	pid_t starter;
	char c = 0;

	/* The daemon inherits a hard limit of 48 descriptors from a starter
	 * process; this process keeps its own limit for the clients. */
	ASSERT_EQ(pipe(up), 0);
	ASSERT_EQ(pipe(down), 0);
	starter = fork();
	ASSERT_GE(starter, 0);
	if (starter == 0) {
		struct rlimit low = { .rlim_cur = 48, .rlim_max = 48 };
		close(up[0]);
		close(down[1]);
		ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
		raw_guard(&e);
		ASSERT_OK(spw_test_daemon_start(&e, "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
						     " \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false}}"));
		ASSERT_EQ(write(up[1], &e, sizeof(e)), (ssize_t)sizeof(e));
		ASSERT_EQ(read(down[0], &c, 1), 1);
		_exit(spw_test_daemon_stop(&e) == 0 ? 0 : 1);
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(read(up[0], &e, sizeof(e)), (ssize_t)sizeof(e));
	for (; n < 120; n++) {
		fds[n] = spw_test_connect(e.control);
		if (fds[n] < 0)
			break;
	}
	ASSERT_GT(n, 60);
	usleep(200000);
	a = raw_cpu_seconds(e.pid);
	usleep(500000);
	b = raw_cpu_seconds(e.pid);
	ASSERT_TRUE(b - a < 0.1);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	usleep(100000);
	{
		int fd = raw_connect_hello(e.control);
		close(fd);
	}
	ASSERT_EQ(write(down[1], "k", 1), 1);
	ASSERT_EQ(waitpid(starter, &st, 0), starter);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	close(up[0]);
	close(down[1]);
}

int main(void)
{
	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	test_messages();
	test_strict_json();
	test_pipelined();
	test_framing();
	test_half_frame();
	test_fds_closed();
	test_never_reads();
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	test_fd_exhaustion();
	return 0;
}
