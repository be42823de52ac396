/* SPDX-License-Identifier: MIT */
/*
 * The pager on its own, over real swap files on the disk: data through a
 * tensor eight times the region comes back bit-exact; a learned order
 * turns every PIN of the next step into a hit; the policy survives orders
 * that change; PINs beyond the region fail instead of hanging; FLUSH makes
 * everything clean; resident tensors stay put; sessions never mix pages.
 * A checkpoint's snapshot: test-pager-snap.c.
 */
#include <fcntl.h>

#include "tier-fixture.h"

#define PAGE (256u * 1024u)
#define SLOTS 16u
#define NPAGES (8u * SLOTS) /* the tensor is 8x the region */
#define DEPTH 8u
#define WINDOW 4u
#define NONE_PAGE UINT32_MAX

static void verify(struct fx *f, uint32_t t, const uint32_t *order, uint32_t n, unsigned tag, unsigned version)
{
	for (uint32_t i = 0; i < n; i++) {
		int slot = fx_pin(f, t, order[i]);

		if (slot < 0)
			TEST_FAIL("pin of page %u: %s (%s)", order[i], strerror(-slot), pager_last_error(f->p));
		if (!fx_check(fx_slot(f, slot), PAGE, SEED(tag, order[i], version)))
			TEST_FAIL("page %u: data differs from what was written", order[i]);
		ASSERT_OK(pager_unpin(f->p, t, order[i], false));
	}
}

static void shuffle(uint32_t *a, uint32_t n, unsigned seed)
{
	srand(seed);
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1), x = a[i];
		a[i] = a[j];
		a[j] = x;
	}
}

/* Random data through a tensor 8x the region, across two swap dirs, read
 * back bit-exact after every page was evicted at least once. */
static void test_round_trip(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t order[NPAGES], t, n;
	char err[256];

	fx_setup(&f, NULL, 2, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/0", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_UEQ(fx_files_in(f.dir[0]), 1);
	ASSERT_UEQ(fx_files_in(f.dir[1]), 1);
	ASSERT_OK(pager_tensor_add(f.p, "exp_avg", (uint64_t)NPAGES * PAGE - 100, true, &t, &n, err, sizeof(err)));
	ASSERT_UEQ(n, NPAGES);
	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = i;
	fx_step(&f, t, order, NPAGES, 1, 0);
	shuffle(order, NPAGES, 7);
	verify(&f, t, order, NPAGES, 1, 0);
	pager_stats(f.p, &st);
	ASSERT_GE(st.evictions, NPAGES - SLOTS);
	ASSERT_GE(st.writes, NPAGES - SLOTS);
	ASSERT_GE(st.reads, NPAGES - SLOTS);
	{
		/* Every finished request is in one latency bucket. */
		uint64_t r = 0, w = 0;

		for (unsigned b = 0; b < PAGER_LAT_BUCKETS; b++)
			r += st.read_lat[b], w += st.write_lat[b];
		ASSERT_UEQ(r, st.reads);
		ASSERT_UEQ(w, st.writes);
	}
	ASSERT_UEQ(st.errors, 0);
	ASSERT_UEQ(st.zero_fills, NPAGES);
	ASSERT_UEQ(st.slots_claimed, 0);
	ASSERT_UEQ(st.pages, NPAGES);
	ASSERT_UEQ(st.swap_assigned_bytes, (uint64_t)NPAGES * PAGE);
	fx_teardown(&f);
}

/* A PIN for overwrite (the caller rewrites the whole page, e.g. a
 * gradient store's first arrival): a page on disk gets a slot at once with
 * no read, its old contents are gone, and what the slot holds at UNPIN is
 * the page's data, written back even after a clean UNPIN. */
static void test_overwrite(void)
{
	struct fx f;
	struct pager_stats s0, s1;
	uint32_t order[NPAGES], t, n;
	char err[256];
	int slot;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/ow", (uint64_t)NPAGES * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "grads", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = i;
	fx_step(&f, t, order, NPAGES, 3, 0); /* every page written; the early ones evicted to disk */
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_DISK);

	pager_stats(f.p, &s0);
	slot = pager_pin_overwrite(f.p, t, 0, fx_ud(&f));
	ASSERT_GE(slot, 0); /* at once: nothing to read */
	pager_stats(f.p, &s1);
	ASSERT_UEQ(s1.reads, s0.reads);
	ASSERT_UEQ(s1.overwrites, s0.overwrites + 1);
	ASSERT_OK(pager_check(f.p));
	fx_fill(fx_slot(&f, slot), PAGE, SEED(3, 0, 9));
	ASSERT_OK(pager_unpin(f.p, t, 0, false)); /* clean, yet the new data is the page's */
	ASSERT_TRUE(pager_page_state(f.p, t, 0) == PAGER_DIRTY || pager_page_state(f.p, t, 0) == PAGER_WRITING);

	/* Push it out to disk and read it back: the overwritten data. Its
	 * write-back lands first (a disk may answer the reads below before
	 * it, and a page is evicted only once clean). */
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_CLEAN);
	for (uint32_t i = 1; i < NPAGES; i++) {
		slot = fx_pin(&f, t, i);
		ASSERT_GE(slot, 0);
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_DISK);
	slot = fx_pin(&f, t, 0);
	ASSERT_GE(slot, 0);
	ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(3, 0, 9)));
	ASSERT_OK(pager_unpin(f.p, t, 0, false));

	/* With every slot busy the overwrite waits for one like any PIN,
	 * and still reads nothing. */
	for (uint32_t i = 1; i <= SLOTS; i++)
		ASSERT_GE(fx_pin(&f, t, i), 0);
	pager_stats(f.p, &s0);
	{
		uint64_t ud = fx_ud(&f);

		ASSERT_EQ(pager_pin_overwrite(f.p, t, 0, ud), -ENOMEM); /* all claimed: refused as any PIN */
		ASSERT_OK(pager_unpin(f.p, t, SLOTS, true));
		ud = fx_ud(&f);
		slot = pager_pin_overwrite(f.p, t, 0, ud);
		if (slot == PAGER_PENDING)
			slot = fx_wait(&f, ud);
		ASSERT_GE(slot, 0);
	}
	pager_stats(f.p, &s1);
	ASSERT_UEQ(s1.reads, s0.reads);
	ASSERT_OK(pager_unpin(f.p, t, 0, true));
	for (uint32_t i = 1; i < SLOTS; i++)
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	fx_drain(&f);
	ASSERT_OK(pager_check(f.p));
	fx_teardown(&f);
}

/* After one recorded step, the next steps in the same order never make a
 * PIN start its own read: each page is already in its slot or on its way.
 *
 * What read-ahead can do depends on slots it may take: a clean page
 * needed later than the one it reads. In a step that dirties every page,
 * those are the pages whose write-back has landed, so how far read-ahead
 * gets before a PIN depends on how fast the disk writes: on a slow one it
 * falls behind. So the step that writes gives the ring time after each
 * page (fx_drain, as a trainer's compute would): then every PIN is a hit
 * on any disk, and the policy (the order followed, write-behind of the
 * pages used, read-ahead into their slots) is what is tested. The step
 * after it only reads: every page it unpins is clean at once, read-ahead
 * never waits for a write, and no PIN misses without any pause at all. */
static void step_settled(struct fx *f, uint32_t t, const uint32_t *order, uint32_t n, unsigned tag,
			 unsigned version)
{
	for (uint32_t i = 0; i < n; i++) {
		fx_step(f, t, &order[i], 1, tag, version);
		fx_drain(f);
	}
}

static void test_order_learning(void)
{
	struct fx f;
	struct pager_stats a, b, c;
	uint32_t order[NPAGES], t, n;
	char err[256];

	fx_setup(&f, NULL, 2, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/learn", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "p32", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	/* Not 0..n: the pager must learn the order, not assume it. */
	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = (i * 37) % NPAGES;

	fx_step(&f, t, order, NPAGES, 2, 0); /* recorded */
	pager_step(f.p);
	/* The first step made every page dirty faster than any disk writes
	 * them; the forward pass between two optimizer steps gives the
	 * write-back that time. Let it have it. */
	fx_drain(&f);
	pager_stats(f.p, &a);
	ASSERT_TRUE(a.plan_active);
	ASSERT_UEQ(a.plan_length, NPAGES);

	step_settled(&f, t, order, NPAGES, 2, 1);
	pager_step(f.p);
	fx_drain(&f);
	pager_stats(f.p, &b);
	ASSERT_UEQ(b.misses - a.misses, 0);
	ASSERT_UEQ(b.pins - a.pins, NPAGES);
	/* At most the pages already in the slots when the step began were
	 * hits without read-ahead. */
	ASSERT_GE(b.prefetch_hits - a.prefetch_hits, NPAGES - SLOTS);
	ASSERT_UEQ(b.prefetch_hits - a.prefetch_hits + b.pin_hits - a.pin_hits, NPAGES);
	ASSERT_GE(b.write_behinds, NPAGES - SLOTS);
	ASSERT_UEQ(b.divergences, 0);

	/* Back to back, nothing dirtied: read-ahead keeps ahead by itself. */
	verify(&f, t, order, NPAGES, 2, 1);
	pager_step(f.p);
	pager_stats(f.p, &c);
	ASSERT_UEQ(c.misses - b.misses, 0);
	ASSERT_UEQ(c.pins - b.pins, NPAGES);
	ASSERT_GE(c.prefetch_hits - b.prefetch_hits, NPAGES - SLOTS);
	ASSERT_UEQ(c.prefetch_hits - b.prefetch_hits + c.pin_hits - b.pin_hits, NPAGES);
	ASSERT_UEQ(c.divergences, 0);
	ASSERT_UEQ(c.errors, 0);
	fprintf(stderr, "order learning: step 2: %llu prefetch hits, %llu hits, 0 misses; step 3: %llu prefetch hits, "
		"%llu hits, 0 misses; %llu evictions, %llu write-behinds\n",
		(unsigned long long)(b.prefetch_hits - a.prefetch_hits), (unsigned long long)(b.pin_hits - a.pin_hits),
		(unsigned long long)(c.prefetch_hits - b.prefetch_hits), (unsigned long long)(c.pin_hits - b.pin_hits),
		(unsigned long long)c.evictions, (unsigned long long)c.write_behinds);
	fx_teardown(&f);
}

/* The order changes: a few skipped pages resynchronise; a new order drops
 * the plan (clock, data still right) and the next STEP adopts it. */
static void test_divergence(void)
{
	struct fx f;
	struct pager_stats a, b, c;
	uint32_t order[NPAGES], skip[NPAGES], other[NPAGES], t, n, ns = 0;
	char err[256];

	fx_setup(&f, NULL, 2, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/div", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "m", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = other[i] = i;
	fx_step(&f, t, order, NPAGES, 3, 0);
	pager_step(f.p);

	/* Skip every tenth page: each skip is a resync, not a divergence. */
	for (uint32_t i = 0; i < NPAGES; i++)
		if (i % 10 != 5)
			skip[ns++] = i;
	verify(&f, t, skip, ns, 3, 0);
	pager_stats(f.p, &a);
	ASSERT_GE(a.resyncs, 10);
	ASSERT_UEQ(a.divergences, 0);
	ASSERT_TRUE(a.plan_active);
	pager_step(f.p); /* re-recorded: the skipping order is the plan now */
	pager_stats(f.p, &a);
	ASSERT_UEQ(a.plan_length, ns);

	/* A different order altogether (same pages, shuffled): the pager
	 * keeps following by resyncs or drops the plan; data stays exact. */
	shuffle(other, NPAGES, 11);
	verify(&f, t, other, NPAGES, 3, 0);
	pager_step(f.p);
	pager_stats(f.p, &b);
	ASSERT_UEQ(b.plan_length, NPAGES);
	verify(&f, t, other, NPAGES, 3, 0);
	pager_stats(f.p, &c);
	ASSERT_UEQ(c.misses - b.misses, 0); /* the new order was learned */
	ASSERT_UEQ(c.errors, 0);
	fx_teardown(&f);
}

/* PINs beyond the region: refused with -ENOMEM and a message, never a
 * hang; a PIN that must wait for a write-back to free a slot completes. */
static void test_enomem(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t t, n;
	char err[256];
	int slots[SLOTS];
	bool pending;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/nomem", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "v", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	/* Fill every slot with a dirty page, then pin all but one of them
	 * again: the one left is dirty, so the next PIN must wait for its
	 * write-back. */
	for (uint32_t i = 0; i < SLOTS; i++) {
		slots[i] = fx_pin(&f, t, i);
		ASSERT_GE(slots[i], 0);
		fx_fill(fx_slot(&f, slots[i]), PAGE, SEED(4, i, 0));
	}
	for (uint32_t i = 0; i < SLOTS; i++)
		ASSERT_OK(pager_unpin(f.p, t, i, true));
	fx_drain(&f);
	for (uint32_t i = 0; i < SLOTS - 1; i++)
		ASSERT_EQ(fx_pin(&f, t, i), slots[i]);
	/* The last page is clean after write-behind; dirty it again. */
	ASSERT_GE(fx_pin(&f, t, SLOTS - 1), 0);
	ASSERT_OK(pager_unpin(f.p, t, SLOTS - 1, true));
	ASSERT_GE(fx_pin_p(&f, f.p, t, SLOTS, &pending), 0);
	ASSERT_TRUE(pending || uring_busy(f.u) == 0);
	/* Now all 16 are pinned: one more is refused, at once. */
	ASSERT_EQ(pager_pin(f.p, t, SLOTS + 1, fx_ud(&f)), -ENOMEM);
	ASSERT_CONTAINS(pager_last_error(f.p), "all 16 slots");
	ASSERT_CONTAINS(pager_last_error(f.p), "job/nomem");
	/* A second pin of a page already pinned needs no new slot. */
	ASSERT_EQ(pager_pin(f.p, t, 0, fx_ud(&f)), slots[0]);
	ASSERT_OK(pager_unpin(f.p, t, 0, false));
	ASSERT_EQ(pager_unpin(f.p, t, SLOTS + 1, false), -EINVAL);
	for (uint32_t i = 0; i < SLOTS - 1; i++)
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	ASSERT_OK(pager_unpin(f.p, t, SLOTS, false));
	ASSERT_EQ(pager_tensor_remove(f.p, t), 0);
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.enomem, 1);
	ASSERT_UEQ(st.slots_free, SLOTS);
	ASSERT_UEQ(st.swap_assigned_bytes, 0);
	fx_teardown(&f);
}

/* FLUSH: every dirty page written and the files fsynced, then complete;
 * then every page is clean or only on disk. */
static void test_flush(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t order[NPAGES / 4], t, n;
	char err[256];

	fx_setup(&f, NULL, 2, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/flush", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "w", (uint64_t)NPAGES / 4 * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	fx_step(&f, t, order, n, 5, 0);
	ASSERT_EQ(fx_flush(&f, f.p), 0);
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.fsyncs, 2);
	ASSERT_UEQ(st.flushes, 1);
	ASSERT_UEQ(st.pages_by_state[PAGER_DIRTY] + st.pages_by_state[PAGER_WRITING], 0);
	ASSERT_UEQ(st.bytes_on_disk, (uint64_t)n * PAGE);
	/* Two FLUSHes at once: both complete, in order. */
	{
		uint64_t u1 = fx_ud(&f), u2 = fx_ud(&f);

		ASSERT_EQ(pager_flush(f.p, u1), PAGER_PENDING);
		ASSERT_EQ(pager_flush(f.p, u2), PAGER_PENDING);
		ASSERT_EQ(fx_wait(&f, u2), 0);
		ASSERT_TRUE(f.done[u1]);
		ASSERT_EQ(f.res[u1], 0);
	}
	verify(&f, t, order, n, 5, 0);
	fx_teardown(&f);
}

/* Resident tensors keep their slots while a swappable one churns through
 * the rest of the region. */
static void test_resident(void)
{
	struct fx f;
	struct pager_stats st;
	uint32_t r, t, nr, n, order[NPAGES];
	int rslot[4];
	char err[256];
	bool pending;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/res", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "bias", 4 * PAGE, false, &r, &nr, err, sizeof(err)));
	ASSERT_UEQ(nr, 4);
	for (uint32_t i = 0; i < 4; i++) {
		rslot[i] = fx_pin_p(&f, f.p, r, i, &pending);
		ASSERT_GE(rslot[i], 0);
		ASSERT_TRUE(!pending);
		ASSERT_TRUE(fx_zero(fx_slot(&f, rslot[i]), PAGE));
		fx_fill(fx_slot(&f, rslot[i]), PAGE, SEED(6, i, 0));
		ASSERT_OK(pager_unpin(f.p, r, i, true));
		ASSERT_EQ(pager_page_state(f.p, r, i), PAGER_RESIDENT);
	}
	/* A resident tensor larger than what is left is refused. */
	ASSERT_EQ(pager_tensor_add(f.p, "huge", (uint64_t)SLOTS * PAGE, false, &t, &n, err, sizeof(err)), -ENOMEM);
	ASSERT_CONTAINS(err, "huge");
	ASSERT_OK(pager_tensor_add(f.p, "g", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	fx_step(&f, t, order, n, 7, 0);
	verify(&f, t, order, n, 7, 0);
	for (uint32_t i = 0; i < 4; i++) {
		ASSERT_EQ(fx_pin(&f, r, i), rslot[i]);
		ASSERT_TRUE(fx_check(fx_slot(&f, rslot[i]), PAGE, SEED(6, i, 0)));
		ASSERT_OK(pager_unpin(f.p, r, i, false));
	}
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.pages_by_state[PAGER_RESIDENT], 4);
	ASSERT_UEQ(st.slots_claimed, 4);
	/* At most SLOTS - 4 swappable pages can be pinned now. */
	for (uint32_t i = 0; i < SLOTS - 4; i++)
		ASSERT_GE(fx_pin(&f, t, i), 0);
	ASSERT_EQ(pager_pin(f.p, t, SLOTS, fx_ud(&f)), -ENOMEM);
	ASSERT_EQ(pager_tensor_remove(f.p, t), -EBUSY);
	for (uint32_t i = 0; i < SLOTS - 4; i++)
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	ASSERT_OK(pager_tensor_remove(f.p, t));
	ASSERT_OK(pager_tensor_remove(f.p, r));
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.slots_free, SLOTS);
	ASSERT_UEQ(st.slots_claimed, 0);
	fx_teardown(&f);
}

/* Two sessions (even with the same name) on the same swap dirs and ring:
 * separate files, and each reads back only its own data. Files go when
 * each pager goes. */
static void test_two_sessions(void)
{
	struct fx f;
	struct fx g; /* the second session's region and completions */
	uint32_t t1, t2, n, order[NPAGES];
	char err[256];

	fx_setup(&f, NULL, 2, PAGE, SLOTS, DEPTH);
	g = f; /* same dirs and ring */
	fx_region(&g, PAGE, SLOTS);
	f.p = fx_pager(&f, "job/0", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	g.p = fx_pager(&g, "job/0", (uint64_t)NPAGES * PAGE, WINDOW, DEPTH);
	ASSERT_UEQ(fx_files_in(f.dir[0]), 2);
	ASSERT_UEQ(fx_files_in(f.dir[1]), 2);
	ASSERT_OK(pager_tensor_add(f.p, "p", (uint64_t)NPAGES * PAGE, true, &t1, &n, err, sizeof(err)));
	ASSERT_OK(pager_tensor_add(g.p, "p", (uint64_t)NPAGES * PAGE, true, &t2, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	/* Interleave the two sessions page by page. */
	for (uint32_t i = 0; i < n; i++) {
		fx_step(&f, t1, &order[i], 1, 8, 0);
		fx_step(&g, t2, &order[i], 1, 9, 0);
	}
	shuffle(order, n, 3);
	for (uint32_t i = 0; i < n; i++) {
		verify(&f, t1, &order[i], 1, 8, 0);
		verify(&g, t2, &order[i], 1, 9, 0);
	}
	/* Nothing of g's in flight (a write-back may still be: the ring
	 * answers reads first on some disks), so its files go with it at
	 * once; with a write out it would be an orphan until that lands
	 * (test-pager-faults.c). */
	fx_drain(&f);
	g.p = pager_free(g.p);
	ASSERT_UEQ(fx_files_in(f.dir[0]), 1);
	verify(&f, t1, order, n, 8, 0);
	munmap(g.region, g.region_bytes);
	fx_teardown(&f);
}

/* Another session's file in f's first swap dir, `pages` pages long and
 * registered with f's ring, for reads that keep the ring busy: its index
 * in the ring; path and *fd for the caller to close and unlink. */
static int filler_open(struct fx *f, uint32_t pages, char *path, size_t len, int *fd)
{
	int file;

	snprintf(path, len, "%s/filler", f->dir[0]);
	*fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	ASSERT_GE(*fd, 0);
	ASSERT_EQ(fallocate(*fd, 0, 0, (off_t)PAGE * pages), 0);
	file = uring_file_register(f->u, *fd);
	ASSERT_GE(file, 0);
	return file;
}

/* Write-behind that finds the shared ring full (other sessions' I/O) is
 * not forgotten: once the ring has room again the pager is pumped and its
 * dirty pages go to disk, though its own session does nothing more. */
static void on_filler(struct uring_req *req, int res)
{
	(void)req;
	ASSERT_GE(res, 0);
}

static void test_room(void)
{
	struct fx f;
	struct pager_stats st;
	struct uring_req filler[DEPTH];
	uint32_t t, n, order[SLOTS / 2];
	char err[256], path[128];
	int fd, file;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/room", (uint64_t)NPAGES * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "w", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	/* Another "session" fills the ring: reads of a file of its own. */
	file = filler_open(&f, DEPTH, path, sizeof(path), &fd);
	for (uint32_t i = 0; i < DEPTH; i++) {
		filler[i] = (struct uring_req){ .op = URING_READ, .file = file,
						.addr = f.region + (size_t)(SLOTS - 1) * PAGE, .len = PAGE,
						.off = (uint64_t)i * PAGE, .complete = on_filler };
		uring_submit(f.u, &filler[i]);
	}
	ASSERT_UEQ(uring_busy(f.u), DEPTH);
	/* Dirty pages, unpinned while the ring is full: no room to write. */
	for (uint32_t i = 0; i < SLOTS / 2; i++)
		order[i] = i;
	fx_step(&f, t, order, SLOTS / 2, 5, 0);
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.writes_inflight, 0);
	ASSERT_UEQ(st.pages_by_state[PAGER_DIRTY], SLOTS / 2);
	/* The filler completes; the kick (fx_drain, as the daemon after a
	 * reap) writes them. */
	fx_drain(&f);
	pager_stats(f.p, &st);
	ASSERT_UEQ(st.pages_by_state[PAGER_DIRTY], 0);
	ASSERT_GE(st.writes, SLOTS / 2);
	uring_file_unregister(f.u, file);
	close(fd);
	unlink(path);
	fx_teardown(&f);
}

/* A PIN for overwrite that joins a read already in flight (a PREFETCH
 * here) waits for that read, and then the page is dirty as after any PIN
 * for overwrite: unpinned clean, the rewrite still survives eviction.
 * (Found by fuzz-pager: the page used to stay clean and the rewrite was
 * lost.) */
static void test_overwrite_joins_read(void)
{
	struct fx f;
	uint32_t order[NPAGES], t, n;
	char err[256];
	uint64_t ud;
	int slot, st;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	f.p = fx_pager(&f, "job/owr", (uint64_t)NPAGES * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "grads", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = i;
	fx_step(&f, t, order, NPAGES, 4, 0);
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_DISK);
	ASSERT_OK(pager_prefetch(f.p, t, 0));
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_READING);
	ud = fx_ud(&f);
	ASSERT_EQ(pager_pin_overwrite(f.p, t, 0, ud), PAGER_PENDING);
	slot = fx_wait(&f, ud);
	ASSERT_GE(slot, 0);
	fx_fill(fx_slot(&f, slot), PAGE, SEED(4, 0, 7));
	ASSERT_OK(pager_unpin(f.p, t, 0, false));
	st = pager_page_state(f.p, t, 0);
	ASSERT_TRUE(st == PAGER_DIRTY || st == PAGER_WRITING);
	/* Its write-back lands before the pages below push it out (only a
	 * clean page is evicted). */
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_CLEAN);
	for (uint32_t i = 1; i < NPAGES; i++) {
		ASSERT_GE(fx_pin(&f, t, i), 0);
		ASSERT_OK(pager_unpin(f.p, t, i, false));
	}
	fx_drain(&f);
	ASSERT_EQ(pager_page_state(f.p, t, 0), PAGER_DISK);
	slot = fx_pin(&f, t, 0);
	ASSERT_GE(slot, 0);
	ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(4, 0, 7)));
	ASSERT_OK(pager_unpin(f.p, t, 0, false));
	fx_teardown(&f);
}

/* A PIN that waits for a slot waits for this session's write-backs. Those
 * that went to the ring as write-behind before anyone waited (background:
 * their checksums were computed off the loop while the ring filled) must
 * then count as waited for, or another session's urgent I/O keeps them
 * behind it for as long as it has any: here a stream of urgent reads
 * that runs FILLER_RUNS times. (Found by spillway-bench swap --sessions 4:
 * with 4 MiB pages one session's PINs waited a second while the other
 * three wrote.) */
#define FILLER_RUNS 2048u
static struct uring *filler_ring;
static unsigned filler_runs;
static struct pager_job *deferred[SLOTS];
static unsigned ndeferred;
static bool defer_jobs;

static void on_urgent_filler(struct uring_req *req, int res)
{
	ASSERT_GE(res, 0);
	if (++filler_runs < FILLER_RUNS)
		uring_submit(filler_ring, req); /* behind its own queued others */
}

/* The daemon's threadpool, held back while defer_jobs is set. */
static void offload_deferred(void *ctx, struct pager_job *j)
{
	(void)ctx;
	if (defer_jobs) {
		ASSERT_TRUE(ndeferred < SLOTS);
		deferred[ndeferred++] = j;
		return;
	}
	j->fn(j);
	j->done(j);
}

static void test_slot_wait_hurries(void)
{
	struct fx f;
	struct uring_owner other = { 0 };
	struct uring_req filler[DEPTH + 2];
	struct pager_stats st;
	uint32_t t, n, order[SLOTS];
	uint8_t *buf;
	char err[256], path[128];
	int fd, file, slot;

	fx_setup(&f, NULL, 1, PAGE, SLOTS, DEPTH);
	f.offload = offload_deferred;
	f.p = fx_pager(&f, "job/hurry", (uint64_t)NPAGES * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f.p, "w", (uint64_t)NPAGES * PAGE, true, &t, &n, err, sizeof(err)));
	/* Every slot dirty; the write-behind's checksums wait in the pool. */
	defer_jobs = true;
	ndeferred = 0;
	for (uint32_t i = 0; i < SLOTS; i++)
		order[i] = i;
	fx_step(&f, t, order, SLOTS, 6, 0);
	ASSERT_GE(ndeferred, 1u);
	/* Another session's urgent reads fill the ring and keep some queued,
	 * each going back in as it completes. */
	file = filler_open(&f, DEPTH + 2, path, sizeof(path), &fd);
	ASSERT_EQ(posix_memalign((void **)&buf, 4096, PAGE), 0);
	filler_ring = f.u;
	filler_runs = 0;
	for (uint32_t i = 0; i < DEPTH + 2; i++) {
		filler[i] = (struct uring_req){ .op = URING_READ, .file = file, .addr = buf, .len = PAGE,
						.off = (uint64_t)i * PAGE, .complete = on_urgent_filler,
						.urgent = true, .owner = &other };
		uring_submit(f.u, &filler[i]);
	}
	/* The checksums come back: the writes find the ring full and queue
	 * as background (nobody waits for a slot yet). */
	defer_jobs = false;
	for (unsigned i = 0; i < ndeferred; i++) {
		deferred[i]->fn(deferred[i]);
		deferred[i]->done(deferred[i]);
	}
	pager_stats(f.p, &st);
	ASSERT_GE(st.writes_inflight, 1u);
	/* They wait for room: more than the filler's two are queued. */
	ASSERT_TRUE(uring_busy(f.u) > DEPTH + 2);
	/* A PIN of a page not in the region: every slot is dirty or being
	 * written, so it waits for one of those writes. */
	slot = fx_pin(&f, t, SLOTS);
	ASSERT_GE(slot, 0);
	if (filler_runs >= FILLER_RUNS)
		TEST_FAIL("the PIN waited for all %u of the other session's urgent reads", filler_runs);
	ASSERT_OK(pager_unpin(f.p, t, SLOTS, false));
	fx_drain(&f);
	ASSERT_UEQ(filler_runs, FILLER_RUNS + DEPTH + 1); /* every read it submitted came back */
	/* Nothing was lost on the way. */
	verify(&f, t, order, SLOTS, 6, 0);
	uring_file_unregister(f.u, file);
	close(fd);
	unlink(path);
	free(buf);
	fx_teardown(&f);
}

int main(void)
{
	test_round_trip();
	test_order_learning();
	test_divergence();
	test_enomem();
	test_flush();
	test_resident();
	test_two_sessions();
	test_overwrite();
	test_overwrite_joins_read();
	test_room();
	test_slot_wait_hurries();
	return 0;
}
