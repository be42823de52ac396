/* SPDX-License-Identifier: MIT */
/*
 * The pager's side of checkpoints and restores: where each page's bytes
 * are for a copy made off the loop (checkpoint.c), the freeze that keeps
 * that answer true while the copy runs, and pages put straight into
 * their swap homes (restore.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "pager-private.h"

int pager_freeze(struct pager *p, bool on)
{
	if (on) {
		if (!p->held && !(p->held = malloc((size_t)p->c.nslots * sizeof(*p->held))))
			return -ENOMEM;
		p->nheld = 0;
		p->frozen = true;
		return 0;
	}
	if (!p->frozen)
		return 0;
	p->frozen = false;
	while (p->nheld)
		p->free_slots[p->nfree++] = p->held[--p->nheld];
	if (!p->closing)
		pager_sched_pump(p, true);
	return 0;
}

int pager_page_source(struct pager *p, uint32_t tensor, uint32_t page, struct pager_src *src)
{
	struct ppage *pg = pager_lookup(p, tensor, page);

	if (!pg)
		return -EINVAL;
	*src = (struct pager_src){ .kind = PAGER_SRC_ZERO, .slot = NONE, .fd = -1 };
	switch (pg->state) {
	case PAGER_RESIDENT:
	case PAGER_CLEAN:
	case PAGER_DIRTY:
	case PAGER_WRITING:
		/* The slot holds the newest bytes (a write in flight only
		 * reads it). */
		src->kind = PAGER_SRC_SLOT;
		src->slot = pg->slot;
		return 0;
	case PAGER_FAILED:
		pager_set_msg(p, "session %s: tensor %s page %u: its write-back failed and its data is lost", p->session,
			      tname(p, pg), page);
		return pg->err ? pg->err : -EIO;
	default:
		/* DISK, or READING / SLOTWAIT: what is on disk is the page
		 * until the read lands, and nothing newer exists. */
		if (pg->flags & F_ONDISK) {
			src->kind = PAGER_SRC_DISK;
			src->fd = swap_page_fd(p->swap, pg->disk, &src->off);
			src->path = swap_page_path(p->swap, pg->disk);
			src->crc = pg->crc;
		}
		return 0;
	}
}

int pager_page_home(const struct pager *p, uint32_t tensor, uint32_t page, int *fd, uint64_t *off,
		    const char **path)
{
	const struct ppage *pg = pager_lookup(p, tensor, page);

	if (!pg || !p->tensors[tensor].swappable || pg->state != PAGER_ZERO || pg->disk == NONE)
		return -EINVAL;
	*fd = swap_page_fd(p->swap, pg->disk, off);
	*path = swap_page_path(p->swap, pg->disk);
	return 0;
}

void pager_page_loaded(struct pager *p, uint32_t tensor, uint32_t page, uint32_t crc)
{
	struct ppage *pg = pager_lookup(p, tensor, page);

	if (!pg || pg->state != PAGER_ZERO)
		return;
	pg->crc = crc;
	pg->flags |= F_ONDISK;
	pg->state = PAGER_DISK;
	pager_page_sync(p, pg);
}
