/* SPDX-License-Identifier: MIT */
/*
 * The pager's policy (daemon/pager-policy.c) by simulation: a recorded
 * access trace goes through the order learner and the victim choice the
 * way pager_pin() drives them (follow, record, then a slot), over a tiny
 * cache of slots with no I/O. Against it, an offline Belady (OPT) computed
 * here from the whole trace: once a step's order is learned and repeats,
 * every eviction must be one OPT could make (no cached page is needed
 * later than the victim), and hits, misses and evictions must equal OPT's
 * from the same starting cache.
 */
#include <stdbool.h>
#include <stdint.h>

#include "../../daemon/pager-policy.h"
#include "test.h"

#define MAXP 64
#define MAXS 16
#define MAXT 1024
#define INF UINT64_MAX

struct spage {
	struct pager_order_page ord;
	int slot;
};

struct sim {
	struct pager_order o;
	struct pager_clock clk;
	uint8_t ref[MAXS];
	struct spage pages[MAXP];
	int slot_page[MAXS]; /* -1: free */
	unsigned nslots;
	uint64_t hits, misses, evictions;
	/* The whole trace and step boundaries, for the checks. */
	const unsigned *trace;
	size_t len;
	bool check_opt;  /* every eviction must be an OPT eviction */
	size_t step_start, step_len; /* the current step, for next-use checks */
	bool check_next; /* the learner must predict each page's next use */
};

static void sim_init(struct sim *m, unsigned nslots, unsigned window)
{
	*m = (struct sim){ .nslots = nslots };
	m->o.window = window;
	m->clk.ref = m->ref;
	for (unsigned i = 0; i < MAXP; i++)
		m->pages[i] = (struct spage){ .ord = { PAGER_POLICY_NONE, PAGER_POLICY_NONE }, .slot = -1 };
	for (unsigned s = 0; s < MAXS; s++)
		m->slot_page[s] = -1;
	ASSERT_OK(pager_policy_grow(&m->o, MAXP));
}

static const struct pager_order_page *candidate(const void *ctx, uint32_t s)
{
	const struct sim *m = ctx;

	return m->slot_page[s] < 0 ? NULL : &m->pages[m->slot_page[s]].ord;
}

/* The index of the next access of `page` after t in trace[0..end), INF if none. */
static uint64_t true_next(const unsigned *trace, size_t end, size_t t, unsigned page)
{
	for (size_t i = t + 1; i < end; i++)
		if (trace[i] == page)
			return i;
	return INF;
}

/* With the step's order learned and unchanged, the predicted next use of
 * every page must be where the trace has it: this step at or after
 * position k, else the next step (the same order again). */
static void check_predictions(struct sim *m, size_t k)
{
	for (unsigned pg = 0; pg < MAXP; pg++) {
		uint64_t want = INF, got = pager_policy_next_use(&m->o, &m->pages[pg].ord);

		for (size_t i = k; i < m->step_len && want == INF; i++)
			if (m->trace[m->step_start + i] == pg)
				want = i;
		for (size_t i = 0; i < m->step_len && want == INF; i++)
			if (m->trace[m->step_start + i] == pg)
				want = m->step_len + i;
		if (want == INF)
			ASSERT_UEQ(got, PAGER_POLICY_NO_LIMIT);
		else
			ASSERT_UEQ(got, want);
	}
}

static void sim_access(struct sim *m, size_t t)
{
	unsigned page = m->trace[t];
	struct spage *pg = &m->pages[page];
	uint32_t s;

	if (m->check_next)
		check_predictions(m, t - m->step_start);
	/* The order pager_pin() keeps: the plan and the recording first, so
	 * the eviction sees where the step is now. */
	pager_policy_follow(&m->o, &pg->ord);
	pager_policy_record(&m->o, &pg->ord);
	if (pg->slot >= 0) {
		m->hits++;
		m->ref[pg->slot] = 1;
		return;
	}
	m->misses++;
	for (s = 0; s < m->nslots && m->slot_page[s] >= 0; s++)
		;
	if (s == m->nslots) {
		s = pager_policy_victim(&m->o, &m->clk, m->nslots, PAGER_POLICY_NO_LIMIT, candidate, m);
		ASSERT_TRUE(s < m->nslots);
		if (m->check_opt) {
			uint64_t v = true_next(m->trace, m->len, t, (unsigned)m->slot_page[s]);

			for (unsigned i = 0; i < m->nslots; i++)
				if (true_next(m->trace, m->len, t, (unsigned)m->slot_page[i]) > v)
					TEST_FAIL("access %zu (page %u): evicted page %d (next use %llu) while page %d "
						  "is needed later (OPT would evict that one)",
						  t, page, m->slot_page[s], (unsigned long long)v, m->slot_page[i]);
		}
		m->pages[m->slot_page[s]].slot = -1;
		m->evictions++;
	}
	m->slot_page[s] = (int)page;
	pg->slot = (int)s;
	m->ref[s] = 1;
}

struct counts {
	uint64_t hits, misses, evictions;
};

/* Belady's OPT over trace[from..end) from the cache `cached` (nslots
 * entries, -1 free): on a miss with no free slot, evict the page whose
 * next use is furthest (never used again: furthest of all). */
static struct counts opt(const unsigned *trace, size_t from, size_t end, const int *cached, unsigned nslots)
{
	int cache[MAXS];
	struct counts c = { 0 };

	for (unsigned s = 0; s < nslots; s++)
		cache[s] = cached[s];
	for (size_t t = from; t < end; t++) {
		unsigned s, victim = 0;
		uint64_t far = 0;
		bool hit = false;

		for (s = 0; s < nslots; s++)
			hit |= cache[s] == (int)trace[t];
		if (hit) {
			c.hits++;
			continue;
		}
		c.misses++;
		for (s = 0; s < nslots && cache[s] >= 0; s++)
			;
		if (s < nslots) {
			cache[s] = (int)trace[t];
			continue;
		}
		for (s = 0; s < nslots; s++) {
			uint64_t n = true_next(trace, end, t, (unsigned)cache[s]);

			if (n >= far) {
				far = n;
				victim = s;
			}
		}
		cache[victim] = (int)trace[t];
		c.evictions++;
	}
	return c;
}

/* Runs steps of the trace (lens[i] accesses each, a STEP after each).
 * From step `from` on the policy is held to OPT. */
static void run(const char *name, const unsigned *trace, const size_t *lens, unsigned nsteps, unsigned from,
		unsigned nslots)
{
	struct sim m;
	struct counts want, got;
	int cached[MAXS];
	size_t t = 0, start = 0, end = 0;

	sim_init(&m, nslots, 4);
	for (unsigned i = 0; i < nsteps; i++)
		end += lens[i];
	m.trace = trace;
	m.len = end;
	for (unsigned st = 0; st < nsteps; st++) {
		if (st == from) {
			start = t;
			for (unsigned s = 0; s < nslots; s++)
				cached[s] = m.slot_page[s];
			m.hits = m.misses = m.evictions = 0;
			m.check_opt = true;
		}
		/* From `from` on, each step repeats the one the learner saw
		 * last: its predictions must hold. */
		m.step_start = t;
		m.step_len = lens[st];
		m.check_next = st >= from && st > 0;
		for (size_t k = 0; k < lens[st]; k++, t++)
			sim_access(&m, t);
		pager_policy_step(&m.o);
		/* The plan is now this step's order, repeating. */
		ASSERT_TRUE(m.o.plan_ok);
		ASSERT_EQ(m.o.plan_len, lens[st]);
		for (size_t k = 0; k < lens[st]; k++) {
			ASSERT_TRUE(pager_policy_at(&m.o, k) == &m.pages[trace[t - lens[st] + k]].ord);
			ASSERT_TRUE(pager_policy_at(&m.o, lens[st] + k) == &m.pages[trace[t - lens[st] + k]].ord);
		}
	}
	want = opt(trace, start, end, cached, nslots);
	got = (struct counts){ m.hits, m.misses, m.evictions };
	fprintf(stderr, "%s: policy hits %llu misses %llu evictions %llu; OPT %llu %llu %llu\n", name,
		(unsigned long long)got.hits, (unsigned long long)got.misses, (unsigned long long)got.evictions,
		(unsigned long long)want.hits, (unsigned long long)want.misses, (unsigned long long)want.evictions);
	ASSERT_UEQ(got.hits, want.hits);
	ASSERT_UEQ(got.misses, want.misses);
	ASSERT_UEQ(got.evictions, want.evictions);
	ASSERT_TRUE(got.evictions > 0); /* the cache was too small: the choice mattered */
	pager_policy_free(&m.o);
}

/* Steps 1..steps-1 repeat step 0 (trace[0..len)), as a training loop does. */
static void repeat(unsigned *trace, size_t *lens, size_t len, unsigned steps)
{
	for (unsigned s = 0; s < steps; s++) {
		lens[s] = len;
		for (size_t i = 0; i < len; i++)
			trace[s * len + i] = trace[i];
	}
}

/* A loop over more pages than slots: what LRU and the clock thrash on. */
static void test_cyclic(void)
{
	enum { N = 12, STEPS = 4 };
	unsigned trace[N * STEPS];
	size_t lens[STEPS];

	for (unsigned i = 0; i < N; i++)
		trace[i] = i;
	repeat(trace, lens, N, STEPS);
	run("cyclic", trace, lens, STEPS, 1, 8);
}

/* Forward, backward and an update pass, as a training step touches
 * parameters, gradients and optimizer state: pages used up to three times
 * a step at irregular distances. */
static void test_fwd_bwd_update(void)
{
	enum { N = 10, L = 3 * N, STEPS = 3 };
	unsigned trace[L * STEPS];
	size_t lens[STEPS];

	for (unsigned i = 0; i < N; i++) {
		trace[i] = i;
		trace[N + i] = N - 1 - i;
		trace[2 * N + i] = (i * 7) % N;
	}
	repeat(trace, lens, L, STEPS);
	run("fwd-bwd-update", trace, lens, STEPS, 1, 6);
}

/* An irregular order with repeats (a fixed pseudo-random sequence), the
 * same every step. */
static void test_irregular(void)
{
	enum { N = 20, L = 48, STEPS = 4 };
	unsigned trace[L * STEPS], x = 12345;
	size_t lens[STEPS];

	for (unsigned i = 0; i < L; i++) {
		x = x * 1103515245u + 12345u;
		trace[i] = (x >> 16) % N;
	}
	repeat(trace, lens, L, STEPS);
	run("irregular", trace, lens, STEPS, 1, 7);
}

/* The order changes in step 2: that step follows a stale plan (no OPT
 * there), its recording becomes the plan at the STEP, and from step 3 the
 * policy is OPT again. */
static void test_order_change(void)
{
	enum { N = 14, STEPS = 5 };
	unsigned trace[N * STEPS];
	size_t lens[STEPS];

	for (unsigned i = 0; i < N; i++) {
		trace[i] = i;
		trace[2 * N + i] = (i * 5 + 3) % N;
	}
	repeat(trace, lens, N, 2);
	repeat(&trace[2 * N], &lens[2], N, STEPS - 2);
	run("order-change", trace, lens, STEPS, 3, 9);
}

/* With a plan, a victim is only taken when it is needed after `limit`;
 * pages not in the plan go first. */
static void test_limit(void)
{
	struct sim m;
	static const unsigned order[] = { 0, 1, 2, 3 };

	sim_init(&m, 4, 4);
	for (unsigned i = 0; i < 4; i++)
		pager_policy_record(&m.o, &m.pages[order[i]].ord);
	pager_policy_step(&m.o);
	for (unsigned i = 0; i < 4; i++)
		m.slot_page[i] = (int)i;
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, PAGER_POLICY_NO_LIMIT, candidate, &m), 3);
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, 2, candidate, &m), 3);
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, 3, candidate, &m), PAGER_POLICY_NONE);
	m.slot_page[1] = 9; /* not in the plan: never needed */
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, 3, candidate, &m), 1);
	/* Past page 0 this step, its next use is in the next step: last. */
	m.slot_page[1] = 1;
	pager_policy_follow(&m.o, &m.pages[0].ord);
	ASSERT_UEQ(pager_policy_next_use(&m.o, &m.pages[0].ord), 4);
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, PAGER_POLICY_NO_LIMIT, candidate, &m), 0);
	pager_policy_free(&m.o);
}

/* Without a plan: the clock. A referenced slot loses its bit and is passed
 * over once; slots with no candidate are skipped. */
static void test_clock(void)
{
	struct sim m;

	sim_init(&m, 4, 4);
	for (unsigned i = 0; i < 4; i++) {
		m.slot_page[i] = (int)i;
		m.ref[i] = 1;
	}
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, PAGER_POLICY_NO_LIMIT, candidate, &m), 0);
	ASSERT_EQ(m.ref[1] + m.ref[2] + m.ref[3], 0);
	m.ref[1] = 1;
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, PAGER_POLICY_NO_LIMIT, candidate, &m), 2);
	ASSERT_EQ(m.ref[1], 0);
	m.slot_page[3] = -1;
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, PAGER_POLICY_NO_LIMIT, candidate, &m), 0);
	for (unsigned i = 0; i < 4; i++)
		m.slot_page[i] = -1;
	ASSERT_UEQ(pager_policy_victim(&m.o, &m.clk, 4, PAGER_POLICY_NO_LIMIT, candidate, &m), PAGER_POLICY_NONE);
	pager_policy_free(&m.o);
}

/* The learner: an empty step keeps the plan; a run of accesses the plan
 * does not have drops it (a few are noise); an overflowing recording
 * leaves no plan; forgetting clears every page's positions. */
static void test_learner(void)
{
	struct sim m;
	uint32_t cap;

	sim_init(&m, 4, 4); /* window 4: the noise allowed is 8 */
	for (unsigned i = 0; i < 5; i++)
		pager_policy_record(&m.o, &m.pages[i].ord);
	pager_policy_step(&m.o);
	ASSERT_TRUE(m.o.plan_ok);
	ASSERT_EQ(m.o.plan_len, 5);
	pager_policy_step(&m.o);
	ASSERT_TRUE(m.o.plan_ok);
	ASSERT_TRUE(pager_policy_at(&m.o, 7) == &m.pages[2].ord);

	/* Skipping ahead resynchronises. */
	pager_policy_follow(&m.o, &m.pages[3].ord);
	ASSERT_UEQ(m.o.resyncs, 1);
	ASSERT_EQ(m.o.cursor, 4);
	for (unsigned i = 0; i < 8; i++)
		pager_policy_follow(&m.o, &m.pages[20 + i].ord);
	ASSERT_TRUE(m.o.plan_ok);
	pager_policy_follow(&m.o, &m.pages[28].ord);
	ASSERT_TRUE(!m.o.plan_ok);
	ASSERT_UEQ(m.o.divergences, 9);
	ASSERT_TRUE(pager_policy_at(&m.o, 0) == NULL);

	/* Overflow: no plan rather than half of one. */
	cap = m.o.cap;
	for (uint32_t i = 0; i <= cap; i++)
		pager_policy_record(&m.o, &m.pages[i % MAXP].ord);
	pager_policy_step(&m.o);
	ASSERT_TRUE(!m.o.plan_ok);
	for (unsigned i = 0; i < MAXP; i++)
		ASSERT_UEQ(pager_policy_next_use(&m.o, &m.pages[i].ord), PAGER_POLICY_NO_LIMIT);

	/* Forget. */
	for (unsigned i = 0; i < 3; i++)
		pager_policy_record(&m.o, &m.pages[i].ord);
	pager_policy_step(&m.o);
	ASSERT_TRUE(m.o.plan_ok);
	ASSERT_UEQ(pager_policy_next_use(&m.o, &m.pages[1].ord), 1);
	pager_policy_forget(&m.o);
	ASSERT_TRUE(!m.o.plan_ok);
	for (unsigned i = 0; i < MAXP; i++)
		ASSERT_TRUE(m.pages[i].ord.first == PAGER_POLICY_NONE && m.pages[i].ord.next_pos == PAGER_POLICY_NONE);
	pager_policy_free(&m.o);
}

/* Accesses that rewrite a page whole (an exact-mode gradient store's first
 * arrival) are marked in the plan at their positions, wrapping into the
 * next step like the plan itself, so read-ahead can pass them over; the
 * marks follow the recording, not the page: the same page read later in
 * the step is not marked there. */
static void test_overwrite_marks(void)
{
	struct sim m;

	sim_init(&m, 4, 4);
	ASSERT_TRUE(!pager_policy_overwrite_at(&m.o, 0)); /* no plan yet */
	/* Phase A writes g0, g1; phase B reads them back with p0, p1. */
	pager_policy_record_overwrite(&m.o, &m.pages[0].ord);
	pager_policy_record_overwrite(&m.o, &m.pages[1].ord);
	pager_policy_record(&m.o, &m.pages[0].ord);
	pager_policy_record(&m.o, &m.pages[2].ord);
	pager_policy_record(&m.o, &m.pages[1].ord);
	pager_policy_record(&m.o, &m.pages[3].ord);
	pager_policy_step(&m.o);
	ASSERT_TRUE(m.o.plan_ok);
	for (uint64_t i = 0; i < 12; i++)
		ASSERT_TRUE(pager_policy_overwrite_at(&m.o, i) == (i % 6 < 2));
	ASSERT_TRUE(pager_policy_at(&m.o, 2) == &m.pages[0].ord);
	/* The next step records plain reads only: the marks go with it. */
	for (unsigned i = 0; i < 4; i++)
		pager_policy_record(&m.o, &m.pages[i].ord);
	pager_policy_step(&m.o);
	for (uint64_t i = 0; i < 8; i++)
		ASSERT_TRUE(!pager_policy_overwrite_at(&m.o, i));
	pager_policy_forget(&m.o);
	ASSERT_TRUE(!pager_policy_overwrite_at(&m.o, 0));
	pager_policy_free(&m.o);
}

/* A page rewritten whole by its next access needs no read ahead of any
 * later access: a bf16 gradient store's page is rewritten by one chunk's
 * first arrival and read by the other's right after (plan: ow g, g, p). */
static void test_rewritten_next(void)
{
	struct sim m;

	sim_init(&m, 4, 4);
	ASSERT_TRUE(!pager_policy_rewritten_next(&m.o, &m.pages[0].ord)); /* no plan yet */
	pager_policy_record_overwrite(&m.o, &m.pages[0].ord);
	pager_policy_record(&m.o, &m.pages[0].ord);
	pager_policy_record(&m.o, &m.pages[1].ord);
	pager_policy_step(&m.o);
	ASSERT_TRUE(m.o.plan_ok);
	ASSERT_TRUE(pager_policy_rewritten_next(&m.o, &m.pages[0].ord));
	ASSERT_TRUE(!pager_policy_rewritten_next(&m.o, &m.pages[1].ord));
	/* Past the rewrite its next access is a read: worth reading ahead. */
	pager_policy_follow(&m.o, &m.pages[0].ord);
	ASSERT_TRUE(!pager_policy_rewritten_next(&m.o, &m.pages[0].ord));
	pager_policy_follow(&m.o, &m.pages[0].ord);
	pager_policy_follow(&m.o, &m.pages[1].ord);
	/* Done with it this step: its next access is next step's rewrite. */
	ASSERT_TRUE(pager_policy_rewritten_next(&m.o, &m.pages[0].ord));
	pager_policy_free(&m.o);
}

int main(void)
{
	test_cyclic();
	test_fwd_bwd_update();
	test_irregular();
	test_order_change();
	test_limit();
	test_clock();
	test_learner();
	test_overwrite_marks();
	test_rewritten_next();
	return 0;
}
