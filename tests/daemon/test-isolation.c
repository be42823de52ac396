/* SPDX-License-Identifier: MIT */
/*
 * Two sessions are isolated (separate memfds, slots, tensor ids), and a
 * session name belongs to its uid: uid 65534 may not attach to root's
 * session (EPERM, with a message that does not say whose it is), sees
 * other uids' sessions only as the
 * "others" aggregate, and root sees everybody's.
 */
#include <errno.h>
#include <grp.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)
#define NOBODY 65534

static void test_two_sessions(struct spw_test_daemon *d, struct raw_session *a, struct raw_session *b)
{
	struct stat sa, sb;
	int ta, ta2, tb, slot_a, slot_b;

	ASSERT_OK(raw_attach(d->control, "a/0", 4 * MiB, 1 * MiB, a));
	ASSERT_OK(raw_attach(d->control, "b/0", 4 * MiB, 1 * MiB, b));
	ASSERT_EQ(fstat(a->fds[SPW_ATTACH_FD_REGION], &sa), 0);
	ASSERT_EQ(fstat(b->fds[SPW_ATTACH_FD_REGION], &sb), 0);
	ASSERT_TRUE(sa.st_ino != sb.st_ino);
	ASSERT_EQ(fstat(a->fds[SPW_ATTACH_FD_RINGS], &sa), 0);
	ASSERT_EQ(fstat(b->fds[SPW_ATTACH_FD_RINGS], &sb), 0);
	ASSERT_TRUE(sa.st_ino != sb.st_ino);

	ta = raw_register(a, "w", 1 * MiB, NULL);
	ta2 = raw_register(a, "only-in-a", 1 * MiB, NULL);
	tb = raw_register(b, "w", 1 * MiB, NULL);
	ASSERT_GE(ta, 0);
	ASSERT_GE(ta2, 0);
	ASSERT_GE(tb, 0);
	slot_a = raw_op(a, SPW_OP_PIN, 0, (uint32_t)ta, 0);
	slot_b = raw_op(b, SPW_OP_PIN, 0, (uint32_t)tb, 0);
	ASSERT_GE(slot_a, 0);
	ASSERT_GE(slot_b, 0);
	memset(a->region + (size_t)slot_a * a->page_size, 0xAA, a->page_size);
	memset(b->region + (size_t)slot_b * b->page_size, 0xBB, b->page_size);
	ASSERT_EQ(a->region[(size_t)slot_a * a->page_size + 100], 0xAA);
	ASSERT_EQ(b->region[(size_t)slot_b * b->page_size + 100], 0xBB);
	/* A tensor id of a means nothing in b. */
	ASSERT_EQ(raw_op(b, SPW_OP_PIN, 0, (uint32_t)ta2, 0), -EINVAL);
	/* Garbage in b does not disturb a. */
	ASSERT_EQ(raw_op(b, 77, 0, 0, 0), -EINVAL);
	ASSERT_EQ(raw_op(a, SPW_OP_NOP, 0, 0, 0), 0);
	ASSERT_EQ(raw_op(a, SPW_OP_UNPIN, 0, (uint32_t)ta, 0), 0);
	ASSERT_EQ(raw_op(b, SPW_OP_UNPIN, 0, (uint32_t)tb, 0), 0);
}

static void nobody_child(struct spw_test_daemon *d, int to_parent, int from_parent)
{
	struct raw_session s, own;
	cJSON *st;
	char c = 0;

	ASSERT_EQ(setgroups(0, NULL), 0);
	ASSERT_EQ(setgid(NOBODY), 0);
	ASSERT_EQ(setuid(NOBODY), 0);

	ASSERT_EQ(raw_attach(d->control, "a/0", 1 * MiB, 0, &s), -EPERM);
	ASSERT_CONTAINS(s.message, "a/0");
	ASSERT_CONTAINS(s.message, "held by another user's session");
	/* Who holds it is not this uid's business. */
	ASSERT_TRUE(strstr(s.message, "uid 0") == NULL);
	ASSERT_TRUE(strstr(s.message, "pid") == NULL);

	st = raw_status(d->status);
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(st, "sessions")), 0);
	ASSERT_EQ(raw_num(st, "others.sessions"), 2);
	ASSERT_EQ(raw_num(st, "others.region_bytes"), 8.0 * MiB);
	ASSERT_EQ(raw_num(st, "pool.used_bytes"), 8.0 * MiB);
	cJSON_Delete(st);

	ASSERT_OK(raw_attach(d->control, "nobody/0", 1 * MiB, 0, &own));
	st = raw_status(d->status);
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(st, "sessions")), 1);
	ASSERT_TRUE(raw_status_session(st, "nobody/0") != NULL);
	ASSERT_EQ(raw_num(st, "others.sessions"), 2);
	cJSON_Delete(st);
	ASSERT_EQ(write(to_parent, "k", 1), 1);
	ASSERT_EQ(read(from_parent, &c, 1), 1);
	raw_session_close(&own);
	_exit(0);
}

static void test_other_uid(struct spw_test_daemon *d)
{
	int up[2], down[2], st = -1;
	char c = 0;
	pid_t pid;
	cJSON *s;
	const cJSON *n;

	ASSERT_EQ(pipe(up), 0);
	ASSERT_EQ(pipe(down), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		nobody_child(d, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	ASSERT_EQ(read(up[0], &c, 1), 1);
	/* Root sees every session, with its owner. */
	s = raw_status(d->status);
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(s, "sessions")), 3);
	n = raw_status_session(s, "nobody/0");
	ASSERT_TRUE(n != NULL);
	ASSERT_EQ(raw_num(n, "uid"), NOBODY);
	ASSERT_EQ(raw_num(n, "pid"), pid);
	ASSERT_EQ(raw_num(s, "others.sessions"), 0);
	cJSON_Delete(s);
	ASSERT_EQ(write(down[1], "k", 1), 1);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	close(up[0]);
	close(down[1]);
}

int main(void)
{
	struct spw_test_daemon d;
	struct raw_session a, b;

	if (geteuid() != 0)
		SKIP("needs root to act as uid %d", NOBODY);
	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	test_two_sessions(&d, &a, &b);
	test_other_uid(&d);
	raw_session_close(&a);
	raw_session_close(&b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
