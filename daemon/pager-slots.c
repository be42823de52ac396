/* SPDX-License-Identifier: MIT */
/*
 * pager-slots.c: where pages wait and where they sit. Waiters are a
 * preallocated pool (a pending PIN costs no allocation), delivered in
 * order when their page's fate is known; slots are assigned, released, and
 * taken: a free one, else the clean unpinned page the policy
 * (pager-policy.c) would miss least.
 */
#include "pager-private.h"

/* Waiters: a preallocated pool, so a pending PIN costs no allocation. */

uint32_t pager_wait_alloc(struct pager *p, uint64_t user_data)
{
	uint32_t w = p->wait_free;

	if (w == NONE)
		return NONE;
	p->wait_free = p->waits[w].next;
	p->waits[w] = (struct pwait){ user_data, NONE };
	p->npending++;
	return w;
}

void pager_wait_release(struct pager *p, uint32_t w)
{
	p->waits[w].next = p->wait_free;
	p->wait_free = w;
	p->npending--;
}

void pager_wait_append(struct pager *p, uint32_t *head, uint32_t *tail, uint32_t w)
{
	if (*tail == NONE)
		*head = w;
	else
		p->waits[*tail].next = w;
	*tail = w;
}

void pager_deliver_list(struct pager *p, uint32_t head, int32_t res)
{
	while (head != NONE) {
		uint32_t next = p->waits[head].next;
		uint64_t ud = p->waits[head].user_data;

		pager_wait_release(p, head);
		if (!p->closing)
			p->c.complete(p->c.ctx, ud, res);
		head = next;
	}
}

void pager_deliver_page(struct pager *p, struct ppage *pg, int32_t res)
{
	uint32_t head = pg->wait_head;

	pg->wait_head = pg->wait_tail = NONE;
	pg->npending = 0;
	pager_page_sync(p, pg);
	pager_deliver_list(p, head, res);
}

/* Slots. */

void pager_slot_assign(struct pager *p, uint32_t s, struct ppage *pg)
{
	p->slots[s].page = pg;
	p->clock.ref[s] = 1;
	pg->slot = s;
	pager_page_sync(p, pg);
}

void pager_slot_release(struct pager *p, struct ppage *pg)
{
	p->slots[pg->slot].page = NULL;
	/* A checkpoint's copy may still need what this slot holds: then it
	 * is held until the copier has it (pager_snap_progress()). */
	if (!p->snap || pager_snap_release_ok(p, pg))
		p->free_slots[p->nfree++] = pg->slot;
	pg->slot = NONE;
	pager_page_sync(p, pg);
}

/* Only an unpinned clean page gives up its slot at once: a dirty one is
 * written back first (pager-sched.c), an in-flight one waits for its I/O. */
static const struct pager_order_page *slot_candidate(const void *ctx, uint32_t s)
{
	const struct ppage *pg = ((const struct pager *)ctx)->slots[s].page;

	return clean_victim(pg) ? &pg->ord : NULL;
}

/* pager_policy_victim() with a plan, over the clean unpinned pages only
 * (pager.clean) rather than every slot: the furthest next use, if after
 * limit. Ties go to the lowest slot, as the scan over slots did. */
static uint32_t planned_victim(const struct pager *p, uint64_t limit)
{
	uint32_t best = NONE;
	uint64_t best_key = 0;

	for (const struct ppage *pg = p->clean; pg; pg = pg->cl_next) {
		uint64_t k = pager_policy_next_use(&p->order, &pg->ord);

		if (limit != NO_LIMIT && k <= limit)
			continue;
		if (best == NONE || k > best_key || (k == best_key && pg->slot < best)) {
			best = pg->slot;
			best_key = k;
		}
	}
	return best;
}

uint32_t pager_take_slot(struct pager *p, uint64_t limit)
{
	struct ppage *pg;
	uint32_t s;

	if (p->nfree)
		return p->free_slots[--p->nfree];
	if (!p->nclean)
		return NONE; /* nothing evictable: no need to look */
	if (p->order.plan_ok)
		s = planned_victim(p, limit);
	else
		s = pager_policy_victim(&p->order, &p->clock, p->c.nslots, limit, slot_candidate, p);
	if (s == NONE)
		return NONE;
	pg = p->slots[s].page;
	/* Its bytes owed to a checkpoint and no budget to save them: the
	 * caller waits (the copier's wake pumps again). */
	if (p->snap && !pager_snap_slot_ok(p, pg))
		return NONE;
	pg->slot = NONE;
	pg->state = pg->flags & F_ONDISK ? PAGER_DISK : PAGER_ZERO;
	pg->flags &= (uint8_t)~F_PREFETCHED;
	pager_page_sync(p, pg);
	p->slots[s].page = NULL;
	p->st.evictions++;
	return s;
}
