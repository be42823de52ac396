/* SPDX-License-Identifier: MIT */
/*
 * pager-copy.c: UNPIN of a page that is a copy of another (SPW_UNPIN_COPY_OF).
 *
 * An overlapped optimizer on a persistent session keeps an undo copy of
 * the master weights it updates (client/journal.c): each step copies a
 * page of p into its undo page, updates p, and unpins both dirty. On the
 * NVMe tier both then reach the disk, p's bytes twice. But the undo copy
 * holds exactly what p's disk home held when p was read from it: when p
 * was pinned clean and on disk, the undo page can take that home over
 * (clean, its checksum known) and p gets the undo page's old home to be
 * written into. The disk moves p once each way per step, as without the
 * undo copy; the homes alternate between the two pages step by step. The
 * undo page gives its slot back at once (only a takeover after a kill
 * reads it, from disk).
 *
 * The client's word that the bytes are a copy is taken: a client that
 * lies only gets its own page's old data back. What is checked is what
 * keeps the pager's own books right: both pages are this session's,
 * swappable and pinned, no transfer is in flight on either, and neither
 * a checkpoint's snapshot (it reads disk homes by the table it planned
 * with) nor a FLUSH (it waits for writes it counted) is running.
 */
#include <errno.h>

#include "pager-private.h"

/* Whether dst may take over src's disk copy now (see above). */
static bool can_take(const struct pager *p, const struct ppage *dst, const struct ppage *src)
{
	if (p->snap || p->fl.active)
		return false;
	if (!p->tensors[dst->tensor].swappable || !p->tensors[src->tensor].swappable)
		return false;
	/* dst: this UNPIN's pin is its only one, in its slot, no write. */
	if (dst->npending || dst->pins != 1 || dst->slot == NONE ||
	    (dst->state != PAGER_CLEAN && dst->state != PAGER_DIRTY) || (dst->flags & (F_FLUSH | F_REDIRTY)))
		return false;
	/* src: pinned, and its disk copy is what it held when pinned (not
	 * written while pinned: the write may carry the client's changes). */
	return src->pins > src->npending && src->state == PAGER_CLEAN && (src->flags & F_ONDISK) &&
	       !(src->flags & F_FLUSH) && !src->write_pinned;
}

int pager_unpin_copy(struct pager *p, uint32_t tensor, uint32_t page, uint32_t src_tensor, uint32_t src_page)
{
	struct ppage *dst = pager_lookup(p, tensor, page), *src = pager_lookup(p, src_tensor, src_page);
	uint32_t disk;

	if (!dst || !src || dst == src) {
		pager_set_msg(p, "session '%s': unpin of tensor %u page %u as a copy of tensor %u page %u: %s", p->session,
			      tensor, page, src_tensor, src_page,
			      dst == src && dst ? "a page is not a copy of itself" : "no such tensor or page");
		return -EINVAL;
	}
	/* Not taken over: an UNPIN as any (a page not pinned is its error). */
	if (!can_take(p, dst, src)) {
		int r = pager_unpin(p, tensor, page, true);

		return r < 0 ? r : 0;
	}
	disk = dst->disk;
	dst->disk = src->disk;
	dst->crc = src->crc;
	/* Where src's bytes are: a backing file's page goes with them. */
	pager_back_drop(p, dst);
	dst->back = src->back;
	dst->back_off = src->back_off;
	dst->flags |= F_ONDISK;
	src->disk = disk;
	src->back = 0;
	src->flags &= (uint8_t)~F_ONDISK;
	src->state = PAGER_DIRTY; /* its new home holds nothing of it yet */
	pager_page_sync(p, src);
	/* Nobody reads an undo copy in the step that made it: its slot is
	 * free at once, for the pages the step reads next. */
	dst->state = PAGER_DISK;
	pager_pin_put(p, dst, 1);
	pager_slot_release(p, dst);
	p->st.disk_copies_taken++;
	pager_sched_pump(p, true);
	return 1;
}
