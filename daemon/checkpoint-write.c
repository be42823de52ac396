/* SPDX-License-Identifier: MIT */
/*
 * A checkpoint's copy, on the libuv threadpool: every page from the
 * region (through the daemon's own mapping, and safemem), from the side
 * buffer the loop saved it into before the trainer changed it, or from
 * its swap file (a reflink where the filesystem makes them, else read
 * with O_DIRECT); the pages the loop waits for first (pager-snap.c).
 * Pages through memory are written with O_DIRECT where the filesystem
 * takes it (checkpoint-direct.c).
 * Then a manifest, one syncfs() for all of it, the rename into place,
 * fsync of the parent.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>

#include <cjson/cJSON.h>

#include "checkpoint-private.h"
#include "checkpoint.h"
#include "util/crc32c.h"
#include "util/fdio.h"
#include "pager.h"
#include "safemem.h"

/* Worker helpers: each sets ck->err and ck->msg once. */
#define wfail checkpoint_fail

int checkpoint_fail(struct checkpoint *ck, int err, const char *fmt, ...)
{
	va_list ap;

	if (ck->err)
		return ck->err;
	va_start(ap, fmt);
	vsnprintf(ck->msg, sizeof(ck->msg), fmt, ap);
	va_end(ap);
	ck->err = err < 0 ? err : -err;
	return ck->err;
}

/*
 * n bytes of src at off to dst at at as a reflink (XFS, btrfs: the two
 * files share the blocks until one is written, and the copy costs
 * nothing); 1 when the filesystem cannot (the caller copies). Only a
 * reflink: a copy_file_range that the kernel carries out as a copy goes
 * through the page cache, and its writeback lands on the disk in bursts
 * the trainer's own I/O then waits behind (spillway-bench checkpoint:
 * two steps held up where direct reads and writes hold up one).
 */
static int reflink_range(int src, uint64_t off, int dst, uint64_t at, size_t n)
{
	struct file_clone_range fcr = { .src_fd = src, .src_offset = off, .src_length = n, .dest_offset = at };

	if (ioctl(dst, FICLONERANGE, &fcr) == 0)
		return 0;
	if (errno == EOPNOTSUPP || errno == ENOTTY || errno == EXDEV || errno == EINVAL || errno == EPERM ||
	    errno == ETXTBSY || errno == EBADF)
		return 1;
	return -errno;
}

/* The whole swap page of file k at off into buf (a page-aligned buffer
 * of a page): past the page cache where the file opened with O_DIRECT
 * (reading through it would fill the cache with pages the pager's direct
 * writes must then drop), else through it. Where the copier's ring reads
 * it instead: ck_io_read_write(). */
static int read_swap_page(const struct checkpoint *ck, unsigned k, uint8_t *buf, uint64_t off)
{
	int r = -EINVAL;

	if (ck->srcdfd[k] >= 0)
		r = fd_pread_all(ck->srcdfd[k], buf, ck->page_size, off);
	if (r == -EINVAL)
		r = fd_pread_all(ck->srcfd[k], buf, ck->page_size, off);
	return r;
}

int ck_page_verify(struct checkpoint *ck, uint64_t gi, uint32_t k, const struct ck_tensor *t, const uint8_t *buf,
		   size_t len)
{
	struct ck_page *pg = &ck->pages[gi];
	uint32_t got = crc32c(0, buf, ck->page_size);

	if (got != pg->crc)
		return checkpoint_fail(ck, EBADMSG,
				       "page %u of tensor %s in swap file %s (offset %llu) fails its checksum (CRC-32C "
				       "%08x, written as %08x): the disk gave back other bytes than the daemon wrote, and "
				       "nothing of this checkpoint is kept (check the drive: dmesg, smartctl)",
				       k, t->name, ck->srcpath[pg->src], (unsigned long long)pg->off, got, pg->crc);
	pg->crc = len == ck->page_size ? got : crc32c(0, buf, len);
	return 0;
}

/* Pages k to k + m - 1 of o's tensor, claimed, whole and side by side in
 * one swap file, reflinked into its file at once: 0 (copied, their CRCs
 * the pager's), 1 where the filesystem refuses (*reflinks false from then
 * on: the caller copies them, and the loop saves swap pages as its reads
 * bring them in, since the copy will read them), or the failure. */
static int reflink_pages(struct checkpoint *ck, struct ck_out *o, uint32_t k, uint32_t m, bool *reflinks)
{
	const struct ck_tensor *t = o->t;
	const struct ck_page *pg = &ck->pages[t->first + k];
	int r = reflink_range(ck->srcfd[pg->src], pg->off, o->fd, (uint64_t)k * ck->page_size,
			      (size_t)m * ck->page_size);

	if (r < 0)
		return wfail(ck, r, "reflinking pages %u-%u of tensor %s from swap file %s to %s/%s: %s", k, k + m - 1,
			     t->name, ck->srcpath[pg->src], ck->path, t->file, strerror(-r));
	if (r > 0) {
		*reflinks = false;
		pager_snap_save_reads(ck->snap);
		return 1;
	}
	for (uint32_t j = 0; j < m; j++) {
		ck->copied += ck->page_size;
		checkpoint_add_done(ck, ck->page_size);
		pager_snap_copied(ck->snap, t->first + k + j);
	}
	return 0;
}

/* Page k of o's tensor into its file, claimed already (claim, saved: what
 * pager_snap_claim() said): from where the plan says, or from the loop's
 * side buffer. Pages go in any order (the loop's first), so each at its
 * own offset. urgent: the loop waits for this page (it takes the disk as
 * it is). */
static int copy_claimed(struct checkpoint *ck, struct ck_writer *w, struct ck_out *o, uint32_t k, bool *reflinks,
			bool urgent, enum pager_snap_claim claim, const uint8_t *saved)
{
	const struct ck_tensor *t = o->t;
	uint64_t gi = t->first + k, at = (uint64_t)k * ck->page_size;
	struct ck_page *pg = &ck->pages[gi];
	size_t len = t->bytes - at < ck->page_size ? (size_t)(t->bytes - at) : ck->page_size;
	const uint8_t *from;
	struct ck_io *io;
	uint8_t *buf;
	int r;

	if (claim == PAGER_SNAP_DONE)
		return 0;
	if (claim == PAGER_SNAP_COPY && pg->kind == PAGER_SRC_DISK && ck->link && ck->link_as[pg->src] >= 0) {
		/* A stopping daemon's save: the page stays in the swap file
		 * linked into the directory, its CRC the pager's (of the
		 * whole page). Nothing will write there again. */
		pg->kept = true;
		ck->kept += ck->page_size;
		checkpoint_add_done(ck, len);
		pager_snap_copied(ck->snap, gi);
		return 0;
	}
	if (claim != PAGER_SNAP_SAVED && pg->kind == PAGER_SRC_DISK && len == ck->page_size && *reflinks &&
	    (r = reflink_pages(ck, o, k, 1, reflinks)) <= 0)
		return r;
	/* A buffer: once one of the writes in flight is done when none is
	 * free. The page stays claimed meanwhile (the loop waits, or keeps
	 * its side buffer). */
	if (!(io = ck_io_get(w, !urgent)))
		return ck->err;
	from = buf = ck_io_buf(io);
	if (claim == PAGER_SNAP_SAVED) {
		from = saved; /* what the slot held at the commit point */
		/* Planned on disk, saved as the trainer's read brought it in
		 * (its CRC checked by the pager before the copy): other bytes
		 * now mean the client wrote a page it had not pinned. */
		if (pg->kind == PAGER_SRC_DISK && crc32c(0, saved, ck->page_size) != pg->crc) {
			ck_io_put(w, io);
			return wfail(ck, EBADMSG, "tensor %s page %u changed in the session's memory as it was read from "
				     "swap (the client wrote to a page it had not pinned); nothing of this checkpoint is kept",
				     t->name, k);
		}
	} else if (pg->kind == PAGER_SRC_ZERO) {
		memset(buf, 0, len);
	} else if (pg->kind == PAGER_SRC_SLOT) {
		/* The client can punch its region: through safemem. */
		if (safemem_copy(buf, ck->map + (size_t)pg->slot * ck->page_size, len) < 0) {
			ck_io_put(w, io);
			return wfail(ck, EFAULT, "tensor %s page %u: the session's region could not be read (its "
				     "client released that memory)", t->name, k);
		}
	} else {
		/* Only on disk: read whole (the pager's CRC is of all of
		 * it) through the copier's ring, several at once, where the
		 * swap file and the data file take O_DIRECT; its completion
		 * checks and writes it (checkpoint-direct.c). A read at a
		 * time and a write of it behind could not keep pace with a
		 * trainer whose own I/O fills the disk's queue. */
		if (ck_io_read_write(w, io, o, k, gi) == 0)
			return 0;
		r = read_swap_page(ck, pg->src, buf, pg->off);
		ck->swap_read += r < 0 ? 0 : ck->page_size;
		if (r < 0) {
			ck_io_put(w, io);
			return wfail(ck, r, "reading page %u of tensor %s from swap file %s: %s", k, t->name,
				     ck->srcpath[pg->src], strerror(-r));
		}
		pager_snap_copied(ck->snap, gi);
		if ((r = ck_page_verify(ck, gi, k, t, buf, len)) < 0) {
			ck_io_put(w, io);
			return r;
		}
		return ck_io_write(w, io, o, k, gi, from, len, false);
	}
	/* The source is read (into buf): the loop may change it now, and
	 * need not wait for the checksum and the write. A side buffer is
	 * handed back once written. */
	if (claim != PAGER_SNAP_SAVED)
		pager_snap_copied(ck->snap, gi);
	pg->crc = crc32c(0, from, len);
	return ck_io_write(w, io, o, k, gi, from, len, claim == PAGER_SNAP_SAVED);
}

/* Page k of o's tensor into its file, unless the copier wrote it already. */
static int copy_page(struct checkpoint *ck, struct ck_writer *w, struct ck_out *o, uint32_t k, bool *reflinks,
		     bool urgent)
{
	const uint8_t *saved = NULL;
	enum pager_snap_claim claim = pager_snap_claim(ck->snap, o->t->first + k, &saved);

	return copy_claimed(ck, w, o, k, reflinks, urgent, claim, saved);
}

/* Whether pages k and k + 1 of t sit side by side in one swap file, whole. */
static bool disk_next(const struct checkpoint *ck, const struct ck_tensor *t, uint32_t k)
{
	const struct ck_page *a = &ck->pages[t->first + k], *b = a + 1;

	return k + 1 < t->npages && (uint64_t)(k + 2) * ck->page_size <= t->bytes && b->kind == PAGER_SRC_DISK &&
	       b->src == a->src && b->off == a->off + ck->page_size;
}

/*
 * Pages k... of o's tensor that lie side by side in one swap file (in the
 * order the pager first wrote them, as a rule), reflinked in one
 * FICLONERANGE of up to RUN_MAX bytes instead of one call a page: fewer
 * remaps for the filesystem's journal, and fewer times both files' locks
 * are taken while the trainer's direct I/O runs on the swap file. Each
 * page is claimed first; one the loop has saved aside or the copy wrote
 * already ends the run and goes its own way. *n: the pages done.
 */
#define RUN_MAX (64u << 20)

static int reflink_run(struct checkpoint *ck, struct ck_writer *w, struct ck_out *o, uint32_t k, bool *reflinks,
		       uint32_t *n)
{
	const struct ck_tensor *t = o->t;
	uint32_t m = 0, cap = ck->page_size < RUN_MAX ? RUN_MAX / ck->page_size : 1;
	const uint8_t *saved = NULL;
	enum pager_snap_claim claim = PAGER_SNAP_COPY;
	int r = 0;

	/* Claimed in order while they follow on disk and stay the plan's. */
	while (m < cap && (m == 0 || disk_next(ck, t, k + m - 1))) {
		claim = pager_snap_claim(ck->snap, t->first + k + m, &saved);
		if (claim != PAGER_SNAP_COPY)
			break;
		m++;
	}
	if (m > 1 && (r = reflink_pages(ck, o, k, m, reflinks)) < 0)
		return r;
	if (m == 1 || r == 1) {
		/* One page, or no reflinks after all: each claimed page its
		 * own way (a single one may yet reflink). */
		for (uint32_t j = 0; j < m; j++) {
			r = copy_claimed(ck, w, o, k + j, reflinks, false, PAGER_SNAP_COPY, NULL);
			if (r < 0)
				return r;
		}
	}
	*n = m;
	/* The page that ended the run, as it was claimed. */
	if (claim != PAGER_SNAP_COPY) {
		*n = m + 1;
		return copy_claimed(ck, w, o, k + m, reflinks, false, claim, saved);
	}
	return 0;
}

/*
 * Data files whose writes may still be in flight. A file's writeback is
 * started (sync_file_range) as soon as it is written, and the file is
 * closed (its writes done, cut to its bytes) when PENDING newer files are
 * under way or at the end: waiting for each file's writes right away
 * would leave the disk idle while the next file is read. Then one
 * syncfs() makes every file durable with the manifest (checkpoint_write()):
 * a fsync per file forces the journal and flushes the drive's cache once
 * each (XFS flushes even when the journal had the file already).
 */
#define PENDING 32

struct pending {
	struct ck_out *o[PENDING];
	unsigned head, n;
};

/* The oldest pending file: its writes done, cut and closed. */
static int pending_close_one(struct ck_writer *w, struct pending *q)
{
	struct ck_out *o = q->o[q->head];

	q->head = (q->head + 1) % PENDING;
	q->n--;
	return ck_out_close(w, o);
}

/* Every pending file closed; the first error. */
static int pending_drain(struct ck_writer *w, struct pending *q)
{
	int r = 0;

	while (q->n) {
		int e = pending_close_one(w, q);

		r = r < 0 ? r : e;
	}
	return r;
}

static int pending_add(struct ck_writer *w, struct pending *q, struct ck_out *o)
{
	int r = 0;

	/* A start only (syncfs waits): what went through the page cache
	 * (buffered writes); direct writes are on their way already. */
	sync_file_range(o->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	if (q->n == PENDING)
		r = pending_close_one(w, q);
	q->o[(q->head + q->n) % PENDING] = o;
	q->n++;
	return r;
}

/* The tensor entry gi belongs to (ck->t is in plan order). */
static const struct ck_tensor *tensor_of(const struct checkpoint *ck, uint64_t gi)
{
	uint32_t lo = 0, hi = ck->nt;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (ck->t[mid].first <= gi)
			lo = mid;
		else
			hi = mid;
	}
	return &ck->t[lo];
}

/*
 * Files open for pages out of the main pass's order (the loop waits for
 * them, or saved them aside), a few at a time: closing one waits for its
 * writes, so a file is kept while such pages keep coming for it. Closed
 * at the end, before the filesystem's sync.
 */
#define SIDE_OUTS 8

struct side_outs {
	struct ck_out *o[SIDE_OUTS];
	unsigned next; /* the one to close for a new file */
};

/* An open file of t: the main pass's, a side one, or a new side one. */
static struct ck_out *side_out(struct ck_writer *w, struct side_outs *so, struct ck_out *cur,
			       const struct ck_tensor *t)
{
	struct ck_out **slot;

	if (cur && t == cur->t)
		return cur;
	for (unsigned k = 0; k < SIDE_OUTS; k++)
		if (so->o[k] && so->o[k]->t == t)
			return so->o[k];
	slot = &so->o[so->next];
	so->next = (so->next + 1) % SIDE_OUTS;
	if (*slot && ck_out_close(w, *slot) < 0) {
		*slot = NULL;
		return NULL;
	}
	*slot = NULL;
	return ck_out_open(w, t, slot) < 0 ? NULL : *slot;
}

/* Every side file closed (a failure is in ck->err). */
static void side_close(struct ck_writer *w, struct side_outs *so)
{
	for (unsigned k = 0; k < SIDE_OUTS; k++) {
		if (so->o[k])
			(void)ck_out_close(w, so->o[k]);
		so->o[k] = NULL;
	}
}

/* The pages the loop waits for (a PIN, a slot, a write-back) before
 * anything else, then those it saved aside (their buffers count against
 * its budget until written): before the main pass reads another page. */
static int serve_loop(struct checkpoint *ck, struct ck_writer *w, struct ck_out *cur, bool *reflinks,
		      struct side_outs *so)
{
	for (;;) {
		bool urgent = true;
		uint64_t gi = pager_snap_urgent(ck->snap);
		const struct ck_tensor *t;
		struct ck_out *o;
		int r;

		if (gi == UINT64_MAX) {
			urgent = false;
			gi = pager_snap_ready(ck->snap);
		}
		if (gi == UINT64_MAX)
			return 0;
		t = tensor_of(ck, gi);
		if (!(o = side_out(w, so, cur, t)))
			return ck->err;
		r = copy_page(ck, w, o, (uint32_t)(gi - t->first), reflinks, urgent);
		if (r < 0)
			return r;
	}
}

static int write_tensor(struct checkpoint *ck, struct ck_writer *w, const struct ck_tensor *t, bool *reflinks,
			struct pending *q, struct side_outs *so)
{
	struct ck_out *o;
	int r = ck_out_open(w, t, &o);

	if (r < 0)
		return r;
	for (uint32_t k = 0; r == 0 && k < t->npages; k++) {
		r = serve_loop(ck, w, o, reflinks, so);
		/* Pairs with checkpoint_session_gone(): no use copying on. */
		if (r == 0 && __atomic_load_n(&ck->aborted, __ATOMIC_SEQ_CST))
			r = wfail(ck, ECANCELED, "the session ended while its pages were being copied");
		/* Swap pages are read in the second pass, once the first
		 * one's refusal said they do not reflink. */
		if (r == 0 && !*reflinks && ck->pages[t->first + k].kind == PAGER_SRC_DISK)
			continue;
		/* Runs once a page has reflinked: where the filesystem
		 * refuses, the first page says so alone. */
		if (r == 0 && *reflinks && ck->copied && ck->pages[t->first + k].kind == PAGER_SRC_DISK) {
			uint32_t n = 0;

			r = reflink_run(ck, w, o, k, reflinks, &n);
			k += n - 1;
		} else if (r == 0) {
			r = copy_page(ck, w, o, k, reflinks, false);
		}
		if (r == 0 && ck->stall_ms)
			pager_snap_nap(ck->snap, ck->stall_ms);
	}
	if (r < 0) {
		ck_out_close(w, o);
		return r;
	}
	return pending_add(w, q, o);
}

/*
 * The second pass: swap pages that did not reflink, read from the swap
 * files and written, the pages the session will use last first (its
 * learned order, as planned: ck_page.next_use). The session reads its
 * state as it trains, and each page it reads before the copy got there
 * is saved aside as the read lands (pager_snap_page_read()) and written
 * from memory: the copy and the trainer meet in the middle instead of
 * both reading everything. Without a learned order, in plan order.
 */
struct by_use {
	uint64_t use, gi;
};

static int later_use_first(const void *a, const void *b)
{
	const struct by_use *x = a, *y = b;

	if (x->use != y->use)
		return x->use < y->use ? 1 : -1;
	return x->gi < y->gi ? -1 : x->gi > y->gi;
}

static int read_swap_pages(struct checkpoint *ck, struct ck_writer *w, bool *reflinks, struct side_outs *so)
{
	struct by_use *order;
	uint64_t n = 0;
	int r = 0;

	for (uint64_t gi = 0; gi < ck->npages; gi++)
		n += ck->pages[gi].kind == PAGER_SRC_DISK;
	if (!n || *reflinks)
		return 0;
	if (!(order = malloc(n * sizeof(*order))))
		return wfail(ck, ENOMEM, "out of memory for the order of %" PRIu64 " swap pages", n);
	n = 0;
	for (uint64_t gi = 0; gi < ck->npages; gi++)
		if (ck->pages[gi].kind == PAGER_SRC_DISK)
			order[n++] = (struct by_use){ .use = ck->pages[gi].next_use, .gi = gi };
	qsort(order, n, sizeof(*order), later_use_first);
	for (uint64_t j = 0; r == 0 && j < n; j++) {
		const struct ck_tensor *t = tensor_of(ck, order[j].gi);
		struct ck_out *o;

		r = serve_loop(ck, w, NULL, reflinks, so);
		if (r == 0 && __atomic_load_n(&ck->aborted, __ATOMIC_SEQ_CST))
			r = wfail(ck, ECANCELED, "the session ended while its pages were being copied");
		if (r == 0 && !(o = side_out(w, so, NULL, t)))
			r = ck->err;
		if (r == 0)
			r = copy_page(ck, w, o, (uint32_t)(order[j].gi - t->first), reflinks, false);
		if (r == 0 && ck->stall_ms)
			pager_snap_nap(ck->snap, ck->stall_ms);
	}
	free(order);
	return r;
}

/*
 * The first swap page before anything else: it reflinks, or the refusal
 * says none will (then it is read and written, and the loop saves swap
 * pages as its reads bring them in from then on: reflink_pages()).
 */
static int first_swap_page(struct checkpoint *ck, struct ck_writer *w, bool *reflinks, struct side_outs *so)
{
	const struct ck_tensor *t;
	struct ck_out *o;

	for (uint64_t gi = 0; gi < ck->npages; gi++) {
		if (ck->pages[gi].kind != PAGER_SRC_DISK)
			continue;
		t = tensor_of(ck, gi);
		if (!(o = side_out(w, so, NULL, t)) || copy_page(ck, w, o, (uint32_t)(gi - t->first), reflinks, false) < 0)
			return ck->err;
		return 0;
	}
	return 0;
}

/* On a threadpool thread: touches only ck (never the session). */
void checkpoint_write(uv_work_t *w)
{
	struct checkpoint *ck = w->data;
	struct pending q = { .n = 0 };
	struct side_outs so = { .next = 0 };
	struct ck_writer *wr = NULL;
	bool reflinks = true; /* until the first refusal */
	char *text = NULL;
	int dir = -1, fd = -1;

	ck_remove_stale(ck);
	if (mkdirat(ck->parent, ck->tmp, 0700) < 0) {
		wfail(ck, errno, "creating %s: %s", ck->tmp, strerror(errno));
		return;
	}
	dir = openat(ck->parent, ck->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0) {
		wfail(ck, errno, "opening %s: %s", ck->tmp, strerror(errno));
		goto out;
	}
	if (geteuid() == 0 && !ck->state && fchown(dir, ck->uid, ck->gid) < 0) {
		wfail(ck, errno, "chown of %s: %s", ck->tmp, strerror(errno));
		goto out;
	}
	if (ck_writer_new(ck, dir, &wr) < 0 || ck_create_files(ck, dir) < 0 || ck_link_swap_files(ck, dir) < 0 ||
	    first_swap_page(ck, wr, &reflinks, &so) < 0)
		goto out;
	for (uint32_t i = 0; i < ck->nt; i++)
		if (write_tensor(ck, wr, &ck->t[i], &reflinks, &q, &so) < 0)
			break;
	if (!ck->err)
		(void)read_swap_pages(ck, wr, &reflinks, &so);
	side_close(wr, &so);
	/* A failure: the writes in flight done before their files close. */
	if (ck->err)
		ck_writer_drain(wr);
	if (pending_drain(wr, &q) < 0 || ck->err)
		goto out;
	ck_writer_free(wr); /* every write done */
	wr = NULL;
	text = ck_manifest_text(ck);
	if (!text) {
		wfail(ck, ENOMEM, "out of memory for the manifest");
		goto out;
	}
	fd = openat(dir, CHECKPOINT_MANIFEST, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || (geteuid() == 0 && !ck->state && fchown(fd, ck->uid, ck->gid) < 0) ||
	    fd_write_all(fd, text, strlen(text)) < 0) {
		wfail(ck, errno ? errno : EIO, "writing %s/%s: %s", ck->path, CHECKPOINT_MANIFEST, strerror(errno));
		goto out;
	}
	/*
	 * One sync of the filesystem makes the data files, the manifest and
	 * the directory's entries durable together, before the rename makes
	 * them visible: a fsync of each forces the journal and flushes the
	 * drive's cache on its own, and under a trainer's I/O each such
	 * flush waits behind the drive's queue (a tenth of a second to a
	 * second on the development machines' virtual disks: seconds for an
	 * optimizer's files). syncfs() reports any write-back error of the
	 * filesystem since the directory was opened.
	 */
	if (syncfs(dir) < 0) {
		wfail(ck, errno, "syncing the filesystem of %s (its data files and manifest): %s", ck->tmp,
		      strerror(errno));
		goto out;
	}
	/* Pairs with checkpoint_session_gone(): a region released (and
	 * punched) under the copy set this before the punch. */
	if (__atomic_load_n(&ck->aborted, __ATOMIC_SEQ_CST)) {
		wfail(ck, ECANCELED, "the session ended while its pages were being copied");
		goto out;
	}
	if (renameat2(ck->parent, ck->tmp, ck->parent, ck->base, RENAME_NOREPLACE) < 0) {
		/* A save at shutdown replaces the last one in one step: the
		 * old directory takes the temporary's name and goes. */
		if (!(errno == EEXIST && ck->state &&
		      renameat2(ck->parent, ck->tmp, ck->parent, ck->base, RENAME_EXCHANGE) == 0)) {
			wfail(ck, errno, "renaming %s to %s: %s", ck->tmp, ck->path, strerror(errno));
			goto out;
		}
		checkpoint_remove_dir(ck->parent, ck->tmp);
	}
	if (fsync(ck->parent) < 0)
		wfail(ck, errno, "fsync of the directory holding %s: %s", ck->path, strerror(errno));
	close(dir);
	dir = -1;
	free(text);
	if (fd >= 0)
		close(fd);
	return;
out:
	ck_writer_free(wr);
	if (fd >= 0)
		close(fd);
	if (dir >= 0)
		close(dir);
	free(text);
	ck_remove_tmp(ck);
}

