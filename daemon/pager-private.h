/* SPDX-License-Identifier: MIT */
/*
 * pager-private.h: what the pager's pieces share, and nobody else sees.
 * pager.h is the interface for the rest of the daemon.
 *
 *   pager.c         page table, PIN/UNPIN/PREFETCH/STEP, life cycle
 *   pager-tensors.c tensors registered, dropped, removed
 *   pager-policy.c  learned access order and victim choice (pure code)
 *   pager-io.c      reads and writes of one page, their completions, CRC-32C
 *   pager-sched.c   slot waiters, write-back, read-ahead, write-behind
 *   pager-flush.c   the FLUSH state machine (writes, then fsync every file)
 *   pager-slots.c   waiters for a page, slots assigned, released, taken
 *   pager-copy.c    UNPIN of a copy: it takes over its source's disk copy
 *   pager-index.c   dirty and clean page lists kept at every page change
 */
#ifndef SPW_DAEMON_PAGER_PRIVATE_H
#define SPW_DAEMON_PAGER_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pager-policy.h"
#include "pager.h"
#include "swap.h"
#include "uring.h"
#include "util/clock.h"

#define NONE PAGER_POLICY_NONE
#define NO_LIMIT PAGER_POLICY_NO_LIMIT
#define MAX_PINS (1u << 24)
/* A failed write-back is retried this many times, the first after
 * RETRY_MS and each next one 4x later (50, 200, 800 ms): a transient EIO
 * or ENOSPC costs a delay, not the page. */
#define WRITE_RETRIES 3
#define RETRY_MS 50u

/* ppage.flags */
#define F_ONDISK     (1u << 0) /* the disk holds a copy whose CRC is in .crc */
#define F_PREFETCHED (1u << 1) /* brought in ahead of use, not pinned since */
#define F_REDIRTY    (1u << 2) /* unpinned dirty while its write was in flight */
#define F_FLUSH      (1u << 3) /* the running FLUSH waits for this page's write */
#define F_DIRTYLIST  (1u << 4) /* on pager.dirty: dirty, unpinned, in a slot, tensor not dying */
#define F_SPARE      (1u << 5) /* counted in pager.nspare: clean, unpinned, in a slot, not prefetched */
#define F_CLEANLIST  (1u << 6) /* on pager.clean: clean, unpinned, in a slot (an eviction candidate) */
#define F_OVERWRITE  (1u << 7) /* waits for a slot to be rewritten whole: no read when it comes */

/* ppage.counted */
#define C_PINNED     (1u << 0) /* in pager.npinned: a delivered pin (pins > npending) */
#define C_ONDISK     (1u << 1) /* in pager.nondisk: F_ONDISK */
#define CSTATE_NONE  0xffu

struct ppage {
	uint32_t slot;            /* NONE when it has none */
	uint32_t disk;            /* swap page, NONE for resident pages */
	uint32_t crc;             /* of what the disk holds (F_ONDISK) */
	uint32_t wcrc;            /* of the write in flight */
	struct pager_order_page ord; /* its place in the learned order */
	uint32_t wait_head, wait_tail; /* pending PINs (indices into pager.waits) */
	uint32_t pins;            /* including the pending ones */
	uint32_t npending;
	uint32_t tensor, index;
	int32_t err;              /* FAILED: the error every later operation gets */
	uint8_t state;            /* enum pager_page_state */
	uint8_t flags;
	uint8_t wfails;           /* failed attempts of the write in flight (retried with backoff) */
	uint8_t cstate;           /* the state pager.by_state counts it in; CSTATE_NONE before the first sync */
	uint8_t counted;          /* C_* : what pager's counters count it as */
	bool read_failed;         /* its last read failed: read-ahead leaves it to the next PIN */
	bool rewrite_wait;        /* a PIN for overwrite waits for its read or zero-fill: dirty once in */
	/* Its last write-back landed while it was pinned: its client may
	 * have changed the slot under the write, so the disk copy may hold
	 * some of the new bytes under the old bytes' CRC. Whatever the
	 * client writes it unpins dirty (rewritten later), but the copy must
	 * not be taken over as another page's (pager_unpin_copy()). */
	bool write_pinned;
	uint8_t back;             /* F_ONDISK in a backing file (1 + its index), not at its home; 0: home */
	uint64_t back_off;        /* there, at this offset */
	struct ppage *sw_next;    /* slot-wait queue */
	struct ppage *dl_prev, *dl_next; /* pager.dirty */
	struct ppage *cl_prev, *cl_next; /* pager.clean */
};

struct ptensor {
	char *name;
	struct ppage *pages;
	uint32_t npages;
	uint64_t bytes;           /* as registered */
	uint32_t nio;             /* its pages' reads and writes in the ring */
	bool used, swappable, dying;
};

/* One request per slot: a slot never has more than one transfer in flight
 * (it is read into, or written from, by the page that owns it). */
struct pslot {
	struct uring_req req; /* first: the completion casts back */
	struct pager *pager;
	struct ppage *page;   /* owner, NULL when free */
	uint64_t t0;
	/* The checksum job of this slot's transfer (one at a time, like the
	 * transfer): what it reads, and what it found. Only these are
	 * touched off the loop thread. */
	struct pager_job job;
	const uint8_t *job_addr;
	uint32_t job_len, job_crc;
	bool job_fault;        /* the checksum hit a punched page */
	unsigned job_delay;   /* a write: its backoff once the checksum is known */
};

struct pfsync {
	struct uring_req req; /* first */
	struct pager *pager;
	uint64_t t0;
};

struct pheld {
	uint32_t at;          /* the slot (pager.held) or the swap page (pager.dheld) */
	uint64_t entry;       /* the snapshot's page whose bytes it holds */
};

struct pwait {
	uint64_t user_data;
	uint32_t next;
};

struct cand {
	struct ppage *pg;
	uint64_t key;
};

/* A file the pager reads pages from but never writes (pager_backing_add()). */
struct pback {
	int fd;                   /* -1 once no page is read from it */
	int index;                /* the ring's file index */
	char *path;
	uint64_t npages;          /* pages with back naming it */
};

struct pager {
	struct pager_config c;
	char *session;
	struct swap *swap;
	int bufreg;
	struct pback backs[PAGER_BACKS_MAX];
	unsigned nbacks;
	struct uring_owner owner; /* this session's turn in the shared ring */
	/* Background writes deferred because the shared ring was full: on
	 * the list pager_room_kick() pumps once it has room again. */
	struct pager *room_next;
	bool room_wait;

	struct pslot *slots;
	uint32_t *free_slots, nfree;
	uint32_t nclaim;          /* resident pages + pinned swappable pages */
	struct pager_clock clock; /* a reference bit per slot */
	struct cand *scratch;     /* nslots, for choosing write-backs */

	struct ptensor *tensors;
	uint32_t ntensors;        /* ids handed out so far (used or free) */
	uint32_t tensors_cap;
	uint32_t *free_tids, nfree_tids; /* ids of removed tensors, reused first */
	uint32_t nfailed;         /* pages FAILED: FLUSH looks for them only when > 0 */
	uint64_t npages;

	uint32_t *disk_free;
	uint64_t ndisk, ndisk_free;

	struct pwait *waits;
	uint32_t wait_free, npending;

	struct ppage *sw_head, *sw_tail;
	uint32_t nslotwait;

	/* Recording of this step and the plan learned from the last one. */
	struct pager_order order;

	uint32_t nreading, nwriting;
	uint32_t njobs;           /* checksum jobs off the loop; an orphan waits for them too */

	/* Kept up to date by pager_page_sync() at every change of a page's
	 * state, pins, slot or flags, so the scheduler never scans every
	 * slot per operation: the write-back candidates, and how many slots
	 * read-ahead could take without waiting. */
	struct ppage *dirty;      /* F_DIRTYLIST pages */
	uint32_t ndirty;
	struct ppage *clean;      /* F_CLEANLIST pages: what the planned eviction chooses among */
	uint32_t nclean;
	uint32_t nspare;          /* F_SPARE pages */
	/* The page counts pager_stats() reports (status asks per request):
	 * kept by pager_page_sync() too, never walked. */
	uint64_t by_state[PAGER__STATES];
	uint64_t npinned, nondisk;
	uint64_t pub_slots, pub_pinned; /* the gauges as last published (c.gauges) */
	uint32_t ntensors_used;

	struct {
		bool active, fsyncing;
		uint32_t head, tail;   /* this round's waiters */
		uint32_t nhead, ntail; /* the next round's */
		uint32_t writes_left, fsyncs_left;
		int err;
		struct pfsync *reqs;   /* one per swap file */
	} fl;

	/* pager_close() ran: completions only count down (an orphan), and
	 * the last one tears the pager down and calls release. */
	bool closing;
	/* A checkpoint's copy-on-write snapshot (pager-snap.c), or NULL. */
	struct pager_snap *snap;
	struct pheld *held;       /* slots freed while the snapshot still owed their bytes */
	uint32_t nheld;
	/* Swap pages a write-back moved off while the snapshot still owed
	 * their bytes (pager_snap_home_ok()): neither a page's nor free. */
	struct pheld *dheld;
	uint64_t ndheld;
	uint64_t dheld_seen;      /* the copier's count of pages done at the last look */
	uint64_t wait_since;      /* a PIN got PAGER_WAIT at (now_ns()), 0: none waits */
	void (*release)(void *arg);
	void *release_arg;
	char msg[1024];
	struct pager_stats st;    /* counters; the rest is computed in pager_stats() */
};


static inline uint8_t *slot_addr(const struct pager *p, uint32_t s)
{
	return p->c.region + (size_t)s * p->c.page_size;
}

/* Where pg's bytes on disk are (F_ONDISK): its backing file or its home.
 * Returns the ring's file index and sets *off. */
static inline int page_on_disk(const struct pager *p, const struct ppage *pg, uint64_t *off)
{
	if (pg->back) {
		*off = pg->back_off;
		return p->backs[pg->back - 1].index;
	}
	return swap_locate(p->swap, pg->disk, off);
}

/* And its path, for messages. */
static inline const char *page_path(const struct pager *p, const struct ppage *pg)
{
	return pg->back ? p->backs[pg->back - 1].path : swap_page_path(p->swap, pg->disk);
}

/* pg's bytes are no longer read from its backing file (written home,
 * dropped, or moved to another page): the file goes once no page needs
 * it, so the space of a save replaced meanwhile is not held for nothing.
 * No read of pg can be in flight (it is in a slot, or its tensor is
 * being dropped with nothing in flight). */
void pager_back_drop(struct pager *p, struct ppage *pg);
/* Every backing file still open, closed (the pager's teardown). */
void pager_backs_free(struct pager *p);

/* The page a plan position names. */
static inline struct ppage *page_of(struct pager_order_page *o)
{
	return (struct ppage *)((char *)o - offsetof(struct ppage, ord));
}

static inline const char *tname(const struct pager *p, const struct ppage *pg)
{
	return p->tensors[pg->tensor].name;
}

static inline bool clean_victim(const struct ppage *pg)
{
	return pg && pg->pins == 0 && pg->state == PAGER_CLEAN;
}

/* pager.c: every pager's errors together (see pager_errors_total()). */
extern uint64_t pager_errors_all;

/* pager-index.c */
void pager_page_sync(struct pager *p, struct ppage *pg);

/* pager.c */
__attribute__((format(printf, 2, 3)))
void pager_set_msg(struct pager *p, const char *fmt, ...);
/* -EFAULT with a message: op on pg found no memory behind its slot. */
int pager_region_gone(struct pager *p, const char *op, const struct ppage *pg);
void pager_pin_put(struct pager *p, struct ppage *pg, uint32_t n);
/* pg's contents are about to be rewritten whole (a PIN for overwrite):
 * dirty from now on, whatever its UNPIN says; counted. */
void pager_overwrite(struct pager *p, struct ppage *pg);
/* pager-slots.c */
uint32_t pager_wait_alloc(struct pager *p, uint64_t user_data);
/* Returns an unused waiter to the pool (not delivered). */
void pager_wait_release(struct pager *p, uint32_t w);
void pager_wait_append(struct pager *p, uint32_t *head, uint32_t *tail, uint32_t w);
void pager_deliver_list(struct pager *p, uint32_t head, int32_t res);
void pager_deliver_page(struct pager *p, struct ppage *pg, int32_t res);
void pager_slot_assign(struct pager *p, uint32_t s, struct ppage *pg);
void pager_slot_release(struct pager *p, struct ppage *pg);
/* A free slot, or one taken from a clean page not needed before `limit`
 * (see pager_policy_victim()); NONE when there is none. */
uint32_t pager_take_slot(struct pager *p, uint64_t limit);

/* An orphan's request completed: tears it down when it was the last. */
void pager_orphan_done(struct pager *p);
/* A live tensor's page, or NULL for a bad id or page or a dying tensor. */
struct ppage *pager_lookup(const struct pager *p, uint32_t tensor, uint32_t page);

/* Drops a tensor with nothing in flight: slots, swap pages, id. */
void pager_tensor_drop(struct pager *p, uint32_t id);

/* pager-io.c: the page owns its slot; the completion moves the state on. */
void pager_io_read(struct pager *p, struct ppage *pg);
void pager_io_write(struct pager *p, struct ppage *pg);

/* pager-sched.c */
void pager_sched_pump(struct pager *p, bool serve);
/* Takes p off the room-wait list (it is going away). */
void pager_room_forget(struct pager *p);

/* pager-snap.c: the guards of a snapshot's pages (see pager.h). With
 * p->snap set: whether pg's bytes in its slot may change now (a PIN, the
 * slot going to another page), saving them first when the budget allows;
 * whether pg's write-back may go now (to a spare swap page, when its home
 * still holds a page of the plan); whether tensor is in the plan. false
 * asks the copier for the page: its wake follows. */
bool pager_snap_slot_ok(struct pager *p, struct ppage *pg);
bool pager_snap_home_ok(struct pager *p, struct ppage *pg);
/* pg was read into its slot (CRC checked): saved aside where the copy
 * would read it from its swap home. */
void pager_snap_page_read(struct pager *p, struct ppage *pg);
bool pager_snap_covers(const struct pager *p, uint32_t tensor);
/* pg leaves its slot: true when the slot may be reused at once, false
 * when it was put aside until the copier has pg's bytes. */
bool pager_snap_release_ok(struct pager *p, struct ppage *pg);
/* A PIN of pg: 0 when it may go on, PAGER_WAIT when its slot's bytes are
 * owed to the copier and could not be saved (the time counts as held). */
int pager_snap_pin_guard(struct pager *p, struct ppage *pg);

/* pager-flush.c */
void pager_flush_progress(struct pager *p);

#endif
