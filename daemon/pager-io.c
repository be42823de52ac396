/* SPDX-License-Identifier: MIT */
/*
 * pager-io.c: one page's transfer between its slot and its swap page, and
 * what its completion does to the page. Every write sets the CRC-32C the
 * next read of that page is checked against.
 */
#include <errno.h>
#include <string.h>

#include "crc32c.h"
#include "pager-private.h"

static void io_done(struct uring_req *req, int res);

static void start_io(struct pager *p, struct ppage *pg, enum uring_op op)
{
	struct pslot *sl = &p->slots[pg->slot];
	uint64_t off;
	int file = swap_locate(p->swap, pg->disk, &off);

	sl->req = (struct uring_req){
		.op = op, .file = file, .addr = slot_addr(p, pg->slot),
		.len = p->c.page_size, .off = off, .complete = io_done,
	};
	sl->t0 = now_ns();
	p->tensors[pg->tensor].nio++;
	uring_submit(p->c.uring, &sl->req);
}

void pager_io_read(struct pager *p, struct ppage *pg)
{
	pg->state = PAGER_READING;
	p->nreading++;
	start_io(p, pg, URING_READ);
}

void pager_io_write(struct pager *p, struct ppage *pg)
{
	/* The checksum of what goes out; it becomes the page's only if the
	 * write succeeds and nobody re-dirtied the page meanwhile. */
	pg->wcrc = crc32c(0, slot_addr(p, pg->slot), p->c.page_size);
	pg->state = PAGER_WRITING;
	pg->flags &= (uint8_t)~F_REDIRTY;
	p->nwriting++;
	start_io(p, pg, URING_WRITE);
}

static const char *err_text(int res)
{
	return res == -EBADMSG ? "checksum mismatch" : strerror(-res);
}

static void read_done(struct pager *p, struct pslot *sl, struct ppage *pg, int res)
{
	uint64_t dt = now_ns() - sl->t0;

	p->nreading--;
	if (res == 0) {
		uint32_t got = crc32c(0, slot_addr(p, pg->slot), p->c.page_size);

		p->st.reads++;
		p->st.read_bytes += p->c.page_size;
		p->st.read_ns += dt;
		if (got != pg->crc) {
			p->st.checksum_errors++;
			res = -EBADMSG;
		}
	}
	if (res < 0) {
		uint32_t n = pg->npending;

		p->st.errors++;
		pager_set_msg(p, "session '%s': read of tensor '%s' page %u from %s (offset %llu) failed: %s%s",
			p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
			(unsigned long long)sl->req.off, err_text(res),
			res == -EBADMSG ? " (the data on disk is not what was written; it was not handed out)" : "");
		/* The slot's contents are whatever the failed read left: never
		 * hand them out. The disk copy stays the page's home; a later
		 * PIN tries again. */
		pager_slot_release(p, pg);
		pg->state = PAGER_DISK;
		pg->flags &= (uint8_t)~F_PREFETCHED;
		pager_pin_put(p, pg, n);
		pager_deliver_page(p, pg, res);
		return;
	}
	pg->state = PAGER_CLEAN;
	pager_deliver_page(p, pg, (int32_t)pg->slot);
}

static void write_done(struct pager *p, struct pslot *sl, struct ppage *pg, int res)
{
	uint64_t dt = now_ns() - sl->t0;
	bool flagged = pg->flags & F_FLUSH;

	p->nwriting--;
	pg->flags &= (uint8_t)~F_FLUSH;
	if (res < 0) {
		p->st.errors++;
		pager_set_msg(p,
			"session '%s': write of tensor '%s' page %u to %s (offset %llu) failed: %s; "
			"the page's data is lost and its PINs will fail (restore it from a checkpoint)",
			p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
			(unsigned long long)sl->req.off, err_text(res));
		pg->state = PAGER_FAILED;
		p->nfailed++;
		pg->err = res;
		pg->flags &= (uint8_t)~(F_ONDISK | F_REDIRTY | F_PREFETCHED);
		/* A pinned page keeps its slot until the last UNPIN. */
		if (pg->pins == 0)
			pager_slot_release(p, pg);
		if (flagged && !p->fl.err)
			p->fl.err = res;
	} else {
		p->st.writes++;
		p->st.write_bytes += p->c.page_size;
		p->st.write_ns += dt;
		pg->crc = pg->wcrc;
		pg->flags |= F_ONDISK;
		pg->state = pg->flags & F_REDIRTY ? PAGER_DIRTY : PAGER_CLEAN;
		pg->flags &= (uint8_t)~F_REDIRTY;
	}
	if (flagged)
		p->fl.writes_left--;
}

static void io_done(struct uring_req *req, int res)
{
	struct pslot *sl = (struct pslot *)req;
	struct pager *p = sl->pager;

	if (p->closing) {
		/* An orphan: its pages and waiters are gone with the session;
		 * only the count matters. */
		if (req->op == URING_READ)
			p->nreading--;
		else
			p->nwriting--;
		pager_orphan_done(p);
		return;
	}
	struct ppage *pg = sl->page;
	uint32_t tid = pg->tensor;
	struct ptensor *t = &p->tensors[tid];
	bool gone;

	if (req->op == URING_READ)
		read_done(p, sl, pg, res);
	else
		write_done(p, sl, pg, res);
	gone = --t->nio == 0 && t->dying;
	if (gone)
		pager_tensor_drop(p, tid);
	pager_flush_progress(p);
	pager_sched_pump(p, true);
	/* Last: the session's reply to the UNREGISTER may end the session
	 * (a client gone), and with it this pager. */
	if (gone && p->c.tensor_removed)
		p->c.tensor_removed(p->c.ctx, tid);
}

