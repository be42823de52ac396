/* SPDX-License-Identifier: MIT */
/*
 * checkpoint-private.h: what checkpoint.c (the request, the commit point,
 * the plan) and checkpoint-write.c (the copy on the threadpool) share.
 */
#ifndef SPW_DAEMON_CHECKPOINT_PRIVATE_H
#define SPW_DAEMON_CHECKPOINT_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "pager.h"

struct client;
struct daemon;
struct session;

/* The plan: entry i here is entry i of the snapshot (pager-snap.c). */
struct ck_page {
	uint8_t kind;      /* enum pager_src_kind */
	uint8_t src;       /* DISK: index into checkpoint.srcfd */
	uint32_t slot;
	uint64_t off;
	uint32_t crc;      /* DISK: of the page_size bytes there; then of the bytes written */
	uint64_t next_use; /* DISK: the session's next use of it (struct pager_src) */
	bool kept;         /* DISK: left where it is, in its swap file linked into the directory */
};

struct ck_tensor {
	char *name;
	uint64_t bytes;
	bool swappable;
	uint32_t npages;
	uint64_t first;    /* its first page in checkpoint.pages */
	char file[24];
};

#define MAX_SRC 64

struct checkpoint {
	struct daemon *d;
	struct session *s;
	struct client *c;          /* who asked; NULL once it left */
	uid_t uid;
	gid_t gid;
	char *path, *tmp;          /* the directory as asked for; the temporary's name in the parent */
	const char *base;          /* into path */
	int parent;
	bool running;
	bool state;                /* a save at shutdown (state.c): replaces, keeps the daemon's ownership */
	/* The save of a daemon that is stopping: its swap files are linked
	 * into the directory and its pages on disk stay where they are
	 * (the session is not served again, nothing rewrites them); only
	 * what sits in memory is written. link_as[k]: srcfd[k]'s index among
	 * the directory's links ("s<NN>.swap"), -1 where it could not be
	 * linked (another filesystem) and its pages are copied. */
	bool link;
	int8_t link_as[MAX_SRC];
	unsigned nlinks;
	uint64_t kept;             /* bytes left in linked swap files */
	char link_note[256];       /* why a swap file was not linked, for the log; or empty */
	void (*done)(void *arg, int err);
	void *done_arg;
	void (*also)(void *arg, int err); /* a shutdown counting on this save (checkpoint_also_tell) */
	void *also_arg;
	int aborted;               /* atomic: the session went away while copying */
	uint64_t t_ask, t_start;

	/* What the worker copies: taken on the loop at the commit point. */
	char *session;
	uint64_t step;
	uint64_t opened;           /* the session's opened step: past step for an orphan saved inside updates */
	bool opened_by_write;      /* and spw_optimizer_write opened it (session.h write_step) */
	uint32_t scale_bits, good_steps, page_size, lease_s;
	uint64_t region_bytes, swap_bytes;
	uint64_t total;            /* the tensors' bytes: what bytes reaches at the end */
	cJSON *meta;               /* the asker's "meta" object, kept in the manifest as "client"; or NULL */
	struct ck_tensor *t;
	uint32_t nt;
	struct ck_page *pages;
	uint64_t npages;
	const uint8_t *map;        /* the region, mapped read-only for the worker */
	size_t map_len;
	int srcfd[MAX_SRC];        /* swap files, reopened without O_DIRECT (reflinks, buffered reads) */
	int srcdfd[MAX_SRC];       /* and with O_DIRECT where it opens, else -1 */
	int srcorig[MAX_SRC];
	const char *srcpath[MAX_SRC];
	unsigned nsrc;
	/* Copy-on-write: the pages' states, shared with the session's pager
	 * (the loop) until the end; the copier takes the pages the loop waits
	 * for first, and wakes it through `wake`. */
	struct pager_snap *snap;
	uv_async_t wake;
	bool wake_on;              /* wake initialised: ck is freed in its close callback */
	uint32_t stall_ms;         /* test-only (fault-injection builds): a nap after each page */
	char *faults;              /* test-only: SPILLWAY_CHECKPOINT_FAULTS, the copier's ring's rules */
	bool no_direct;            /* test-only: as if the filesystem refused O_DIRECT */
	uint64_t plan_ns;          /* the plan, on the loop: what the trainer waited for at the commit */
	bool low_priority;         /* checkpoint.priority "low": the copy gives the disk to sessions waiting on it */

	/* The worker's result. */
	int err;
	char msg[1024];
	char stale[512];           /* temporaries of dead daemons it removed, for the log */
	uint64_t bytes, copied;    /* written in all (atomic: status reads it while copying); of which
				    * reflinked from swap files */
	uint64_t direct, buffered; /* and of which written from memory with O_DIRECT, through the page cache */
	uint64_t swap_read;        /* bytes the copy read from swap files itself (the copier's) */
	char note[256];            /* why the data files were written buffered, for the log; or empty */
	uint64_t yields;           /* requests the main pass held back for a session waiting on the disk */
	uint64_t yield_ns;         /* and how long in all */
	uv_work_t work;
	/* At the end, on the loop. */
	uint64_t steps_during;     /* steps the session committed while the copy ran */
	struct pager_snap_stats cow;
};

/* Sets ck->err and ck->msg, the first failure's (later ones are
 * dropped); returns ck->err. The copier's thread only. */
int checkpoint_fail(struct checkpoint *ck, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Progress: the loop reads ck->bytes for the status document. */
static inline void checkpoint_add_done(struct checkpoint *ck, uint64_t n)
{
	__atomic_add_fetch(&ck->bytes, n, __ATOMIC_RELAXED);
}

/*
 * checkpoint-direct.c: the data files and their writes from memory, on
 * the copier's thread. A file is written with O_DIRECT through an
 * io_uring of the copier's own, several pages in flight, where its
 * filesystem takes O_DIRECT; through the page cache otherwise.
 */
struct ck_writer;

/* A tensor's data file, open for writing. */
struct ck_out {
	const struct ck_tensor *t;
	int fd;            /* without O_DIRECT: reflinks, the buffered writes, ftruncate */
	int dfd;           /* with O_DIRECT, or -1 */
	int ring;          /* dfd's index in the writer's ring */
	unsigned inflight; /* its writes in the ring */
};

/* A page buffer (page-aligned, page_size bytes) and its write. */
struct ck_io;

/* The writer of ck's data files in the directory dir (ck->tmp). */
int ck_writer_new(struct checkpoint *ck, int dir, struct ck_writer **ret);
/* Waits for every write in flight, then frees. NULL-safe. */
void ck_writer_free(struct ck_writer *w);

/* t's data file (created already), opened for writing. */
int ck_out_open(struct ck_writer *w, const struct ck_tensor *t, struct ck_out **ret);
/* Its writes completed, cut to its tensor's bytes, closed and freed (the
 * copy syncs the filesystem once, after every file is closed); the first
 * error (of a write too) is returned. */
int ck_out_close(struct ck_writer *w, struct ck_out *o);

/* A free buffer, once a write in flight completed if none is: NULL when
 * the copy failed meanwhile (ck->err). yield: for the main pass, which
 * under checkpoint.priority "low" keeps one request in flight while a
 * session waits on the disk (ck->yields); the pages the loop waits for
 * take what there is. */
struct ck_io *ck_io_get(struct ck_writer *w, bool yield);
uint8_t *ck_io_buf(struct ck_io *io);
/* io back unused. */
void ck_io_put(struct ck_writer *w, struct ck_io *io);
/* Page k (entry gi) of o's tensor, len bytes at from (io's buffer, or the
 * loop's side buffer when saved: pager_snap_copied() once written), to
 * its offset: submitted (O_DIRECT), or written (buffered). io is the
 * writer's again once the write is done. Returns 0 or ck->err. */
int ck_io_write(struct ck_writer *w, struct ck_io *io, struct ck_out *o, uint32_t k, uint64_t gi, const uint8_t *from,
		size_t len, bool saved);
/* Page k (entry gi) of o's tensor, planned on disk: read whole from its
 * swap file through the writer's ring, then (on this thread, from a
 * completion) marked copied, checked (ck_page_verify()) and written as
 * ck_io_write() does. 0, or -EAGAIN where it cannot go that way (no
 * O_DIRECT on either side): the caller reads it itself, io still its. */
int ck_io_read_write(struct ck_writer *w, struct ck_io *io, struct ck_out *o, uint32_t k, uint64_t gi);
/* A swap page read whole into buf must have the CRC-32C the pager wrote
 * it with, or the checkpoint fails naming page, file and offset; then
 * its entry's CRC becomes that of the tensor's len bytes of it. */
int ck_page_verify(struct checkpoint *ck, uint64_t gi, uint32_t k, const struct ck_tensor *t, const uint8_t *buf,
		   size_t len);
/* Every write in flight completed: 0 or ck->err. */
int ck_writer_drain(struct ck_writer *w);

/* checkpoint-dir.c, on the copier's thread. Each tensor's data file,
 * empty, in the temporary dir (0 or the failure, set in ck). */
int ck_create_files(struct checkpoint *ck, int dir);
/* A stopping daemon's save (ck->link): each swap file hard-linked into
 * the directory as s<NN>.swap, ck->link_as set; one that cannot be
 * (another filesystem, say) keeps -1, its pages copied (ck->note says
 * why). 0, or a failure of the directory itself. */
int ck_link_swap_files(struct checkpoint *ck, int dir);
/* The manifest's JSON text (malloc'd), or NULL when out of memory. */
char *ck_manifest_text(struct checkpoint *ck);
/* The temporary directory and the files in it, gone. */
void ck_remove_tmp(struct checkpoint *ck);
/* Temporaries of this name that dead daemons left (killed while
 * copying), gone; their names in ck->stale for the log. */
void ck_remove_stale(struct checkpoint *ck);

/* On a threadpool thread: writes ck's directory from its plan, touching
 * only ck and its snapshot (never the session): each page from where the
 * plan says, or from the side buffer the loop saved it into, the pages
 * the loop waits for first; sets ck->err and ck->msg on failure, with
 * the temporary directory removed. */
void checkpoint_write(uv_work_t *w);

#endif
