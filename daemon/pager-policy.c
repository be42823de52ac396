/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "pager-policy.h"

#define NONE PAGER_POLICY_NONE
#define NO_LIMIT PAGER_POLICY_NO_LIMIT

int pager_policy_grow(struct pager_order *o, uint64_t pages)
{
	/* A step may touch each page a few times (forward, backward, update):
	 * four PINs a page, and one more recording past that is dropped. */
	uint64_t want = 4 * pages + 64;
	struct pager_order_page **a, **b;
	uint32_t *n;

	if (want > UINT32_MAX - 1)
		want = UINT32_MAX - 1;
	if (want <= o->cap)
		return 0;
	/* Doubling: registering many small tensors one by one stays linear. */
	if (want < 2ull * o->cap)
		want = 2ull * o->cap < UINT32_MAX - 1 ? 2ull * o->cap : UINT32_MAX - 1;
	a = realloc(o->rec, want * sizeof(*a));
	if (!a)
		return -ENOMEM;
	o->rec = a;
	b = realloc(o->plan, want * sizeof(*b));
	if (!b)
		return -ENOMEM;
	o->plan = b;
	n = realloc(o->nxt, want * sizeof(*n));
	if (!n)
		return -ENOMEM;
	o->nxt = n;
	for (int k = 0; k < 2; k++) {
		uint8_t **ow = k ? &o->plan_ow : &o->rec_ow, *m = realloc(*ow, want);

		if (!m)
			return -ENOMEM;
		*ow = m;
	}
	o->cap = (uint32_t)want;
	return 0;
}

void pager_policy_free(struct pager_order *o)
{
	free(o->rec);
	free(o->plan);
	free(o->nxt);
	free(o->rec_ow);
	free(o->plan_ow);
	o->rec_ow = o->plan_ow = NULL;
	o->rec = o->plan = NULL;
	o->nxt = NULL;
	o->cap = o->rec_len = o->plan_len = 0;
}

uint64_t pager_policy_next_use(const struct pager_order *o, const struct pager_order_page *pg)
{
	if (pg->next_pos != NONE)
		return pg->next_pos;
	if (pg->first != NONE)
		return (uint64_t)o->plan_len + pg->first; /* next step */
	return NO_LIMIT;                                  /* never: evict first */
}

struct pager_order_page *pager_policy_at(const struct pager_order *o, uint64_t i)
{
	if (!o->plan_ok || !o->plan_len)
		return NULL;
	return o->plan[i % o->plan_len];
}

static void pass(struct pager_order *o)
{
	uint32_t i = o->cursor++;

	o->plan[i]->next_pos = o->nxt[i];
}

void pager_policy_follow(struct pager_order *o, struct pager_order_page *pg)
{
	unsigned slack = o->window > 8 ? o->window : 8;

	if (!o->plan_ok)
		return;
	if (o->cursor < o->plan_len && o->plan[o->cursor] == pg) {
		pass(o);
		o->consec_div = 0;
		return;
	}
	if (pg->next_pos != NONE) {
		/* Further on than expected: the client skipped some pages. */
		uint32_t target = pg->next_pos;

		while (o->cursor <= target)
			pass(o);
		o->resyncs++;
		o->consec_div = 0;
		return;
	}
	if (pg->first != NONE && o->cursor + slack >= o->plan_len) {
		/* Near the end and back at the start: a step began without a
		 * STEP mark. Rewind. */
		for (uint32_t i = 0; i < o->plan_len; i++)
			o->plan[i]->next_pos = o->plan[i]->first;
		o->cursor = 0;
		while (o->cursor <= pg->first)
			pass(o);
		o->resyncs++;
		o->consec_div = 0;
		return;
	}
	/* A page the recording does not have here. A few are noise; a run
	 * of them means the order changed: stop trusting it until the next
	 * STEP brings a fresh recording. */
	o->divergences++;
	if (pg->first == NONE && ++o->consec_div > slack)
		o->plan_ok = false;
}

static void record(struct pager_order *o, struct pager_order_page *pg, bool overwrite)
{
	if (o->rec_len < o->cap) {
		o->rec_ow[o->rec_len] = overwrite;
		o->rec[o->rec_len++] = pg;
	} else {
		o->rec_overflow = true;
	}
}

void pager_policy_record(struct pager_order *o, struct pager_order_page *pg)
{
	record(o, pg, false);
}

void pager_policy_record_overwrite(struct pager_order *o, struct pager_order_page *pg)
{
	record(o, pg, true);
}

bool pager_policy_overwrite_at(const struct pager_order *o, uint64_t i)
{
	return o->plan_ok && o->plan_len && o->plan_ow[i % o->plan_len];
}

bool pager_policy_rewritten_next(const struct pager_order *o, const struct pager_order_page *pg)
{
	uint32_t k;

	if (!o->plan_ok || !o->plan_len)
		return false;
	k = pg->next_pos != NONE ? pg->next_pos : pg->first;
	return k != NONE && o->plan_ow[k];
}

/* Only the plan's pages hold positions (every function here keeps it so):
 * clearing them clears every page. */
static void clear_plan(struct pager_order *o)
{
	for (uint32_t i = 0; i < o->plan_len; i++)
		o->plan[i]->first = o->plan[i]->next_pos = NONE;
	o->plan_len = 0;
}

void pager_policy_step(struct pager_order *o)
{
	struct pager_order_page **tmp;

	if (o->rec_overflow) {
		/* Longer than we can hold: follow nothing rather than half. */
		clear_plan(o);
		o->plan_ok = false;
	} else if (o->rec_len) {
		clear_plan(o);
		uint8_t *ow = o->plan_ow;

		tmp = o->plan;
		o->plan = o->rec;
		o->rec = tmp;
		o->plan_ow = o->rec_ow;
		o->rec_ow = ow;
		o->plan_len = o->rec_len;
		/* Backwards, so each page's .first holds its next occurrence. */
		for (uint32_t i = o->plan_len; i-- > 0;) {
			o->nxt[i] = o->plan[i]->first;
			o->plan[i]->first = i;
		}
		for (uint32_t i = 0; i < o->plan_len; i++)
			o->plan[i]->next_pos = o->plan[i]->first;
		o->cursor = 0;
		o->consec_div = 0;
		o->plan_ok = true;
	}
	/* An empty step keeps the old plan. */
	o->rec_len = 0;
	o->rec_overflow = false;
}

void pager_policy_forget(struct pager_order *o)
{
	clear_plan(o);
	o->plan_ok = false;
	o->rec_len = o->cursor = 0;
	o->rec_overflow = false;
}

uint32_t pager_policy_victim(const struct pager_order *o, struct pager_clock *clk, uint32_t n, uint64_t limit,
			     pager_policy_candidate_fn candidate, const void *ctx)
{
	uint32_t best = NONE;

	if (o->plan_ok) {
		uint64_t best_key = 0;

		for (uint32_t s = 0; s < n; s++) {
			const struct pager_order_page *pg = candidate(ctx, s);
			uint64_t k;

			if (!pg)
				continue;
			k = pager_policy_next_use(o, pg);
			if (limit != NO_LIMIT && k <= limit)
				continue;
			if (best == NONE || k > best_key) {
				best = s;
				best_key = k;
			}
		}
		return best;
	}
	for (uint32_t i = 0; i < 2 * n; i++) {
		uint32_t s = clk->hand;

		clk->hand = (clk->hand + 1) % n;
		if (!candidate(ctx, s))
			continue;
		if (clk->ref[s]) {
			clk->ref[s] = 0;
			continue;
		}
		return s;
	}
	return NONE;
}
