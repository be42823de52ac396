/* SPDX-License-Identifier: MIT */
/*
 * The daemon's io_uring engine on its own: pages written to an O_DIRECT
 * file and read back bit-exact, from a memfd region registered as fixed
 * buffers (as the daemon does with session regions), and every injected
 * fault reaching the request that it was aimed at.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "../../util/crc32c.h"
#include "../../daemon/uring.h"
#include "test.h"

#define PAGE (256u * 1024u)
#define NPAGES 16

struct page_io {
	struct uring_req req;
	int res;
	int done;
};

static void on_done(struct uring_req *req, int res)
{
	struct page_io *p = (struct page_io *)req;

	p->res = res;
	p->done = 1;
}

struct fixture {
	char dir[64];
	char path[96];
	int fd;
	uint8_t *region;
	struct uring *u;
	int file;
};

static void setup(struct fixture *f, const char *faults)
{
	int memfd;

	if (faults)
		setenv("SPILLWAY_FAULTS", faults, 1);
	else
		unsetenv("SPILLWAY_FAULTS");
	snprintf(f->dir, sizeof(f->dir), "/var/tmp/spw-uring-XXXXXX");
	ASSERT_TRUE(mkdtemp(f->dir) != NULL);
	snprintf(f->path, sizeof(f->path), "%s/swap", f->dir);
	f->fd = open(f->path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	ASSERT_GE(f->fd, 0);
	ASSERT_EQ(fallocate(f->fd, 0, 0, (off_t)PAGE * NPAGES), 0);

	memfd = memfd_create("test-region", MFD_CLOEXEC);
	ASSERT_GE(memfd, 0);
	ASSERT_EQ(ftruncate(memfd, (off_t)PAGE * NPAGES * 2), 0);
	f->region = mmap(NULL, (size_t)PAGE * NPAGES * 2, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	ASSERT_TRUE(f->region != MAP_FAILED);
	close(memfd);

	ASSERT_OK(uring_new(8, false, 4, 4, &f->u));
	f->file = uring_file_register(f->u, f->fd);
	ASSERT_GE(f->file, 0);
	/* Fixed buffers are an optimisation: the test passes either way. */
	(void)uring_buffer_register(f->u, f->region, (size_t)PAGE * NPAGES * 2);
}

static void teardown(struct fixture *f)
{
	uring_file_unregister(f->u, f->file);
	f->u = uring_free(f->u);
	munmap(f->region, (size_t)PAGE * NPAGES * 2);
	close(f->fd);
	unlink(f->path);
	rmdir(f->dir);
}

/* Submits one request per page (more than the queue depth, so some wait
 * in the engine's FIFO) and waits for all of them. */
static void run_pages(struct fixture *f, enum uring_op op, uint8_t *base, struct page_io *io)
{
	int left = NPAGES;

	for (int i = 0; i < NPAGES; i++) {
		io[i] = (struct page_io){
			.req = { .op = op, .file = f->file, .addr = base + (size_t)i * PAGE,
				 .len = PAGE, .off = (uint64_t)i * PAGE, .complete = on_done },
		};
		uring_submit(f->u, &io[i].req);
	}
	for (int spins = 0; left > 0 && spins < 1000; spins++) {
		ASSERT_GE(uring_wait(f->u, 1000), 0);
		left = 0;
		for (int i = 0; i < NPAGES; i++)
			left += !io[i].done;
	}
	ASSERT_EQ(left, 0);
	ASSERT_EQ(uring_busy(f->u), 0);
}

static void fill_random(uint8_t *p, size_t n, unsigned seed)
{
	srand(seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rand();
}

static void test_round_trip(void)
{
	struct fixture f;
	struct page_io io[NPAGES];
	struct uring_stats st;
	uint8_t *src, *dst;

	setup(&f, NULL);
	src = f.region;
	dst = f.region + (size_t)PAGE * NPAGES;
	fill_random(src, (size_t)PAGE * NPAGES, 1);
	run_pages(&f, URING_WRITE, src, io);
	for (int i = 0; i < NPAGES; i++)
		ASSERT_EQ(io[i].res, 0);
	memset(dst, 0, (size_t)PAGE * NPAGES);
	run_pages(&f, URING_READ, dst, io);
	for (int i = 0; i < NPAGES; i++)
		ASSERT_EQ(io[i].res, 0);
	ASSERT_EQ(memcmp(src, dst, (size_t)PAGE * NPAGES), 0);
	uring_get_stats(f.u, &st);
	ASSERT_UEQ(st.writes, NPAGES);
	ASSERT_UEQ(st.reads, NPAGES);
	ASSERT_UEQ(st.write_bytes, (uint64_t)PAGE * NPAGES);
	ASSERT_UEQ(st.errors, 0);
	teardown(&f);
}

/* Each fault hits exactly the request it names and no other. */
static void test_faults(void)
{
	struct fixture f;
	struct page_io io[NPAGES];
	struct uring_stats st;
	uint8_t *src, *dst;

	setup(&f, "write:eio@3,write:enospc@5,read:short@2,read:flip@4,read:eio@7+");
	src = f.region;
	dst = f.region + (size_t)PAGE * NPAGES;
	fill_random(src, (size_t)PAGE * NPAGES, 2);

	run_pages(&f, URING_WRITE, src, io);
	for (int i = 0; i < NPAGES; i++)
		ASSERT_EQ(io[i].res, i == 2 ? -EIO : i == 4 ? -ENOSPC : 0);

	run_pages(&f, URING_READ, dst, io);
	for (int i = 0; i < NPAGES; i++) {
		uint32_t want = crc32c(0, src + (size_t)i * PAGE, PAGE);
		uint32_t got = crc32c(0, dst + (size_t)i * PAGE, PAGE);

		if (i >= 6) {
			ASSERT_EQ(io[i].res, -EIO);
			continue;
		}
		ASSERT_EQ(io[i].res, 0);
		if (i == 2 || i == 4)
			continue; /* never written: whatever fallocate left */
		if (i == 3)
			ASSERT_TRUE(want != got); /* the flipped byte shows in the checksum */
		else
			ASSERT_UEQ(want, got);
	}
	uring_get_stats(f.u, &st);
	ASSERT_GE(st.resubmits, 1); /* the short read was continued, not failed */
	teardown(&f);
}

static void test_bad_fault_spec(void)
{
	struct uring *u = NULL;
	const char *bad[] = { "read:eio", "read:bogus@1", "fsync:eio@1", "write:flip@1", "read:eio@0", "read:eio@2x",
			      "write:stall@1", "write:stall=@1", "write:stall=0@1", "write:stall=5x@1", "write:eio=5@1",
			      "write:stall=700000@1" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("SPILLWAY_FAULTS", bad[i], 1);
		ASSERT_EQ(uring_new(8, false, 4, 4, &u), -EINVAL);
		ASSERT_TRUE(u == NULL);
	}
	unsetenv("SPILLWAY_FAULTS");
}

/* A stalled request stays in flight for its hold, then runs as asked:
 * the requests around it are not held, and its data still lands.
 *
 * That the others are done while the held one is not can only be seen
 * while the hold lasts: the two other writes must land within it. On a
 * machine too slow for that (a loaded disk), this run says nothing and
 * the test runs again with a hold four times as long. Returns whether
 * the run could tell. */
static bool stall_once(unsigned hold_ms)
{
	struct fixture f;
	struct page_io io[3];
	char faults[64];
	double t0, seen, ms;

	snprintf(faults, sizeof(faults), "write:stall=%u@2", hold_ms);
	setup(&f, faults);
	fill_random(f.region, (size_t)PAGE * 3, 3);
	t0 = test_now_ms(); /* before the held write goes out: its hold ends after t0 + hold_ms */
	for (int i = 0; i < 3; i++) {
		io[i] = (struct page_io){
			.req = { .op = URING_WRITE, .file = f.file, .addr = f.region + (size_t)i * PAGE,
				 .len = PAGE, .off = (uint64_t)i * PAGE, .complete = on_done },
		};
		uring_submit(f.u, &io[i].req);
	}
	for (int spins = 0; (!io[0].done || !io[2].done) && spins < 1000; spins++)
		ASSERT_GE(uring_wait(f.u, 10), 0);
	ASSERT_TRUE(io[0].done && io[2].done);
	seen = test_now_ms() - t0;
	if (seen < hold_ms) {
		/* Looked while the hold lasts: the held one must still be out. */
		ASSERT_TRUE(!io[1].done);
		ASSERT_UEQ(uring_busy(f.u), 1);
	}
	while (!io[1].done && test_now_ms() - t0 < hold_ms + 30000.0)
		ASSERT_GE(uring_wait(f.u, 10), 0);
	ms = test_now_ms() - t0;
	ASSERT_TRUE(io[1].done);
	ASSERT_EQ(io[1].res, 0);
	ASSERT_UEQ(uring_busy(f.u), 0);
	/* The hold is a floor: never sooner. */
	ASSERT_GE(ms, hold_ms);
	fprintf(stderr, "stall: held request completed after %.0f ms (hold %u ms; the others were done at %.0f ms)\n",
		ms, hold_ms, seen);
	/* What it wrote is there. */
	memset(f.region + (size_t)PAGE * 4, 0, PAGE);
	io[0] = (struct page_io){
		.req = { .op = URING_READ, .file = f.file, .addr = f.region + (size_t)PAGE * 4, .len = PAGE,
			 .off = PAGE, .complete = on_done },
	};
	uring_submit(f.u, &io[0].req);
	for (int spins = 0; !io[0].done && spins < 1000; spins++)
		ASSERT_GE(uring_wait(f.u, 10), 0);
	ASSERT_EQ(io[0].res, 0);
	ASSERT_EQ(memcmp(f.region + PAGE, f.region + (size_t)PAGE * 4, PAGE), 0);
	teardown(&f);
	return seen < hold_ms;
}

static void test_stall(void)
{
	test_with_longer_holds(stall_once, 300, 4, 20000,
			       "stall: the two other 256 KiB writes");
}

static void test_crc32c(void)
{
	/* The standard check value of CRC-32C over "123456789". */
	ASSERT_UEQ(crc32c(0, "123456789", 9), 0xe3069283u);
	/* Continuing over pieces gives the same as one pass. */
	ASSERT_UEQ(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

/* Completion order, one request in the ring at a time. */
static int seq;
struct ordered_io {
	struct uring_req req;
	int at;
};

static void on_ordered(struct uring_req *req, int res)
{
	ASSERT_EQ(res, 0);
	((struct ordered_io *)req)->at = seq++;
}

/* With the ring full, urgent requests (someone waits for them) go out
 * before background ones queued earlier, FIFO within each class; a
 * background request hurried while it waits moves to the urgent class.
 * uring_waited() counts the urgent ones until they finish. */
static void test_priority(void)
{
	struct fixture f;
	struct uring *u;
	struct ordered_io io[6];
	int file;

	setup(&f, NULL);
	ASSERT_OK(uring_new(1, false, 2, 2, &u));
	file = uring_file_register(u, f.fd);
	ASSERT_GE(file, 0);
	seq = 0;
	for (int i = 0; i < 6; i++)
		io[i] = (struct ordered_io){
			.req = { .op = URING_READ, .file = file, .addr = f.region + (size_t)i * PAGE, .len = PAGE,
				 .off = (uint64_t)i * PAGE, .complete = on_ordered, .urgent = i == 3 || i == 4 },
			.at = -1,
		};
	/* 0 takes the one place; 1, 2 (background) wait; then 3, 4 (urgent)
	 * and 5 (background, hurried while it waits). */
	ASSERT_EQ(uring_waited(u), 0u);
	for (int i = 0; i < 6; i++)
		uring_submit(u, &io[i].req);
	/* Someone waits on the disk: for 3 and 4, then 5 (once). */
	ASSERT_EQ(uring_waited(u), 2u);
	uring_hurry(u, &io[5].req);
	uring_hurry(u, &io[5].req);
	ASSERT_EQ(uring_waited(u), 3u);
	for (int spins = 0; uring_busy(u) && spins < 1000; spins++)
		ASSERT_GE(uring_wait(u, 1000), 0);
	/* All finished: no one waits; a finished request hurried is not counted. */
	ASSERT_EQ(uring_waited(u), 0u);
	uring_hurry(u, &io[1].req);
	ASSERT_EQ(uring_waited(u), 0u);
	ASSERT_EQ(io[0].at, 0);
	ASSERT_EQ(io[3].at, 1);
	ASSERT_EQ(io[4].at, 2);
	ASSERT_EQ(io[5].at, 3);
	ASSERT_EQ(io[1].at, 4);
	ASSERT_EQ(io[2].at, 5);
	uring_file_unregister(u, file);
	u = uring_free(u);
	teardown(&f);
}

/* Owners take turns within a class: owner A queues four background
 * requests, then B two; with one place in the ring they go out A B A B A
 * A, not A's four first. */
static void test_turns(void)
{
	struct fixture f;
	struct uring *u;
	struct uring_owner a = { 0 }, b = { 0 };
	struct ordered_io io[7];
	static const int want[7] = { 0, 1, 5, 2, 6, 3, 4 };
	int file;

	setup(&f, NULL);
	ASSERT_OK(uring_new(1, false, 2, 2, &u));
	file = uring_file_register(u, f.fd);
	ASSERT_GE(file, 0);
	seq = 0;
	for (int i = 0; i < 7; i++)
		io[i] = (struct ordered_io){
			.req = { .op = URING_READ, .file = file, .addr = f.region + (size_t)i * PAGE, .len = PAGE,
				 .off = (uint64_t)i * PAGE, .complete = on_ordered, .owner = i < 5 ? &a : &b },
			.at = -1,
		};
	/* 0 takes the place; A's 1-4 wait, then B's 5 and 6. */
	for (int i = 0; i < 7; i++)
		uring_submit(u, &io[i].req);
	for (int spins = 0; uring_busy(u) && spins < 1000; spins++)
		ASSERT_GE(uring_wait(u, 1000), 0);
	for (int k = 0; k < 7; k++)
		if (io[want[k]].at != k)
			TEST_FAIL("request %d went out %d-th, expected %d-th", want[k], io[want[k]].at, k);
	uring_file_unregister(u, file);
	u = uring_free(u);
	teardown(&f);
}

int main(void)
{
	test_crc32c();
	test_bad_fault_spec();
	test_round_trip();
	test_faults();
	test_stall();
	test_priority();
	test_turns();
	return 0;
}
