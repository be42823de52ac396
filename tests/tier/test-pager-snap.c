/* SPDX-License-Identifier: MIT */
/*
 * The pager under a checkpoint's copy-on-write snapshot (pager-snap.c),
 * the test playing the copier thread: the copy reads only the commit
 * point's bytes while the session goes on changing its pages.
 */
#include <fcntl.h>

#include "tier-fixture.h"

#define PAGE (256u * 1024u)
#define SLOTS 16u
#define NPAGES (8u * SLOTS)
#define DEPTH 8u
#define WINDOW 4u
#define NONE_PAGE UINT32_MAX

static unsigned snap_wakes;

static void snap_wake(void *arg)
{
	(void)arg;
	snap_wakes++;
}

/* The copier's part of one entry, played by the test: the bytes it reads
 * from the plan's source (or the side buffer) are the commit point's. */
static void snap_copy(struct fx *f, struct pager_snap *sn, uint64_t i, const struct pager_src *src, uint64_t seed)
{
	const uint8_t *saved = NULL;
	enum pager_snap_claim c = pager_snap_claim(sn, i, &saved);

	if (c == PAGER_SNAP_SAVED) {
		ASSERT_TRUE(fx_check(saved, PAGE, seed));
	} else if (c == PAGER_SNAP_COPY && src->kind == PAGER_SRC_SLOT) {
		ASSERT_TRUE(fx_check(fx_slot(f, (int)src->slot), PAGE, seed));
	} else if (c == PAGER_SNAP_COPY && src->kind == PAGER_SRC_DISK) {
		uint8_t *b = aligned_alloc(4096, PAGE); /* src->fd is O_DIRECT */

		ASSERT_TRUE(b != NULL);
		ASSERT_EQ(pread(src->fd, b, PAGE, (off_t)src->off), (ssize_t)PAGE);
		ASSERT_TRUE(fx_check(b, PAGE, seed));
		free(b);
	}
	if (c != PAGER_SNAP_DONE)
		pager_snap_copied(sn, i);
}

/* The copier, serving what the loop asks for until ud completes (the
 * ring drained first each time: only the copy can move it on). Returns
 * must when it was asked for, else the first entry asked for. */
static uint64_t snap_serve(struct fx *f, struct pager_snap *sn, const struct pager_src *src, uint32_t n, uint64_t ud,
			   uint64_t must)
{
	uint64_t first = UINT64_MAX, k;
	bool seen = false;

	for (int i = 0; i < 200; i++) {
		fx_drain(f);
		if (f->done[ud])
			break;
		k = pager_snap_urgent(sn);
		if (k == UINT64_MAX)
			TEST_FAIL("completion %llu waits, and the loop asked the copier for nothing", (unsigned long long)ud);
		if (first == UINT64_MAX)
			first = k;
		seen |= k == must;
		snap_copy(f, sn, k, &src[k], k < n ? SEED(9, k, 0) : SEED(10, k - n, 0));
		pager_snap_progress(f->p);
	}
	ASSERT_TRUE(f->done[ud]);
	return seen ? must : first;
}

/* Copy-on-write for a checkpoint (pager-snap.c), the test playing the
 * copier thread: a PIN of a page planned in its slot saves it aside while
 * the budget (one page) lasts, then waits (PAGER_WAIT, the page asked of
 * the copier); a PIN that needs a slot does not evict a page the copy
 * still needs, and a write-back over the swap home of a page planned on
 * disk (a FLUSH) waits for the copier when the session has no spare swap
 * page to write it to (test_snapshot_moves); the copier's wake lets each
 * go on. The copy sees only the commit point's bytes; unregister is
 * refused meanwhile. */
static void test_snapshot(void)
{
	struct pager_src src[SLOTS * 2 + 2];
	uint32_t order[SLOTS * 2], t, r, n, nr, d = NONE_PAGE, k;
	struct pager_snap *sn;
	uint64_t ud, victim;
	struct fx f;
	char err[256];
	int slot;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	/* Swap for s alone: no spare page. */
	f.p = fx_pager(&f, "job/snap", (uint64_t)SLOTS * 2 * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "r", 2 * PAGE, false, &r, &nr, err, sizeof(err)));
	ASSERT_OK(pager_tensor_add(f.p, "s", (uint64_t)SLOTS * 2 * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	fx_step(&f, t, order, n, 9, 0);
	for (uint32_t i = 0; i < nr; i++) {
		slot = fx_pin(&f, r, i);
		fx_fill(fx_slot(&f, slot), PAGE, SEED(10, i, 0));
		ASSERT_OK(pager_unpin(f.p, r, i, true));
	}
	fx_drain(&f);

	/* The plan: s's pages 0..n-1, then r's. */
	sn = pager_snap_new(f.p, n + nr, PAGE, snap_wake, NULL);
	ASSERT_TRUE(sn != NULL);
	for (uint32_t i = 0; i < n; i++) {
		ASSERT_OK(pager_snap_plan(f.p, sn, t, i, i, &src[i]));
		if (src[i].kind == PAGER_SRC_DISK && d == NONE_PAGE)
			d = i;
	}
	for (uint32_t i = 0; i < nr; i++)
		ASSERT_OK(pager_snap_plan(f.p, sn, r, i, n + i, &src[n + i]));
	ASSERT_TRUE(d != NONE_PAGE);
	ASSERT_EQ(src[n].kind, PAGER_SRC_SLOT);
	ASSERT_OK(pager_snap_attach(f.p, sn));
	ASSERT_EQ(pager_tensor_remove(f.p, t), -EAGAIN);

	/* Saved aside: the one page the budget holds. */
	slot = fx_pin(&f, r, 0);
	ASSERT_GE(slot, 0);
	fx_fill(fx_slot(&f, slot), PAGE, SEED(10, 0, 1));
	ASSERT_OK(pager_unpin(f.p, r, 0, true));
	/* Budget spent: the PIN waits, the copier is asked for that page. */
	ud = fx_ud(&f);
	ASSERT_EQ(pager_pin(f.p, r, 1, ud), PAGER_WAIT);
	ASSERT_UEQ(pager_snap_urgent(sn), n + 1);
	ASSERT_UEQ(pager_snap_urgent(sn), UINT64_MAX);
	snap_copy(&f, sn, n + 1, &src[n + 1], SEED(10, 1, 0));
	ASSERT_EQ(snap_wakes, 1u);
	pager_snap_progress(f.p);
	slot = pager_pin(f.p, r, 1, ud);
	ASSERT_GE(slot, 0);
	fx_fill(fx_slot(&f, slot), PAGE, SEED(10, 1, 1));
	ASSERT_OK(pager_unpin(f.p, r, 1, true));

	/* A page on disk needs a slot: every clean one still owed to the
	 * copy, none is evicted; the PIN waits until the copier has one. */
	ud = fx_ud(&f);
	ASSERT_EQ(pager_pin(f.p, t, d, ud), PAGER_PENDING);
	victim = snap_serve(&f, sn, src, n, ud, NONE_PAGE);
	ASSERT_TRUE(victim < n && src[victim].kind == PAGER_SRC_SLOT);
	slot = f.res[ud];
	ASSERT_GE(slot, 0);
	ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(9, d, 0)));
	fx_fill(fx_slot(&f, slot), PAGE, SEED(9, d, 1));
	ASSERT_OK(pager_unpin(f.p, t, d, true));

	/* Its write-back would overwrite what the copy reads: a FLUSH waits
	 * for the copier to have it. */
	ud = fx_ud(&f);
	ASSERT_EQ(pager_flush(f.p, ud), PAGER_PENDING);
	ASSERT_UEQ(snap_serve(&f, sn, src, n, ud, d), d);
	ASSERT_EQ(f.res[ud], 0);

	/* The rest of the copy: the saved page from its side buffer. */
	for (uint64_t i = 0; i < n + nr; i++)
		snap_copy(&f, sn, i, &src[i], i < n ? SEED(9, i, 0) : SEED(10, i - n, 0));
	pager_snap_detach(f.p);
	pager_snap_progress(f.p);
	pager_snap_free(sn);
	ASSERT_OK(pager_check(f.p));
	/* The session kept what was written after the commit point. */
	ASSERT_TRUE(fx_check(fx_slot(&f, fx_pin(&f, r, 0)), PAGE, SEED(10, 0, 1)));
	ASSERT_OK(pager_unpin(f.p, r, 0, false));
	slot = fx_pin(&f, t, d);
	ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(9, d, 1)));
	ASSERT_OK(pager_unpin(f.p, t, d, false));
	/* No snapshot any more: unregister works again. */
	k = (uint32_t)pager_tensor_remove(f.p, t);
	ASSERT_TRUE(k == 0 || k == (uint32_t)PAGER_PENDING);
	fx_drain(&f);
	fx_teardown(&f);
}

/* Rewrites page i of t (a PIN, new bytes of seed, a dirty UNPIN) and
 * FLUSHes: the completion's ud. */
static uint64_t rewrite_and_flush(struct fx *f, uint32_t t, uint32_t i, uint64_t seed)
{
	int slot = fx_pin(f, t, i);
	uint64_t ud;

	ASSERT_GE(slot, 0);
	fx_fill(fx_slot(f, slot), PAGE, seed);
	ASSERT_OK(pager_unpin(f->p, t, i, true));
	ud = fx_ud(f);
	ASSERT_EQ(pager_flush(f->p, ud), PAGER_PENDING);
	return ud;
}

/* A write-back over the swap home of a page planned on disk goes to a
 * spare swap page of the session instead of waiting for the copier (the
 * trainer rewrites every page each step, and would otherwise wait for a
 * copy that shares its disk): the copy still reads the commit point's
 * bytes at the planned home, the session reads the new ones from the new
 * home, and the planned home is free again once copied. With no spare
 * page left, the write waits as before. */
static void test_snapshot_moves(void)
{
	struct pager_src src[SLOTS * 2];
	uint32_t order[SLOTS * 2], t, n, d[2], nd = 0;
	struct pager_snap_stats ss;
	struct pager_stats st0, st1;
	struct pager_snap *sn;
	uint64_t ud;
	struct fx f;
	char err[256];
	int slot;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	/* One swap page more than s needs. */
	f.p = fx_pager(&f, "job/moves", (uint64_t)(SLOTS * 2 + 1) * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "s", (uint64_t)SLOTS * 2 * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	fx_step(&f, t, order, n, 9, 0); /* snap_serve() checks tag 9 */
	fx_drain(&f);
	pager_stats(f.p, &st0);

	/* Side buffers for every page: evictions never wait here. */
	sn = pager_snap_new(f.p, n, (uint64_t)n * PAGE, snap_wake, NULL);
	ASSERT_TRUE(sn != NULL);
	for (uint32_t i = 0; i < n; i++) {
		ASSERT_OK(pager_snap_plan(f.p, sn, t, i, i, &src[i]));
		if (src[i].kind == PAGER_SRC_DISK && nd < 2)
			d[nd++] = i;
	}
	ASSERT_EQ(nd, 2u);
	ASSERT_OK(pager_snap_attach(f.p, sn));

	/* The first rewritten page takes the spare swap page: its FLUSH
	 * completes with the copier idle, nothing asked of it. */
	ud = rewrite_and_flush(&f, t, d[0], SEED(9, d[0], 1));
	fx_drain(&f);
	ASSERT_TRUE(f.done[ud]);
	ASSERT_EQ(f.res[ud], 0);
	ASSERT_UEQ(pager_snap_urgent(sn), UINT64_MAX);
	pager_snap_stats(sn, &ss);
	ASSERT_UEQ(ss.moved, 1);
	ASSERT_UEQ(ss.waits, 0);
	ASSERT_OK(pager_check(f.p));

	/* No spare page left: the second one's write waits for the copier,
	 * which is asked for that very page. */
	ud = rewrite_and_flush(&f, t, d[1], SEED(9, d[1], 1));
	ASSERT_UEQ(snap_serve(&f, sn, src, n, ud, d[1]), d[1]);
	ASSERT_EQ(f.res[ud], 0);

	/* The copy reads the commit point's bytes everywhere, d[0]'s at its
	 * planned home, which the session no longer uses. */
	for (uint64_t i = 0; i < n; i++)
		snap_copy(&f, sn, i, &src[i], SEED(9, i, 0));
	pager_snap_progress(f.p);
	ASSERT_OK(pager_check(f.p));
	pager_snap_detach(f.p);
	pager_snap_free(sn);
	ASSERT_OK(pager_check(f.p));
	pager_stats(f.p, &st1);
	ASSERT_UEQ(st1.swap_assigned_bytes, st0.swap_assigned_bytes);

	/* The rewritten pages read back from their homes as rewritten:
	 * every other page pinned pushes them out of the region first. */
	for (uint32_t i = 0; i < n; i++) {
		if (i == d[0] || i == d[1])
			continue;
		ASSERT_GE(fx_pin(&f, t, i), 0);
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	fx_drain(&f);
	for (uint32_t k = 0; k < 2; k++) {
		ASSERT_EQ(pager_page_state(f.p, t, d[k]), PAGER_DISK);
		slot = fx_pin(&f, t, d[k]);
		ASSERT_GE(slot, 0);
		ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(9, d[k], 1)));
		ASSERT_OK(pager_unpin(f.p, t, d[k], false));
	}
	fx_teardown(&f);
}

int main(void)
{
	test_snapshot();
	test_snapshot_moves();
	return 0;
}
