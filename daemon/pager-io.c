/* SPDX-License-Identifier: MIT */
/*
 * pager-io.c: one page's transfer between its slot and its swap page, and
 * what its completion does to the page. Every write sets the CRC-32C the
 * next read of that page is checked against.
 */
#include <errno.h>
#include <string.h>

#include "pager-private.h"
#include "safemem.h"

static void io_done(struct uring_req *req, int res);

/* Someone waits for this transfer: a PIN of the page, a FLUSH, or (for a
 * write) a PIN waiting for any slot, which a write-back frees. The ring
 * sends these before read-ahead and write-behind, whoever's they are. */
static bool urgent(const struct pager *p, const struct ppage *pg, enum uring_op op)
{
	if (op == URING_READ)
		return pg->npending > 0;
	return pg->npending > 0 || (pg->flags & F_FLUSH) || p->nslotwait > 0;
}

static void start_io(struct pager *p, struct ppage *pg, enum uring_op op, unsigned delay_ms)
{
	struct pslot *sl = &p->slots[pg->slot];
	uint64_t off;
	/* A read takes the bytes from where they are; a write goes home. */
	int file = op == URING_READ ? page_on_disk(p, pg, &off) : swap_locate(p->swap, pg->disk, &off);

	sl->req = (struct uring_req){
		.op = op, .file = file, .addr = slot_addr(p, pg->slot),
		.len = p->c.page_size, .off = off, .complete = io_done, .urgent = urgent(p, pg, op),
		.owner = &p->owner,
	};
	sl->t0 = now_ns();
	uring_submit_after(p->c.uring, &sl->req, delay_ms);
}

/* Off the loop thread: touches only the slot's job fields and its page,
 * through safemem (its guard is per thread). A slot the client punched
 * cannot be summed; job_fault says so and the caller decides. */
static void crc_fn(struct pager_job *j)
{
	struct pslot *sl = (struct pslot *)((char *)j - offsetof(struct pslot, job));
	uint32_t crc = 0;

	sl->job_fault = safemem_crc32c(&crc, sl->job_addr, sl->job_len) < 0;
	sl->job_crc = crc;
}

/* A checksum of slot sl's page, then done() on the loop thread. */
static void crc_job(struct pager *p, struct pslot *sl, void (*done)(struct pager_job *j))
{
	sl->job.fn = crc_fn;
	sl->job.done = done;
	sl->job_addr = slot_addr(p, (uint32_t)(sl - p->slots));
	sl->job_len = p->c.page_size;
	p->njobs++;
	if (p->c.offload) {
		p->c.offload(p->c.ctx, &sl->job);
	} else {
		crc_fn(&sl->job);
		done(&sl->job);
	}
}

void pager_io_read(struct pager *p, struct ppage *pg)
{
	pg->state = PAGER_READING;
	pager_page_sync(p, pg);
	p->nreading++;
	p->tensors[pg->tensor].nio++;
	start_io(p, pg, URING_READ, 0);
}

static void write_crc_done(struct pager_job *j)
{
	struct pslot *sl = (struct pslot *)((char *)j - offsetof(struct pslot, job));
	struct pager *p = sl->pager;

	p->njobs--;
	if (p->closing) {
		/* An orphan: the write is not worth starting now. */
		p->nwriting--;
		pager_orphan_done(p);
		return;
	}
	/* It becomes the page's checksum only if the write succeeds and
	 * nobody re-dirtied the page meanwhile. A slot the client punched
	 * goes out with a checksum no data matches, so a later read fails
	 * (-EBADMSG) rather than hand out what the kernel wrote from the
	 * hole. */
	sl->page->wcrc = sl->job_fault ? ~sl->page->crc : sl->job_crc;
	start_io(p, sl->page, URING_WRITE, sl->job_delay);
}

static void write_after(struct pager *p, struct ppage *pg, unsigned delay_ms)
{
	struct pslot *sl = &p->slots[pg->slot];

	pg->state = PAGER_WRITING;
	pg->flags &= (uint8_t)~F_REDIRTY;
	pager_page_sync(p, pg);
	/* Counted from now: the tensor is not dropped under its checksum. */
	p->tensors[pg->tensor].nio++;
	sl->job_delay = delay_ms;
	/* The checksum of what goes out, off the loop: CPU time the loop
	 * owes every other session. */
	crc_job(p, sl, write_crc_done);
}

void pager_io_write(struct pager *p, struct ppage *pg)
{
	pg->wfails = 0;
	p->nwriting++;
	write_after(p, pg, 0);
}

static const char *err_text(int res)
{
	return res == -EBADMSG ? "checksum mismatch" : strerror(-res);
}

const uint64_t pager_lat_bounds_us[PAGER_LAT_BUCKETS] = {
	/* Few: every session and operation repeats them in each scrape. */
	100, 500, 1000, 5000, 10000, 50000, 250000, 1000000, UINT64_MAX,
};

/* The latency bucket of a request that took ns. */
static unsigned lat_bucket(uint64_t ns)
{
	unsigned b = 0;

	while (ns > pager_lat_bounds_us[b] * 1000u && b + 1 < PAGER_LAT_BUCKETS)
		b++;
	return b;
}

/* got: the checksum of what the read brought (when res is 0). */
static void read_done(struct pager *p, struct pslot *sl, struct ppage *pg, int res, uint32_t got)
{
	uint64_t t1 = now_ns(), dt = t1 - sl->t0;

	p->nreading--;
	if (res == 0) {
		p->st.reads++;
		p->st.read_bytes += p->c.page_size;
		p->st.read_ns += dt;
		p->st.read_lat[lat_bucket(dt)]++;
		if (got != pg->crc) {
			p->st.checksum_errors++;
			res = -EBADMSG;
		}
	}
	if (p->c.io_event)
		p->c.io_event(p->c.ctx, pg->tensor, pg->index, PAGER_IO_READ, sl->t0, t1, res);
	if (res < 0) {
		uint32_t n = pg->npending;

		p->st.errors++;
		pager_errors_all++;
		pager_set_msg(p, "session '%s': read of tensor '%s' page %u from %s (offset %llu) failed: %s%s%s",
			p->session, tname(p, pg), pg->index, page_path(p, pg),
			(unsigned long long)sl->req.off, err_text(res),
			res == -EBADMSG ? " (the data on disk is not what was written; it was not handed out)" : "",
			res == -EBADMSG && pg->back ? "; that file is a stopping spillwayd's save, changed since: load the "
						       "last checkpoint (spillwayctl drop, then spillwayctl restore)" : "");
		if (res == -EBADMSG && pg->back && p->c.backing_bad)
			p->c.backing_bad(p->c.ctx, pg->tensor, pg->index);
		/* The slot's contents are whatever the failed read left: never
		 * hand them out. The disk copy stays the page's home; a later
		 * PIN tries again. */
		pager_slot_release(p, pg);
		pg->state = PAGER_DISK;
		pg->flags &= (uint8_t)~F_PREFETCHED;
		/* Read ahead again at once, a failing drive would have the
		 * pager re-read the page in a loop (the ring never idle, the
		 * loop thread spinning): only a PIN tries it again. */
		pg->read_failed = true;
		pg->rewrite_wait = false; /* its PINs fail with the read */
		pager_pin_put(p, pg, n); /* syncs */
		pager_deliver_page(p, pg, res);
		return;
	}
	pg->state = pg->rewrite_wait ? PAGER_DIRTY : PAGER_CLEAN;
	pg->rewrite_wait = false;
	pg->read_failed = false;
	pager_page_sync(p, pg);
	/* Before anyone may change it: a checkpoint's copy may take it. */
	if (p->snap)
		pager_snap_page_read(p, pg);
	pager_deliver_page(p, pg, (int32_t)pg->slot);
}

/* A write failed and may be tried again: the data stays in its slot, the
 * page stays WRITING (still pinnable, still owed to a FLUSH waiting for
 * it) and the same write goes out after a backoff. Returns false when the
 * retries are spent or retrying makes no sense (the tensor is going). */
static bool write_retry(struct pager *p, struct pslot *sl, struct ppage *pg, int res)
{
	unsigned delay = RETRY_MS;

	if (pg->wfails >= WRITE_RETRIES || p->tensors[pg->tensor].dying)
		return false;
	for (unsigned i = 0; i < pg->wfails; i++)
		delay *= 4;
	pg->wfails++;
	pager_set_msg(p,
		"session '%s': write of tensor '%s' page %u to %s (offset %llu) failed: %s; the data stays in its "
		"slot and the write is retried in %u ms (retry %u of %u)",
		p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
		(unsigned long long)sl->req.off, err_text(res), delay, pg->wfails, WRITE_RETRIES);
	write_after(p, pg, delay);
	return true;
}

/* Returns true when the write is out again (a retry): nothing is done yet. */
static bool write_done(struct pager *p, struct pslot *sl, struct ppage *pg, int res)
{
	uint64_t t1 = now_ns(), dt = t1 - sl->t0;
	bool flagged = pg->flags & F_FLUSH, going;

	if (p->c.io_event)
		p->c.io_event(p->c.ctx, pg->tensor, pg->index, PAGER_IO_WRITE, sl->t0, t1, res);
	if (res < 0) {
		p->st.errors++;
		pager_errors_all++;
		if (write_retry(p, sl, pg, res))
			return true;
	}
	going = res < 0 && p->tensors[pg->tensor].dying;
	p->nwriting--;
	pg->flags &= (uint8_t)~F_FLUSH;
	if (going) {
		/* Unregistered meanwhile: its data is owed to nobody, and a
		 * FLUSH that waited for this write is not failed by it. */
		pager_set_msg(p,
			"session '%s': write of tensor '%s' page %u to %s (offset %llu) failed: %s; not retried, "
			"the tensor is being unregistered",
			p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
			(unsigned long long)sl->req.off, err_text(res));
	} else if (res < 0) {
		pager_set_msg(p,
			"session '%s': write of tensor '%s' page %u to %s (offset %llu) failed %u times, last: %s; "
			"the page's data is lost and its PINs will fail (check the drive behind that swap dir "
			"(dmesg, smartctl) or free space on it, then unregister the tensor and restore it from "
			"a checkpoint)",
			p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
			(unsigned long long)sl->req.off, pg->wfails + 1u, err_text(res));
	}
	if (res < 0) {
		pg->state = PAGER_FAILED;
		p->nfailed++;
		pg->err = res;
		pg->flags &= (uint8_t)~(F_ONDISK | F_REDIRTY | F_PREFETCHED);
		/* A pinned page keeps its slot until the last UNPIN. */
		if (pg->pins == 0)
			pager_slot_release(p, pg);
		if (flagged && !going && !p->fl.err)
			p->fl.err = res;
	} else {
		p->st.writes++;
		p->st.write_bytes += p->c.page_size;
		p->st.write_ns += dt;
		p->st.write_lat[lat_bucket(dt)]++;
		pg->crc = pg->wcrc;
		pg->write_pinned = pg->pins > 0;
		pg->flags |= F_ONDISK;
		pager_back_drop(p, pg);  /* at home from now on */
		pg->read_failed = false; /* a fresh copy on disk */
		pg->state = pg->flags & F_REDIRTY ? PAGER_DIRTY : PAGER_CLEAN;
		pg->flags &= (uint8_t)~F_REDIRTY;
	}
	pager_page_sync(p, pg);
	pg->wfails = 0;
	if (flagged)
		p->fl.writes_left--;
	return false;
}

/* What follows every transfer's end: the tensor's count, a dying tensor's
 * drop, FLUSH, the scheduler, and last the UNREGISTER reply. */
static void io_finish(struct pager *p, struct ppage *pg)
{
	uint32_t tid = pg->tensor;
	bool gone = --p->tensors[tid].nio == 0 && p->tensors[tid].dying;

	if (gone)
		pager_tensor_drop(p, tid);
	pager_flush_progress(p);
	pager_sched_pump(p, true);
	/* Last: the session's reply to the UNREGISTER may end the session
	 * (a client gone), and with it this pager. */
	if (gone && p->c.tensor_removed)
		p->c.tensor_removed(p->c.ctx, tid);
}

static void read_crc_done(struct pager_job *j)
{
	struct pslot *sl = (struct pslot *)((char *)j - offsetof(struct pslot, job));
	struct pager *p = sl->pager;

	p->njobs--;
	if (p->closing) {
		p->nreading--;
		pager_orphan_done(p);
		return;
	}
	struct ppage *pg = sl->page; /* a failed check frees the slot */

	/* A punched slot: never hand it out (the check below fails). */
	read_done(p, sl, pg, 0, sl->job_fault ? ~pg->crc : sl->job_crc);
	io_finish(p, pg);
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
	if (req->op == URING_READ && res == 0) {
		/* Checked off the loop; the page stays READING meanwhile. */
		crc_job(p, sl, read_crc_done);
		return;
	}
	struct ppage *pg = sl->page; /* a failure frees the slot */

	if (req->op == URING_READ)
		read_done(p, sl, pg, res, 0);
	else
		write_done(p, sl, pg, res); /* a retry counts in t->nio anew */
	io_finish(p, pg);
}
