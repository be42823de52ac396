/* SPDX-License-Identifier: MIT */
/*
 * The pager's side of checkpoints and restores: where each page's bytes
 * are for a copy made off the loop (checkpoint.c), the copy-on-write
 * snapshot that keeps that answer true while the session trains on (see
 * pager.h), and pages put straight into their swap homes (restore.c).
 *
 * The snapshot is shared by the loop and the copier thread: each page's
 * state and urged flag are atomics, the queue of pages the loop waits for
 * is under a mutex, and everything else is the loop's alone (the copier
 * only reads a side buffer after it saw SAVED, and frees it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "pager-private.h"
#include "safemem.h"

#define NO_ENTRY UINT64_MAX

/* PENDING -> COPYING -> DONE, or PENDING -> SAVED -> WRITING -> DONE: the
 * copier claims each page once, whichever way it reaches it (its main
 * pass, the loop's waits, the loop's saves). */
enum { SNAP_PENDING, SNAP_COPYING, SNAP_SAVED, SNAP_WRITING, SNAP_DONE };

struct snap_page {
	uint8_t kind;   /* enum pager_src_kind, as planned */
	uint8_t state;  /* atomic: SNAP_* */
	uint8_t urged;  /* atomic: the loop waits for it (queued once) */
	uint8_t moved;  /* the loop's: PAGER_SRC_DISK, and the page's writes go elsewhere now */
	uint8_t backed; /* PAGER_SRC_DISK in a backing file: its home holds nothing the copy needs */
	uint32_t slot;  /* PAGER_SRC_SLOT: the slot planned */
	uint8_t *saved; /* SAVED: the bytes, the loop's copy */
};

struct pager_snap {
	struct snap_page *pages;
	uint64_t npages;
	uint64_t *first;     /* per tensor id: the entry of its page 0, NO_ENTRY when not planned */
	uint32_t nids;
	uint32_t page_size;
	uint64_t budget;
	uint64_t used;       /* atomic: side-buffer bytes alive (the loop adds, the copier takes off) */
	uint64_t ndone;      /* atomic: entries the copier is done with (the loop looks at its held pages anew) */
	uint8_t from_reads;  /* atomic: the copier reads swap pages (they do not reflink): save them from reads */
	void (*wake)(void *arg);
	void *arg;
	const struct uring *ring; /* the daemon's: who waits on the disk */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t *queue;     /* pages the loop waits for, each at most once: npages places */
	uint64_t qhead, qtail;
	/* Pages saved aside, for the copier to write before it reads more
	 * (their buffers count against the budget until written): each at
	 * most once, npages places. */
	uint64_t *ready;
	uint64_t rhead, rtail;
	/* Side buffers written out, for the next save (under lock): a fresh
	 * malloc of a page is an mmap whose every 4 KiB faults in zeroed on
	 * the loop's copy. Never more than the budget allocated in all. */
	uint8_t **spare;
	uint32_t nspare;
	struct pager_snap_stats st; /* the loop's */
};

static bool settled(uint8_t st)
{
	return st == SNAP_SAVED || st == SNAP_WRITING || st == SNAP_DONE;
}

struct pager_snap *pager_snap_new(const struct pager *p, uint64_t npages, uint64_t budget, void (*wake)(void *arg),
				  void *arg)
{
	struct pager_snap *sn = calloc(1, sizeof(*sn));

	if (!sn)
		return NULL;
	sn->npages = npages;
	sn->nids = p->ntensors;
	sn->page_size = p->c.page_size;
	sn->budget = budget;
	sn->wake = wake;
	sn->arg = arg;
	sn->ring = p->c.uring;
	sn->pages = calloc(npages ? npages : 1, sizeof(*sn->pages));
	sn->queue = calloc(npages ? npages : 1, sizeof(*sn->queue));
	sn->ready = calloc(npages ? npages : 1, sizeof(*sn->ready));
	sn->first = malloc((sn->nids ? sn->nids : 1) * sizeof(*sn->first));
	/* One place per page the budget can hold (at most one per page). */
	sn->spare = calloc(budget / sn->page_size < npages ? budget / sn->page_size + 1 : npages + 1,
			   sizeof(*sn->spare));
	if (!sn->pages || !sn->queue || !sn->ready || !sn->first || !sn->spare) {
		free(sn->pages);
		free(sn->queue);
		free(sn->ready);
		free(sn->first);
		free(sn->spare);
		free(sn);
		return NULL;
	}
	for (uint32_t t = 0; t < sn->nids; t++)
		sn->first[t] = NO_ENTRY;
	pthread_mutex_init(&sn->lock, NULL);
	pthread_cond_init(&sn->cond, NULL);
	return sn;
}

void pager_snap_free(struct pager_snap *sn)
{
	if (!sn)
		return;
	/* Saved pages the copier never wrote (it failed or gave up). */
	for (uint64_t i = 0; i < sn->npages; i++)
		free(sn->pages[i].saved);
	while (sn->nspare)
		free(sn->spare[--sn->nspare]);
	free(sn->spare);
	pthread_mutex_destroy(&sn->lock);
	pthread_cond_destroy(&sn->cond);
	free(sn->pages);
	free(sn->queue);
	free(sn->ready);
	free(sn->first);
	free(sn);
}

int pager_snap_plan(struct pager *p, struct pager_snap *sn, uint32_t tensor, uint32_t page, uint64_t i,
		    struct pager_src *src)
{
	int r = pager_page_source(p, tensor, page, src);

	if (r < 0 || i >= sn->npages || tensor >= sn->nids)
		return r < 0 ? r : -EINVAL;
	if (page == 0)
		sn->first[tensor] = i;
	sn->pages[i] = (struct snap_page){ .kind = (uint8_t)src->kind, .state = SNAP_PENDING, .slot = src->slot,
					   .backed = src->backed };
	return 0;
}

int pager_snap_attach(struct pager *p, struct pager_snap *sn)
{
	/* A swap page is moved off at most once per entry of the plan. */
	uint64_t ndh = p->ndisk < sn->npages ? p->ndisk : sn->npages;

	p->held = malloc((size_t)p->c.nslots * sizeof(*p->held));
	p->dheld = malloc((size_t)(ndh ? ndh : 1) * sizeof(*p->dheld));
	if (!p->held || !p->dheld) {
		free(p->held);
		free(p->dheld);
		p->held = p->dheld = NULL;
		return -ENOMEM;
	}
	p->nheld = 0;
	p->ndheld = 0;
	p->dheld_seen = 0;
	p->wait_since = 0;
	p->snap = sn;
	return 0;
}

/* pg's entry in the plan, or NULL (no snapshot, a tensor added after it). */
static struct snap_page *entry_of(const struct pager *p, const struct ppage *pg, uint64_t *i)
{
	const struct pager_snap *sn = p->snap;

	if (!sn || pg->tensor >= sn->nids || sn->first[pg->tensor] == NO_ENTRY)
		return NULL;
	*i = sn->first[pg->tensor] + pg->index;
	return *i < sn->npages ? &sn->pages[*i] : NULL;
}

bool pager_snap_covers(const struct pager *p, uint32_t tensor)
{
	const struct pager_snap *sn = p->snap;

	return sn && tensor < sn->nids && sn->first[tensor] != NO_ENTRY;
}

/* The loop needs entry i now: the copier takes it before its next page
 * and wakes the loop once it has it. true when it is settled after all. */
static bool wait_for(struct pager_snap *sn, uint64_t i)
{
	struct snap_page *e = &sn->pages[i];

	if (!__atomic_load_n(&e->urged, __ATOMIC_RELAXED)) {
		/* Sequentially consistent, pairing with pager_snap_copied():
		 * either it sees the flag and wakes us, or we see DONE below. */
		__atomic_store_n(&e->urged, 1, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&sn->lock);
		sn->queue[sn->qtail++ % sn->npages] = i;
		pthread_cond_signal(&sn->cond);
		pthread_mutex_unlock(&sn->lock);
		sn->st.waits++;
	}
	return settled(__atomic_load_n(&e->state, __ATOMIC_SEQ_CST));
}

/* A side buffer back for the next save (either thread). The places
 * suffice: buffers are only allocated while fewer than the budget's are
 * alive, saved or spare. */
static void spare_put(struct pager_snap *sn, uint8_t *buf)
{
	uint64_t cap = sn->budget / sn->page_size < sn->npages ? sn->budget / sn->page_size + 1 : sn->npages + 1;

	pthread_mutex_lock(&sn->lock);
	if (sn->nspare < cap) {
		sn->spare[sn->nspare++] = buf;
		buf = NULL;
	}
	pthread_mutex_unlock(&sn->lock);
	free(buf);
}

/* Copies entry i's bytes, at `from` in a slot, into a side buffer while the
 * budget lasts, and queues it for the copier: true when the entry is SAVED
 * by it. */
static bool save(struct pager_snap *sn, struct snap_page *e, uint64_t i, const uint8_t *from)
{
	uint64_t used = __atomic_load_n(&sn->used, __ATOMIC_RELAXED);
	uint8_t expect = SNAP_PENDING;
	uint8_t *buf;

	if (used + sn->page_size > sn->budget)
		return false;
	pthread_mutex_lock(&sn->lock);
	buf = sn->nspare ? sn->spare[--sn->nspare] : NULL;
	pthread_mutex_unlock(&sn->lock);
	/* Aligned: the copier writes it to its data file with O_DIRECT
	 * (page sizes are multiples of 4 KiB). */
	if (!buf && !(buf = aligned_alloc(4096, sn->page_size)))
		return false;
	/* The slot is the client's memory: a punched page fails the save,
	 * and the copier's read of it will fail the checkpoint. */
	if (safemem_copy(buf, from, sn->page_size) < 0) {
		spare_put(sn, buf);
		return false;
	}
	/* Published by the CAS (release): the copier reads it only once it
	 * sees SAVED. It may have taken the page meanwhile (COPYING). */
	e->saved = buf;
	if (!__atomic_compare_exchange_n(&e->state, &expect, SNAP_SAVED, false, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
		e->saved = NULL;
		spare_put(sn, buf);
		return false;
	}
	used = __atomic_add_fetch(&sn->used, sn->page_size, __ATOMIC_RELAXED);
	if (used > sn->st.peak_bytes)
		sn->st.peak_bytes = used;
	sn->st.saved_bytes += sn->page_size;
	pthread_mutex_lock(&sn->lock);
	sn->ready[sn->rtail++ % sn->npages] = i;
	pthread_mutex_unlock(&sn->lock);
	return true;
}

/* Whether the bytes in pg's slot may change now; *owed: the entry that
 * still needs them when not. */
static bool slot_free(struct pager *p, struct ppage *pg, uint64_t *owed)
{
	struct pager_snap *sn = p->snap;
	struct snap_page *e = entry_of(p, pg, owed);
	uint8_t st;

	/* Planned in this slot; a page that left its planned slot went
	 * through here already. */
	if (!e || e->kind != PAGER_SRC_SLOT || e->slot != pg->slot)
		return true;
	st = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
	if (settled(st))
		return true;
	if (st == SNAP_PENDING && save(sn, e, *owed, slot_addr(p, e->slot)))
		return true;
	return wait_for(sn, *owed);
}

bool pager_snap_slot_ok(struct pager *p, struct ppage *pg)
{
	uint64_t i;

	return slot_free(p, pg, &i);
}

/* Swap pages moved off whose bytes the copier has now go back to the free
 * list; a look only when it finished something since the last one. */
static void dheld_reclaim(struct pager *p)
{
	uint64_t done = __atomic_load_n(&p->snap->ndone, __ATOMIC_ACQUIRE);

	if (done == p->dheld_seen)
		return;
	p->dheld_seen = done;
	for (uint64_t k = 0; k < p->ndheld;) {
		struct pheld *h = &p->dheld[k];

		if (__atomic_load_n(&p->snap->pages[h->entry].state, __ATOMIC_ACQUIRE) != SNAP_DONE) {
			k++;
			continue;
		}
		p->disk_free[p->ndisk_free++] = h->at;
		*h = p->dheld[--p->ndheld];
	}
}

/*
 * pg's write-back would overwrite the swap page the plan reads it from
 * (it was on disk at the commit point). Rather than wait for the copier,
 * the write goes to a spare swap page of the session, which becomes pg's
 * home, and the planned one is held until the copier is done with it,
 * then freed: the trainer rewrites its state every step, and a copy that
 * shares the disk with it would otherwise set its pace. Only without a
 * spare page does the write wait, as a PIN does past the side buffers'
 * budget.
 */
bool pager_snap_home_ok(struct pager *p, struct ppage *pg)
{
	uint64_t i;
	struct snap_page *e = entry_of(p, pg, &i);

	/* SAVED: the bytes the copy needs are in a side buffer (the page
	 * was read in, pager_snap_page_read()), so the home may change. */
	if (!e || e->kind != PAGER_SRC_DISK || e->moved || e->backed ||
	    settled(__atomic_load_n(&e->state, __ATOMIC_ACQUIRE)))
		return true;
	if (!p->ndisk_free)
		dheld_reclaim(p);
	if (p->ndisk_free) {
		p->dheld[p->ndheld++] = (struct pheld){ .at = pg->disk, .entry = i };
		pg->disk = p->disk_free[--p->ndisk_free];
		/* The new home holds nothing of pg's until this write lands. */
		pg->flags &= (uint8_t)~F_ONDISK;
		e->moved = 1;
		p->snap->st.moved++;
		pager_page_sync(p, pg);
		return true;
	}
	return wait_for(p->snap, i);
}

/*
 * pg was just read into its slot, its CRC checked. Where the plan reads it
 * from that swap home and the copier has not taken it, the slot holds the
 * commit point's bytes (no write-back reached the home since: it would
 * have moved), and a copy of them into a side buffer spares the copier a
 * second read of what the trainer read anyway: on the NVMe tier, where
 * every step reads the whole state, a checkpoint then costs the disk its
 * writes and not much more. Half of the budget at most: the rest is for
 * pages planned in their slots, whose changes wait without one. Only once
 * the copier said it reads swap pages: a reflink costs less than a write.
 */
void pager_snap_page_read(struct pager *p, struct ppage *pg)
{
	struct pager_snap *sn = p->snap;
	uint64_t i;
	struct snap_page *e = entry_of(p, pg, &i);

	if (!e || !__atomic_load_n(&sn->from_reads, __ATOMIC_RELAXED) || e->kind != PAGER_SRC_DISK || e->moved ||
	    __atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != SNAP_PENDING ||
	    __atomic_load_n(&sn->used, __ATOMIC_RELAXED) + sn->page_size > sn->budget / 2)
		return;
	if (save(sn, e, i, slot_addr(p, pg->slot)))
		sn->st.read_saved_bytes += sn->page_size;
}

bool pager_snap_release_ok(struct pager *p, struct ppage *pg)
{
	uint64_t i;

	if (slot_free(p, pg, &i))
		return true;
	p->held[p->nheld++] = (struct pheld){ .at = pg->slot, .entry = i };
	return false;
}

/* Dirty pages a FLUSH waits for whose write-back waited for the copier. */
static void flush_resume(struct pager *p)
{
	struct ppage *pg = p->dirty, *next;

	for (; pg && p->fl.active; pg = next) {
		next = pg->dl_next; /* the write takes pg off the list */
		if (!(pg->flags & F_FLUSH) || (p->snap && !pager_snap_home_ok(p, pg)))
			continue;
		pager_io_write(p, pg);
		p->st.writebacks++;
		uring_hurry(p->c.uring, &p->slots[pg->slot].req);
	}
}

void pager_snap_progress(struct pager *p)
{
	if (p->closing)
		return;
	for (uint32_t k = 0; p->snap && k < p->nheld;) {
		struct pheld *h = &p->held[k];

		if (!settled(__atomic_load_n(&p->snap->pages[h->entry].state, __ATOMIC_ACQUIRE))) {
			k++;
			continue;
		}
		p->free_slots[p->nfree++] = h->at;
		*h = p->held[--p->nheld];
	}
	if (p->snap && p->ndheld)
		dheld_reclaim(p);
	flush_resume(p);
	pager_sched_pump(p, true);
}

void pager_snap_detach(struct pager *p)
{
	struct pager_snap *sn = p ? p->snap : NULL;

	if (!sn)
		return;
	if (p->wait_since)
		sn->st.held_ns += now_ns() - p->wait_since;
	p->wait_since = 0;
	p->snap = NULL;
	while (p->nheld)
		p->free_slots[p->nfree++] = p->held[--p->nheld].at;
	/* The copy is over (done or given up): nothing is owed any more. */
	while (p->ndheld)
		p->disk_free[p->ndisk_free++] = p->dheld[--p->ndheld].at;
	free(p->held);
	free(p->dheld);
	p->held = p->dheld = NULL;
}

int pager_snap_pin_guard(struct pager *p, struct ppage *pg)
{
	if (pg->slot != NONE && !pager_snap_slot_ok(p, pg)) {
		if (!p->wait_since)
			p->wait_since = now_ns();
		return PAGER_WAIT;
	}
	/* The ring goes on past the PIN that waited. */
	if (p->wait_since) {
		p->snap->st.held_ns += now_ns() - p->wait_since;
		p->wait_since = 0;
	}
	return 0;
}

void pager_snap_stats(const struct pager_snap *sn, struct pager_snap_stats *st)
{
	*st = sn->st;
}

/* The copier's side. */

enum pager_snap_claim pager_snap_claim(struct pager_snap *sn, uint64_t i, const uint8_t **saved)
{
	struct snap_page *e = &sn->pages[i];
	uint8_t st = SNAP_PENDING;

	if (__atomic_compare_exchange_n(&e->state, &st, SNAP_COPYING, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return PAGER_SNAP_COPY;
	if (st == SNAP_SAVED &&
	    __atomic_compare_exchange_n(&e->state, &st, SNAP_WRITING, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		*saved = e->saved;
		return PAGER_SNAP_SAVED;
	}
	return PAGER_SNAP_DONE;
}

void pager_snap_copied(struct pager_snap *sn, uint64_t i)
{
	struct snap_page *e = &sn->pages[i];

	/* Only a saved entry's buffer is the copier's to free: the loop
	 * may be writing the field of one it failed to save. */
	if (__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) == SNAP_WRITING) {
		/* Taken off the count after it is back: the loop allocates
		 * a new one only below the budget. */
		spare_put(sn, e->saved);
		e->saved = NULL;
		__atomic_sub_fetch(&sn->used, sn->page_size, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&e->state, SNAP_DONE, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&sn->ndone, 1, __ATOMIC_RELEASE);
	if (__atomic_load_n(&e->urged, __ATOMIC_SEQ_CST))
		sn->wake(sn->arg);
}

/* The oldest entry of one of the snapshot's queues (npages places, each
 * entry in it at most once), or UINT64_MAX. */
static uint64_t queue_pop(struct pager_snap *sn, const uint64_t *q, uint64_t *head, const uint64_t *tail)
{
	uint64_t i = UINT64_MAX;

	pthread_mutex_lock(&sn->lock);
	if (*head != *tail)
		i = q[(*head)++ % sn->npages];
	pthread_mutex_unlock(&sn->lock);
	return i;
}

uint64_t pager_snap_urgent(struct pager_snap *sn)
{
	return queue_pop(sn, sn->queue, &sn->qhead, &sn->qtail);
}

uint64_t pager_snap_ready(struct pager_snap *sn)
{
	return queue_pop(sn, sn->ready, &sn->rhead, &sn->rtail);
}

void pager_snap_save_reads(struct pager_snap *sn)
{
	__atomic_store_n(&sn->from_reads, 1, __ATOMIC_RELAXED);
}

bool pager_snap_disk_waited(struct pager_snap *sn)
{
	uint64_t asked;

	if (!sn->ring || uring_waited(sn->ring) == 0)
		return false;
	pthread_mutex_lock(&sn->lock);
	asked = sn->qtail;
	pthread_mutex_unlock(&sn->lock);
	/* Once the loop has waited for the copy, the copy is what holds it
	 * up: giving the disk away would only make it wait longer. */
	return asked == 0;
}

void pager_snap_nap(struct pager_snap *sn, unsigned ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&sn->lock);
	while (sn->qhead == sn->qtail && pthread_cond_timedwait(&sn->cond, &sn->lock, &ts) == 0)
		;
	pthread_mutex_unlock(&sn->lock);
}

/* Sources and restores. */

int pager_page_source(struct pager *p, uint32_t tensor, uint32_t page, struct pager_src *src)
{
	struct ppage *pg = pager_lookup(p, tensor, page);

	if (!pg)
		return -EINVAL;
	*src = (struct pager_src){ .kind = PAGER_SRC_ZERO, .slot = NONE, .fd = -1, .next_use = UINT64_MAX };
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
			src->backed = pg->back != 0;
			if (src->backed) {
				src->fd = p->backs[pg->back - 1].fd;
				src->off = pg->back_off;
			} else {
				src->fd = swap_page_fd(p->swap, pg->disk, &src->off);
			}
			src->path = page_path(p, pg);
			src->crc = pg->crc;
			src->next_use = p->order.plan_ok ? pager_policy_next_use(&p->order, &pg->ord) : UINT64_MAX;
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
