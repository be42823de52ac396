/* SPDX-License-Identifier: MIT */
/*
 * pager-tensors.c: the tensors of a session's page table: registering
 * one (its pages, their swap homes or slots, zeroed), dropping it, and
 * removing it once its I/O is over.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pager-private.h"
#include "safemem.h"

int pager_tensor_info(const struct pager *p, uint32_t id, uint64_t *bytes, bool *swappable, uint32_t *npages)
{
	const struct ptensor *t = id < p->ntensors ? &p->tensors[id] : NULL;

	if (!t || !t->used || t->dying)
		return -ENOENT;
	*bytes = t->bytes;
	*swappable = t->swappable;
	*npages = t->npages;
	return 0;
}

/* Zeros slot s for a resident page that holds used bytes. Past them, to
 * the end of the page, nothing is ever read or written for the tensor (a
 * tensor's last page, for a bias, a norm's weight: most of a page), so
 * that part goes back to the kernel rather than being zeroed: no memory
 * sits in a slot for nothing. Anyone who touches it later reads zeros and
 * gets memory back, as with a zeroed page. Not while the region is
 * registered with io_uring as fixed buffers (a session with swap): the
 * registration holds the pages it pinned, so a punched page would live on
 * under the ring, and a later swap write from that slot would send the old
 * page's bytes to disk. */
static int resident_zero(struct pager *p, uint32_t s, uint64_t used)
{
	uint64_t keep = (used + 4095) & ~(uint64_t)4095, off = (uint64_t)s * p->c.page_size;

	if (keep < p->c.page_size && p->c.discard && p->bufreg < 0 &&
	    p->c.discard(p->c.ctx, off + keep, p->c.page_size - keep) == 0)
		return safemem_zero(slot_addr(p, s), keep);
	return safemem_zero(slot_addr(p, s), p->c.page_size);
}

int pager_tensor_add(struct pager *p, const char *name, uint64_t bytes, bool swappable, uint32_t *id,
		     uint32_t *npages, char *err, size_t errlen)
{
	uint64_t n = (bytes + p->c.page_size - 1) / p->c.page_size;
	struct ptensor *t = NULL;
	uint32_t tid = NONE;
	int r;

	if (!name || !*name || bytes == 0 || n >= NONE) {
		snprintf(err, errlen, "session '%s': tensor '%s': bad name or size", p->session, name ? name : "");
		return -EINVAL;
	}
	if (swappable && p->swap && p->ndisk_free < n && p->ndisk_free + p->ndheld >= n) {
		snprintf(err, errlen,
			 "session '%s': tensor '%s' needs %llu MiB of swap, and %llu MiB of the session's spare swap "
			 "hold pages a checkpoint is still copying (pages rewritten since its commit point went to "
			 "spare swap pages): register it again when the checkpoint ends",
			 p->session, name, (unsigned long long)(n * p->c.page_size >> 20),
			 (unsigned long long)(p->ndheld * p->c.page_size >> 20));
		return -EAGAIN;
	}
	if (swappable && (!p->swap || p->ndisk_free < n)) {
		snprintf(err, errlen,
			 "session '%s': tensor '%s' needs %llu MiB of swap, %llu MiB left of the session's %llu MiB "
			 "(attach with a larger swap size)",
			 p->session, name, (unsigned long long)(n * p->c.page_size >> 20),
			 (unsigned long long)(p->ndisk_free * p->c.page_size >> 20),
			 (unsigned long long)(p->ndisk * p->c.page_size >> 20));
		return -ENOSPC;
	}
	if (!swappable) {
		uint32_t avail = p->nfree;

		if (p->nclaim + n > p->c.nslots) {
			snprintf(err, errlen,
				 "session '%s': resident tensor '%s' needs %llu slots, %u of %u are held "
				 "(attach with a larger region or make it swappable)",
				 p->session, name, (unsigned long long)n, p->nclaim, p->c.nslots);
			return -ENOMEM;
		}
		/* Clean pages give up their slots too; look for them only
		 * when the free ones do not suffice. */
		/* While a checkpoint copies, an eviction may have to wait
		 * for it: count the free slots only. */
		for (uint32_t s = 0; !p->snap && avail < n && s < p->c.nslots; s++)
			avail += clean_victim(p->slots[s].page);
		if (avail < n) {
			snprintf(err, errlen,
				 "session '%s': resident tensor '%s' needs %llu slots and only %u are free or clean now "
				 "(register resident tensors first, or FLUSH before registering)",
				 p->session, name, (unsigned long long)n, avail);
			return -EBUSY;
		}
	}
	if (p->nfree_tids) {
		tid = p->free_tids[p->nfree_tids - 1];
	} else {
		if (p->ntensors == p->tensors_cap) {
			/* Doubling: registering n tensors costs O(n), not O(n^2). */
			uint32_t cap = p->tensors_cap ? 2 * p->tensors_cap : 16;
			struct ptensor *nt = realloc(p->tensors, (size_t)cap * sizeof(*nt));
			uint32_t *nf;

			if (!nt)
				return -ENOMEM;
			p->tensors = nt;
			nf = realloc(p->free_tids, (size_t)cap * sizeof(*nf));
			if (!nf)
				return -ENOMEM;
			p->free_tids = nf;
			p->tensors_cap = cap;
		}
		tid = p->ntensors;
		p->tensors[tid] = (struct ptensor){ 0 };
	}
	r = pager_policy_grow(&p->order, p->npages + n);
	if (r < 0)
		return r;
	t = &p->tensors[tid];
	t->name = strdup(name);
	t->pages = calloc(n, sizeof(*t->pages));
	if (!t->name || !t->pages) {
		free(t->name);
		free(t->pages);
		*t = (struct ptensor){ 0 };
		return -ENOMEM;
	}
	if (p->nfree_tids && p->free_tids[p->nfree_tids - 1] == tid)
		p->nfree_tids--;
	else
		p->ntensors++;
	p->ntensors_used++;
	t->npages = (uint32_t)n;
	t->bytes = bytes;
	t->swappable = swappable;
	t->used = true;
	for (uint32_t i = 0; i < n; i++) {
		struct ppage *pg = &t->pages[i];

		*pg = (struct ppage){
			.slot = NONE, .disk = NONE, .ord = { NONE, NONE },
			.wait_head = NONE, .wait_tail = NONE, .tensor = tid, .index = i,
			.state = swappable ? PAGER_ZERO : PAGER_RESIDENT, .cstate = CSTATE_NONE,
		};
		pager_page_sync(p, pg);
		if (swappable) {
			pg->disk = p->disk_free[--p->ndisk_free];
		} else {
			uint32_t s = pager_take_slot(p, NO_LIMIT);

			pager_slot_assign(p, s, pg);
			p->nclaim++;
		}
	}
	p->npages += n;
	/* A resident page starts as zeros. The slot is client memory: through
	 * safemem, so a region punched under us fails this register alone. */
	for (uint32_t i = 0; !swappable && i < n; i++) {
		uint64_t used = i + 1 < n ? p->c.page_size : bytes - (uint64_t)i * p->c.page_size;

		if (resident_zero(p, t->pages[i].slot, used) < 0) {
			int r2 = pager_region_gone(p, "register", &t->pages[i]);

			snprintf(err, errlen, "%s", pager_last_error(p));
			pager_tensor_remove(p, tid);
			return r2;
		}
	}
	*id = tid;
	*npages = (uint32_t)n;
	return 0;
}

void pager_tensor_drop(struct pager *p, uint32_t id)
{
	struct ptensor *t = &p->tensors[id];

	for (uint32_t i = 0; i < t->npages; i++) {
		struct ppage *pg = &t->pages[i];

		if (pg->slot != NONE)
			pager_slot_release(p, pg);
		if (pg->state == PAGER_RESIDENT)
			p->nclaim--;
		if (pg->state == PAGER_FAILED)
			p->nfailed--;
		if (pg->disk != NONE)
			p->disk_free[p->ndisk_free++] = pg->disk;
		pager_back_drop(p, pg);
		/* Out of the counts (no slot, no pin by now). */
		p->by_state[pg->cstate]--;
		if (pg->counted & C_ONDISK)
			p->nondisk--;
		if (pg->counted & C_PINNED)
			p->npinned--;
	}
	p->npages -= t->npages;
	p->ntensors_used--;
	free(t->name);
	free(t->pages);
	*t = (struct ptensor){ 0 };
	p->free_tids[p->nfree_tids++] = id;
}

int pager_tensor_remove(struct pager *p, uint32_t id)
{
	struct ptensor *t;

	if (id >= p->ntensors || !p->tensors[id].used || p->tensors[id].dying)
		return -ENOENT;
	t = &p->tensors[id];
	if (pager_snap_covers(p, id)) {
		/* Its slots and swap pages would go to other tensors while
		 * the copy still reads them. */
		pager_set_msg(p, "session '%s': cannot remove tensor '%s' while a checkpoint of the session copies it; "
			      "unregister it once the checkpoint is done", p->session, t->name);
		return -EAGAIN;
	}
	for (uint32_t i = 0; i < t->npages; i++) {
		if (t->pages[i].pins) {
			pager_set_msg(p, "session '%s': cannot remove tensor '%s': page %u is pinned", p->session, t->name, i);
			return -EBUSY;
		}
	}
	/* The learned order points into this tensor's pages. */
	pager_policy_forget(&p->order);
	if (t->nio) {
		/* Reads ahead and writes behind are in flight into its slots:
		 * dying keeps new ones from starting, and the last completion
		 * drops it (pager-io.c). */
		t->dying = true;
		for (uint32_t i = 0; i < t->npages; i++)
			pager_page_sync(p, &t->pages[i]);
		return PAGER_PENDING;
	}
	pager_tensor_drop(p, id);
	pager_sched_pump(p, true);
	return 0;
}

uint32_t pager_slots_unclaimed(const struct pager *p)
{
	return p->c.nslots - p->nclaim;
}
