/* SPDX-License-Identifier: MIT */
/*
 * pager.c: the page table (tensors, their pages, the slots they sit in),
 * the operations a session's ring asks for (PIN, UNPIN, PREFETCH, STEP),
 * and the pager's life cycle. Registering and removing tensors:
 * pager-tensors.c. See pager.h for the model, pager-private.h
 * for where the rest lives.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pager-private.h"
#include "safemem.h"

void pager_set_msg(struct pager *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
	va_end(ap);
}

struct ppage *pager_lookup(const struct pager *p, uint32_t tensor, uint32_t page)
{
	const struct ptensor *t;

	if (tensor >= p->ntensors)
		return NULL;
	t = &p->tensors[tensor];
	if (!t->used || t->dying || page >= t->npages)
		return NULL;
	return &t->pages[page];
}

static int bad_id(struct pager *p, const char *op, uint32_t tensor, uint32_t page)
{
	pager_set_msg(p, "session '%s': %s of tensor %u page %u: no such tensor or page", p->session, op, tensor, page);
	return -EINVAL;
}

/* An operation on a page whose write-back failed (FAILED) gets its error. */
static int lost(struct pager *p, const char *op, const struct ppage *pg)
{
	pager_set_msg(p,
		      "session '%s': %s of tensor '%s' page %u: the page was lost when its write to %s failed %u times: "
		      "%s (check the drive behind that swap dir (dmesg, smartctl) or free space on it, then unregister "
		      "the tensor and restore it from a checkpoint)",
		      p->session, op, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk), WRITE_RETRIES + 1,
		      strerror(-pg->err));
	return pg->err;
}

/* The client removed memory from its own region (a punched or truncated
 * memfd; on hugetlb a CPU touch would be SIGBUS): the operation fails with
 * -EFAULT and a message; nothing was handed out. */
int pager_region_gone(struct pager *p, const char *op, const struct ppage *pg)
{
	p->st.errors++;
	pager_set_msg(p, "session '%s': %s of tensor '%s' page %u: the session's region has no memory behind "
		      "slot %u (the client punched or truncated its region memfd)", p->session, op, tname(p, pg),
		      pg->index, pg->slot);
	return -EFAULT;
}

/* Claims: see "Slots and -ENOMEM" in pager.h. */

static void pin_get(struct pager *p, struct ppage *pg)
{
	if (pg->pins++ == 0)
		p->nclaim++;
	pager_page_sync(p, pg);
}

void pager_pin_put(struct pager *p, struct ppage *pg, uint32_t n)
{
	pg->pins -= n;
	if (n && pg->pins == 0)
		p->nclaim--;
	pager_page_sync(p, pg);
}

/* Operations. */

/* Every accepted PIN: the plan and the recording follow it, it counts, and
 * a page already in (or on its way into) a slot is a hit, credited to the
 * prefetcher when a PREFETCH brought it. */
static void pin_accept(struct pager *p, struct ppage *pg, bool in_slot, bool rewrite)
{
	pager_policy_follow(&p->order, &pg->ord);
	if (rewrite)
		pager_policy_record_overwrite(&p->order, &pg->ord);
	else
		pager_policy_record(&p->order, &pg->ord);
	pin_get(p, pg);
	p->st.pins++;
	if (!in_slot)
		return;
	if (pg->flags & F_PREFETCHED)
		p->st.prefetch_hits++;
	else
		p->st.pin_hits++;
	pg->flags &= (uint8_t)~F_PREFETCHED;
	pager_page_sync(p, pg);
}

/* A page about to be rewritten whole: its contents become whatever the
 * slot holds (the caller's own region, never another session's), so it is
 * dirty from now on, however it is unpinned. */
void pager_overwrite(struct pager *p, struct ppage *pg)
{
	if (pg->state == PAGER_WRITING)
		pg->flags |= F_REDIRTY;
	else
		pg->state = PAGER_DIRTY;
	pg->flags &= (uint8_t)~F_OVERWRITE;
	p->st.overwrites++;
	pager_page_sync(p, pg);
}

static int pin(struct pager *p, uint32_t tensor, uint32_t page, uint64_t user_data, bool rewrite)
{
	struct ppage *pg = pager_lookup(p, tensor, page);
	uint32_t w, s;

	if (!pg)
		return bad_id(p, "pin", tensor, page);
	if (pg->state == PAGER_FAILED) {
		return lost(p, "pin", pg);
	}
	if (pg->pins >= MAX_PINS) {
		/* A client pinning in a loop must not wrap the count. */
		pager_set_msg(p, "session '%s': tensor '%s' page %u is pinned %u times already", p->session, tname(p, pg),
			page, pg->pins);
		return -EBUSY;
	}
	/* The client writes a page after pinning it: a checkpoint's copy
	 * that still needs its slot's bytes gets them first. Before any
	 * change: a PIN that must wait is tried again whole. */
	if (p->snap && pager_snap_pin_guard(p, pg) == PAGER_WAIT)
		return PAGER_WAIT;
	if (pg->state == PAGER_RESIDENT) {
		pg->pins++;
		pager_page_sync(p, pg);
		p->st.pins++;
		p->st.pin_hits++;
		return (int)pg->slot;
	}
	if (pg->pins == 0 && p->nclaim >= p->c.nslots) {
		p->st.enomem++;
		pager_set_msg(p,
			"session '%s': cannot pin tensor '%s' page %u: all %u slots are held by pinned or resident "
			"pages (unpin pages before pinning more, or attach with a larger region)",
			p->session, tname(p, pg), page, p->c.nslots);
		return -ENOMEM;
	}

	switch (pg->state) {
	case PAGER_CLEAN:
	case PAGER_DIRTY:
	case PAGER_WRITING:
		pin_accept(p, pg, true, rewrite);
		if (rewrite)
			pager_overwrite(p, pg);
		p->clock.ref[pg->slot] = 1;
		pager_sched_pump(p, false);
		return (int)pg->slot;

	case PAGER_READING:
	case PAGER_SLOTWAIT:
		w = pager_wait_alloc(p, user_data);
		if (w == NONE)
			goto busy;
		pin_accept(p, pg, true, rewrite);
		/* Joining a read (or a zero-fill) that another PIN or a
		 * read-ahead started: the caller rewrites the page once it is
		 * in, so from then on it is dirty, however it is unpinned. */
		if (rewrite && !(pg->flags & F_OVERWRITE))
			pg->rewrite_wait = true;
		/* A read-ahead now has a PIN waiting for it. */
		if (pg->state == PAGER_READING)
			uring_hurry(p->c.uring, &p->slots[pg->slot].req);
		pager_wait_append(p, &pg->wait_head, &pg->wait_tail, w);
		pg->npending++;
		pager_page_sync(p, pg);
		pager_sched_pump(p, false);
		return PAGER_PENDING;

	default: /* ZERO, DISK */
		break;
	}

	w = pager_wait_alloc(p, user_data);
	if (w == NONE)
		goto busy;
	/* Follow the plan first, so the eviction below sees where the step
	 * is now. */
	pin_accept(p, pg, false, rewrite);
	s = pager_take_slot(p, NO_LIMIT);
	if (s != NONE) {
		pager_slot_assign(p, s, pg);
		if (rewrite) {
			/* Nothing to read or zero: the caller writes it all. */
			pager_wait_release(p, w);
			pager_overwrite(p, pg);
			pager_sched_pump(p, false);
			return (int)s;
		}
		if (pg->state == PAGER_ZERO) {
			pager_wait_release(p, w);
			if (safemem_zero(slot_addr(p, s), p->c.page_size) < 0) {
				pager_slot_release(p, pg);
				pager_pin_put(p, pg, 1);
				return pager_region_gone(p, "pin", pg);
			}
			pg->state = PAGER_CLEAN;
			pager_page_sync(p, pg);
			p->st.zero_fills++;
			pager_sched_pump(p, false);
			return (int)s;
		}
		p->st.misses++;
		pager_wait_append(p, &pg->wait_head, &pg->wait_tail, w);
		pg->npending++;
		pager_io_read(p, pg);
		pager_sched_pump(p, false);
		return PAGER_PENDING;
	}
	/* No slot free or clean: wait for write-back to clean one. The claim
	 * check above guarantees one will come. */
	if (pg->state == PAGER_DISK && !rewrite)
		p->st.misses++;
	if (rewrite)
		pg->flags |= F_OVERWRITE; /* the slot, when it comes, is not read into */
	pg->state = PAGER_SLOTWAIT;
	pager_wait_append(p, &pg->wait_head, &pg->wait_tail, w);
	pg->npending++;
	pager_page_sync(p, pg);
	if (p->sw_tail)
		p->sw_tail->sw_next = pg;
	else
		p->sw_head = pg;
	p->sw_tail = pg;
	p->nslotwait++;
	pager_sched_pump(p, false);
	return PAGER_PENDING;

busy:
	pager_set_msg(p, "session '%s': pin of tensor '%s' page %u refused: %u operations already pending", p->session,
		tname(p, pg), page, p->npending);
	return -EBUSY;
}

int pager_pin(struct pager *p, uint32_t tensor, uint32_t page, uint64_t user_data)
{
	return pin(p, tensor, page, user_data, false);
}

int pager_pin_overwrite(struct pager *p, uint32_t tensor, uint32_t page, uint64_t user_data)
{
	return pin(p, tensor, page, user_data, true);
}

int pager_unpin(struct pager *p, uint32_t tensor, uint32_t page, bool dirty)
{
	struct ppage *pg = pager_lookup(p, tensor, page);

	if (!pg)
		return bad_id(p, "unpin", tensor, page);
	if (pg->pins <= pg->npending) {
		pager_set_msg(p, "session '%s': unpin of tensor '%s' page %u, which is not pinned", p->session,
			tname(p, pg), page);
		return -EINVAL;
	}
	if (pg->state == PAGER_RESIDENT) {
		pg->pins--;
		pager_page_sync(p, pg);
		return 0;
	}
	if (pg->state == PAGER_FAILED) {
		int r;

		pager_pin_put(p, pg, 1);
		if (pg->pins == 0 && pg->slot != NONE)
			pager_slot_release(p, pg);
		r = lost(p, "unpin", pg);
		pager_sched_pump(p, true);
		return r;
	}
	if (dirty) {
		if (pg->state == PAGER_CLEAN)
			pg->state = PAGER_DIRTY; /* synced by the pin_put below */
		else if (pg->state == PAGER_WRITING)
			pg->flags |= F_REDIRTY;
	}
	pager_pin_put(p, pg, 1);
	pager_sched_pump(p, true);
	return 0;
}

uint64_t pager_unpin_all(struct pager *p)
{
	uint64_t n = 0;

	for (uint32_t id = 0; id < p->ntensors; id++) {
		struct ptensor *t = &p->tensors[id];

		for (uint32_t i = 0; t->used && !t->dying && i < t->npages; i++)
			for (; t->pages[i].pins > t->pages[i].npending; n++)
				pager_unpin(p, id, i, true);
	}
	return n;
}

int pager_prefetch(struct pager *p, uint32_t tensor, uint32_t page)
{
	struct ppage *pg = pager_lookup(p, tensor, page);
	uint64_t limit = NO_LIMIT;
	uint32_t s;

	if (!pg)
		return bad_id(p, "prefetch", tensor, page);
	if (pg->state == PAGER_FAILED) {
		return lost(p, "prefetch", pg);
	}
	if (pg->state != PAGER_DISK)
		return 0; /* in a slot, on its way, or a zero page: nothing to read */
	if (p->nslotwait) {
		p->st.prefetch_dropped++;
		return 0; /* PINs waiting for slots come first */
	}
	/* With a plan, evict only pages needed later than this one. */
	if (p->order.plan_ok && pager_policy_next_use(&p->order, &pg->ord) != NO_LIMIT)
		limit = pager_policy_next_use(&p->order, &pg->ord);
	s = pager_take_slot(p, limit);
	if (s == NONE) {
		p->st.prefetch_dropped++;
		return 0;
	}
	pager_slot_assign(p, s, pg);
	pg->flags |= F_PREFETCHED;
	p->st.prefetches++;
	pager_io_read(p, pg); /* syncs */
	return 0;
}

void pager_step(struct pager *p)
{
	p->st.steps++;
	pager_policy_step(&p->order);
	pager_sched_pump(p, true);
}

/* Life cycle. */

int pager_new(const struct pager_config *c, char *err, size_t errlen, struct pager **ret)
{
	struct pager *p;
	int r;

	if (!c || !c->session || !c->region || ((uintptr_t)c->region & 4095) || c->page_size < 4096 ||
	    (c->page_size & (c->page_size - 1)) || c->nslots == 0 || c->nslots >= (uint32_t)PAGER_PENDING ||
	    !c->uring || !c->complete || (c->swap_bytes && (!c->dirs || !c->ndirs))) {
		snprintf(err, errlen, "pager: bad configuration (region, page size, slots, ring, callback or swap.dirs)");
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->c = *c;
	p->order.window = c->prefetch_window;
	if (!p->c.queue_depth)
		p->c.queue_depth = 32;
	if (!p->c.max_pending)
		p->c.max_pending = 1024;
	p->bufreg = -1;
	p->fl.head = p->fl.tail = p->fl.nhead = p->fl.ntail = NONE;
	p->wait_free = NONE;
	p->session = strdup(c->session);
	p->slots = calloc(c->nslots, sizeof(*p->slots));
	p->clock.ref = calloc(c->nslots, sizeof(*p->clock.ref));
	p->free_slots = calloc(c->nslots, sizeof(*p->free_slots));
	p->scratch = calloc(c->nslots, sizeof(*p->scratch));
	p->waits = calloc(p->c.max_pending, sizeof(*p->waits));
	if (!p->session || !p->slots || !p->clock.ref || !p->free_slots || !p->scratch || !p->waits) {
		r = -ENOMEM;
		snprintf(err, errlen, "session '%s': out of memory for the page table", c->session);
		goto fail;
	}
	p->c.session = p->session;
	for (uint32_t i = 0; i < c->nslots; i++) {
		p->slots[i].pager = p;
		/* Handed out from the top of the stack: slot 0 first. */
		p->free_slots[i] = c->nslots - 1 - i;
	}
	p->nfree = c->nslots;
	for (uint32_t i = p->c.max_pending; i-- > 0;) {
		p->waits[i].next = p->wait_free;
		p->wait_free = i;
	}

	if (c->swap_bytes) {
		r = swap_new(c->dirs, c->ndirs, c->session, c->page_size, c->swap_bytes, c->uring, err, errlen, &p->swap);
		if (r < 0)
			goto fail;
		p->ndisk = swap_npages(p->swap);
		if (p->ndisk >= NONE) {
			r = -EINVAL;
			snprintf(err, errlen, "session '%s': swap size too large for page size %u", c->session, c->page_size);
			goto fail;
		}
		p->disk_free = calloc(p->ndisk, sizeof(*p->disk_free));
		p->fl.reqs = calloc(swap_nfiles(p->swap), sizeof(*p->fl.reqs));
		if (!p->disk_free || !p->fl.reqs) {
			r = -ENOMEM;
			snprintf(err, errlen, "session '%s': out of memory for the swap map", c->session);
			goto fail;
		}
		for (unsigned i = 0; i < swap_nfiles(p->swap); i++)
			p->fl.reqs[i].pager = p;
		/* Popped from the end: pages 0, 1, 2... go to drives 0, 1, 2... */
		for (uint64_t i = 0; i < p->ndisk; i++)
			p->disk_free[i] = (uint32_t)(p->ndisk - 1 - i);
		p->ndisk_free = p->ndisk;
	}
	/* Fixed buffers save pinning the pages on every request; without
	 * them plain reads and writes work as well. A session without swap
	 * does no I/O through the ring, and its region's pages may be given
	 * back (resident_zero()), which registered buffers forbid. */
	if (c->swap_bytes)
		p->bufreg = uring_buffer_register(c->uring, c->region, (size_t)c->nslots * c->page_size);
	*ret = p;
	return 0;

fail:
	pager_free(p);
	return r;
}

bool pager_busy(const struct pager *p)
{
	return p->nreading || p->nwriting || p->fl.fsyncs_left || p->njobs;
}

/* Everything the pager holds; nothing of it is in the ring any more. */
static void destroy(struct pager *p)
{
	void (*release)(void *) = p->release;
	void *arg = p->release_arg;

	pager_room_forget(p);
	if (p->bufreg >= 0)
		uring_buffer_unregister(p->c.uring, p->bufreg);
	p->swap = swap_free(p->swap);
	pager_backs_free(p);
	for (uint32_t t = 0; t < p->ntensors; t++) {
		free(p->tensors[t].name);
		free(p->tensors[t].pages);
	}
	free(p->tensors);
	free(p->free_tids);
	pager_policy_free(&p->order);
	free(p->clock.ref);
	free(p->disk_free);
	free(p->held);
	free(p->dheld);
	free(p->free_slots);
	free(p->scratch);
	free(p->waits);
	free(p->session);
	free(p->slots);
	free(p->fl.reqs);
	free(p);
	if (release)
		release(arg);
}

void pager_orphan_done(struct pager *p)
{
	if (!pager_busy(p))
		destroy(p);
}

struct pager *pager_close(struct pager *p, void (*release)(void *arg), void *arg)
{
	if (!p) {
		if (release)
			release(arg);
		return NULL;
	}
	p->closing = true;
	p->release = release;
	p->release_arg = arg;
	/* An orphan: the last completion calls destroy(). Requests still
	 * queued in the ring go out as they are: their file indexes and
	 * buffers stay registered until then. */
	if (!pager_busy(p))
		destroy(p);
	return NULL;
}

struct pager *pager_free(struct pager *p)
{
	return pager_close(p, NULL, NULL);
}

/* Introspection. */

const char *pager_last_error(const struct pager *p)
{
	return p->msg;
}

int pager_page_state(const struct pager *p, uint32_t tensor, uint32_t page)
{
	const struct ppage *pg = pager_lookup(p, tensor, page);

	return pg ? pg->state : -EINVAL;
}

const char *pager_state_name(unsigned state)
{
	static const char *const names[PAGER__STATES] = {
		"zero", "disk", "slotwait", "reading", "clean", "dirty", "writing", "failed", "resident",
	};

	return state < PAGER__STATES ? names[state] : "unknown";
}

void pager_stats(const struct pager *p, struct pager_stats *st)
{
	*st = p->st;
	st->page_size = p->c.page_size;
	st->nslots = p->c.nslots;
	st->slots_free = p->nfree;
	st->slots_claimed = p->nclaim;
	st->pending = p->npending;
	st->reads_inflight = p->nreading;
	st->writes_inflight = p->nwriting;
	st->queue_depth = uring_busy(p->c.uring);
	st->plan_active = p->order.plan_ok;
	st->plan_length = p->order.plan_ok ? p->order.plan_len : 0;
	st->resyncs = p->order.resyncs;
	st->divergences = p->order.divergences;
	/* Counted as pages change (pager_page_sync()), not walked: a status
	 * request costs the same for 10 pages as for 10 million. */
	st->tensors = p->ntensors_used;
	st->pages = p->npages;
	memcpy(st->pages_by_state, p->by_state, sizeof(st->pages_by_state));
	st->pages_pinned = p->npinned;
	st->bytes_on_disk = p->nondisk * p->c.page_size;
	st->backed_bytes = 0;
	for (unsigned i = 0; i < p->nbacks; i++)
		st->backed_bytes += p->backs[i].npages * p->c.page_size;
	st->swap_bytes = p->ndisk * p->c.page_size;
	st->swap_assigned_bytes = (p->ndisk - p->ndisk_free) * p->c.page_size;
}

uint64_t pager_error_count(const struct pager *p)
{
	return p->st.errors;
}

uint64_t pager_errors_all;

uint64_t pager_errors_total(void)
{
	return pager_errors_all;
}
