/* SPDX-License-Identifier: MIT */
/*
 * pager-sched.c: what the pager starts on its own after every change:
 * slots for the PINs waiting for one, the write-backs that clean them,
 * read-ahead along the learned order, and write-behind while the ring has
 * room.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pager-private.h"
#include "safemem.h"

static int cand_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct cand *)a)->key, y = ((const struct cand *)b)->key;

	return x < y ? 1 : x > y ? -1 : 0; /* furthest next use first */
}

/* Starts up to n writes of unpinned dirty pages whose next use is after
 * `after` (NO_LIMIT: any), furthest next use first. */
static uint32_t start_writebacks(struct pager *p, uint32_t n, uint64_t after, uint64_t *counter)
{
	uint32_t m = 0, started = 0;

	if (n == 0 || !p->ndirty)
		return 0;
	/* Only the dirty unpinned pages (pager.dirty), not every slot. */
	for (struct ppage *pg = p->dirty; pg; pg = pg->dl_next) {
		uint64_t k;

		/* Its swap home still holds a checkpoint's page: later. */
		if (p->snap && !pager_snap_home_ok(p, pg))
			continue;
		k = p->order.plan_ok ? pager_policy_next_use(&p->order, &pg->ord) : (uint64_t)!p->clock.ref[pg->slot];
		if (p->order.plan_ok && after != NO_LIMIT && k <= after)
			continue;
		p->scratch[m++] = (struct cand){ pg, k };
	}
	if (m > n)
		qsort(p->scratch, m, sizeof(*p->scratch), cand_cmp);
	for (uint32_t i = 0; i < m && started < n; i++, started++)
		pager_io_write(p, p->scratch[i].pg);
	*counter += started;
	return started;
}

static void serve_slot_waiters(struct pager *p)
{
	while (p->sw_head) {
		struct ppage *pg = p->sw_head;
		uint32_t s = pager_take_slot(p, NO_LIMIT);

		if (s == NONE)
			break;
		p->sw_head = pg->sw_next;
		if (!p->sw_head)
			p->sw_tail = NULL;
		pg->sw_next = NULL;
		p->nslotwait--;
		pager_slot_assign(p, s, pg);
		if (pg->flags & F_OVERWRITE) {
			pager_overwrite(p, pg);
			pager_deliver_page(p, pg, (int32_t)s);
		} else if (pg->flags & F_ONDISK) {
			pager_io_read(p, pg);
		} else if (safemem_zero(slot_addr(p, s), p->c.page_size) < 0) {
			uint32_t n = pg->npending;

			pager_region_gone(p, "pin", pg);
			pg->rewrite_wait = false;
			pager_slot_release(p, pg);
			pager_pin_put(p, pg, n);
			pager_deliver_page(p, pg, -EFAULT);
		} else {
			pg->state = pg->rewrite_wait ? PAGER_DIRTY : PAGER_CLEAN;
			pg->rewrite_wait = false;
			pager_page_sync(p, pg);
			p->st.zero_fills++;
			pager_deliver_page(p, pg, (int32_t)s);
		}
	}
}

static void prefetch_ahead(struct pager *p)
{
	uint64_t end;

	if (!p->order.plan_ok || !p->order.plan_len || !p->c.prefetch_window || !p->swap)
		return;
	end = (uint64_t)p->order.cursor + p->c.prefetch_window;
	for (uint64_t i = p->order.cursor; i < end; i++) {
		struct ppage *pg = page_of(pager_policy_at(&p->order, i));
		uint32_t s;

		/* A page rewritten whole there, or before then (a bf16
		 * gradient store's page: one chunk rewrites it, the other
		 * reads it next), needs no read. */
		if (pg->state != PAGER_DISK || p->tensors[pg->tensor].dying || pager_policy_overwrite_at(&p->order, i) ||
		    pager_policy_rewritten_next(&p->order, &pg->ord))
			continue;
		/* A page whose read just failed waits for a PIN to try again. */
		if (pg->read_failed)
			continue;
		/* Only evict what is needed later than what comes in. When
		 * only dirty pages qualify, clean enough of them for the rest
		 * of the window now: the read-ahead must not wait for the
		 * ring to be idle. */
		s = pager_take_slot(p, i);
		if (s == NONE) {
			uint64_t want = end - i, busy = uring_busy(p->c.uring), room;

			room = busy < p->c.queue_depth ? p->c.queue_depth - busy : 0;
			if (want > room)
				want = room;
			start_writebacks(p, (uint32_t)want, i, &p->st.writebacks);
			break;
		}
		pager_slot_assign(p, s, pg);
		pg->flags |= F_PREFETCHED;
		p->st.prefetches++;
		pager_io_read(p, pg);
	}
}

/* Pagers whose write-behind found the shared ring full. Another session's
 * completion frees the room, and that completion pumps only its own
 * pager: without this list the deferred writes would wait for this
 * session's next operation, which may never come (a trainer between
 * steps), and its dirty pages would sit in their slots. One loop thread:
 * no lock. */
static struct pager *room_head, *room_tail;

static void room_wait(struct pager *p)
{
	if (p->room_wait)
		return;
	p->room_wait = true;
	p->room_next = NULL;
	if (room_tail)
		room_tail->room_next = p;
	else
		room_head = p;
	room_tail = p;
}

void pager_room_forget(struct pager *p)
{
	struct pager **pp = &room_head, *prev = NULL;

	if (!p->room_wait)
		return;
	while (*pp && *pp != p) {
		prev = *pp;
		pp = &(*pp)->room_next;
	}
	if (*pp)
		*pp = p->room_next;
	if (room_tail == p)
		room_tail = prev;
	p->room_wait = false;
}

void pager_room_kick(void)
{
	/* Those waiting now, in order; a pager that still finds no room
	 * goes back on the list for the next kick. */
	struct pager *p = room_head;

	room_head = room_tail = NULL;
	while (p) {
		struct pager *next = p->room_next;

		p->room_wait = false;
		p->room_next = NULL;
		pager_sched_pump(p, true);
		p = next;
	}
}

static void write_behind(struct pager *p)
{
	uint32_t depth = p->c.queue_depth, half = depth / 2 ? depth / 2 : 1;
	uint32_t busy = uring_busy(p->c.uring), n;
	uint64_t after = NO_LIMIT;

	/* Slots the read-ahead can take without waiting (kept by
	 * pager_page_sync(), not counted here). While there are enough,
	 * writes keep to half the ring so that reads (a PIN may be waiting
	 * for one) always find room; when they run short, the next reads
	 * will wait for these writes anyway, so use all of it. */
	uint32_t spare = p->nfree + p->nspare;

	if (!p->ndirty)
		return;
	if (busy >= depth) {
		room_wait(p);
		return;
	}
	if (spare >= 2 * p->c.prefetch_window) {
		if (p->nwriting >= half)
			return;
		n = half - p->nwriting;
		if (n > depth - busy)
			n = depth - busy;
	} else {
		n = depth - busy;
	}
	/* A page needed again within the window would only be dirtied
	 * again: leave it. */
	if (p->order.plan_ok)
		after = (uint64_t)p->order.cursor + p->c.prefetch_window;
	start_writebacks(p, n, after, &p->st.write_behinds);
}

/* Runs after every change: gives slots to PINs waiting for one, keeps
 * enough write-backs going for them, reads ahead, writes behind. `serve`
 * is false inside pager_pin(), which must not complete other operations. */
void pager_sched_pump(struct pager *p, bool serve)
{
	if (p->closing || !p->swap)
		return;
	if (serve)
		serve_slot_waiters(p);
	if (p->nslotwait) {
		/* Each waiter needs one slot to come clean; reads and writes in
		 * flight will each free or clean one, so only the shortfall
		 * needs new writes. */
		uint32_t coming = p->nreading + p->nwriting;

		/* Those that went out as write-behind, before anyone waited,
		 * may still wait for room in the background class, which other
		 * sessions' urgent I/O keeps out of the ring for as long as it
		 * has any: they are waited for now. */
		uring_hurry_owner(p->c.uring, &p->owner, p->nslotwait);
		if (coming < p->nslotwait)
			start_writebacks(p, p->nslotwait - coming, NO_LIMIT, &p->st.writebacks);
		return; /* waiters first: no read-ahead competes for slots */
	}
	prefetch_ahead(p);
	write_behind(p);
}

