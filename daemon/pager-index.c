/* SPDX-License-Identifier: MIT */
/*
 * pager-index.c: the scheduler's incremental indexes over the page table:
 * the dirty unpinned pages (write-back candidates), the clean unpinned
 * pages (eviction candidates) and how many of those read-ahead may take.
 * pager_page_sync() runs at every change of a page's state, pins, slot or
 * flags, so no operation scans every slot; pager_check() proves the
 * indexes against a full scan in the tests.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pager-private.h"

/* The page's place in the scheduler's indexes, from what it is now. */
void pager_page_sync(struct pager *p, struct ppage *pg)
{
	bool in_slot = pg->slot != NONE && pg->pins == 0;
	bool dirty = in_slot && pg->state == PAGER_DIRTY && !p->tensors[pg->tensor].dying;
	bool spare = in_slot && pg->state == PAGER_CLEAN && !(pg->flags & F_PREFETCHED);
	bool clean = in_slot && pg->state == PAGER_CLEAN;
	bool pinned = pg->pins > pg->npending, ondisk = pg->flags & F_ONDISK;

	if (pg->cstate != pg->state) {
		if (pg->cstate != CSTATE_NONE)
			p->by_state[pg->cstate]--;
		p->by_state[pg->state]++;
		pg->cstate = pg->state;
	}
	if (pinned != !!(pg->counted & C_PINNED)) {
		p->npinned += pinned ? 1 : (uint64_t)-1;
		pg->counted ^= C_PINNED;
	}
	if (ondisk != !!(pg->counted & C_ONDISK)) {
		p->nondisk += ondisk ? 1 : (uint64_t)-1;
		pg->counted ^= C_ONDISK;
	}

	if (dirty != !!(pg->flags & F_DIRTYLIST)) {
		if (dirty) {
			pg->dl_prev = NULL;
			pg->dl_next = p->dirty;
			if (p->dirty)
				p->dirty->dl_prev = pg;
			p->dirty = pg;
			p->ndirty++;
			pg->flags |= F_DIRTYLIST;
		} else {
			if (pg->dl_prev)
				pg->dl_prev->dl_next = pg->dl_next;
			else
				p->dirty = pg->dl_next;
			if (pg->dl_next)
				pg->dl_next->dl_prev = pg->dl_prev;
			pg->dl_prev = pg->dl_next = NULL;
			p->ndirty--;
			pg->flags &= (uint8_t)~F_DIRTYLIST;
		}
	}
	if (clean != !!(pg->flags & F_CLEANLIST)) {
		if (clean) {
			pg->cl_prev = NULL;
			pg->cl_next = p->clean;
			if (p->clean)
				p->clean->cl_prev = pg;
			p->clean = pg;
			p->nclean++;
			pg->flags |= F_CLEANLIST;
		} else {
			if (pg->cl_prev)
				pg->cl_prev->cl_next = pg->cl_next;
			else
				p->clean = pg->cl_next;
			if (pg->cl_next)
				pg->cl_next->cl_prev = pg->cl_prev;
			pg->cl_prev = pg->cl_next = NULL;
			p->nclean--;
			pg->flags &= (uint8_t)~F_CLEANLIST;
		}
	}
	if (spare != !!(pg->flags & F_SPARE)) {
		if (spare) {
			p->nspare++;
			pg->flags |= F_SPARE;
		} else {
			p->nspare--;
			pg->flags &= (uint8_t)~F_SPARE;
		}
	}
	/* Every slot and pin change passes here: publish the gauges when
	 * they moved (a store into the session's rings, no syscall). */
	if (p->c.gauges && (p->c.nslots - p->nfree != p->pub_slots || p->npinned != p->pub_pinned)) {
		p->pub_slots = p->c.nslots - p->nfree;
		p->pub_pinned = p->npinned;
		p->c.gauges(p->c.ctx, p->pub_slots, p->pub_pinned);
	}
}

/* Every slot accounted once: a slot's page points back at it and a
 * page's slot at the page; the free list holds each other slot once. The
 * claims (the -ENOMEM rule), the slot-wait queue and the swap pages add
 * up. For pager_check(): a full scan, never on an operation's path. */
static int check_slots(const struct pager *p)
{
	uint32_t owned = 0, with_slot = 0, claims = 0, waiting = 0, npending = 0;
	uint64_t disk_used = 0, per_back[PAGER_BACKS_MAX] = { 0 };
	uint8_t *seen;
	int r = 0;

	for (uint32_t s = 0; s < p->c.nslots; s++) {
		const struct ppage *pg = p->slots[s].page;

		if (pg && pg->slot != s)
			return -EUCLEAN;
		owned += pg != NULL;
	}
	for (uint32_t t = 0; t < p->ntensors; t++) {
		const struct ptensor *te = &p->tensors[t];

		for (uint32_t i = 0; te->used && i < te->npages; i++) {
			const struct ppage *pg = &te->pages[i];

			if (pg->slot != NONE && (pg->slot >= p->c.nslots || p->slots[pg->slot].page != pg))
				return -EUCLEAN;
			with_slot += pg->slot != NONE;
			claims += pg->state == PAGER_RESIDENT || pg->pins > 0;
			disk_used += pg->disk != NONE;
			npending += pg->npending;
			if (pg->npending > pg->pins || (pg->state == PAGER_RESIDENT) != (pg->slot != NONE && !te->swappable))
				return -EUCLEAN;
			/* A page read from a backing file has its bytes there. */
			if (pg->back && (pg->back > p->nbacks || !(pg->flags & F_ONDISK) ||
					 p->backs[pg->back - 1].fd < 0))
				return -EUCLEAN;
			if (pg->back)
				per_back[pg->back - 1]++;
		}
	}
	for (const struct ppage *pg = p->sw_head; pg && waiting <= p->nslotwait; pg = pg->sw_next)
		waiting++;
	for (unsigned b = 0; b < p->nbacks; b++)
		if (per_back[b] != p->backs[b].npages || (p->backs[b].fd < 0 && per_back[b]))
			return -EUCLEAN;
	/* Held slots (a checkpoint's copy still reads them) are neither
	 * owned nor free. */
	if (owned != with_slot || owned + p->nfree + p->nheld != p->c.nslots || claims != p->nclaim ||
	    claims > p->c.nslots ||
	    waiting != p->nslotwait || disk_used + p->ndisk_free + p->ndheld != p->ndisk || npending > p->npending)
		return -EUCLEAN;
	seen = calloc(p->c.nslots, 1);
	if (!seen)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->nfree && !r; i++) {
		uint32_t s = p->free_slots[i];

		if (s >= p->c.nslots || seen[s] || p->slots[s].page)
			r = -EUCLEAN;
		else
			seen[s] = 1;
	}
	free(seen);
	return r;
}

/* Each swap page belongs to one page, or is free, or is held for a
 * checkpoint's copy: never two of these. */
static int check_disks(const struct pager *p)
{
	uint8_t *seen = p->ndisk ? calloc(p->ndisk, 1) : NULL;
	int r = 0;

	if (p->ndisk && !seen)
		return -ENOMEM;
#define SEE(d) do { if ((d) >= p->ndisk || seen[(d)]++) r = -EUCLEAN; } while (0)
	for (uint32_t t = 0; t < p->ntensors && !r; t++)
		for (uint32_t i = 0; p->tensors[t].used && i < p->tensors[t].npages && !r; i++)
			if (p->tensors[t].pages[i].disk != NONE)
				SEE(p->tensors[t].pages[i].disk);
	for (uint64_t i = 0; i < p->ndisk_free && !r; i++)
		SEE(p->disk_free[i]);
	for (uint64_t i = 0; i < p->ndheld && !r; i++)
		SEE(p->dheld[i].at);
#undef SEE
	free(seen);
	return r;
}

int pager_check(const struct pager *p)
{
	uint32_t dirty = 0, spare = 0, clean = 0, listed = 0, clisted = 0, used = 0;
	uint64_t by_state[PAGER__STATES] = { 0 }, pinned = 0, ondisk = 0;
	int r;

	for (uint32_t t = 0; t < p->ntensors; t++) {
		const struct ptensor *te = &p->tensors[t];

		if (!te->used)
			continue;
		used++;
		for (uint32_t i = 0; i < te->npages; i++) {
			const struct ppage *pg = &te->pages[i];

			by_state[pg->state]++;
			pinned += pg->pins > pg->npending;
			ondisk += !!(pg->flags & F_ONDISK);
			if (pg->cstate != pg->state)
				return -EUCLEAN;
		}
	}
	if (used != p->ntensors_used || pinned != p->npinned || ondisk != p->nondisk ||
	    memcmp(by_state, p->by_state, sizeof(by_state)))
		return -EUCLEAN;

	for (uint32_t s = 0; s < p->c.nslots; s++) {
		const struct ppage *pg = p->slots[s].page;

		if (!pg || pg->pins)
			continue;
		if (pg->state == PAGER_DIRTY && !p->tensors[pg->tensor].dying) {
			dirty++;
			if (!(pg->flags & F_DIRTYLIST))
				return -EUCLEAN;
		}
		if (pg->state == PAGER_CLEAN && !(pg->flags & F_PREFETCHED)) {
			spare++;
			if (!(pg->flags & F_SPARE))
				return -EUCLEAN;
		}
		if (pg->state == PAGER_CLEAN) {
			clean++;
			if (!(pg->flags & F_CLEANLIST))
				return -EUCLEAN;
		}
	}
	for (const struct ppage *pg = p->clean; pg; pg = pg->cl_next) {
		if (++clisted > p->nclean || (pg->cl_next && pg->cl_next->cl_prev != pg) || !clean_victim(pg))
			return -EUCLEAN;
	}
	if (clean != p->nclean || clisted != p->nclean)
		return -EUCLEAN;
	for (const struct ppage *pg = p->dirty; pg; pg = pg->dl_next) {
		if (++listed > p->ndirty || (pg->dl_next && pg->dl_next->dl_prev != pg))
			return -EUCLEAN;
	}
	if (dirty != p->ndirty || listed != p->ndirty || spare != p->nspare)
		return -EUCLEAN;
	if ((r = check_disks(p)) < 0)
		return r;
	return check_slots(p);
}

