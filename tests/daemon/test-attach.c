/* SPDX-License-Identifier: MIT */
/*
 * A real spillwayd, raw sockets: hello, attach with four descriptors,
 * sealed memfds, register, PIN/UNPIN through the ring with data written
 * through one mapping and read through another, the ops not enabled yet,
 * caps with both figures in the message, unregister, detach, and the status
 * document's figures at each step.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "config.h"
#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

static void test_attach_and_pages(struct spw_test_daemon *d)
{
	struct raw_session s;
	uint32_t pages = 0;
	int t0, t1, slot, slot2, seals;
	uint8_t *second;
	cJSON *st, *r;
	const cJSON *ss;

	ASSERT_OK(raw_attach(d->control, "job/0", 16 * MiB, 1 * MiB, &s));
	ASSERT_EQ(s.slots, 16);
	ASSERT_EQ(s.page_size, 1 * MiB);

	/* Sealed against resizing, so nobody can SIGBUS the other side. */
	seals = fcntl(s.fds[SPW_ATTACH_FD_REGION], F_GET_SEALS);
	ASSERT_EQ(seals & (F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
	ASSERT_TRUE(ftruncate(s.fds[SPW_ATTACH_FD_REGION], 1 * MiB) < 0);
	seals = fcntl(s.fds[SPW_ATTACH_FD_RINGS], F_GET_SEALS);
	ASSERT_EQ(seals & (F_SEAL_GROW | F_SEAL_SHRINK), F_SEAL_GROW | F_SEAL_SHRINK);

	t0 = raw_register(&s, "layer0.p32", 3 * MiB + 1, &pages);
	ASSERT_GE(t0, 0);
	ASSERT_EQ(pages, 4);
	t1 = raw_register(&s, "layer0.m", 2 * MiB, &pages);
	ASSERT_GE(t1, 0);
	ASSERT_NE(t0, t1);
	ASSERT_EQ(pages, 2);
	ASSERT_EQ(raw_register(&s, "layer0.m", 1, NULL), -EEXIST);
	ASSERT_CONTAINS(s.message, "layer0.m");
	/* 6 of 16 slots used: 11 more do not fit, and the message says so. */
	ASSERT_EQ(raw_register(&s, "too-big", 11 * MiB, NULL), -ENOSPC);
	ASSERT_CONTAINS(s.message, "11 slots");
	ASSERT_CONTAINS(s.message, "10 of 16 are free");

	ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
	slot = raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t0, 3);
	ASSERT_GE(slot, 0);
	ASSERT_LT(slot, 16);
	/* Pinning again answers the same slot and counts a second pin. */
	ASSERT_EQ(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t0, 3), slot);
	slot2 = raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t1, 0);
	ASSERT_GE(slot2, 0);
	ASSERT_NE(slot2, slot);

	/* Written through this mapping, read through a second, independent
	 * mapping of the same memfd: the slot is shared memory. */
	memset(s.region + (size_t)slot * s.page_size, 0xA5, s.page_size);
	s.region[(size_t)slot * s.page_size + 7] = 0x42;
	second = mmap(NULL, s.region_bytes, PROT_READ, MAP_SHARED, s.fds[SPW_ATTACH_FD_REGION], 0);
	ASSERT_TRUE(second != MAP_FAILED);
	ASSERT_EQ(second[(size_t)slot * s.page_size], 0xA5);
	ASSERT_EQ(second[(size_t)slot * s.page_size + 7], 0x42);
	ASSERT_EQ(second[(size_t)slot * s.page_size + s.page_size - 1], 0xA5);
	ASSERT_EQ(second[(size_t)slot2 * s.page_size], 0);
	munmap(second, s.region_bytes);

	/* Out-of-range tensor and page; the NVMe tier's ops on resident
	 * tensors are no-ops (no swap: FLUSH has nothing to write). */
	ASSERT_EQ(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t0, 4), -EINVAL);
	ASSERT_EQ(raw_op(&s, SPW_OP_PIN, 0, 999, 0), -EINVAL);
	ASSERT_EQ(raw_op(&s, SPW_OP_PREFETCH, 0, (uint32_t)t0, 0), 0);
	ASSERT_EQ(raw_op(&s, SPW_OP_STEP, 0, 0, 0), 0);
	ASSERT_EQ(raw_op(&s, SPW_OP_FLUSH, 0, 0, 0), 0);

	st = raw_status(d->status);
	ASSERT_STREQ(cJSON_GetObjectItem(st, "version")->valuestring, SPW_VERSION);
	ASSERT_EQ(raw_num(st, "proto.major"), 1);
	ASSERT_EQ(raw_num(st, "pid"), d->pid);
	ASSERT_TRUE(raw_num(st, "uptime_s") >= 0);
	ASSERT_TRUE(raw_num(st, "cpu_s") >= 0);
	ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "config"), "socket_dir")->valuestring, d->dir);
	ASSERT_EQ(raw_num(st, "config.page_size"), 4 * MiB);
	ASSERT_EQ(raw_num(st, "config.ring_entries"), 256);
	ASSERT_EQ(raw_num(st, "pool.max_bytes"), 1024.0 * MiB);
	ASSERT_EQ(raw_num(st, "pool.session_max_bytes"), 256.0 * MiB);
	ASSERT_EQ(raw_num(st, "pool.used_bytes"), 16.0 * MiB);
	ASSERT_EQ(raw_num(st, "pool.free_bytes"), 1008.0 * MiB);
	ASSERT_TRUE(!isnan(raw_num(st, "pool.numa_node")));
	ASSERT_TRUE(cJSON_IsBool(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "pool"), "hugepages")));
	ss = raw_status_session(st, "job/0");
	ASSERT_TRUE(ss != NULL);
	ASSERT_EQ(raw_num(ss, "uid"), getuid());
	ASSERT_EQ(raw_num(ss, "pid"), getpid());
	ASSERT_STREQ(cJSON_GetObjectItem(ss, "state")->valuestring, "attached");
	ASSERT_EQ(raw_num(ss, "region_bytes"), 16.0 * MiB);
	ASSERT_EQ(raw_num(ss, "region_ready_bytes"), 16.0 * MiB);
	ASSERT_EQ(raw_num(ss, "page_size"), 1.0 * MiB);
	ASSERT_EQ(raw_num(ss, "slots"), 16);
	ASSERT_EQ(raw_num(ss, "slots_used"), 6);
	ASSERT_EQ(raw_num(ss, "tensors"), 2);
	ASSERT_EQ(raw_num(ss, "pages_pinned"), 2);
	ASSERT_EQ(raw_num(ss, "ring.nop"), 1);
	ASSERT_EQ(raw_num(ss, "ring.pin"), 5);
	ASSERT_EQ(raw_num(ss, "ring.ops"), 9);
	ASSERT_EQ(raw_num(ss, "ring.errors"), 2);
	ASSERT_EQ(raw_num(ss, "tier.pages.resident"), 6);
	ASSERT_EQ(raw_num(ss, "tier.swap_bytes"), 0);
	ASSERT_EQ(raw_num(st, "swap.uring.queue_depth"), 32);
	ASSERT_EQ(raw_num(st, "others.sessions"), 0);
	/* The locked figure agrees with the session's flag. */
	if (cJSON_IsTrue(cJSON_GetObjectItem(ss, "locked")))
		ASSERT_EQ(raw_num(st, "pool.locked_bytes"), 16.0 * MiB);
	cJSON_Delete(st);

	/* Pinned pages keep the tensor registered. */
	{
		char req[96];
		snprintf(req, sizeof(req), "{\"type\":\"unregister\",\"tensor\":%d}", t0);
		r = raw_request(s.ctl, req);
		ASSERT_EQ(raw_reply_errno(r), -EBUSY);
		ASSERT_CONTAINS(raw_reply_message(r), "pinned");
		cJSON_Delete(r);
	}

	ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, (uint32_t)t0, 3), 0);
	ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, SPW_UNPIN_CLEAN, (uint32_t)t0, 3), 0);
	/* One UNPIN too many. */
	ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, 0, (uint32_t)t0, 3), -EINVAL);
	ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, 0, (uint32_t)t1, 1), -EINVAL);
	ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, 0, (uint32_t)t1, 0), 0);

	{
		char req[96];
		snprintf(req, sizeof(req), "{\"type\":\"unregister\",\"tensor\":%d}", t0);
		r = raw_request(s.ctl, req);
		ASSERT_EQ(raw_reply_errno(r), 0);
		cJSON_Delete(r);
		r = raw_request(s.ctl, req);
		ASSERT_EQ(raw_reply_errno(r), -ENOENT);
		cJSON_Delete(r);
	}
	/* The freed slots are usable again. */
	ASSERT_GE(raw_register(&s, "after", 14 * MiB, &pages), 0);
	ASSERT_EQ(pages, 14);

	st = raw_status(d->status);
	ss = raw_status_session(st, "job/0");
	ASSERT_EQ(raw_num(ss, "slots_used"), 16);
	ASSERT_EQ(raw_num(ss, "pages_pinned"), 0);
	cJSON_Delete(st);

	r = raw_request(s.ctl, "{\"type\":\"detach\"}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	ASSERT_STREQ(cJSON_GetObjectItem(r, "type")->valuestring, "detach");
	cJSON_Delete(r);
	st = raw_status(d->status);
	ASSERT_EQ(raw_num(st, "pool.used_bytes"), 0);
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(st, "sessions")), 0);
	cJSON_Delete(st);
	/* After detach, the same connection may attach again. */
	r = raw_request(s.ctl, "{\"type\":\"register\",\"name\":\"x\",\"bytes\":1}");
	ASSERT_EQ(raw_reply_errno(r), -ENOTCONN);
	cJSON_Delete(r);
	r = raw_request(s.ctl, "{\"type\":\"attach\",\"session\":\"job/0\",\"region_bytes\":1048576}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	raw_session_close(&s);
}

static void test_refusals(struct spw_test_daemon *d)
{
	struct raw_session a, b, c;
	cJSON *r;

	/* Per-session cap (16 MiB here): both figures named. */
	ASSERT_EQ(raw_attach(d->control, "big/0", 20 * MiB, 0, &a), -EDQUOT);
	ASSERT_CONTAINS(a.message, "region 20.0 MiB");
	ASSERT_CONTAINS(a.message, "pool.session_max_bytes (16.0 MiB");
	ASSERT_CONTAINS(a.message, "ask for less");

	/* Pool cap: 64 MiB with 3 x 16 MiB in use leaves 16 MiB. */
	ASSERT_OK(raw_attach(d->control, "fill/0", 16 * MiB, 0, &a));
	ASSERT_OK(raw_attach(d->control, "fill/1", 16 * MiB, 0, &b));
	ASSERT_OK(raw_attach(d->control, "fill/2", 16 * MiB, 0, &c));
	raw_session_close(&c);
	ASSERT_OK(raw_attach(d->control, "fill/2", 16 * MiB, 0, &c));
	{
		struct raw_session e, f;
		ASSERT_EQ(raw_attach(d->control, "fill/3", 16 * MiB + 1, 0, &e), -EDQUOT);
		ASSERT_OK(raw_attach(d->control, "fill/3", 15 * MiB + 1, 0, &f));
		ASSERT_EQ(f.region_bytes, 16 * MiB); /* rounded up to whole pages */
		ASSERT_EQ(raw_attach(d->control, "fill/4", 1, 0, &e), -ENOSPC);
		ASSERT_CONTAINS(e.message, "pool.max_bytes (64.0 MiB, 64.0 MiB in use)");
		ASSERT_CONTAINS(e.message, "region 1.0 MiB");
		raw_session_close(&f);
		/* Same name, same uid, still attached: busy. */
		ASSERT_EQ(raw_attach(d->control, "fill/0", 1 * MiB, 0, &e), -EBUSY);
		ASSERT_CONTAINS(e.message, "already attached");
		ASSERT_EQ(raw_attach(d->control, "bad page", 1 * MiB, 0, &e), -EINVAL);
		ASSERT_EQ(raw_attach(d->control, "job/1", 1 * MiB, 3 * MiB, &e), -EINVAL);
		ASSERT_CONTAINS(e.message, "page_size 3145728");
		ASSERT_EQ(raw_attach(d->control, "job/1", 0, 0, &e), -EINVAL);
	}
	raw_session_close(&a);
	raw_session_close(&b);
	raw_session_close(&c);

	/* swappable needs swap.dirs (this config has none); persistent is
	 * not there yet. */
	ASSERT_OK(raw_attach(d->control, "kinds/0", 4 * MiB, 0, &a));
	r = raw_request(a.ctl, "{\"type\":\"register\",\"name\":\"v\",\"bytes\":100,\"kind\":\"swappable\"}");
	ASSERT_EQ(raw_reply_errno(r), -EOPNOTSUPP);
	ASSERT_CONTAINS(raw_reply_message(r), "set swap.dirs");
	cJSON_Delete(r);
	r = raw_request(a.ctl, "{\"type\":\"register\",\"name\":\"v\",\"bytes\":100,\"kind\":\"resident\",\"persistent\":true}");
	ASSERT_EQ(raw_reply_errno(r), -EOPNOTSUPP);
	cJSON_Delete(r);
	r = raw_request(a.ctl, "{\"type\":\"register\",\"name\":\"v\",\"bytes\":100,\"kind\":\"sideways\"}");
	ASSERT_EQ(raw_reply_errno(r), -EINVAL);
	cJSON_Delete(r);
	r = raw_request(a.ctl, "{\"type\":\"register\",\"name\":\"v\",\"bytes\":0}");
	ASSERT_EQ(raw_reply_errno(r), -EINVAL);
	cJSON_Delete(r);
	r = raw_request(a.ctl, "{\"type\":\"register\",\"name\":\"\",\"bytes\":1}");
	ASSERT_EQ(raw_reply_errno(r), -EINVAL);
	cJSON_Delete(r);
	raw_session_close(&a);
	{
		/* A lease of 0 or over 7 days is refused, naming the range. */
		int fd = raw_connect_hello(d->control);
		r = raw_request(fd, "{\"type\":\"attach\",\"session\":\"p/0\",\"region_bytes\":1048576,\"persistent\":true,"
				"\"lease_s\":0}");
		ASSERT_EQ(raw_reply_errno(r), -EINVAL);
		ASSERT_CONTAINS(raw_reply_message(r), "7 days");
		cJSON_Delete(r);
		r = raw_request(fd, "{\"type\":\"attach\",\"session\":\"p/0\",\"region_bytes\":1048576,\"persistent\":true,"
				"\"lease_s\":604801}");
		ASSERT_EQ(raw_reply_errno(r), -EINVAL);
		ASSERT_CONTAINS(raw_reply_message(r), "lease_s");
		cJSON_Delete(r);
		close(fd);
	}
}

int main(void)
{
	struct spw_test_daemon d;
	gid_t gid;

	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	test_attach_and_pages(&d);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);

	raw_guard(&d);
	/* A second daemon with small caps, socket.mode 0664 and socket.group set
	 * to gid 65534's group where the host has one. */
	{
		struct group *g = getgrgid(65534);
		char cfg[512];

		snprintf(cfg, sizeof(cfg),
			 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0664\", \"group\": %s%s%s},"
			 " \"pool\": {\"max_bytes\": \"64MiB\", \"session_max_bytes\": \"16MiB\", \"require_locked\": false},"
			 " \"session\": {\"page_size\": \"1MiB\"}, \"log\": {\"level\": \"info\"}}",
			 g ? "\"" : "", g ? g->gr_name : "null", g ? "\"" : "");
		ASSERT_OK(spw_test_daemon_start(&d, cfg));
		gid = g ? 65534 : getgid();
	}
	{
		/* socket.mode and socket.group are applied to both sockets (the
		 * status socket was 0666 once: issue 9, item 8). */
		struct stat st;
		ASSERT_EQ(stat(d.control, &st), 0);
		ASSERT_EQ(st.st_mode & 07777, 0664);
		ASSERT_EQ(st.st_gid, gid);
		ASSERT_EQ(stat(d.status, &st), 0);
		ASSERT_EQ(st.st_mode & 07777, 0664);
		ASSERT_EQ(st.st_gid, gid);
	}
	test_refusals(&d);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
