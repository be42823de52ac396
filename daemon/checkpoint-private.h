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
	int srcfd[MAX_SRC];        /* swap files, reopened without O_DIRECT */
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
	uint64_t plan_ns;          /* the plan, on the loop: what the trainer waited for at the commit */

	/* The worker's result. */
	int err;
	char msg[1024];
	char stale[512];           /* temporaries of dead daemons it removed, for the log */
	uint64_t bytes, copied;    /* written in all (atomic: status reads it while copying); of which
				    * copied in the kernel */
	uv_work_t work;
	/* At the end, on the loop. */
	uint64_t steps_during;     /* steps the session committed while the copy ran */
	struct pager_snap_stats cow;
};

/* On a threadpool thread: writes ck's directory from its plan, touching
 * only ck and its snapshot (never the session): each page from where the
 * plan says, or from the side buffer the loop saved it into, the pages
 * the loop waits for first; sets ck->err and ck->msg on failure, with
 * the temporary directory removed. */
void checkpoint_write(uv_work_t *w);

#endif
