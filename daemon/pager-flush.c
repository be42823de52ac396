/* SPDX-License-Identifier: MIT */
/*
 * pager-flush.c: FLUSH as a state machine: write every page unpinned dirty
 * (and wait for the writes in flight), then fsync every swap file through
 * the ring, then complete the round's waiters. A FLUSH that arrives while a
 * round runs waits for the next round.
 */
#include <errno.h>
#include <string.h>

#include "pager-private.h"

static void fsync_done(struct uring_req *req, int res)
{
	struct pfsync *f = (struct pfsync *)req;
	struct pager *p = f->pager;

	p->fl.fsyncs_left--;
	if (p->closing) {
		pager_orphan_done(p);
		return;
	}
	p->st.fsyncs++;
	if (res < 0) {
		p->st.errors++;
		pager_errors_all++;
		if (!p->fl.err) {
			p->fl.err = res;
			pager_set_msg(p, "session '%s': fsync of %s failed: %s", p->session,
				swap_file_path(p->swap, (unsigned)(f - p->fl.reqs)), strerror(-res));
		}
	}
	pager_flush_progress(p);
	pager_sched_pump(p, true);
}

static void flush_round(struct pager *p)
{
	p->fl.active = true;
	p->fl.fsyncing = false;
	p->fl.err = 0;
	p->fl.writes_left = 0;
	for (uint32_t t = 0; p->nfailed && t < p->ntensors && !p->fl.err; t++) {
		const struct ptensor *te = &p->tensors[t];

		for (uint32_t i = 0; te->used && !te->dying && i < te->npages; i++) {
			if (te->pages[i].state == PAGER_FAILED) {
				p->fl.err = te->pages[i].err;
				pager_set_msg(p, "session '%s': flush: tensor '%s' page %u was lost by a write that failed "
					"%u times: %s (check the drive behind that swap dir or free space on it, then "
					"unregister the tensor and restore it from a checkpoint)",
					p->session, te->name, i, WRITE_RETRIES + 1, strerror(-p->fl.err));
				break;
			}
		}
	}
	for (uint32_t s = 0; s < p->c.nslots; s++) {
		struct ppage *pg = p->slots[s].page;

		if (!pg || p->tensors[pg->tensor].dying)
			continue;
		if (pg->state == PAGER_DIRTY && pg->pins == 0) {
			/* Its swap home still holds a checkpoint's page: the
			 * write waits for the copier (pager_snap_progress()). */
			if (p->snap && !pager_snap_home_ok(p, pg)) {
				pg->flags |= F_FLUSH;
				p->fl.writes_left++;
				continue;
			}
			pager_io_write(p, pg);
			p->st.writebacks++;
		} else if (pg->state != PAGER_WRITING) {
			continue;
		}
		pg->flags |= F_FLUSH;
		/* The FLUSH waits for it: ahead of background I/O. */
		uring_hurry(p->c.uring, &p->slots[s].req);
		p->fl.writes_left++;
	}
}

/* Moves the running FLUSH on: writes done -> fsync every file -> complete. */
void pager_flush_progress(struct pager *p)
{
	uint32_t head;
	int err;

	if (!p->fl.active || p->fl.writes_left || p->fl.fsyncs_left || p->closing)
		return;
	if (!p->fl.fsyncing) {
		unsigned n = swap_nfiles(p->swap);

		p->fl.fsyncing = true;
		p->fl.fsyncs_left = n;
		for (unsigned i = 0; i < n; i++) {
			struct pfsync *f = &p->fl.reqs[i];

			f->req = (struct uring_req){ .op = URING_FSYNC, .file = swap_file_index(p->swap, i),
						     .complete = fsync_done, .urgent = true, .owner = &p->owner };
			f->t0 = now_ns();
			uring_submit(p->c.uring, &f->req);
		}
		return;
	}
	head = p->fl.head;
	err = p->fl.err;
	p->fl.head = p->fl.tail = NONE;
	p->fl.active = false;
	p->fl.fsyncing = false;
	p->st.flushes++;
	pager_deliver_list(p, head, err);
	if (p->fl.nhead != NONE) {
		p->fl.head = p->fl.nhead;
		p->fl.tail = p->fl.ntail;
		p->fl.nhead = p->fl.ntail = NONE;
		flush_round(p);
		pager_flush_progress(p);
	}
}

int pager_flush(struct pager *p, uint64_t user_data)
{
	uint32_t w;

	if (!p->swap)
		return 0; /* resident only: nothing lives on disk */
	w = pager_wait_alloc(p, user_data);
	if (w == NONE) {
		pager_set_msg(p, "session '%s': flush refused: %u operations already pending", p->session, p->npending);
		return -EBUSY;
	}
	if (p->fl.active) {
		/* The running round may have started before pages this FLUSH
		 * must cover were unpinned: the next round takes them. */
		pager_wait_append(p, &p->fl.nhead, &p->fl.ntail, w);
		return PAGER_PENDING;
	}
	pager_wait_append(p, &p->fl.head, &p->fl.tail, w);
	flush_round(p);
	pager_flush_progress(p); /* starts the fsyncs at most: completions come from the ring */
	return PAGER_PENDING;
}

