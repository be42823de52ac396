/* SPDX-License-Identifier: MIT */
/*
 * A checkpoint's data files and the writes of pages from memory (the
 * region's, the loop's side buffers), on the copier's thread.
 *
 * Where the filesystem takes O_DIRECT, a file is written through a second
 * descriptor opened with it, from page-aligned buffers, up to
 * INFLIGHT_BYTES (at least two pages) in flight, through an io_uring of
 * the copier's own. Not the daemon's ring: that one is the loop's alone
 * (its submission queue, its per-session queues and its completions are
 * touched without locks, and reaped from the loop's eventfd), so a
 * submission from this thread would race the loop's; handing each write
 * to the loop instead would make the copy wait on the loop and the loop
 * do the copier's bookkeeping. A ring of a few entries per checkpoint
 * costs one io_uring_setup.
 *
 * Where it does not (the open fails with EINVAL, or tmpfs and ramfs,
 * whose O_DIRECT is a copy into their page cache all the same), the pages
 * are written through the page cache with pwrite, one at a time, as
 * before; ck->note says why for the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "checkpoint-private.h"
#include "uring.h"
#include "util/clock.h"
#include "util/fdio.h"

/* What O_DIRECT wants aligned (offset, length, memory): 4 KiB serves
 * every logical block size in use; a device that wants more refuses a
 * write with EINVAL, and that page goes through the page cache. */
#define DIO_ALIGN 4096u
#define INFLIGHT_BYTES (16u << 20)
#define INFLIGHT_MAX 16u
/* Files registered at once: the ones waiting to be closed
 * (checkpoint-write.c's PENDING, 32), the main pass's, those open for
 * pages out of its order (SIDE_OUTS, 8), and the swap files read from. */
#define RING_FILES (48u + MAX_SRC)

struct ck_io {
	struct uring_req req;
	struct ck_writer *w;
	struct ck_out *o;
	uint8_t *buf;
	uint64_t gi;
	uint32_t k;
	uint32_t len;  /* the tensor's bytes in the write (the last page's is padded) */
	bool saved;    /* from the loop's side buffer: handed back once written */
	struct ck_io *next;
};

struct ck_writer {
	struct checkpoint *ck;
	int dir;
	bool direct;        /* O_DIRECT for the files opened next */
	struct uring *ring; /* NULL: every file buffered */
	uint8_t *pool;
	int pool_reg;
	struct ck_io *io, *free;
	unsigned nio;
	unsigned busy;          /* ios taken and not yet back */
	int src_ring[MAX_SRC];  /* ck->srcdfd[k]'s index in the ring, or -1 */
};

/* Fault injection: the copier's writes counted over every checkpoint of
 * the daemon, so that a rule can pick one of the second checkpoint's. */
static uint64_t fault_seen[2];

static void buffered_from_now(struct ck_writer *w, const char *why)
{
	if (!w->direct)
		return;
	w->direct = false;
	snprintf(w->ck->note, sizeof(w->ck->note), "%s", why);
}

int ck_writer_new(struct checkpoint *ck, int dir, struct ck_writer **ret)
{
	struct ck_writer *w = calloc(1, sizeof(*w));
	unsigned n = ck->page_size ? INFLIGHT_BYTES / ck->page_size : 0;
	struct statfs sf;
	int r;

	if (!w)
		return checkpoint_fail(ck, ENOMEM, "out of memory for the copier");
	w->ck = ck;
	w->dir = dir;
	w->pool_reg = -1;
	w->direct = true;
	if (ck->no_direct) {
		buffered_from_now(w, "the filesystem refused O_DIRECT (SPILLWAY_CHECKPOINT_NO_DIRECT, a test's)");
	} else if (fstatfs(dir, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC)) {
		buffered_from_now(w, "the directory is on tmpfs, whose O_DIRECT goes through its page cache anyway");
	}
	n = n < 2 ? 2 : n > INFLIGHT_MAX ? INFLIGHT_MAX : n;
	if (w->direct) {
		r = uring_new(n, false, RING_FILES, 1, &w->ring);
		if (r < 0) {
			w->ring = NULL;
			buffered_from_now(w, "the copier could not set up an io_uring");
		}
	}
	for (unsigned k = 0; k < MAX_SRC; k++)
		w->src_ring[k] = w->ring && k < ck->nsrc && ck->srcdfd[k] >= 0 ? uring_file_register(w->ring, ck->srcdfd[k])
									   : -1;
	if (w->ring) {
		r = uring_faults(w->ring, ck->faults, fault_seen);
		if (r < 0) {
			ck_writer_free(w);
			return checkpoint_fail(ck, r, "SPILLWAY_CHECKPOINT_FAULTS \"%s\": not a fault rule list",
					       ck->faults);
		}
	} else {
		n = 1; /* one page at a time, as pwrite goes */
	}
	w->pool = aligned_alloc(DIO_ALIGN, (size_t)n * ck->page_size);
	w->io = calloc(n, sizeof(*w->io));
	if (!w->pool || !w->io) {
		ck_writer_free(w);
		return checkpoint_fail(ck, ENOMEM, "out of memory for %u page buffers", n);
	}
	w->nio = n;
	/* Fixed buffers spare a page pinning per write; optional. */
	if (w->ring)
		w->pool_reg = uring_buffer_register(w->ring, w->pool, (size_t)n * ck->page_size);
	for (unsigned i = 0; i < n; i++) {
		w->io[i].w = w;
		w->io[i].buf = w->pool + (size_t)i * ck->page_size;
		w->io[i].next = i + 1 < n ? &w->io[i + 1] : NULL;
	}
	w->free = w->io;
	*ret = w;
	return 0;
}

/* At least one completion (or a second gone by). */
static int reap_wait(struct ck_writer *w)
{
	int r = uring_wait(w->ring, 1000);

	if (r < 0 && r != -EINTR)
		return checkpoint_fail(w->ck, r, "waiting for the checkpoint's writes: %s", strerror(-r));
	return 0;
}

int ck_writer_drain(struct ck_writer *w)
{
	while (w->ring && uring_busy(w->ring))
		if (reap_wait(w) < 0)
			break;
	return w->ck->err;
}

void ck_writer_free(struct ck_writer *w)
{
	if (!w)
		return;
	if (w->ring) {
		ck_writer_drain(w);
		if (w->pool_reg >= 0)
			uring_buffer_unregister(w->ring, w->pool_reg);
		/* Waits (bounded) for what is still in the kernel. */
		uring_free(w->ring);
	}
	free(w->pool);
	free(w->io);
	free(w);
}

int ck_out_open(struct ck_writer *w, const struct ck_tensor *t, struct ck_out **ret)
{
	struct checkpoint *ck = w->ck;
	struct ck_out *o = calloc(1, sizeof(*o));
	int r;

	if (!o)
		return checkpoint_fail(ck, ENOMEM, "out of memory");
	o->t = t;
	o->dfd = -1;
	o->ring = -1;
	o->fd = openat(w->dir, t->file, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (o->fd < 0) {
		r = checkpoint_fail(ck, errno, "opening %s/%s: %s", ck->tmp, t->file, strerror(errno));
		free(o);
		return r;
	}
	if (w->direct) {
		o->dfd = openat(w->dir, t->file, O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
		if (o->dfd < 0 && errno == EINVAL) {
			buffered_from_now(w, "the filesystem refused O_DIRECT (EINVAL at open)");
		} else if (o->dfd < 0) {
			r = checkpoint_fail(ck, errno, "opening %s/%s: %s", ck->tmp, t->file, strerror(errno));
			close(o->fd);
			free(o);
			return r;
		} else if ((o->ring = uring_file_register(w->ring, o->dfd)) < 0) {
			close(o->dfd); /* cannot happen (RING_FILES); this file then goes buffered */
			o->dfd = -1;
		}
	}
	/* The blocks allocated up front (unwritten): the direct writes then
	 * overwrite, which ext4 and XFS do several at once, where writes
	 * past the end of the file go one at a time. ck_out_close() cuts
	 * the file to its bytes. */
	if (o->dfd >= 0)
		(void)fallocate(o->fd, 0, 0, (off_t)((t->bytes + DIO_ALIGN - 1) & ~(uint64_t)(DIO_ALIGN - 1)));
	*ret = o;
	return 0;
}

int ck_out_close(struct ck_writer *w, struct ck_out *o)
{
	struct checkpoint *ck = w->ck;
	const struct ck_tensor *t = o->t;

	while (o->inflight)
		if (reap_wait(w) < 0)
			return ck->err; /* o stays: a write still names it (never seen: poll on an eventfd) */
	if (o->dfd >= 0) {
		/* The last page went out padded to DIO_ALIGN, and the blocks
		 * were allocated rounded up: the file is cut to its bytes. */
		if (!ck->err && ftruncate(o->fd, (off_t)t->bytes) < 0)
			checkpoint_fail(ck, errno, "cutting %s/%s to %llu bytes: %s", ck->path, t->file,
					(unsigned long long)t->bytes, strerror(errno));
		uring_file_unregister(w->ring, o->ring);
		close(o->dfd);
	}
	close(o->fd);
	free(o);
	return ck->err;
}

/*
 * Under checkpoint.priority "low", the main pass keeps a single request in
 * flight while any session waits on the disk (a PIN's read, a FLUSH, a
 * slot's write-back in the daemon's ring): with sixteen of the copy's
 * requests ahead of it in the drive's queue, each such wait would grow by
 * their time. The copy still moves a page at a time, so it ends; when no
 * one waits it takes the whole window again, and for good once the
 * session has waited for the copy itself (pager_snap_disk_waited()). The
 * I/O scheduler cannot do this for us: with "none", or a device queue
 * deeper than both rings together, priorities never meet.
 */
static void yield_to_waiters(struct ck_writer *w)
{
	struct checkpoint *ck = w->ck;
	uint64_t t0 = 0;

	while (w->busy && !ck->err && pager_snap_disk_waited(ck->snap)) {
		if (!t0) {
			t0 = now_ns();
			ck->yields++;
		}
		if (reap_wait(w) < 0)
			break;
	}
	if (t0)
		ck->yield_ns += now_ns() - t0;
}

struct ck_io *ck_io_get(struct ck_writer *w, bool yield)
{
	struct ck_io *io;

	/* Completions first: the progress, side buffers back to the loop. */
	if (w->ring && uring_busy(w->ring))
		uring_reap(w->ring);
	if (yield && w->ring && w->ck->low_priority)
		yield_to_waiters(w);
	while (!w->free && !w->ck->err)
		if (reap_wait(w) < 0)
			return NULL;
	if (w->ck->err)
		return NULL;
	io = w->free;
	w->free = io->next;
	w->busy++;
	return io;
}

uint8_t *ck_io_buf(struct ck_io *io)
{
	return io->buf;
}

void ck_io_put(struct ck_writer *w, struct ck_io *io)
{
	io->next = w->free;
	w->free = io;
	w->busy--;
}

/* A write done (res 0) or failed: counted, the side buffer back, io free. */
static void io_done(struct ck_writer *w, struct ck_io *io, int res, bool direct)
{
	struct checkpoint *ck = w->ck;
	const struct ck_tensor *t = io->o->t;

	if (res < 0) {
		checkpoint_fail(ck, res, "writing page %u of tensor %s to %s/%s: %s", io->k, t->name, ck->path,
				t->file, strerror(-res));
	} else {
		if (direct)
			ck->direct += io->len;
		else
			ck->buffered += io->len;
		checkpoint_add_done(ck, io->len);
		if (io->saved)
			pager_snap_copied(ck->snap, io->gi);
	}
	ck_io_put(w, io);
}

/* From uring_reap() on this thread. */
static void written(struct uring_req *req, int res)
{
	struct ck_io *io = (struct ck_io *)((uint8_t *)req - offsetof(struct ck_io, req));
	struct ck_writer *w = io->w;
	bool direct = true;

	io->o->inflight--;
	if (res == -EINVAL) {
		/* O_DIRECT refused at the write (a device that wants more
		 * than DIO_ALIGN): this page through the page cache, and the
		 * files opened after it. */
		buffered_from_now(w, "the filesystem refused an O_DIRECT write (EINVAL)");
		res = fd_pwrite_all(io->o->fd, req->addr, io->len, req->off);
		direct = false;
	}
	io_done(w, io, res, direct);
}

/* From uring_reap() on this thread: a swap page in io's buffer, to check
 * against the pager's CRC of it and write. */
static void read_in(struct uring_req *req, int res)
{
	struct ck_io *io = (struct ck_io *)((uint8_t *)req - offsetof(struct ck_io, req));
	struct ck_writer *w = io->w;
	struct checkpoint *ck = w->ck;
	const struct ck_page *pg = &ck->pages[io->gi];
	struct ck_out *o = io->o;

	o->inflight--;
	/* Read: the loop may write over that swap page now. */
	pager_snap_copied(ck->snap, io->gi);
	if (res == 0) /* the whole page (uring.c finishes short transfers) */
		ck->swap_read += ck->page_size;
	if (res < 0) {
		checkpoint_fail(ck, res, "reading page %u of tensor %s from swap file %s: %s", io->k, o->t->name,
				ck->srcpath[pg->src], strerror(-res));
		ck_io_put(w, io);
		return;
	}
	if (ck_page_verify(ck, io->gi, io->k, o->t, io->buf, io->len) < 0) {
		ck_io_put(w, io);
		return;
	}
	ck_io_write(w, io, o, io->k, io->gi, io->buf, io->len, false);
}

int ck_io_read_write(struct ck_writer *w, struct ck_io *io, struct ck_out *o, uint32_t k, uint64_t gi)
{
	struct checkpoint *ck = w->ck;
	const struct ck_page *pg = &ck->pages[gi];
	uint64_t at = (uint64_t)k * ck->page_size;

	if (o->dfd < 0 || pg->src >= MAX_SRC || w->src_ring[pg->src] < 0)
		return -EAGAIN;
	io->o = o;
	io->gi = gi;
	io->k = k;
	/* The tensor's bytes of the page (its last one may be short); the
	 * read is of the whole swap page. */
	io->len = (uint32_t)(o->t->bytes - at < ck->page_size ? o->t->bytes - at : ck->page_size);
	io->saved = false;
	io->req = (struct uring_req){ .op = URING_READ, .file = w->src_ring[pg->src], .addr = io->buf,
				      .len = ck->page_size, .off = pg->off, .complete = read_in };
	o->inflight++;
	uring_submit(w->ring, &io->req);
	return 0;
}

int ck_io_write(struct ck_writer *w, struct ck_io *io, struct ck_out *o, uint32_t k, uint64_t gi, const uint8_t *from,
		size_t len, bool saved)
{
	struct checkpoint *ck = w->ck;
	uint64_t at = (uint64_t)k * ck->page_size;
	size_t n = (len + DIO_ALIGN - 1) & ~(size_t)(DIO_ALIGN - 1);

	io->o = o;
	io->gi = gi;
	io->k = k;
	io->len = (uint32_t)len;
	io->saved = saved;
	if (o->dfd < 0) {
		io_done(w, io, fd_pwrite_all(o->fd, from, len, at), false);
		return ck->err;
	}
	if (n != len) {
		/* The tensor's tail: O_DIRECT writes whole blocks, so it goes
		 * out padded with zeros (ck_out_close() cuts the file), from
		 * io's buffer, never the loop's. */
		if (from != io->buf) {
			memcpy(io->buf, from, len);
			if (saved)
				pager_snap_copied(ck->snap, gi);
			io->saved = false;
		}
		memset(io->buf + len, 0, n - len);
		from = io->buf;
	}
	io->req = (struct uring_req){ .op = URING_WRITE, .file = o->ring, .addr = (uint8_t *)from, .len = (uint32_t)n,
				      .off = at, .complete = written };
	o->inflight++;
	uring_submit(w->ring, &io->req);
	return 0;
}
