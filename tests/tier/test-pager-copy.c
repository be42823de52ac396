/* SPDX-License-Identifier: MIT */
/*
 * UNPIN of a page made a copy of another (pager_unpin_copy,
 * SPW_UNPIN_COPY_OF), over real swap files: an undo copy of a page that
 * came clean from disk takes over that disk copy instead of being
 * written, step after step, and both pages read back right through
 * evictions; where the source's disk copy is not what it held when
 * pinned (dirty, never written, not pinned, resident) or a checkpoint's
 * snapshot is running, the copy is written as any dirty page; bad
 * sources are refused.
 */
#include "tier-fixture.h"

#define PAGE (64u * 1024u)
#define SLOTS 4u
#define NP 8u /* pages of p and of its undo copy u: 4x the region together */
#define DEPTH 8u

struct two {
	struct fx f;
	uint32_t p, u;
};

static void two_setup(struct two *w, const char *name)
{
	uint32_t n;
	char err[256];

	fx_setup(&w->f, NULL, 1, PAGE, SLOTS, DEPTH);
	w->f.p = fx_pager(&w->f, name, (uint64_t)2 * NP * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(w->f.p, "p", (uint64_t)NP * PAGE, true, &w->p, &n, err, sizeof(err)));
	ASSERT_UEQ(n, NP);
	ASSERT_OK(pager_tensor_add(w->f.p, "p undo", (uint64_t)NP * PAGE, true, &w->u, &n, err, sizeof(err)));
}

static int pin_overwrite(struct fx *f, uint32_t t, uint32_t page)
{
	uint64_t ud = fx_ud(f);
	int r = pager_pin_overwrite(f->p, t, page, ud);

	return r == PAGER_PENDING ? fx_wait(f, ud) : r;
}

/* Every page of p written with version 0, then made durable: each is
 * clean with its copy on disk. */
static void write_p(struct two *w)
{
	for (uint32_t i = 0; i < NP; i++) {
		int slot = fx_pin(&w->f, w->p, i);

		fx_fill(fx_slot(&w->f, slot), PAGE, SEED(1, i, 0));
		ASSERT_OK(pager_unpin(w->f.p, w->p, i, true));
	}
	ASSERT_OK(fx_flush(&w->f, w->f.p));
	fx_drain(&w->f);
}

/* Page i of p at version v from disk or its slot. */
static void expect(struct two *w, uint32_t t, uint32_t i, unsigned v)
{
	int slot = fx_pin(&w->f, t, i);

	ASSERT_TRUE(fx_check(fx_slot(&w->f, slot), PAGE, SEED(1, i, v)));
	ASSERT_OK(pager_unpin(w->f.p, t, i, false));
}

/* The undo step of an overlapped optimizer: p's page i pinned, u's pinned
 * for overwrite and made a copy of it, p updated to version v, u unpinned
 * as p's copy, then p dirty. Returns what the copy's UNPIN returned. */
static int undo_step(struct two *w, uint32_t i, unsigned v)
{
	int sp = fx_pin(&w->f, w->p, i), su = pin_overwrite(&w->f, w->u, i), r;

	ASSERT_TRUE(fx_check(fx_slot(&w->f, sp), PAGE, SEED(1, i, v - 1)));
	memcpy(fx_slot(&w->f, su), fx_slot(&w->f, sp), PAGE);
	fx_fill(fx_slot(&w->f, sp), PAGE, SEED(1, i, v));
	r = pager_unpin_copy(w->f.p, w->u, i, w->p, i);
	ASSERT_OK(pager_check(w->f.p));
	ASSERT_OK(pager_unpin(w->f.p, w->p, i, true));
	ASSERT_OK(pager_check(w->f.p));
	return r;
}

/* Three steps: each undo copy takes over p's disk copy (no write of it),
 * so the disk writes p's pages once a step; the homes trade every step,
 * and after each the undo copy reads back as p's previous version and p
 * as its new one, through evictions. */
static void test_takes_disk_copy(void)
{
	struct pager_stats s0, s1;
	struct two w;

	two_setup(&w, "job/copy");
	write_p(&w);
	for (unsigned v = 1; v <= 3; v++) {
		pager_stats(w.f.p, &s0);
		for (uint32_t i = 0; i < NP; i++) {
			ASSERT_EQ(undo_step(&w, i, v), 1);
			/* Its slot is free at once: it is read from disk. */
			ASSERT_EQ(pager_page_state(w.f.p, w.u, i), PAGER_DISK);
		}
		ASSERT_OK(fx_flush(&w.f, w.f.p));
		fx_drain(&w.f);
		pager_stats(w.f.p, &s1);
		ASSERT_UEQ(s1.disk_copies_taken - s0.disk_copies_taken, NP);
		ASSERT_UEQ(s1.writes - s0.writes, NP); /* p's pages only */
		ASSERT_UEQ(s1.bytes_on_disk, (uint64_t)2 * NP * PAGE);
		for (uint32_t i = 0; i < NP; i++) {
			expect(&w, w.u, i, v - 1);
			expect(&w, w.p, i, v);
		}
		/* Read back from disk, not from slots: push them all out. */
		for (uint32_t i = 0; i < NP; i++) {
			expect(&w, w.p, (i + 3) % NP, v);
			expect(&w, w.u, (i + 5) % NP, v - 1);
		}
		fx_drain(&w.f);
	}
	fx_teardown(&w.f);
}

static void no_wake(void *arg)
{
	(void)arg;
}

/* Where p's disk copy is not what p held when pinned, or a snapshot
 * reads disk homes by its plan, the copy is written like any dirty page
 * (0), and still reads back right. Bad sources are refused. */
static void test_written_when_not_on_disk(void)
{
	struct pager_stats s0, s1;
	struct pager_snap *sn;
	struct pager_src src;
	struct two w;
	uint32_t r, nr;
	char err[256];
	int sp, su;

	two_setup(&w, "job/nocopy");
	/* Never written: p's pages are zero-filled, no disk copy. */
	sp = fx_pin(&w.f, w.p, 0);
	su = pin_overwrite(&w.f, w.u, 0);
	memcpy(fx_slot(&w.f, su), fx_slot(&w.f, sp), PAGE);
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.u, 0, w.p, 0), 0);
	ASSERT_OK(pager_unpin(w.f.p, w.p, 0, false));

	write_p(&w);
	/* p dirty in its slot when pinned: its disk copy is older. (No
	 * reap between its UNPIN and the copy's: its write cannot land.) */
	su = pin_overwrite(&w.f, w.u, 1);
	sp = fx_pin(&w.f, w.p, 1);
	fx_fill(fx_slot(&w.f, sp), PAGE, SEED(1, 1, 1));
	ASSERT_OK(pager_unpin(w.f.p, w.p, 1, true));
	ASSERT_EQ(fx_pin(&w.f, w.p, 1), sp);
	ASSERT_TRUE(pager_page_state(w.f.p, w.p, 1) == PAGER_DIRTY || pager_page_state(w.f.p, w.p, 1) == PAGER_WRITING);
	memcpy(fx_slot(&w.f, su), fx_slot(&w.f, sp), PAGE);
	fx_fill(fx_slot(&w.f, sp), PAGE, SEED(1, 1, 2));
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.u, 1, w.p, 1), 0);
	ASSERT_OK(pager_unpin(w.f.p, w.p, 1, true));

	/* p pinned while its write-back is in flight and changed under it,
	 * the write landing before its UNPIN: the disk copy may hold some of
	 * the new bytes under the old bytes' CRC, so it is not taken (0). */
	sp = fx_pin(&w.f, w.p, 5);
	fx_fill(fx_slot(&w.f, sp), PAGE, SEED(1, 5, 1));
	ASSERT_OK(pager_unpin(w.f.p, w.p, 5, true));
	{
		uint64_t ud = fx_ud(&w.f);
		int fr = pager_flush(w.f.p, ud);

		ASSERT_EQ(fr, PAGER_PENDING);
		ASSERT_EQ(pager_page_state(w.f.p, w.p, 5), PAGER_WRITING);
		ASSERT_EQ(fx_pin(&w.f, w.p, 5), sp);
		fx_fill(fx_slot(&w.f, sp), PAGE, SEED(1, 5, 2));
		ASSERT_OK(fx_wait(&w.f, ud));
	}
	ASSERT_EQ(pager_page_state(w.f.p, w.p, 5), PAGER_CLEAN);
	su = pin_overwrite(&w.f, w.u, 5);
	memcpy(fx_slot(&w.f, su), fx_slot(&w.f, sp), PAGE);
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.u, 5, w.p, 5), 0);
	ASSERT_OK(pager_unpin(w.f.p, w.p, 5, true));

	/* The source not pinned (unpinned before the copy): 0. */
	sp = fx_pin(&w.f, w.p, 2);
	su = pin_overwrite(&w.f, w.u, 2);
	memcpy(fx_slot(&w.f, su), fx_slot(&w.f, sp), PAGE);
	ASSERT_OK(pager_unpin(w.f.p, w.p, 2, false));
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.u, 2, w.p, 2), 0);

	/* A checkpoint's snapshot running: 0. */
	sn = pager_snap_new(w.f.p, 1, PAGE, no_wake, NULL);
	ASSERT_TRUE(sn != NULL);
	ASSERT_OK(pager_snap_plan(w.f.p, sn, w.p, 7, 0, &src));
	ASSERT_OK(pager_snap_attach(w.f.p, sn));
	ASSERT_EQ(undo_step(&w, 3, 1), 0);
	pager_snap_detach(w.f.p);
	pager_snap_free(sn);

	/* Refused: a page as its own copy, a source that does not exist, a
	 * copy that is not pinned. Nothing changes. */
	sp = fx_pin(&w.f, w.p, 4);
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.p, 4, w.p, 4), -EINVAL);
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.p, 4, w.p, NP), -EINVAL);
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.p, 4, 99, 0), -EINVAL);
	ASSERT_EQ(pager_unpin_copy(w.f.p, w.u, 4, w.p, 4), -EINVAL);
	ASSERT_OK(pager_unpin(w.f.p, w.p, 4, false));

	/* Resident pages have no disk copy to take: 0. */
	ASSERT_OK(pager_tensor_add(w.f.p, "r", 2 * PAGE, false, &r, &nr, err, sizeof(err)));
	sp = fx_pin(&w.f, r, 0);
	su = fx_pin(&w.f, r, 1);
	ASSERT_EQ(pager_unpin_copy(w.f.p, r, 1, r, 0), 0);
	ASSERT_OK(pager_unpin(w.f.p, r, 0, true));

	ASSERT_OK(fx_flush(&w.f, w.f.p));
	fx_drain(&w.f);
	pager_stats(w.f.p, &s0);
	ASSERT_UEQ(s0.disk_copies_taken, 0);
	expect(&w, w.u, 1, 1);
	expect(&w, w.p, 1, 2);
	expect(&w, w.u, 2, 0);
	expect(&w, w.u, 3, 0);
	expect(&w, w.p, 3, 1);
	expect(&w, w.p, 4, 0);
	expect(&w, w.u, 5, 2);
	expect(&w, w.p, 5, 2);
	pager_stats(w.f.p, &s1);
	ASSERT_UEQ(s1.errors, 0);
	ASSERT_OK(pager_tensor_remove(w.f.p, r));
	fx_teardown(&w.f);
}

int main(void)
{
	test_takes_disk_copy();
	test_written_when_not_on_disk();
	return 0;
}
