/* SPDX-License-Identifier: MIT */
/*
 * pager.h: one session's page table and paging policy, the NVMe tier's core.
 *
 * The pager owns the slots of a session's region (slot i is the page_size
 * bytes at region + i * page_size) and decides which tensor page sits in
 * which slot. Resident tensors keep a slot per page for their lifetime;
 * swappable tensors have a home in the session's swap files (swap.h) and
 * take a slot only while needed. All disk I/O goes through the daemon's
 * io_uring (uring.h); the pager never blocks on it. Page checksums run
 * through config.offload (the daemon's threadpool).
 *
 * Page states (enum pager_page_state):
 *
 *   ZERO      never written: no slot, nothing on disk. PIN zero-fills a slot.
 *   DISK      only on disk (checksum kept here). PIN reads it.
 *   SLOTWAIT  pinned, waiting for a slot to be cleaned (write-back running).
 *   READING   slot assigned, read in flight.
 *   CLEAN     in slot, same as on disk (or a zero page that was not dirtied).
 *   DIRTY     in slot, newer than disk.
 *   WRITING   in slot, write-back in flight. Still pinnable: the data in the
 *             slot is valid. Unpinned dirty meanwhile, it stays DIRTY. A
 *             failed write (EIO, ENOSPC) keeps the page WRITING with its
 *             data in the slot and goes out again after a backoff (50,
 *             200, 800 ms): one bad write costs a delay, not the page.
 *   FAILED    its write-back failed 4 times: the data never reached the
 *             disk and the slot copy is discarded. Every later
 *             PIN/UNPIN/PREFETCH of it fails with the error, and a message
 *             naming tensor, page, file and the fix; FLUSH fails too. Only
 *             removing the tensor clears it. (Keeping it dirty in its slot
 *             for ever would leak the slot on a dead drive and stall the
 *             session.)
 *   RESIDENT  a resident tensor's page: always in its slot, never written.
 *
 * A failed READ (EIO, or -EBADMSG when the checksum does not match) fails
 * the PINs waiting for it, frees the slot (its contents are never handed
 * out) and leaves the page DISK: a later PIN reads it again.
 *
 * Policy. Between two pager_step() calls the pager records the order of
 * PINs; from the next step on it follows that order (a cursor), reads ahead
 * prefetch_window pages, and when it must evict picks the unpinned page
 * whose next use is furthest away (Belady, with the recorded future). Clean
 * pages are evicted first; dirty ones are written back in batches when a
 * slot is needed, and written behind whenever the ring is not busy and their
 * next use is beyond the window. A PIN that is not where the cursor expects
 * it resynchronises to its next occurrence; pages not in the recording make
 * the pager drop the plan (clock policy, no read-ahead) until the next STEP,
 * which adopts a fresh recording. With no recording the policy is a clock.
 *
 * Slots and -ENOMEM. Every pinned page and every resident page claims one
 * slot; a PIN of a page not yet pinned is refused with -ENOMEM when all
 * slots are already claimed. The other slots always become free by
 * themselves (clean: at once; dirty: after write-back; reading: after the
 * read), so a PIN that was accepted always completes, and a client that
 * pins more than its region holds gets an error instead of a deadlock.
 *
 * Completions. pager_pin() and pager_flush() return PAGER_PENDING when the
 * result comes later: then config.complete(ctx, user_data, res) is called
 * exactly once, with the slot index or 0, or -errno. It is called from
 * inside uring_reap()/uring_wait() and from pager_unpin(),
 * pager_prefetch(), pager_step() and pager_tensor_remove() (for other,
 * earlier operations), never for the operation being submitted by the same
 * call and never from pager_close(). The callback may read
 * pager_last_error() and pager_stats(), and must not call anything else in
 * the pager. At most config.max_pending operations are pending at a time.
 *
 * Integrity. Every page written gets a CRC-32C kept in the page table; every
 * read is checked against it. Failed completions carry -EIO, -ENOSPC or
 * -EBADMSG, and pager_last_error() names the session, tensor, page and file.
 *
 * Nothing here logs; every error returns -errno and a message.
 */
#ifndef SPW_DAEMON_PAGER_H
#define SPW_DAEMON_PAGER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "swap.h"

struct uring;
struct pager;

/* CPU work the pager hands off the loop (the CRC-32C of a page written or
 * read): fn runs on some thread, then done back on the loop thread. The
 * job lives in the pager's memory until done has run; space is the
 * offloader's own (a uv_work_t, say). */
struct pager_job {
	void (*fn)(struct pager_job *j);
	void (*done)(struct pager_job *j);
	_Alignas(16) unsigned char space[256];
};

/* pager_pin()/pager_flush(): the result will come through config.complete. */
#define PAGER_PENDING INT_MAX

/* pager_config.io_event's op: the values of spw-ring.h's SPW_IO_*. */
enum pager_io_op { PAGER_IO_READ = 1, PAGER_IO_WRITE = 2 };

struct pager_config {
	const char *session;      /* for messages and swap file names */
	uint8_t *region;          /* nslots * page_size bytes, 4 KiB aligned */
	uint32_t page_size;       /* power of two, >= 4096 */
	uint32_t nslots;
	struct uring *uring;
	const struct swap_dir *dirs; /* swap.dirs; unused when swap_bytes == 0 */
	unsigned ndirs;
	uint64_t swap_bytes;      /* the session's swap capacity; 0 = resident tensors only */
	unsigned prefetch_window; /* swap.prefetch_window; 0 = no read-ahead */
	unsigned queue_depth;     /* the ring's depth: write-behind keeps under half of it (0 = 32) */
	unsigned max_pending;     /* pending PIN/FLUSH at once, e.g. the CQ size (0 = 1024) */
	void (*complete)(void *ctx, uint64_t user_data, int32_t res);
	/* A tensor whose pager_tensor_remove() returned PAGER_PENDING is gone
	 * (its I/O drained); called from inside uring_reap(), never after
	 * pager_close(). May be NULL. */
	void (*tensor_removed)(void *ctx, uint32_t id);
	/* A read or write (PAGER_IO_*) of tensor's page ended (res 0 or
	 * -errno), the transfer having started at t0 (now_ns() clock). May
	 * be NULL. */
	void (*io_event)(void *ctx, uint32_t tensor, uint32_t page, int op, uint64_t t0, uint64_t t1, int32_t res);
	/* A page read from a backing file failed its CRC-32C: the file
	 * changed since it was saved, and no later read will bring the
	 * page's bytes back (pager_last_error() says which). Called from
	 * inside the read's completion, before its PINs fail; the callback
	 * must not call into the pager. May be NULL. */
	void (*backing_bad)(void *ctx, uint32_t tensor, uint32_t page);
	/* The slots in use (nslots - free) or the pinned pages changed: their
	 * new values, for the client's timeline counters. May be NULL. */
	void (*gauges)(void *ctx, uint64_t slots_used, uint64_t pages_pinned);
	/* Runs j->fn elsewhere and j->done on this thread later (or both at
	 * once, in order, when it cannot). NULL: both inline. */
	void (*offload)(void *ctx, struct pager_job *j);
	/* Gives len bytes of the region at offset off (4 KiB aligned) back to
	 * the kernel: they read as zeros from then on, and take memory again
	 * only when touched. The unused tail of a resident tensor's last page
	 * goes this way. NULL, or a failure, zero-fills instead. */
	int (*discard)(void *ctx, uint64_t off, uint64_t len);
	void *ctx;
};

/* Sets up the page table, creates the swap files (swap_new()) and registers
 * the region with the ring as fixed buffers (optional; a refusal only costs
 * speed). Returns 0, or -errno with *ret untouched and a sentence for a
 * person in err (-EINVAL bad config, -ENOSPC no room for the swap files,
 * ...). */
int pager_new(const struct pager_config *c, char *err, size_t errlen, struct pager **ret);

/* Ends the pager without waiting for the disk, and delivers no
 * completions. With nothing in flight everything goes now: the fixed-buffer
 * registration, the swap files (unregistered, closed, removed), the page
 * table; then release(arg) runs (the caller frees the region there). With
 * I/O in flight (a stalled drive) the pager becomes an orphan: its requests
 * only count down, and the swap files with their registered file indexes,
 * the buffer registration and the region stay reserved until the last one
 * completes, so a late completion never touches freed memory and a file
 * index is never reused while a request may still use it; then the same
 * teardown runs, from inside uring_reap(). release may be NULL (then the
 * caller must keep the region mapped until the ring is idle). Accepts NULL
 * (release runs at once); returns NULL. */
struct pager *pager_close(struct pager *p, void (*release)(void *arg), void *arg);

/* pager_close(p, NULL, NULL): for callers that unmap the region only after
 * the ring is idle (uring_free() waits for it). */
struct pager *pager_free(struct pager *p);

/* True while the pager has requests in the ring. */
bool pager_busy(const struct pager *p);

/* Registers a tensor of `bytes` (cut into ceil(bytes / page_size) pages).
 * Swappable pages start ZERO and take swap pages from the session's swap
 * capacity; resident pages take slots now, zero-filled. Sets *id and
 * *npages. Returns 0, or -errno with a message in err: -ENOSPC (swap
 * capacity left is too small), -ENOMEM (not enough slots for a resident
 * tensor), -EBUSY (slots exist but hold dirty or in-flight pages: FLUSH,
 * or register resident tensors first), -EINVAL. */
int pager_tensor_add(struct pager *p, const char *name, uint64_t bytes, bool swappable, uint32_t *id,
		     uint32_t *npages, char *err, size_t errlen);

/* Drops a tensor: its slots and swap pages return to the pool and the
 * learned order is forgotten (it refers to the tensor). Never waits: with
 * reads ahead or writes behind of its pages in flight the tensor is dying
 * (no operation finds it, nothing new starts on it) and the call returns
 * PAGER_PENDING; config.tensor_removed(ctx, id) follows when the last one
 * completes. Returns 0 (gone now), PAGER_PENDING, -ENOENT, or -EBUSY when
 * one of its pages is pinned or has a pending PIN. */
int pager_tensor_remove(struct pager *p, uint32_t id);

/* A live tensor's registered size, kind and pages: 0, or -ENOENT. */
int pager_tensor_info(const struct pager *p, uint32_t id, uint64_t *bytes, bool *swappable, uint32_t *npages);

/* Releases every delivered pin (a client that died holding pages), as if
 * each were unpinned dirty: whatever the client wrote stays. Pending PINs
 * are not touched; call it once none is. Returns the pins released. */
uint64_t pager_unpin_all(struct pager *p);

/* Slots not claimed by resident or pinned pages (what a resident tensor
 * could still take), without pager_stats()'s walk over every page. */
uint32_t pager_slots_unclaimed(const struct pager *p);

/* PIN: returns the slot index (>= 0) when the page is in its slot now,
 * PAGER_PENDING when complete() will deliver the slot index or -errno, or
 * -errno at once (then complete() is never called for it): -EINVAL bad
 * tensor/page, -ENOMEM every slot claimed, -EBUSY max_pending reached, or
 * the page's stored error (FAILED). Pins count: each PIN needs an UNPIN. */
int pager_pin(struct pager *p, uint32_t tensor, uint32_t page, uint64_t user_data);

/* After the shared ring's completions were reaped (it has room again):
 * pumps the pagers whose background writes found it full, in the order
 * they found it so. The daemon calls it after every uring_reap(). */
void pager_room_kick(void);

/* PIN for overwrite: the caller rewrites the whole page, so a page on disk
 * (or never written) gets its slot with no read and no zeroing; the slot
 * holds stale bytes of this session's own region until the caller writes
 * them. From this PIN on the page is dirty, whatever its UNPIN says: what
 * the slot holds then is the page's data. Other PINs of the page meanwhile
 * see those bytes too. Returns as pager_pin(). */
int pager_pin_overwrite(struct pager *p, uint32_t tensor, uint32_t page, uint64_t user_data);

/* UNPIN, marking the page dirty (it will be written back) or clean. Returns
 * 0, -EINVAL when not pinned (a pending PIN does not count), or the page's
 * error when it FAILED (the pin is released all the same). */
int pager_unpin(struct pager *p, uint32_t tensor, uint32_t page, bool dirty);

/* UNPIN, dirty, of a page whose bytes the caller made a whole copy of page
 * src_page of src_tensor as that page was pinned (SPW_UNPIN_COPY_OF,
 * pager-copy.c). Where the source is pinned, clean and on disk, the two
 * trade disk homes: this page takes the source's disk copy (clean, no
 * write) and the source, dirty from now on, will be written to this
 * page's old home. Returns 1 when they traded, 0 when the page was
 * unpinned dirty as by pager_unpin(), or pager_unpin()'s errors;
 * -EINVAL also for a bad source or a page named as its own copy. */
int pager_unpin_copy(struct pager *p, uint32_t tensor, uint32_t page, uint32_t src_tensor, uint32_t src_page);

/* PREFETCH: a hint; starts reading the page when a slot can be had without
 * waiting (a slot whose page is needed later than this one, with a
 * recording). Returns 0 (also when the hint was dropped; see stats), or
 * -EINVAL / the page's error. */
int pager_prefetch(struct pager *p, uint32_t tensor, uint32_t page);

/* STEP: ends the recording of this step; it becomes the order the pager
 * follows from now on (unless it was empty or overflowed). */
void pager_step(struct pager *p);

/* FLUSH: every page unpinned dirty before this call, and every write in
 * flight, reaches the disk, then every swap file is fsynced through the
 * ring. Returns PAGER_PENDING (complete() gets 0 or the first error),
 * -EBUSY when max_pending is reached. Pages pinned at the time are not
 * covered: the client is still changing them. */
int pager_flush(struct pager *p, uint64_t user_data);

/* The message for the most recent failure (immediate or completion), or "". */
const char *pager_last_error(const struct pager *p);

enum pager_page_state {
	PAGER_ZERO,
	PAGER_DISK,
	PAGER_SLOTWAIT,
	PAGER_READING,
	PAGER_CLEAN,
	PAGER_DIRTY,
	PAGER_WRITING,
	PAGER_FAILED,
	PAGER_RESIDENT,
	PAGER__STATES
};

/* The state of one page, for tests and status; -EINVAL for a bad id. */
int pager_page_state(const struct pager *p, uint32_t tensor, uint32_t page);
const char *pager_state_name(unsigned state);

/* Swap request latency buckets (submit to completion), upper bounds in
 * microseconds, the last UINT64_MAX (+Inf): metrics.c's histogram. */
#define PAGER_LAT_BUCKETS 9
extern const uint64_t pager_lat_bounds_us[PAGER_LAT_BUCKETS];

struct pager_stats {
	/* Geometry and now. */
	uint32_t page_size, nslots;
	uint32_t slots_free;          /* owned by no page */
	uint32_t slots_claimed;       /* resident + pinned pages (the -ENOMEM rule) */
	uint32_t tensors;
	uint64_t pages;               /* all tensors' pages */
	uint64_t pages_by_state[PAGER__STATES];
	uint64_t pages_pinned;
	uint32_t pending;             /* PIN/FLUSH waiting for their completion */
	uint32_t reads_inflight, writes_inflight; /* this pager's, the ring's queue depth share */
	uint32_t queue_depth;         /* the whole ring now: in the kernel + waiting for room */
	/* Swap. */
	uint64_t swap_bytes;          /* capacity (files' size) */
	uint64_t swap_assigned_bytes; /* swap pages given to tensors */
	uint64_t bytes_on_disk;       /* pages with a valid copy on disk */
	uint64_t backed_bytes;        /* of which in backing files (a stopping daemon's save), not yet home */
	/* Throughput inputs: divide deltas of bytes by deltas of wall time;
	 * *_ns sum each request's latency (submit to completion). */
	uint64_t reads, read_bytes, read_ns;
	uint64_t writes, write_bytes, write_ns;
	uint64_t read_lat[PAGER_LAT_BUCKETS], write_lat[PAGER_LAT_BUCKETS]; /* requests per bucket, not cumulative */
	uint64_t fsyncs;
	/* PIN outcomes. */
	uint64_t pins;
	uint64_t pin_hits;            /* already in slot, not thanks to a prefetch */
	uint64_t prefetch_hits;       /* in slot or reading because of a prefetch */
	uint64_t misses;              /* had to start a read (or wait for a slot to read into) */
	uint64_t zero_fills;          /* ZERO page: slot memset, no read */
	uint64_t overwrites;          /* PINs for overwrite: slot handed out with no read */
	uint64_t disk_copies_taken;   /* UNPINs of a copy that took over its source's disk copy: a write saved */
	uint64_t enomem;              /* refused: every slot claimed */
	/* Policy. */
	uint64_t prefetches;          /* reads started ahead of a PIN (plan or PREFETCH op) */
	uint64_t prefetch_dropped;    /* PREFETCH hints that found no slot */
	uint64_t evictions;
	uint64_t writebacks;          /* writes started because a slot was needed */
	uint64_t write_behinds;       /* writes started while the ring was not busy */
	uint64_t flushes;
	uint64_t steps;
	uint32_t plan_length;         /* PINs per step in the order being followed (0: none) */
	bool plan_active;
	uint64_t resyncs;             /* PINs off the expected position, found further on */
	uint64_t divergences;         /* PINs not in the recording */
	/* Errors. */
	uint64_t errors;              /* failed reads/writes/fsyncs */
	uint64_t checksum_errors;     /* of which -EBADMSG */
};

void pager_stats(const struct pager *p, struct pager_stats *st);

/* For tests: 0 when the pager's incremental indexes (the dirty list, the
 * spare count) agree with a full scan of its slots, else -EUCLEAN. */
int pager_check(const struct pager *p);

/* stats.errors alone: checked after a reap that counted a new error, to
 * log a failed write-back (which no pending operation reports) when it
 * happens. */
uint64_t pager_error_count(const struct pager *p);
/* The errors of every pager in the process together: when it has not
 * moved, no pager needs looking at. */
uint64_t pager_errors_total(void);

/* Checkpoints and restores (pager-snap.c). Where one page's bytes are
 * now: nowhere (never written: zeros), in its slot, or only in its swap
 * file (fd is the file's own O_DIRECT descriptor, crc the CRC-32C of the
 * page_size bytes at off). */
enum pager_src_kind { PAGER_SRC_ZERO, PAGER_SRC_SLOT, PAGER_SRC_DISK };
struct pager_src {
	enum pager_src_kind kind;
	uint32_t slot;
	int fd;
	uint64_t off;
	uint32_t crc;
	const char *path;
	bool backed;    /* DISK: in a backing file (pager_backing_add()), not at its home */
	/* DISK: where the session's learned order uses the page next
	 * (pager_policy_next_use(): positions from this step's start), or
	 * UINT64_MAX (never, or no order learned). */
	uint64_t next_use;
};

/* PIN: the page's bytes are owed to a checkpoint's copy that has not
 * reached it, and can be neither saved now (cow budget spent) nor
 * changed: the caller holds the operation (the ring stops at it) and
 * tries it again once the snapshot's wake came (pager_snap_progress()). */
#define PAGER_WAIT (INT_MAX - 1)

/*
 * Copy-on-write snapshots (pager-snap.c): a checkpoint's plan, taken at a
 * commit point, says where each page's bytes are (pager_page_source());
 * the session trains on while a copier thread writes them out. Until the
 * copier has a page, every pager path that would change what the plan
 * points at preserves it first: a PIN of a page planned in its slot (the
 * client writes after a PIN), that slot given to another page (eviction,
 * a slot freed and reused), a write-back over the swap home of a page
 * planned on disk. Preserving is a copy of the slot into a side buffer on
 * the loop while the budget lasts (slot pages); otherwise the operation
 * waits for the copier, which is asked to take that page next: a PIN
 * returns PAGER_WAIT, a slot freed is held, a write-back is left for
 * later, an eviction picks nothing. The loop never waits on the disk or
 * the copier: the copier's wake (wake(arg), from its thread) leads the
 * loop to call pager_snap_progress().
 *
 * Per page the state goes PENDING -> COPYING -> DONE (the copier) or
 * PENDING -> SAVED (the loop, the side buffer filled) -> DONE (the copier
 * wrote it and freed the buffer). The snapshot belongs to its checkpoint:
 * it outlives the pager when the session ends mid-copy (detach first).
 */
struct pager_snap;
/* npages planned pages for tensor ids below nids; budget: bytes of side
 * buffers alive at once. NULL when out of memory. */
struct pager_snap *pager_snap_new(const struct pager *p, uint64_t npages, uint64_t budget, void (*wake)(void *arg),
				  void *arg);
/* The plan's entry i: page (tensor, page) as pager_page_source() finds
 * it now (the same return), recorded for the guards. */
int pager_snap_plan(struct pager *p, struct pager_snap *sn, uint32_t tensor, uint32_t page, uint64_t i,
		    struct pager_src *src);
/* From now on p guards the plan's pages (on the loop, right after the
 * plan: no operation between). Returns 0 or -ENOMEM. */
int pager_snap_attach(struct pager *p, struct pager_snap *sn);
/* The copier moved on (its wake): held slots whose pages it has go back
 * to the free list, write-backs and slot waiters that waited go on. The
 * caller then retries a PIN that got PAGER_WAIT. */
void pager_snap_progress(struct pager *p);
/* The checkpoint ended (or the session goes): nothing is guarded any
 * more, and everything that waited goes on. Accepts p without one. */
void pager_snap_detach(struct pager *p);
/* After detach and after the copier ended: frees the side buffers left
 * and sn. Accepts NULL. */
void pager_snap_free(struct pager_snap *sn);

/* The copier's side, from its thread. claim: what to do with entry i:
 * COPY from the plan's source (now the copier's until copied()), SAVED
 * (the bytes are at *saved until copied()), or DONE (written already). */
enum pager_snap_claim { PAGER_SNAP_COPY, PAGER_SNAP_SAVED, PAGER_SNAP_DONE };
enum pager_snap_claim pager_snap_claim(struct pager_snap *sn, uint64_t i, const uint8_t **saved);
void pager_snap_copied(struct pager_snap *sn, uint64_t i);
/* The next entry the loop waits for, or UINT64_MAX. */
uint64_t pager_snap_urgent(struct pager_snap *sn);
/* From now on the loop saves pages planned on disk as its reads bring
 * them in (the swap files do not reflink: the copier would read them). */
void pager_snap_save_reads(struct pager_snap *sn);
/* The next entry the loop saved aside (its buffer held until written),
 * or UINT64_MAX. */
uint64_t pager_snap_ready(struct pager_snap *sn);
/* Whether the copy should give the disk away now: a session (any, on
 * the daemon's ring) waits on it (a PIN's read, a FLUSH, a slot's
 * write-back), and this snapshot's loop never waited for the copy. */
bool pager_snap_disk_waited(struct pager_snap *sn);
/* Sleeps up to ms, less when the loop asks for a page meanwhile
 * (test-only slow copies). */
void pager_snap_nap(struct pager_snap *sn, unsigned ms);

struct pager_snap_stats {
	uint64_t saved_bytes;   /* copied into side buffers by the loop */
	uint64_t read_saved_bytes; /* of which pages planned on disk, saved as a read brought them in */
	uint64_t peak_bytes;    /* side buffers alive at once, at most */
	uint64_t waits;         /* operations that waited for the copier (PINs held, slots held, writes left) */
	uint64_t held_ns;       /* the ring held at a PIN that waited, in all */
	uint64_t moved;         /* write-backs that went to a spare swap page, the planned home kept */
};
void pager_snap_stats(const struct pager_snap *sn, struct pager_snap_stats *st);

/* 0 with *src set, -EINVAL for a bad id, or the error of a FAILED page
 * (its message in pager_last_error()). */
int pager_page_source(struct pager *p, uint32_t tensor, uint32_t page, struct pager_src *src);
/* Restore: the swap home of a swappable page never written (fd, offset
 * and path). Returns 0, or -EINVAL (bad id, resident, already written). */
int pager_page_home(const struct pager *p, uint32_t tensor, uint32_t page, int *fd, uint64_t *off,
		    const char **path);
/* The page_size bytes whose CRC-32C is crc are now at its home: the page
 * is on disk (DISK), as if written back and evicted. */
void pager_page_loaded(struct pager *p, uint32_t tensor, uint32_t page, uint32_t crc);

/*
 * Backing files: read-only sources of pages that are not at their homes.
 * A restored session's pages can stay in the files they were saved in (a
 * stopping daemon's swap files, linked into its save) instead of being
 * copied to their homes first: such a page is read from there until its
 * first write-back, which goes to its home as any. The files are never
 * written, so the save stays whole (what a crash brings back).
 *
 * pager_backing_add() takes fd (open for reading, O_DIRECT where the
 * filesystem allows; the pager closes it) and registers it with the
 * ring: the backing's number (>= 0), or -errno with a message (fd closed
 * either way). pager_page_backed(): a swappable page never written
 * (ZERO) is on disk in backing `back` at off (page-aligned), its CRC-32C
 * crc: DISK from now on. -EINVAL for a bad page, backing or offset.
 */
#define PAGER_BACKS_MAX 64
int pager_backing_add(struct pager *p, int fd, const char *path);
int pager_page_backed(struct pager *p, uint32_t tensor, uint32_t page, unsigned back, uint64_t off, uint32_t crc);

#endif
