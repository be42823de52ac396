/* SPDX-License-Identifier: MIT */
/*
 * session.h: one attached trainer: its region, page table (the pager),
 * tensor names and rings (session.c; the rings are consumed by
 * dataplane.c). A session is listed in daemon.sessions and owned by at most
 * one control connection.
 */
#ifndef SPW_DAEMON_SESSION_H
#define SPW_DAEMON_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "list.h"
#include "region.h"
#include "spw-proto.h"
#include "spw-ring.h"

struct daemon;
struct client;

/* Every tensor's pages, resident and swappable, live in the session's pager
 * (pager.h): one page table and one slot allocator per session. The
 * session keeps only the tensor names, for the duplicate-name check. */
struct pager;

struct ring_stats {
	uint64_t ops, errors;
	uint64_t throttled;     /* times the session used up its limits.ring_ops_per_s */
	uint64_t by_op[SPW_OP__COUNT];
};

struct session {
	struct daemon *d;
	struct client *owner;
	struct list link;       /* daemon.sessions */
	struct list poll_link;  /* daemon.polling while the daemon polls its SQ */
	char *name;
	uid_t uid;
	pid_t pid;

	uint64_t bytes;          /* counted in the pool from the moment of attach */
	bool attaching;          /* the region is being built on the threadpool */
	bool locked_counted;     /* counted in daemon.locked_bytes */
	uv_work_t work;
	struct region_opts ropts;
	int work_result;
	char work_err[768];

	struct region *region;   /* NULL while attaching */
	uint32_t page_size;
	uint32_t nslots;
	uint64_t swap_bytes;     /* swap reserved at attach (0: resident tensors only) */
	struct pager *pager;     /* the page table; NULL until the region is mapped */
	uint32_t pending;        /* PIN/FLUSH accepted by the pager, CQE not yet posted */
	uint64_t attached_ns;    /* for the tier's average MB/s */
	uint64_t errors_logged;  /* the pager's error count last logged */

	/* A persistent session outlives a client that dies without DETACH:
	 * it is orphaned (owner NULL, rings idle) for lease_s, and an attach
	 * of its name by its uid takes it over (persist.c). */
	bool persistent;
	uint32_t lease_s;
	uint64_t orphaned_ns;   /* uv_hrtime() when orphaned; 0 while a client holds it */
	uv_timer_t *lease;      /* while orphaned; its own allocation, freed in the close cb */
	bool settling;          /* orphaned with PIN/FLUSH pending: pins dropped when the last completes */
	uint32_t reattaches;
	/* SPW_OP_MARK: the last step opened and the last committed. The
	 * state is one whole step's while opened_step <= committed_step. */
	uint64_t opened_step, committed_step;
	/* The open step when spw_optimizer_write opened it and no update of
	 * it has begun (SPW_MARK_BY_WRITE), else 0: its client dying then
	 * leaves the state partly overwritten, which nothing can resume. */
	uint64_t write_step;
	/* Attached anew in place of an orphan released for its write_step
	 * (control.c): that step, for the attach reply; else 0. */
	uint64_t released_write_step;
	uint32_t scale_bits, good_steps; /* from the last COMMIT */
	uint64_t flushed_step;  /* persist.flush_interval_s: the step its last periodic flush was asked at */
	uint64_t flushed_opened; /* and the step open then: an orphan left inside a later one is flushed again */
	/* Back from a crash with pages whose CRC failed (restore.c): never
	 * handed out (a PIN of one fails -EBADMSG), listed in the status. */
	struct bad_page { uint32_t tensor, page; } *bad;
	uint32_t nbad;
	/* A checkpoint waits for the next COMMIT or copies the state
	 * (checkpoint.c) while the session trains on; sq_paused: a PIN waits
	 * for its copier, and the SQ is not read past it meanwhile. */
	struct checkpoint *ckpt;
	bool sq_paused;
	/* Being built from a checkpoint (restore.c): no client, no lease yet. */
	struct restore *restore;
	uint64_t last_commit_ns, step_ns; /* step_ns: moving average of the time between COMMITs */
	uint64_t skipped_steps;           /* COMMITs of steps skipped for inf/nan */
	float clip_coef;                  /* the last MARK STATS': in [0, 1], or -1 (none yet) */
	uint32_t adam_us;                 /* its optimizer kernels' CPU time */

	char **tnames;          /* by tensor id (the pager's); NULL: free id */
	uint8_t *tclaimed;      /* by tensor id: adopted since the last takeover */
	uint8_t *tscratch;      /* by tensor id: its bytes matter only inside a step
				 * (a user's checkpoint, at a commit point, leaves it out) */
	uint32_t *tname_next;   /* by tensor id: the next id in its hash chain */
	uint32_t ntnames_cap;
	uint32_t *name_heads;   /* hash of tnames: the first id per bucket, UINT32_MAX none */
	uint32_t name_buckets;  /* a power of two */
	uint32_t ntensors;      /* registered (dying ones included) */
	uint32_t max_tensors;
	uint32_t unregistering; /* the tensor id whose UNREGISTER reply waits for its I/O, or UINT32_MAX */

	/* Rings: the memfd is shared; everything below it is the daemon's own
	 * and the only copy it trusts. */
	int rings_fd;
	int rings_ro_fd;        /* the same memfd opened read-only, for io_log (-1: not yet) */
	uint8_t *rings;
	struct spw_ring_layout layout;
	struct spw_ring_hdr *sqh, *cqh;
	struct spw_sqe *sqes;
	struct spw_cqe *cqes;
	uint32_t sq_head;       /* ours: next SQ entry to consume */
	uint32_t cq_tail;       /* ours: next CQ entry to fill */
	uint32_t cq_head_seen;  /* the client's CQ head as last read */
	uint64_t io_tail;       /* records written to the I/O log (ours; the shared copy follows) */

	int sq_evt, cq_evt;
	uv_poll_t *sq_poll;     /* its own allocation: freed in the close callback */
	bool poll;              /* SPW_FEAT_RING_POLL granted: poll after a doorbell */
	bool polling;
	bool backlog;           /* asleep with entries left because the CQ was full */
	uint64_t last_active_ns;
	uint32_t max_garbage;
	uint32_t garbage;       /* invalid entries since the last valid one */
	/* limits.ring_ops_per_s: a token bucket of ring entries, refilled
	 * with time, at most 10 ms worth. */
	uint64_t tokens, tokens_ns;
	bool throttled;         /* the last drain stopped at the budget */
	struct ring_stats stats;
};

/* The pool's admission policy: whether a region of bytes fits under
 * pool.session_max_bytes and what pool.max_bytes has left. Returns 0, or
 * -EDQUOT / -ENOSPC with a sentence in err naming the setting to raise. */
int session_admit(struct daemon *d, const char *name, uint64_t bytes, char *err, size_t errlen);
/* Starts attaching: the session is listed and its bytes counted in the pool
 * at once (so concurrent attaches see them); the region is built on the
 * libuv threadpool, since locking and prefaulting gigabytes takes seconds
 * the loop must not stall for. control_attach_done() gets the result.
 * Returns 0, or a negative errno with a sentence in err. */
int session_attach(struct daemon *d, struct client *owner, const char *name, uint64_t region_bytes,
		   uint32_t page_size, uint64_t swap_bytes, char *err, size_t errlen);
/* Ends the session without waiting: rings, eventfds and names go now, the
 * poll handle's memory in its close cb. The pager goes now too unless it
 * has I/O in flight; then it is an orphan that keeps the swap files and the
 * region (and their place in the pool figures) until its last request
 * completes (pager_close()). Never called on a session that is still
 * attaching. */
struct session *session_free(struct session *s);
/* What uid's live sessions take now: their number, region and swap bytes
 * (for the limits.*_per_uid checks at attach). */
void session_uid_use(struct daemon *d, uid_t uid, unsigned *sessions, uint64_t *region_bytes, uint64_t *swap_bytes);
/* Sessions that ended with I/O in flight and still hold their region. */
unsigned session_draining(void);
struct session *session_find(struct daemon *d, const char *name);
/* The id of the session's tensor of that name, or UINT32_MAX. */
uint32_t session_tensor_find(const struct session *s, const char *name);
/* Gives an orphaned session to a new client: fresh rings and eventfds
 * (the dead client's are dropped), the doorbell watched again. Returns 0
 * or -errno with a sentence in err. */
int session_takeover(struct session *s, struct client *owner, char *err, size_t errlen);

/* scratch: the tensor's bytes matter only inside a step (the overlapped
 * optimizer's undo copy of p): a user's checkpoint leaves it out. */
int session_register(struct session *s, const char *name, uint64_t bytes, bool swappable, bool scratch,
		     uint32_t *id, uint32_t *npages, char *err, size_t errlen);
/* Returns 0 (gone), -errno with a sentence in err, or 1 when the tensor
 * is dying: control_unregister_done() follows once its I/O drained. */
int session_unregister(struct session *s, uint32_t id, char *err, size_t errlen);
/* control.c: the UNREGISTER reply for a tensor that was dying, now gone. */
void control_unregister_done(struct session *s, uint32_t id);
/* pager_config.tensor_removed for the session's pager. */
void session_tensor_removed(void *ctx, uint32_t id);
/* The tensor's name, or NULL for an unknown id. */
const char *session_tensor_name(const struct session *s, uint32_t id);

/* Bytes of s's region that hold memory now (its memfd's blocks: less than
 * the region by the tails pager.c gave back); -1 while there is none. */
int64_t session_region_held(const struct session *s);
/* Whether page of tensor failed its CRC when s came back from a crash
 * (s->bad): such a page is never handed out. */
bool session_page_bad(const struct session *s, uint32_t tensor, uint32_t page);

#endif
