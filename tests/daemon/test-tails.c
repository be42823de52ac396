/* SPDX-License-Identifier: MIT */
/*
 * A resident tensor whose size is not a whole number of pages holds, in
 * its last page, memory nothing ever uses: for the biases and norms of a
 * model (a few KiB each, pages of 128 KiB or more) that is most of the
 * page, times p, m and v. The daemon gives that tail back to the kernel
 * at register. Seen here through the region's memfd (its allocated
 * blocks), status' region_resident_bytes and its Prometheus series: each
 * resident tensor keeps its bytes rounded up to 4 KiB; the tail reads as
 * zeros like a zeroed page, takes memory again when written, and a slot
 * that comes back to a new tensor is zeroed whole, whatever the last one
 * left there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define KiB 1024ull
#define MiB (1024ull * 1024)
#define PAGE MiB
#define REGION (8 * MiB)

static struct spw_test_daemon d;

/* Bytes of the region that hold memory, by the memfd's blocks. */
static uint64_t held(const struct raw_session *s)
{
	struct stat st;

	ASSERT_EQ(fstat(s->fds[SPW_ATTACH_FD_REGION], &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

static uint64_t held_by_status(void)
{
	cJSON *st = raw_status(d.status);
	const cJSON *ss = raw_status_session(st, "job/tails");
	uint64_t v;

	ASSERT_TRUE(ss != NULL);
	v = (uint64_t)raw_num(ss, "region_resident_bytes");
	cJSON_Delete(st);
	return v;
}

/* The same in a scrape of metrics.listen (a unix socket in d's dir). */
static uint64_t held_by_metrics(void)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	static const char series[] = "\nspillway_session_region_resident_bytes{session=\"job/tails\"} ";
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	static char text[1 << 20];
	size_t len = 0;
	ssize_t r;
	char *at;
	int fd;

	ASSERT_LT(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/metrics.sock", d.dir), (int)sizeof(sa.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ASSERT_EQ(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
	while ((r = read(fd, text + len, sizeof(text) - 1 - len)) > 0)
		len += (size_t)r;
	close(fd);
	text[len] = '\0';
	at = strstr(text, series);
	ASSERT_TRUE(at != NULL);
	return strtoull(at + sizeof(series) - 1, NULL, 10);
}

/* The slot the daemon gave page `page` of tensor tid (a PIN says it). */
static uint8_t *slot_of(struct raw_session *s, int tid, uint32_t page)
{
	int32_t slot = raw_op(s, SPW_OP_PIN, 0, (uint32_t)tid, page);

	ASSERT_GE(slot, 0);
	ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, 0, (uint32_t)tid, page), 0);
	return s->region + (uint64_t)slot * PAGE;
}

static bool all_zero(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* The region's bytes at p (a slot in s's mapping) read from the memfd. */
static bool file_zero(const struct raw_session *s, const uint8_t *p, uint64_t n)
{
	static uint8_t buf[PAGE];

	ASSERT_TRUE(n <= sizeof(buf));
	ASSERT_EQ(pread(s->fds[SPW_ATTACH_FD_REGION], buf, n, p - s->region), (ssize_t)n);
	return all_zero(buf, n);
}

static void unregister(struct raw_session *s, int tid)
{
	char req[96];
	cJSON *r;

	snprintf(req, sizeof(req), "{\"type\":\"unregister\",\"tensor\":%d}", tid);
	r = raw_request(s->ctl, req);
	ASSERT_TRUE(r != NULL);
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
}

/* A session with swap keeps its tails: its region is registered with
 * io_uring as fixed buffers, which hold the pages they pinned, so a
 * punched page would live on under the ring and a swap write from that
 * slot would send stale bytes to disk. The slot of an unregistered tail
 * carries swappable pages that go to disk and come back intact. */
static void with_swap(void)
{
	char dir[64] = "/var/tmp/spw-tails-XXXXXX", cfg[512];
	struct raw_session s;
	uint32_t pages = 0;
	int bias, sw;

	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\"}, \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false,"
		 " \"hugepages\": \"never\"}, \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"64MiB\"}],"
		 " \"session_bytes\": \"32MiB\"}}",
		 dir);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	raw_guard(&d);
	ASSERT_OK(raw_attach(d.control, "job/tails", REGION, PAGE, &s));
	bias = raw_register(&s, "bias", 5000, &pages);
	ASSERT_GE(bias, 0);
	ASSERT_UEQ(held(&s), REGION);
	unregister(&s, bias);
	/* Twice the slots: every page is written back and read again. */
	sw = raw_register_kind(&s, "sw", 2 * REGION, "swappable", &pages);
	ASSERT_GE(sw, 0);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < pages; i++) {
			int32_t slot = raw_op(&s, SPW_OP_PIN, 0, (uint32_t)sw, i);
			uint8_t *p;

			ASSERT_GE(slot, 0);
			p = s.region + (uint64_t)slot * PAGE;
			if (pass == 0)
				memset(p, (int)(i + 1), PAGE);
			else
				for (uint64_t b = 0; b < PAGE; b += 4096)
					ASSERT_EQ(p[b], (uint8_t)(i + 1));
			ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, pass == 0 ? SPW_UNPIN_DIRTY : 0, (uint32_t)sw, i), 0);
		}
	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_EQ(rmdir(dir), 0);
}

int main(void)
{
	struct raw_session s;
	uint64_t h0, h;
	uint32_t pages = 0;
	uint8_t *tail;
	int bias, whole, odd, again;

	ASSERT_OK(spw_test_daemon_start(&d, "{\"socket\": {\"dir\": \"@DIR@\"},"
					    " \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false,"
					    " \"hugepages\": \"never\"},"
					    " \"metrics\": {\"listen\": \"@DIR@/metrics.sock\"}}"));
	raw_guard(&d);
	ASSERT_OK(raw_attach(d.control, "job/tails", REGION, PAGE, &s));
	/* The region is prefaulted (or locked) whole at attach. */
	h0 = held(&s);
	ASSERT_UEQ(h0, REGION);
	ASSERT_UEQ(held_by_status(), REGION);

	/* A bias of 5000 bytes: one page, of which 8 KiB stay. */
	bias = raw_register(&s, "bias", 5000, &pages);
	ASSERT_GE(bias, 0);
	ASSERT_UEQ(pages, 1);
	h = held(&s);
	ASSERT_UEQ(h, h0 - (PAGE - 8 * KiB));
	ASSERT_UEQ(held_by_status(), h);
	ASSERT_UEQ(held_by_metrics(), h);
	/* The kept part zeroed, the tail a hole that reads as zeros (read
	 * with pread: a load through a shared mapping would fill the hole). */
	tail = slot_of(&s, bias, 0);
	ASSERT_TRUE(all_zero(tail, 8 * KiB));
	ASSERT_TRUE(file_zero(&s, tail, PAGE));
	ASSERT_UEQ(held(&s), h);

	/* Whole pages keep everything. */
	whole = raw_register(&s, "whole", 2 * PAGE, &pages);
	ASSERT_GE(whole, 0);
	ASSERT_UEQ(pages, 2);
	ASSERT_UEQ(held(&s), h);

	/* One byte past a page: its second page keeps 4 KiB. */
	odd = raw_register(&s, "odd", PAGE + 1, &pages);
	ASSERT_GE(odd, 0);
	ASSERT_UEQ(pages, 2);
	ASSERT_UEQ(held(&s), h - (PAGE - 4 * KiB));
	h = held(&s);

	/* Whoever writes the tail gets memory back, and what it wrote. */
	tail = slot_of(&s, bias, 0);
	memset(tail, 0x5a, PAGE);
	ASSERT_UEQ(held(&s), h + (PAGE - 8 * KiB));
	ASSERT_TRUE(tail[PAGE - 1] == 0x5a);

	/* The slot goes to a new tensor of a whole page: zeroed, all of it. */
	unregister(&s, bias);
	again = raw_register(&s, "again", PAGE, &pages);
	ASSERT_GE(again, 0);
	ASSERT_TRUE(slot_of(&s, again, 0) == tail);
	ASSERT_TRUE(all_zero(tail, PAGE));

	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	with_swap();
	printf("ok\n");
	return 0;
}
