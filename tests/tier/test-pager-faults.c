/* SPDX-License-Identifier: MIT */
/*
 * Every fault SPILLWAY_FAULTS can inject, seen through the pager: a failed
 * write is retried and keeps the data; an error that stays reaches the
 * operation on the page it hit, with the specific errno and a message
 * naming tensor, page and file; wrong data is never handed out; the pager
 * goes on serving every other page.
 */
#include "tier-fixture.h"

#define PAGE (128u * 1024u)
#define SLOTS 8u
#define DEPTH 8u

static void fill_tensor(struct fx *f, uint32_t t, uint32_t n, unsigned tag)
{
	for (uint32_t i = 0; i < n; i++) {
		int s = fx_pin(f, t, i);

		if (s < 0)
			TEST_FAIL("pin of page %u: %s (%s)", i, strerror(-s), pager_last_error(f->p));
		fx_fill(fx_slot(f, s), PAGE, SEED(tag, i, 0));
		ASSERT_OK(pager_unpin(f->p, t, i, true));
		/* One write at a time, in page order, so "write @k" is page k-1. */
		fx_drain(f);
	}
}

static void setup(struct fx *f, const char *faults, const char *session, uint32_t npages, uint32_t *t)
{
	uint32_t n;
	char err[256];

	fx_setup(f, faults, 2, PAGE, SLOTS, DEPTH);
	f->p = fx_pager(f, session, (uint64_t)64 * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f->p, "params", (uint64_t)npages * PAGE, true, t, &n, err, sizeof(err)));
}

static void expect_names(struct fx *f, uint32_t page, const char *what)
{
	char needle[32];
	const char *msg = pager_last_error(f->p), *at;

	snprintf(needle, sizeof(needle), "'params' page %u", page);
	at = strstr(msg, needle);
	if (!at || (at[strlen(needle)] >= '0' && at[strlen(needle)] <= '9'))
		TEST_FAIL("\"%s\" does not name %s", msg, needle);
	ASSERT_CONTAINS(msg, "/var/tmp/spw-tier-");
	ASSERT_CONTAINS(msg, ".swap");
	ASSERT_CONTAINS(msg, what);
}

/* One EIO or ENOSPC on the third write (page 2's): the page keeps its
 * data in its slot, the write is retried after a backoff and lands; no
 * page fails, every page reads back bit-identical, from disk too. */
static void test_write_error_once(const char *faults, int err)
{
	struct fx f;
	struct pager_stats st;
	uint32_t t;

	setup(&f, faults, "job/w1", 2 * SLOTS, &t);
	fill_tensor(&f, t, 2 * SLOTS, 1); /* pages 0-7 end up on disk only */
	ASSERT_CONTAINS(pager_last_error(f.p), "'params' page 2");
	ASSERT_CONTAINS(pager_last_error(f.p), strerror(-err));
	ASSERT_CONTAINS(pager_last_error(f.p), "retried");
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.errors, 1);
	ASSERT_UEQ(st.pages_by_state[PAGER_FAILED], 0);
	ASSERT_UEQ(st.writes, 2 * SLOTS - 0); /* each page's write landed once */
	ASSERT_EQ(fx_flush(&f, f.p), 0);
	ASSERT_EQ(pager_page_state(f.p, t, 2), PAGER_DISK);
	for (uint32_t i = 0; i < 2 * SLOTS; i++) {
		int s = fx_pin(&f, t, i);

		ASSERT_GE(s, 0);
		if (!fx_check(fx_slot(&f, s), PAGE, SEED(1, i, 0)))
			TEST_FAIL("page %u differs after a failed and retried write", i);
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	ASSERT_OK(pager_tensor_remove(f.p, t));
	fx_teardown(&f);
}

/* EIO or ENOSPC on every write from the eighth on (page 7's, and its
 * retries): once the retries are spent page 7 is FAILED, and every later
 * PIN, PREFETCH and FLUSH says so, naming tensor, page, file and what to
 * do; the others are intact. */
static void test_write_error_persistent(const char *faults, int err)
{
	struct fx f;
	struct pager_stats st;
	uint32_t t;

	setup(&f, faults, "job/w", SLOTS, &t);
	fill_tensor(&f, t, SLOTS, 1);
	ASSERT_EQ(pager_page_state(f.p, t, 7), PAGER_FAILED);
	ASSERT_EQ(pager_pin(f.p, t, 7, fx_ud(&f)), err);
	expect_names(&f, 7, strerror(-err));
	ASSERT_CONTAINS(pager_last_error(f.p), "failed 4 times");
	ASSERT_CONTAINS(pager_last_error(f.p), "check the drive");
	ASSERT_EQ(pager_prefetch(f.p, t, 7), err);
	ASSERT_EQ(fx_flush(&f, f.p), err);
	ASSERT_CONTAINS(pager_last_error(f.p), "'params' page 7");
	for (uint32_t i = 0; i < SLOTS - 1; i++) {
		int s = fx_pin(&f, t, i);

		ASSERT_GE(s, 0);
		ASSERT_TRUE(fx_check(fx_slot(&f, s), PAGE, SEED(1, i, 0)));
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.errors, 4); /* the write and its 3 retries */
	ASSERT_UEQ(st.pages_by_state[PAGER_FAILED], 1);
	/* Removing the tensor clears the failure; the pager goes on. */
	ASSERT_OK(pager_tensor_remove(f.p, t));
	fx_teardown(&f);
}

/* A write that fails while the page is pinned again: once, and the retry
 * lands with the page still pinned; for good, and the slot stays until the
 * UNPIN, which reports the error. */
static void test_write_error_pinned(void)
{
	struct fx f;
	uint32_t t;
	int s;

	setup(&f, "write:eio@1", "job/wp1", 4, &t);
	s = fx_pin(&f, t, 0);
	ASSERT_GE(s, 0);
	fx_fill(fx_slot(&f, s), PAGE, SEED(3, 0, 0));
	ASSERT_OK(pager_unpin(f.p, t, 0, true)); /* write-behind starts now */
	ASSERT_EQ(pager_pin(f.p, t, 0, fx_ud(&f)), s); /* pinnable while writing */
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_CLEAN);
	ASSERT_TRUE(fx_check(fx_slot(&f, s), PAGE, SEED(3, 0, 0)));
	ASSERT_OK(pager_unpin(f.p, t, 0, false));
	fx_teardown(&f);

	setup(&f, "write:eio@1+", "job/wp", 4, &t);
	s = fx_pin(&f, t, 0);
	ASSERT_GE(s, 0);
	ASSERT_OK(pager_unpin(f.p, t, 0, true)); /* write-behind starts now */
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_WRITING);
	ASSERT_EQ(pager_pin(f.p, t, 0, fx_ud(&f)), s); /* pinnable while writing */
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_FAILED);
	ASSERT_EQ(pager_unpin(f.p, t, 0, true), -EIO);
	expect_names(&f, 0, "Input/output error");
	ASSERT_EQ(pager_unpin(f.p, t, 0, true), -EINVAL);
	fx_teardown(&f);
}

/* Writes 16 pages through 8 slots, flushes, and leaves page 0 only on
 * disk, so that the next PIN of page 0 is read number 1. */
static void to_disk(struct fx *f, uint32_t t)
{
	fill_tensor(f, t, 2 * SLOTS, 2);
	ASSERT_EQ(fx_flush(f, f->p), 0);
	ASSERT_EQ(pager_page_state(f->p, t, 0), PAGER_DISK);
}

static void test_read_error(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t t;
	bool pending;
	int s;

	setup(&f, "read:eio@1", "job/r", 2 * SLOTS, &t);
	to_disk(&f, t);
	ASSERT_EQ(fx_pin_p(&f, f.p, t, 0, &pending), -EIO);
	ASSERT_TRUE(pending);
	expect_names(&f, 0, "Input/output error");
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_DISK); /* not in a slot */
	/* Not sticky: the page is still good on disk, the next read works. */
	s = fx_pin(&f, t, 0);
	ASSERT_GE(s, 0);
	ASSERT_TRUE(fx_check(fx_slot(&f, s), PAGE, SEED(2, 0, 0)));
	ASSERT_OK(pager_unpin(f.p, t, 0, false));
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.errors, 1);
	ASSERT_UEQ(st.checksum_errors, 0);
	fx_teardown(&f);
}

/* Every read comes back with a flipped byte: every PIN of a page on disk
 * fails with -EBADMSG, none hands out a slot, and pages still in their
 * slots are unaffected. */
static void test_flip(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t t;
	bool pending;

	setup(&f, "read:flip@1+", "job/flip", 2 * SLOTS, &t);
	to_disk(&f, t);
	for (uint32_t i = 0; i < 2 * SLOTS; i++) {
		bool was_disk = pager_page_state(f.p, t, i) == PAGER_DISK;
		int s = fx_pin_p(&f, f.p, t, i, &pending);

		if (was_disk) {
			ASSERT_EQ(s, -EBADMSG);
			ASSERT_TRUE(pending);
			expect_names(&f, i, "checksum mismatch");
			ASSERT_EQ(pager_page_state(f.p, t, i), PAGER_DISK);
			continue;
		}
		ASSERT_GE(s, 0);
		ASSERT_TRUE(fx_check(fx_slot(&f, s), PAGE, SEED(2, i, 0)));
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	pager_stats(f.p, &st);
	ASSERT_GE(st.checksum_errors, SLOTS);
	ASSERT_UEQ(st.checksum_errors, st.errors);
	ASSERT_UEQ(st.slots_claimed, 0);
	fx_teardown(&f);
}

/* Short transfers everywhere: all succeed, bit-exact, and the ring counts
 * the continuations. */
static void test_short(void)
{
	struct fx f;
	struct uring_stats us;
	struct pager_stats st;
	uint32_t t;

	setup(&f, "read:short@1+,write:short@1+", "job/short", 2 * SLOTS, &t);
	to_disk(&f, t);
	for (uint32_t i = 0; i < 2 * SLOTS; i++) {
		int s = fx_pin(&f, t, i);

		ASSERT_GE(s, 0);
		ASSERT_TRUE(fx_check(fx_slot(&f, s), PAGE, SEED(2, i, 0)));
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	uring_get_stats(f.u, &us);
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.errors, 0);
	ASSERT_GE(st.reads, SLOTS);
	ASSERT_UEQ(us.resubmits, us.reads + us.writes);
	fx_teardown(&f);
}

/* A pager closed while its write is stalled becomes an orphan: pager_free()
 * returns at once with the write still in the ring and the files still
 * there; a new pager on the same ring does its I/O meanwhile on files of
 * its own (so the late write cannot land in them: the orphan's file
 * indexes stay registered); when the held write completes, the orphan
 * goes, files and all, and the new pager's data is intact. Under ASan a
 * late completion touching freed memory would abort.
 *
 * That the new pager's I/O went on while the write was held shows only
 * if it all ended within the hold; when it did not (a slow disk), the
 * run says nothing of that and returns false, and the caller runs it
 * again with a longer hold. */
static bool stall_orphan_once(unsigned hold_ms)
{
	struct fx f;
	struct pager *p2;
	uint32_t t, t2, n;
	char err[256], faults[64];
	double t0, seen;
	int s;

	snprintf(faults, sizeof(faults), "write:stall=%u@1", hold_ms);
	setup(&f, faults, "job/stall", 4, &t);
	s = fx_pin(&f, t, 0);
	fx_fill(fx_slot(&f, s), PAGE, SEED(7, 0, 0));
	t0 = test_now_ms(); /* the held write goes out after this */
	ASSERT_OK(pager_unpin(f.p, t, 0, true)); /* write-behind: write 1, held */
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_WRITING);
	f.p = pager_free(f.p);
	ASSERT_UEQ(uring_busy(f.u), 1); /* did not wait for it */
	ASSERT_UEQ(fx_files_in(f.dir[0]) + fx_files_in(f.dir[1]), 2);

	p2 = fx_pager(&f, "job/after", (uint64_t)64 * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(p2, "params", (uint64_t)2 * SLOTS * PAGE, true, &t2, &n, err, sizeof(err)));
	ASSERT_UEQ(fx_files_in(f.dir[0]) + fx_files_in(f.dir[1]), 4);
	for (uint32_t i = 0; i < 2 * SLOTS; i++) {
		s = fx_pin_p(&f, p2, t2, i, NULL);
		ASSERT_GE(s, 0);
		fx_fill(fx_slot(&f, s), PAGE, SEED(8, i, 0));
		ASSERT_OK(pager_unpin(p2, t2, i, true));
	}
	ASSERT_EQ(fx_flush(&f, p2), 0);
	seen = test_now_ms() - t0;
	/* Within the hold, the held write is still out while the new pager
	 * worked. */
	if (seen < hold_ms)
		ASSERT_GE(uring_busy(f.u), 1);
	while (uring_busy(f.u) && test_now_ms() - t0 < hold_ms + 30000.0) {
		ASSERT_GE(uring_wait(f.u, 10), 0);
		pager_room_kick();
	}
	fx_drain(&f);
	/* The orphan went with its last request: only the new pager's files. */
	ASSERT_UEQ(fx_files_in(f.dir[0]) + fx_files_in(f.dir[1]), 2);
	for (uint32_t i = 0; i < 2 * SLOTS; i++) {
		s = fx_pin_p(&f, p2, t2, i, NULL);
		ASSERT_GE(s, 0);
		if (!fx_check(fx_slot(&f, s), PAGE, SEED(8, i, 0)))
			TEST_FAIL("page %u of the new pager differs after the orphan's late write", i);
		ASSERT_OK(pager_unpin(p2, t2, i, false));
	}
	f.p = p2;
	fx_teardown(&f);
	return seen < hold_ms;
}

static void test_stall_orphan(void)
{
	test_with_longer_holds(stall_orphan_once, 1500, 4, 24000,
			       "stall orphan: the new pager's 16 writes and a flush");
}

/* A drive that fails every read, with read-ahead on: a page whose read
 * failed is left to the next PIN, so the ring goes idle. (Found by
 * fuzz-pager: read-ahead re-read the window's failed pages at once, for
 * ever: the ring never idle, the loop spinning.) */
static void test_readahead_failing_drive(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t t, n;
	char err[256];
	bool pending;

	fx_setup(&f, "read:eio@1+", 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/ra", (uint64_t)64 * PAGE, 4, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "params", (uint64_t)2 * SLOTS * PAGE, true, &t, &n, err, sizeof(err)));
	fill_tensor(&f, t, 2 * SLOTS, 6);
	pager_step(f.p); /* the fill's order becomes the plan: read-ahead of pages 0-3 */
	fx_drain(&f); /* goes idle: each of them failed once */
	pager_stats(f.p, &st);
	ASSERT_GE(st.errors, 1);
	ASSERT_LE(st.errors, 4);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_DISK);
	/* A PIN still tries again (and fails again, on this drive); the
	 * window moves on by one page. */
	ASSERT_EQ(fx_pin_p(&f, f.p, t, 0, &pending), -EIO);
	ASSERT_TRUE(pending);
	fx_drain(&f);
	pager_stats(f.p, &st);
	ASSERT_LE(st.errors, 4 + 2);
	fx_teardown(&f);
}

/* A write fails while its tensor is being unregistered: it is not
 * retried, and neither the FLUSH that waited for it nor one that comes
 * while the tensor still drains (its other write is stalled) is failed by
 * data nobody is owed any more. (Found by fuzz-pager: both FLUSHes failed
 * with the dead tensor's -ENOSPC.)
 *
 * "While the tensor still drains" is while page 1's write is held: when
 * the machine was too slow to get there within the hold, the run says
 * nothing of it and returns false, and the caller runs it again with a
 * longer hold. */
static bool write_error_unregistered_once(unsigned hold_ms)
{
	struct fx f;
	uint32_t t, keep, n;
	char err[256], faults[96];
	uint64_t ud1, ud2;
	double t0, seen;

	snprintf(faults, sizeof(faults), "write:enospc@1,write:stall=%u@2", hold_ms);
	fx_setup(&f, faults, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/wu", (uint64_t)64 * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "params", (uint64_t)2 * PAGE, true, &t, &n, err, sizeof(err)));
	ASSERT_OK(pager_tensor_add(f.p, "other", (uint64_t)2 * PAGE, true, &keep, &n, err, sizeof(err)));
	t0 = test_now_ms(); /* page 1's held write goes out after this */
	for (uint32_t i = 0; i < 2; i++) {
		int s = fx_pin(&f, t, i);

		ASSERT_GE(s, 0);
		fx_fill(fx_slot(&f, s), PAGE, SEED(7, i, 0));
		ASSERT_OK(pager_unpin(f.p, t, i, true));
	}
	ud1 = fx_ud(&f);
	ASSERT_EQ(pager_flush(f.p, ud1), PAGER_PENDING); /* page 0's write fails, page 1's stalls */
	ASSERT_EQ(pager_tensor_remove(f.p, t), PAGER_PENDING);
	/* Page 0's failure comes back at once; page 1's write is held. */
	while (uring_busy(f.u) > 1 && test_now_ms() - t0 < hold_ms)
		ASSERT_GE(uring_wait(f.u, 10), 0);
	seen = test_now_ms() - t0;
	if (seen < hold_ms)
		ASSERT_UEQ(uring_busy(f.u), 1);
	ud2 = fx_ud(&f);
	ASSERT_EQ(pager_flush(f.p, ud2), PAGER_PENDING);
	ASSERT_EQ(fx_wait(&f, ud1), 0);
	ASSERT_EQ(fx_wait(&f, ud2), 0);
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), -EINVAL); /* gone */
	fx_teardown(&f);
	return seen < hold_ms;
}

static void test_write_error_unregistered(void)
{
	test_with_longer_holds(write_error_unregistered_once, 300, 4, 4800,
			       "write error unregistered: page 0's injected failure");
}

/* A page whose write failed for good, of a tensor being unregistered
 * (another of its writes still stalled): a FLUSH that starts meanwhile is
 * not failed by it.
 *
 * Page 0's retries take their backoffs (50 + 200 + 800 ms) before it is
 * FAILED; page 1's write must still be held then. When the machine was
 * too slow for that, the run says nothing and returns false, and the
 * caller runs it again with a longer hold. */
static bool flush_ignores_once(unsigned hold_ms)
{
	struct fx f;
	uint32_t t, o, n, ud[2];
	char err[256], faults[96];
	double t0;
	bool inside;

	/* Page 0's write and its retries fail; page 1's (the 2nd) stalls. */
	snprintf(faults, sizeof(faults), "write:stall=%u@2,write:enospc@1+", hold_ms);
	fx_setup(&f, faults, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/wf", (uint64_t)64 * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "params", (uint64_t)2 * PAGE, true, &t, &n, err, sizeof(err)));
	ASSERT_OK(pager_tensor_add(f.p, "other", (uint64_t)SLOTS * PAGE, true, &o, &n, err, sizeof(err)));
	t0 = test_now_ms(); /* page 1's held write goes out after this */
	for (uint32_t k = 0; k < 2; k++) {
		int s = fx_pin(&f, t, k);

		ASSERT_GE(s, 0);
		fx_fill(fx_slot(&f, s), PAGE, SEED(8, k, 0));
		ASSERT_OK(pager_unpin(f.p, t, k, true));
	}
	for (uint32_t k = 0; k < SLOTS - 2; k++)
		ASSERT_GE(fx_pin(&f, o, k), 0);
	/* Two more PINs need the dirty pages' slots: both are written back. */
	for (int k = 0; k < 2; k++) {
		ud[k] = (uint32_t)fx_ud(&f);
		ASSERT_EQ(pager_pin(f.p, o, SLOTS - 2 + (uint32_t)k, ud[k]), PAGER_PENDING);
	}
	while (pager_page_state(f.p, t, 0) != PAGER_FAILED && test_now_ms() - t0 < hold_ms + 30000.0)
		ASSERT_GE(uring_wait(f.u, 10), 0);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_FAILED);
	/* Past the hold page 1's write may have landed: nothing to tell. */
	inside = test_now_ms() - t0 < hold_ms;
	if (inside) {
		ASSERT_EQ(pager_page_state(f.p, t, 1), PAGER_WRITING); /* still stalled */
		ASSERT_EQ(pager_tensor_remove(f.p, t), PAGER_PENDING);
		ASSERT_EQ(fx_flush(&f, f.p), 0);
	}
	ASSERT_GE(fx_wait(&f, ud[0]), 0);
	ASSERT_GE(fx_wait(&f, ud[1]), 0);
	for (uint32_t k = 0; k < SLOTS; k++)
		ASSERT_OK(pager_unpin(f.p, o, k, false));
	fx_drain(&f);
	fx_teardown(&f);
	return inside;
}

static void test_flush_ignores_unregistered_failure(void)
{
	test_with_longer_holds(flush_ignores_once, 5000, 2, 10000,
			       "flush ignores unregistered failure: page 0's retries (1.05 s of backoff)");
}

int main(void)
{
	test_write_error_once("write:eio@3", -EIO);
	test_write_error_once("write:enospc@3", -ENOSPC);
	test_write_error_persistent("write:eio@8+", -EIO);
	test_write_error_persistent("write:enospc@8+", -ENOSPC);
	test_write_error_pinned();
	test_read_error();
	test_flip();
	test_short();
	test_stall_orphan();
	test_readahead_failing_drive();
	test_write_error_unregistered();
	test_flush_ignores_unregistered_failure();
	return 0;
}
