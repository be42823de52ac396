/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "pager.h"
#include "swap.h"
#include "uring.h"

#define NONE UINT32_MAX
#define NO_LIMIT UINT64_MAX
#define MAX_PINS (1u << 24)

/* ppage.flags */
#define F_ONDISK     (1u << 0) /* the disk holds a copy whose CRC is in .crc */
#define F_PREFETCHED (1u << 1) /* brought in ahead of use, not pinned since */
#define F_REDIRTY    (1u << 2) /* unpinned dirty while its write was in flight */
#define F_FLUSH      (1u << 3) /* the running FLUSH waits for this page's write */

struct ppage {
	uint32_t slot;            /* NONE when it has none */
	uint32_t disk;            /* swap page, NONE for resident pages */
	uint32_t crc;             /* of what the disk holds (F_ONDISK) */
	uint32_t wcrc;            /* of the write in flight */
	uint32_t first, next_pos; /* plan positions: first occurrence, next one at/after the cursor */
	uint32_t wait_head, wait_tail; /* pending PINs (indices into pager.waits) */
	uint32_t pins;            /* including the pending ones */
	uint32_t npending;
	uint32_t tensor, index;
	int32_t err;              /* FAILED: the error every later operation gets */
	uint8_t state;            /* enum pager_page_state */
	uint8_t flags;
	struct ppage *sw_next;    /* slot-wait queue */
};

struct ptensor {
	char *name;
	struct ppage *pages;
	uint32_t npages;
	bool used, swappable, dying;
};

/* One request per slot: a slot never has more than one transfer in flight
 * (it is read into, or written from, by the page that owns it). */
struct pslot {
	struct uring_req req; /* first: the completion casts back */
	struct pager *pager;
	struct ppage *page;   /* owner, NULL when free */
	uint64_t t0;
	uint8_t ref;          /* clock reference bit */
};

struct pfsync {
	struct uring_req req; /* first */
	struct pager *pager;
	uint64_t t0;
};

struct pwait {
	uint64_t user_data;
	uint32_t next;
};

struct cand {
	struct ppage *pg;
	uint64_t key;
};

struct pager {
	struct pager_config c;
	char *session;
	struct swap *swap;
	int bufreg;

	struct pslot *slots;
	uint32_t *free_slots, nfree;
	uint32_t nclaim;          /* resident pages + pinned swappable pages */
	uint32_t hand;            /* clock */
	struct cand *scratch;     /* nslots, for choosing write-backs */

	struct ptensor *tensors;
	uint32_t ntensors;
	uint64_t npages;

	uint32_t *disk_free;
	uint64_t ndisk, ndisk_free;

	struct pwait *waits;
	uint32_t wait_free, npending;

	struct ppage *sw_head, *sw_tail;
	uint32_t nslotwait;

	/* Recording of this step and the plan learned from the last one. */
	struct ppage **rec, **plan;
	uint32_t *nxt;            /* plan position -> next position of the same page, NONE */
	uint32_t cap, rec_len, plan_len, cursor, consec_div;
	bool rec_overflow, plan_ok;

	uint32_t nreading, nwriting;

	struct {
		bool active, fsyncing;
		uint32_t head, tail;   /* this round's waiters */
		uint32_t nhead, ntail; /* the next round's */
		uint32_t writes_left, fsyncs_left;
		int err;
		struct pfsync *reqs;   /* one per swap file */
	} fl;

	bool closing;
	char msg[512];
	struct pager_stats st;    /* counters; the rest is computed in pager_stats() */
};

static void pump(struct pager *p, bool serve);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 2, 3)))
static void set_msg(struct pager *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
	va_end(ap);
}

static uint8_t *slot_addr(const struct pager *p, uint32_t s)
{
	return p->c.region + (size_t)s * p->c.page_size;
}

static const char *tname(const struct pager *p, const struct ppage *pg)
{
	return p->tensors[pg->tensor].name;
}

static struct ppage *lookup(const struct pager *p, uint32_t tensor, uint32_t page)
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
	set_msg(p, "session '%s': %s of tensor %u page %u: no such tensor or page", p->session, op, tensor, page);
	return -EINVAL;
}

/* Waiters: a preallocated pool, so a pending PIN costs no allocation. */

static uint32_t wait_alloc(struct pager *p, uint64_t user_data)
{
	uint32_t w = p->wait_free;

	if (w == NONE)
		return NONE;
	p->wait_free = p->waits[w].next;
	p->waits[w] = (struct pwait){ user_data, NONE };
	p->npending++;
	return w;
}

static void wait_release(struct pager *p, uint32_t w)
{
	p->waits[w].next = p->wait_free;
	p->wait_free = w;
	p->npending--;
}

static void wait_append(struct pager *p, uint32_t *head, uint32_t *tail, uint32_t w)
{
	if (*tail == NONE)
		*head = w;
	else
		p->waits[*tail].next = w;
	*tail = w;
}

static void deliver_list(struct pager *p, uint32_t head, int32_t res)
{
	while (head != NONE) {
		uint32_t next = p->waits[head].next;
		uint64_t ud = p->waits[head].user_data;

		wait_release(p, head);
		if (!p->closing)
			p->c.complete(p->c.ctx, ud, res);
		head = next;
	}
}

static void deliver_page(struct pager *p, struct ppage *pg, int32_t res)
{
	uint32_t head = pg->wait_head;

	pg->wait_head = pg->wait_tail = NONE;
	pg->npending = 0;
	deliver_list(p, head, res);
}

/* Claims: see "Slots and -ENOMEM" in pager.h. */

static void pin_get(struct pager *p, struct ppage *pg)
{
	if (pg->pins++ == 0)
		p->nclaim++;
}

static void pin_put(struct pager *p, struct ppage *pg, uint32_t n)
{
	pg->pins -= n;
	if (n && pg->pins == 0)
		p->nclaim--;
}

/* The plan. */

static uint64_t next_use(const struct pager *p, const struct ppage *pg)
{
	if (pg->next_pos != NONE)
		return pg->next_pos;
	if (pg->first != NONE)
		return (uint64_t)p->plan_len + pg->first; /* next step */
	return NO_LIMIT;                                  /* never: evict first */
}

static void pass(struct pager *p)
{
	uint32_t i = p->cursor++;

	p->plan[i]->next_pos = p->nxt[i];
}

static void plan_follow(struct pager *p, struct ppage *pg)
{
	unsigned slack = p->c.prefetch_window > 8 ? p->c.prefetch_window : 8;

	if (!p->plan_ok)
		return;
	if (p->cursor < p->plan_len && p->plan[p->cursor] == pg) {
		pass(p);
		p->consec_div = 0;
		return;
	}
	if (pg->next_pos != NONE) {
		/* Further on than expected: the client skipped some pages. */
		uint32_t target = pg->next_pos;

		while (p->cursor <= target)
			pass(p);
		p->st.resyncs++;
		p->consec_div = 0;
		return;
	}
	if (pg->first != NONE && p->cursor + slack >= p->plan_len) {
		/* Near the end and back at the start: a step began without a
		 * STEP mark. Rewind. */
		for (uint32_t i = 0; i < p->plan_len; i++)
			p->plan[i]->next_pos = p->plan[i]->first;
		p->cursor = 0;
		while (p->cursor <= pg->first)
			pass(p);
		p->st.resyncs++;
		p->consec_div = 0;
		return;
	}
	/* A page the recording does not have here. A few are noise; a run
	 * of them means the order changed: stop trusting it until the next
	 * STEP brings a fresh recording. */
	p->st.divergences++;
	if (pg->first == NONE && ++p->consec_div > slack)
		p->plan_ok = false;
}

static void record(struct pager *p, struct ppage *pg)
{
	if (p->rec_len < p->cap)
		p->rec[p->rec_len++] = pg;
	else
		p->rec_overflow = true;
}

/* Slots. */

static void slot_assign(struct pager *p, uint32_t s, struct ppage *pg)
{
	p->slots[s].page = pg;
	p->slots[s].ref = 1;
	pg->slot = s;
}

static void slot_release(struct pager *p, struct ppage *pg)
{
	p->slots[pg->slot].page = NULL;
	p->free_slots[p->nfree++] = pg->slot;
	pg->slot = NONE;
}

static bool clean_victim(const struct ppage *pg)
{
	return pg && pg->pins == 0 && pg->state == PAGER_CLEAN;
}

/* An unpinned clean page to evict: with a plan, the one used furthest in
 * the future and only if that is after `limit`; else the clock's choice. */
static uint32_t find_victim(struct pager *p, uint64_t limit)
{
	uint32_t n = p->c.nslots, best = NONE;

	if (p->plan_ok) {
		uint64_t best_key = 0;

		for (uint32_t s = 0; s < n; s++) {
			const struct ppage *pg = p->slots[s].page;
			uint64_t k;

			if (!clean_victim(pg))
				continue;
			k = next_use(p, pg);
			if (limit != NO_LIMIT && k <= limit)
				continue;
			if (best == NONE || k > best_key) {
				best = s;
				best_key = k;
			}
		}
		return best;
	}
	for (uint32_t i = 0; i < 2 * n; i++) {
		uint32_t s = p->hand;

		p->hand = (p->hand + 1) % n;
		if (!clean_victim(p->slots[s].page))
			continue;
		if (p->slots[s].ref) {
			p->slots[s].ref = 0;
			continue;
		}
		return s;
	}
	return NONE;
}

static uint32_t take_slot(struct pager *p, uint64_t limit)
{
	struct ppage *pg;
	uint32_t s;

	if (p->nfree)
		return p->free_slots[--p->nfree];
	s = find_victim(p, limit);
	if (s == NONE)
		return NONE;
	pg = p->slots[s].page;
	pg->slot = NONE;
	pg->state = pg->flags & F_ONDISK ? PAGER_DISK : PAGER_ZERO;
	pg->flags &= (uint8_t)~F_PREFETCHED;
	p->slots[s].page = NULL;
	p->st.evictions++;
	return s;
}

/* I/O. */

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
	uring_submit(p->c.uring, &sl->req);
}

static void start_read(struct pager *p, struct ppage *pg)
{
	pg->state = PAGER_READING;
	p->nreading++;
	start_io(p, pg, URING_READ);
}

static void start_write(struct pager *p, struct ppage *pg)
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
		set_msg(p, "session '%s': read of tensor '%s' page %u from %s (offset %llu) failed: %s%s",
			p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
			(unsigned long long)sl->req.off, err_text(res),
			res == -EBADMSG ? " (the data on disk is not what was written; it was not handed out)" : "");
		/* The slot's contents are whatever the failed read left: never
		 * hand them out. The disk copy stays the page's home; a later
		 * PIN tries again. */
		slot_release(p, pg);
		pg->state = PAGER_DISK;
		pg->flags &= (uint8_t)~F_PREFETCHED;
		pin_put(p, pg, n);
		deliver_page(p, pg, res);
		return;
	}
	pg->state = PAGER_CLEAN;
	deliver_page(p, pg, (int32_t)pg->slot);
}

static void flush_progress(struct pager *p);

static void write_done(struct pager *p, struct pslot *sl, struct ppage *pg, int res)
{
	uint64_t dt = now_ns() - sl->t0;
	bool flagged = pg->flags & F_FLUSH;

	p->nwriting--;
	pg->flags &= (uint8_t)~F_FLUSH;
	if (res < 0) {
		p->st.errors++;
		set_msg(p,
			"session '%s': write of tensor '%s' page %u to %s (offset %llu) failed: %s; "
			"the page's data is lost and its PINs will fail (restore it from a checkpoint)",
			p->session, tname(p, pg), pg->index, swap_page_path(p->swap, pg->disk),
			(unsigned long long)sl->req.off, err_text(res));
		pg->state = PAGER_FAILED;
		pg->err = res;
		pg->flags &= (uint8_t)~(F_ONDISK | F_REDIRTY | F_PREFETCHED);
		/* A pinned page keeps its slot until the last UNPIN. */
		if (pg->pins == 0)
			slot_release(p, pg);
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

	if (req->op == URING_READ)
		read_done(p, sl, sl->page, res);
	else
		write_done(p, sl, sl->page, res);
	flush_progress(p);
	pump(p, true);
}

/* Write-back. */

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

	if (n == 0)
		return 0;
	for (uint32_t s = 0; s < p->c.nslots; s++) {
		struct ppage *pg = p->slots[s].page;
		uint64_t k;

		if (!pg || pg->pins || pg->state != PAGER_DIRTY || p->tensors[pg->tensor].dying)
			continue;
		k = p->plan_ok ? next_use(p, pg) : (uint64_t)!p->slots[s].ref;
		if (p->plan_ok && after != NO_LIMIT && k <= after)
			continue;
		p->scratch[m++] = (struct cand){ pg, k };
	}
	if (m > n)
		qsort(p->scratch, m, sizeof(*p->scratch), cand_cmp);
	for (uint32_t i = 0; i < m && started < n; i++, started++)
		start_write(p, p->scratch[i].pg);
	*counter += started;
	return started;
}

static void serve_slot_waiters(struct pager *p)
{
	while (p->sw_head) {
		struct ppage *pg = p->sw_head;
		uint32_t s = take_slot(p, NO_LIMIT);

		if (s == NONE)
			break;
		p->sw_head = pg->sw_next;
		if (!p->sw_head)
			p->sw_tail = NULL;
		pg->sw_next = NULL;
		p->nslotwait--;
		slot_assign(p, s, pg);
		if (pg->flags & F_ONDISK) {
			start_read(p, pg);
		} else {
			memset(slot_addr(p, s), 0, p->c.page_size);
			pg->state = PAGER_CLEAN;
			p->st.zero_fills++;
			deliver_page(p, pg, (int32_t)s);
		}
	}
}

static void prefetch_ahead(struct pager *p)
{
	uint64_t end;

	if (!p->plan_ok || !p->plan_len || !p->c.prefetch_window || !p->swap)
		return;
	end = (uint64_t)p->cursor + p->c.prefetch_window;
	for (uint64_t i = p->cursor; i < end; i++) {
		struct ppage *pg = p->plan[i % p->plan_len];
		uint32_t s;

		if (pg->state != PAGER_DISK || p->tensors[pg->tensor].dying)
			continue;
		/* Only evict what is needed later than what comes in. When
		 * only dirty pages qualify, clean enough of them for the rest
		 * of the window now: the read-ahead must not wait for the
		 * ring to be idle. */
		s = take_slot(p, i);
		if (s == NONE) {
			uint64_t want = end - i, busy = uring_busy(p->c.uring), room;

			room = busy < p->c.queue_depth ? p->c.queue_depth - busy : 0;
			if (want > room)
				want = room;
			start_writebacks(p, (uint32_t)want, i, &p->st.writebacks);
			break;
		}
		slot_assign(p, s, pg);
		pg->flags |= F_PREFETCHED;
		p->st.prefetches++;
		start_read(p, pg);
	}
}

static void write_behind(struct pager *p)
{
	uint32_t depth = p->c.queue_depth, half = depth / 2 ? depth / 2 : 1;
	uint32_t busy = uring_busy(p->c.uring), n;
	uint64_t after = NO_LIMIT;

	uint32_t spare = p->nfree;

	if (busy >= depth)
		return;
	/* Slots the read-ahead can take without waiting. While there are
	 * enough, writes keep to half the ring so that reads (a PIN may be
	 * waiting for one) always find room; when they run short, the next
	 * reads will wait for these writes anyway, so use all of it. */
	for (uint32_t s = 0; s < p->c.nslots && spare < 2 * p->c.prefetch_window; s++) {
		const struct ppage *pg = p->slots[s].page;

		spare += clean_victim(pg) && !(pg->flags & F_PREFETCHED);
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
	if (p->plan_ok)
		after = (uint64_t)p->cursor + p->c.prefetch_window;
	start_writebacks(p, n, after, &p->st.write_behinds);
}

/* Runs after every change: gives slots to PINs waiting for one, keeps
 * enough write-backs going for them, reads ahead, writes behind. `serve`
 * is false inside pager_pin(), which must not complete other operations. */
static void pump(struct pager *p, bool serve)
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

		if (coming < p->nslotwait)
			start_writebacks(p, p->nslotwait - coming, NO_LIMIT, &p->st.writebacks);
		return; /* waiters first: no read-ahead competes for slots */
	}
	prefetch_ahead(p);
	write_behind(p);
}

/* FLUSH. */

static void fsync_done(struct uring_req *req, int res)
{
	struct pfsync *f = (struct pfsync *)req;
	struct pager *p = f->pager;

	p->fl.fsyncs_left--;
	p->st.fsyncs++;
	if (res < 0) {
		p->st.errors++;
		if (!p->fl.err) {
			p->fl.err = res;
			set_msg(p, "session '%s': fsync of %s failed: %s", p->session,
				swap_file_path(p->swap, (unsigned)(f - p->fl.reqs)), strerror(-res));
		}
	}
	flush_progress(p);
	pump(p, true);
}

static void flush_round(struct pager *p)
{
	p->fl.active = true;
	p->fl.fsyncing = false;
	p->fl.err = 0;
	p->fl.writes_left = 0;
	for (uint32_t t = 0; t < p->ntensors && !p->fl.err; t++) {
		const struct ptensor *te = &p->tensors[t];

		for (uint32_t i = 0; te->used && i < te->npages; i++) {
			if (te->pages[i].state == PAGER_FAILED) {
				p->fl.err = te->pages[i].err;
				set_msg(p, "session '%s': flush: tensor '%s' page %u was lost by a failed write: %s",
					p->session, te->name, i, strerror(-p->fl.err));
				break;
			}
		}
	}
	for (uint32_t s = 0; s < p->c.nslots; s++) {
		struct ppage *pg = p->slots[s].page;

		if (!pg)
			continue;
		if (pg->state == PAGER_DIRTY && pg->pins == 0) {
			start_write(p, pg);
			p->st.writebacks++;
		} else if (pg->state != PAGER_WRITING) {
			continue;
		}
		pg->flags |= F_FLUSH;
		p->fl.writes_left++;
	}
}

/* Moves the running FLUSH on: writes done -> fsync every file -> complete. */
static void flush_progress(struct pager *p)
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
						     .complete = fsync_done };
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
	deliver_list(p, head, err);
	if (p->fl.nhead != NONE) {
		p->fl.head = p->fl.nhead;
		p->fl.tail = p->fl.ntail;
		p->fl.nhead = p->fl.ntail = NONE;
		flush_round(p);
		flush_progress(p);
	}
}

int pager_flush(struct pager *p, uint64_t user_data)
{
	uint32_t w;

	if (!p->swap)
		return 0; /* resident only: nothing lives on disk */
	w = wait_alloc(p, user_data);
	if (w == NONE) {
		set_msg(p, "session '%s': flush refused: %u operations already pending", p->session, p->npending);
		return -EBUSY;
	}
	if (p->fl.active) {
		/* The running round may have started before pages this FLUSH
		 * must cover were unpinned: the next round takes them. */
		wait_append(p, &p->fl.nhead, &p->fl.ntail, w);
		return PAGER_PENDING;
	}
	wait_append(p, &p->fl.head, &p->fl.tail, w);
	flush_round(p);
	flush_progress(p); /* starts the fsyncs at most: completions come from the ring */
	return PAGER_PENDING;
}

/* Operations. */

/* Every accepted PIN: the plan and the recording follow it, it counts, and
 * a page already in (or on its way into) a slot is a hit, credited to the
 * prefetcher when a PREFETCH brought it. */
static void pin_accept(struct pager *p, struct ppage *pg, bool in_slot)
{
	plan_follow(p, pg);
	record(p, pg);
	pin_get(p, pg);
	p->st.pins++;
	if (!in_slot)
		return;
	if (pg->flags & F_PREFETCHED)
		p->st.prefetch_hits++;
	else
		p->st.pin_hits++;
	pg->flags &= (uint8_t)~F_PREFETCHED;
}

int pager_pin(struct pager *p, uint32_t tensor, uint32_t page, uint64_t user_data)
{
	struct ppage *pg = lookup(p, tensor, page);
	uint32_t w, s;

	if (!pg)
		return bad_id(p, "pin", tensor, page);
	if (pg->state == PAGER_FAILED) {
		set_msg(p, "session '%s': pin of tensor '%s' page %u: the page was lost when its write to %s failed: %s",
			p->session, tname(p, pg), page, swap_page_path(p->swap, pg->disk), strerror(-pg->err));
		return pg->err;
	}
	if (pg->pins >= MAX_PINS) {
		/* A client pinning in a loop must not wrap the count. */
		set_msg(p, "session '%s': tensor '%s' page %u is pinned %u times already", p->session, tname(p, pg),
			page, pg->pins);
		return -EBUSY;
	}
	if (pg->state == PAGER_RESIDENT) {
		pg->pins++;
		p->st.pins++;
		p->st.pin_hits++;
		return (int)pg->slot;
	}
	if (pg->pins == 0 && p->nclaim >= p->c.nslots) {
		p->st.enomem++;
		set_msg(p,
			"session '%s': cannot pin tensor '%s' page %u: all %u slots are held by pinned or resident "
			"pages (unpin pages before pinning more, or attach with a larger region)",
			p->session, tname(p, pg), page, p->c.nslots);
		return -ENOMEM;
	}

	switch (pg->state) {
	case PAGER_CLEAN:
	case PAGER_DIRTY:
	case PAGER_WRITING:
		pin_accept(p, pg, true);
		p->slots[pg->slot].ref = 1;
		pump(p, false);
		return (int)pg->slot;

	case PAGER_READING:
	case PAGER_SLOTWAIT:
		w = wait_alloc(p, user_data);
		if (w == NONE)
			goto busy;
		pin_accept(p, pg, true);
		wait_append(p, &pg->wait_head, &pg->wait_tail, w);
		pg->npending++;
		pump(p, false);
		return PAGER_PENDING;

	default: /* ZERO, DISK */
		break;
	}

	w = wait_alloc(p, user_data);
	if (w == NONE)
		goto busy;
	/* Follow the plan first, so the eviction below sees where the step
	 * is now. */
	pin_accept(p, pg, false);
	s = take_slot(p, NO_LIMIT);
	if (s != NONE) {
		slot_assign(p, s, pg);
		if (pg->state == PAGER_ZERO) {
			wait_release(p, w);
			memset(slot_addr(p, s), 0, p->c.page_size);
			pg->state = PAGER_CLEAN;
			p->st.zero_fills++;
			pump(p, false);
			return (int)s;
		}
		p->st.misses++;
		wait_append(p, &pg->wait_head, &pg->wait_tail, w);
		pg->npending++;
		start_read(p, pg);
		pump(p, false);
		return PAGER_PENDING;
	}
	/* No slot free or clean: wait for write-back to clean one. The claim
	 * check above guarantees one will come. */
	if (pg->state == PAGER_DISK)
		p->st.misses++;
	pg->state = PAGER_SLOTWAIT;
	wait_append(p, &pg->wait_head, &pg->wait_tail, w);
	pg->npending++;
	if (p->sw_tail)
		p->sw_tail->sw_next = pg;
	else
		p->sw_head = pg;
	p->sw_tail = pg;
	p->nslotwait++;
	pump(p, false);
	return PAGER_PENDING;

busy:
	set_msg(p, "session '%s': pin of tensor '%s' page %u refused: %u operations already pending", p->session,
		tname(p, pg), page, p->npending);
	return -EBUSY;
}

int pager_unpin(struct pager *p, uint32_t tensor, uint32_t page, bool dirty)
{
	struct ppage *pg = lookup(p, tensor, page);

	if (!pg)
		return bad_id(p, "unpin", tensor, page);
	if (pg->pins <= pg->npending) {
		set_msg(p, "session '%s': unpin of tensor '%s' page %u, which is not pinned", p->session,
			tname(p, pg), page);
		return -EINVAL;
	}
	if (pg->state == PAGER_RESIDENT) {
		pg->pins--;
		return 0;
	}
	if (pg->state == PAGER_FAILED) {
		pin_put(p, pg, 1);
		if (pg->pins == 0 && pg->slot != NONE)
			slot_release(p, pg);
		set_msg(p, "session '%s': unpin of tensor '%s' page %u: the page was lost when its write to %s failed: %s",
			p->session, tname(p, pg), page, swap_page_path(p->swap, pg->disk), strerror(-pg->err));
		pump(p, true);
		return pg->err;
	}
	if (dirty) {
		if (pg->state == PAGER_CLEAN)
			pg->state = PAGER_DIRTY;
		else if (pg->state == PAGER_WRITING)
			pg->flags |= F_REDIRTY;
	}
	pin_put(p, pg, 1);
	pump(p, true);
	return 0;
}

int pager_prefetch(struct pager *p, uint32_t tensor, uint32_t page)
{
	struct ppage *pg = lookup(p, tensor, page);
	uint64_t limit = NO_LIMIT;
	uint32_t s;

	if (!pg)
		return bad_id(p, "prefetch", tensor, page);
	if (pg->state == PAGER_FAILED) {
		set_msg(p, "session '%s': prefetch of tensor '%s' page %u: the page was lost when its write to %s failed: %s",
			p->session, tname(p, pg), page, swap_page_path(p->swap, pg->disk), strerror(-pg->err));
		return pg->err;
	}
	if (pg->state != PAGER_DISK)
		return 0; /* in a slot, on its way, or a zero page: nothing to read */
	if (p->nslotwait) {
		p->st.prefetch_dropped++;
		return 0; /* PINs waiting for slots come first */
	}
	/* With a plan, evict only pages needed later than this one. */
	if (p->plan_ok && next_use(p, pg) != NO_LIMIT)
		limit = next_use(p, pg);
	s = take_slot(p, limit);
	if (s == NONE) {
		p->st.prefetch_dropped++;
		return 0;
	}
	slot_assign(p, s, pg);
	pg->flags |= F_PREFETCHED;
	p->st.prefetches++;
	start_read(p, pg);
	return 0;
}

void pager_step(struct pager *p)
{
	struct ppage **tmp;

	p->st.steps++;
	if (p->rec_overflow) {
		/* Longer than we can hold: follow nothing rather than half. */
		p->plan_ok = false;
		p->plan_len = 0;
	} else if (p->rec_len) {
		tmp = p->plan;
		p->plan = p->rec;
		p->rec = tmp;
		p->plan_len = p->rec_len;
		for (uint32_t t = 0; t < p->ntensors; t++)
			for (uint32_t i = 0; p->tensors[t].used && i < p->tensors[t].npages; i++)
				p->tensors[t].pages[i].first = p->tensors[t].pages[i].next_pos = NONE;
		/* Backwards, so each page's .first holds its next occurrence. */
		for (uint32_t i = p->plan_len; i-- > 0;) {
			p->nxt[i] = p->plan[i]->first;
			p->plan[i]->first = i;
		}
		for (uint32_t i = 0; i < p->plan_len; i++)
			p->plan[i]->next_pos = p->plan[i]->first;
		p->cursor = 0;
		p->consec_div = 0;
		p->plan_ok = true;
	}
	/* An empty step keeps the old plan. */
	p->rec_len = 0;
	p->rec_overflow = false;
	pump(p, true);
}

/* Tensors. */

static int grow_plan(struct pager *p, uint64_t pages)
{
	/* A step may touch each page a few times (forward, backward, update):
	 * four PINs a page, and one more recording past that is dropped. */
	uint64_t want = 4 * pages + 64;
	struct ppage **a, **b;
	uint32_t *n;

	if (want > UINT32_MAX - 1)
		want = UINT32_MAX - 1;
	if (want <= p->cap)
		return 0;
	a = realloc(p->rec, want * sizeof(*a));
	if (!a)
		return -ENOMEM;
	p->rec = a;
	b = realloc(p->plan, want * sizeof(*b));
	if (!b)
		return -ENOMEM;
	p->plan = b;
	n = realloc(p->nxt, want * sizeof(*n));
	if (!n)
		return -ENOMEM;
	p->nxt = n;
	p->cap = (uint32_t)want;
	return 0;
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
		for (uint32_t s = 0; s < p->c.nslots; s++)
			avail += clean_victim(p->slots[s].page);
		if (avail < n) {
			snprintf(err, errlen,
				 "session '%s': resident tensor '%s' needs %llu slots and only %u are free or clean now "
				 "(register resident tensors first, or FLUSH before registering)",
				 p->session, name, (unsigned long long)n, avail);
			return -EBUSY;
		}
	}
	for (uint32_t i = 0; i < p->ntensors; i++) {
		if (!p->tensors[i].used) {
			tid = i;
			break;
		}
	}
	if (tid == NONE) {
		struct ptensor *nt = realloc(p->tensors, (p->ntensors + 1) * sizeof(*nt));

		if (!nt)
			return -ENOMEM;
		p->tensors = nt;
		tid = p->ntensors++;
		p->tensors[tid] = (struct ptensor){ 0 };
	}
	r = grow_plan(p, p->npages + n);
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
	t->npages = (uint32_t)n;
	t->swappable = swappable;
	t->used = true;
	for (uint32_t i = 0; i < n; i++) {
		struct ppage *pg = &t->pages[i];

		*pg = (struct ppage){
			.slot = NONE, .disk = NONE, .first = NONE, .next_pos = NONE,
			.wait_head = NONE, .wait_tail = NONE, .tensor = tid, .index = i,
			.state = swappable ? PAGER_ZERO : PAGER_RESIDENT,
		};
		if (swappable) {
			pg->disk = p->disk_free[--p->ndisk_free];
		} else {
			uint32_t s = take_slot(p, NO_LIMIT);

			slot_assign(p, s, pg);
			memset(slot_addr(p, s), 0, p->c.page_size);
			p->nclaim++;
		}
	}
	p->npages += n;
	*id = tid;
	*npages = (uint32_t)n;
	return 0;
}

static bool tensor_io(const struct ptensor *t)
{
	for (uint32_t i = 0; i < t->npages; i++)
		if (t->pages[i].state == PAGER_READING || t->pages[i].state == PAGER_WRITING)
			return true;
	return false;
}

int pager_tensor_remove(struct pager *p, uint32_t id)
{
	struct ptensor *t;

	if (id >= p->ntensors || !p->tensors[id].used || p->tensors[id].dying)
		return -ENOENT;
	t = &p->tensors[id];
	for (uint32_t i = 0; i < t->npages; i++) {
		if (t->pages[i].pins) {
			set_msg(p, "session '%s': cannot remove tensor '%s': page %u is pinned", p->session, t->name, i);
			return -EBUSY;
		}
	}
	/* The learned order points into this tensor's pages. */
	p->plan_ok = false;
	p->plan_len = p->rec_len = p->cursor = 0;
	p->rec_overflow = false;
	/* Reads ahead and writes behind may be in flight into its slots;
	 * dying keeps new ones from starting. */
	t->dying = true;
	for (int i = 0; i < 600 && tensor_io(t); i++)
		uring_wait(p->c.uring, 50);
	if (tensor_io(t)) {
		set_msg(p, "session '%s': cannot remove tensor '%s': its I/O did not finish in 30 s", p->session, t->name);
		return -ETIMEDOUT;
	}
	for (uint32_t i = 0; i < t->npages; i++) {
		struct ppage *pg = &t->pages[i];

		if (pg->slot != NONE)
			slot_release(p, pg);
		if (pg->state == PAGER_RESIDENT)
			p->nclaim--;
		if (pg->disk != NONE)
			p->disk_free[p->ndisk_free++] = pg->disk;
	}
	p->npages -= t->npages;
	free(t->name);
	free(t->pages);
	*t = (struct ptensor){ 0 };
	pump(p, true);
	return 0;
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
	if (!p->c.queue_depth)
		p->c.queue_depth = 32;
	if (!p->c.max_pending)
		p->c.max_pending = 1024;
	p->bufreg = -1;
	p->fl.head = p->fl.tail = p->fl.nhead = p->fl.ntail = NONE;
	p->wait_free = NONE;
	p->session = strdup(c->session);
	p->slots = calloc(c->nslots, sizeof(*p->slots));
	p->free_slots = calloc(c->nslots, sizeof(*p->free_slots));
	p->scratch = calloc(c->nslots, sizeof(*p->scratch));
	p->waits = calloc(p->c.max_pending, sizeof(*p->waits));
	if (!p->session || !p->slots || !p->free_slots || !p->scratch || !p->waits) {
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
	 * them plain reads and writes work as well. */
	p->bufreg = uring_buffer_register(c->uring, c->region, (size_t)c->nslots * c->page_size);
	*ret = p;
	return 0;

fail:
	pager_free(p);
	return r;
}

struct pager *pager_free(struct pager *p)
{
	bool busy;

	if (!p)
		return NULL;
	p->closing = true;
	for (int i = 0; i < 600 && (p->nreading || p->nwriting || p->fl.fsyncs_left); i++)
		uring_wait(p->c.uring, 50);
	busy = p->nreading || p->nwriting || p->fl.fsyncs_left;
	if (p->bufreg >= 0)
		uring_buffer_unregister(p->c.uring, p->bufreg);
	p->swap = swap_free(p->swap);
	for (uint32_t t = 0; t < p->ntensors; t++) {
		free(p->tensors[t].name);
		free(p->tensors[t].pages);
	}
	free(p->tensors);
	free(p->rec);
	free(p->plan);
	free(p->nxt);
	free(p->disk_free);
	free(p->free_slots);
	free(p->scratch);
	free(p->waits);
	free(p->session);
	/* The kernel still holds requests embedded in these after a drive
	 * stopped answering for 30 s: leak them rather than let a late
	 * completion write into freed memory. */
	if (!busy) {
		free(p->slots);
		free(p->fl.reqs);
		free(p);
	}
	return NULL;
}

/* Introspection. */

const char *pager_last_error(const struct pager *p)
{
	return p->msg;
}

int pager_page_state(const struct pager *p, uint32_t tensor, uint32_t page)
{
	const struct ppage *pg = lookup(p, tensor, page);

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
	st->plan_active = p->plan_ok;
	st->plan_length = p->plan_ok ? p->plan_len : 0;
	st->tensors = 0;
	st->pages = 0;
	memset(st->pages_by_state, 0, sizeof(st->pages_by_state));
	st->pages_pinned = 0;
	st->bytes_on_disk = 0;
	for (uint32_t t = 0; t < p->ntensors; t++) {
		const struct ptensor *te = &p->tensors[t];

		if (!te->used)
			continue;
		st->tensors++;
		for (uint32_t i = 0; i < te->npages; i++) {
			const struct ppage *pg = &te->pages[i];

			st->pages++;
			st->pages_by_state[pg->state]++;
			st->pages_pinned += pg->pins > pg->npending;
			if (pg->flags & F_ONDISK)
				st->bytes_on_disk += p->c.page_size;
		}
	}
	st->swap_bytes = p->ndisk * p->c.page_size;
	st->swap_assigned_bytes = (p->ndisk - p->ndisk_free) * p->c.page_size;
}

uint64_t pager_error_count(const struct pager *p)
{
	return p->st.errors;
}
