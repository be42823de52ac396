/* SPDX-License-Identifier: MIT */
/*
 * Fair limits per uid through a real spillwayd (limits.* in the config):
 * sessions, region bytes and swap bytes per uid at attach (a swap size the
 * attach did not name is cut to what the uid has left), control
 * connections per uid, and a deadline for HELLO. Each refusal names the
 * limit, the figures and the key to raise. Another uid is not held back by
 * the first one's use, and its attempt to take a name the first one holds
 * is refused without telling it who holds it.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)
#define NOBODY 65534

static struct spw_test_daemon d;

/* An attach on fd; swap < 0: no swap_bytes in the request. */
static cJSON *attach(int fd, const char *name, uint64_t bytes, long long swap)
{
	char req[256];

	if (swap < 0)
		snprintf(req, sizeof(req), "{\"type\":\"attach\",\"session\":\"%s\",\"region_bytes\":%llu,\"page_size\":%u}",
			 name, (unsigned long long)bytes, MiB);
	else
		snprintf(req, sizeof(req),
			 "{\"type\":\"attach\",\"session\":\"%s\",\"region_bytes\":%llu,\"page_size\":%u,\"swap_bytes\":%lld}",
			 name, (unsigned long long)bytes, MiB, swap);
	return raw_request(fd, req);
}

static void refused(cJSON *r, int err, const char *a, const char *b)
{
	ASSERT_EQ(raw_reply_errno(r), -err);
	ASSERT_CONTAINS(raw_reply_message(r), a);
	ASSERT_CONTAINS(raw_reply_message(r), b);
	cJSON_Delete(r);
}

static double used_bytes(void)
{
	cJSON *st = raw_status(d.status);
	double v = raw_num(st, "pool.used_bytes");

	cJSON_Delete(st);
	return v;
}

static void nobody_child(int to_parent)
{
	int f1, f2;
	cJSON *r;

	ASSERT_EQ(setgroups(0, NULL), 0);
	ASSERT_EQ(setgid(NOBODY), 0);
	ASSERT_EQ(setuid(NOBODY), 0);
	/* root holds as many sessions as the limit allows: not our share. */
	f1 = raw_connect_hello(d.control);
	r = attach(f1, "nobody/a", 2 * MiB, 0);
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	f2 = raw_connect_hello(d.control);
	r = attach(f2, "lim/a", MiB, 0);
	/* root's name: refused, and the reply names neither uid 0 nor a pid. */
	ASSERT_EQ(raw_reply_errno(r), -EPERM);
	ASSERT_CONTAINS(raw_reply_message(r), "another user");
	ASSERT_CONTAINS(raw_reply_message(r), "pick another name");
	ASSERT_TRUE(strstr(raw_reply_message(r), "uid") == NULL || strstr(raw_reply_message(r), "uid 0") == NULL);
	ASSERT_TRUE(strstr(raw_reply_message(r), "pid") == NULL);
	cJSON_Delete(r);
	r = attach(f2, "nobody/b", 2 * MiB, 0);
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	ASSERT_EQ(write(to_parent, "k", 1), 1);
	close(f1);
	close(f2);
	_exit(0);
}

int main(void)
{
	char dir[64], cfg[1024];
	int fa, fb, fc, more[4], late, st = -1;
	pid_t child;
	cJSON *r;

	if (access("/var/tmp", W_OK) < 0)
		SKIP("/var/tmp is not writable");
	snprintf(dir, sizeof(dir), "/var/tmp/spw-limits-XXXXXX");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"6MiB\"},"
		 " \"limits\": {\"sessions_per_uid\": 2, \"connections_per_uid\": 5, \"region_bytes_per_uid\": \"6MiB\","
		 "   \"swap_bytes_per_uid\": \"8MiB\", \"hello_timeout_ms\": 2000},"
		 " \"log\": {\"level\": \"info\"}}", dir);
	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));

	/* Sessions per uid, and the default swap cut to the uid's share. */
	fa = raw_connect_hello(d.control);
	r = attach(fa, "lim/a", 2 * MiB, -1);
	ASSERT_EQ(raw_reply_errno(r), 0);
	ASSERT_EQ(raw_num(r, "swap_bytes"), 6.0 * MiB);
	cJSON_Delete(r);
	fb = raw_connect_hello(d.control);
	r = attach(fb, "lim/b", 2 * MiB, -1);
	ASSERT_EQ(raw_reply_errno(r), 0);
	ASSERT_EQ(raw_num(r, "swap_bytes"), 2.0 * MiB); /* 8 MiB per uid, 6 taken */
	cJSON_Delete(r);
	fc = raw_connect_hello(d.control);
	refused(attach(fc, "lim/c", MiB, 0), EDQUOT, "limits.sessions_per_uid (2)", "already has 2 sessions");

	/* Region bytes per uid. */
	close(fb);
	for (int i = 0; i < 300 && used_bytes() != 2.0 * MiB; i++)
		usleep(10000);
	ASSERT_EQ(used_bytes(), 2.0 * MiB);
	refused(attach(fc, "lim/c", 5 * MiB, 0), EDQUOT, "limits.region_bytes_per_uid (6.0 MiB", "hold 2.0 MiB");
	/* Swap bytes per uid, asked for by name. */
	refused(attach(fc, "lim/c", MiB, 4 * MiB), EDQUOT, "limits.swap_bytes_per_uid (8.0 MiB", "hold 6.0 MiB");
	r = attach(fc, "lim/c", MiB, 2 * MiB);
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);

	/* No hello within limits.hello_timeout_ms: told so, then closed.
	 * Every other connection here says hello as soon as it is made, so
	 * the deadline is long enough that no scheduling delay between the
	 * two makes it late (with 300 ms, a client or daemon held off the CPU
	 * that long between connect and hello was timed out). */
	late = spw_test_connect(d.control);
	ASSERT_OK(late);
	r = raw_recv(late, NULL, NULL, NULL);
	refused(r, ETIMEDOUT, "no hello within 2000 ms", "limits.hello_timeout_ms");
	ASSERT_TRUE(raw_wait_eof(late, 3000));
	close(late);
	/* Connections per uid: fa and fc are open, three more fit. */
	for (int i = 0; i < 3; i++)
		more[i] = raw_connect_hello(d.control);
	more[3] = spw_test_connect(d.control);
	ASSERT_OK(more[3]);
	r = raw_recv(more[3], NULL, NULL, NULL);
	refused(r, EDQUOT, "limits.connections_per_uid (5)", "already has 5 control connections");
	ASSERT_TRUE(raw_wait_eof(more[3], 3000));
	close(more[3]);
	for (int i = 0; i < 3; i++)
		close(more[i]);

	/* A frame of 60 KiB sent in pieces: its buffer grows as the pieces
	 * come (not sized from the header), and the request is whole. */
	{
		static char big[60 * 1024];
		struct spw_proto_frame_hdr h = { 0 };
		size_t n, off = 0;

		n = (size_t)snprintf(big, sizeof(big), "{\"type\":\"register\",\"name\":\"grown\",\"bytes\":4096,\"pad\":\"");
		memset(big + n, 'x', sizeof(big) - n - 3);
		memcpy(big + sizeof(big) - 3, "\"}", 3);
		h.len = (uint32_t)strlen(big);
		ASSERT_EQ(write(fa, &h, sizeof(h)), (ssize_t)sizeof(h));
		while (off < h.len) {
			size_t k = h.len - off < 1500 ? h.len - off : 1500;

			ASSERT_EQ(write(fa, big + off, k), (ssize_t)k);
			off += k;
			usleep(1000);
		}
		r = raw_recv(fa, NULL, NULL, NULL);
		ASSERT_EQ(raw_reply_errno(r), 0);
		cJSON_Delete(r);
	}
	/* Connections that said hello are not timed out. */
	r = raw_request(fa, "{\"type\":\"register\",\"name\":\"w\",\"bytes\":4096}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);

	/* Another uid has its own share, and cannot take root's names. */
	if (geteuid() == 0) {
		int up[2];
		char c;

		ASSERT_EQ(pipe(up), 0);
		child = fork();
		ASSERT_GE(child, 0);
		if (child == 0) {
			close(up[0]);
			nobody_child(up[1]);
		}
		close(up[1]);
		ASSERT_EQ(read(up[0], &c, 1), 1);
		close(up[0]);
		ASSERT_EQ(waitpid(child, &st, 0), child);
		ASSERT_TRUE(WIFEXITED(st));
		ASSERT_EQ(WEXITSTATUS(st), 0);
	} else {
		fprintf(stderr, "not root: the other-uid part is skipped\n");
	}

	close(fa);
	close(fc);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_EQ(rmdir(dir), 0);
	return 0;
}
