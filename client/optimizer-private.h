/* SPDX-License-Identifier: MIT */
/*
 * client/optimizer-private.h: what the files of the offload pipeline behind
 * spw_optimizer_* share: its structs and the calls they make to each other.
 * Nothing outside these files includes it.
 *
 * The files, one job each:
 *
 *   optimizer.c    create and free, errors, wakeups, the trainer's streams,
 *                  sync, stats
 *   engine.c       the engine thread: ring ownership, the admission window,
 *                  pins and unpins, completions, read-ahead hints, parking
 *   job-kernels.c  the kernels a job runs, tile by tile on the pool
 *   journal.c      a persistent session's tile journal: kills inside a
 *                  step's updates made resumable
 *   tensors.c      tensor registration and initial weights
 *   step.c         the step: begin / grad_ready / end
 *   step-policy.c  its pure numerics: the norm, the clip coefficient, the
 *                  dynamic loss scale
 *   params.c       wait_params, parameter fetch and release, fetch order
 *   state-io.c     spw_optimizer_read / spw_optimizer_write
 *   param-view.c   spw_optimizer_param_view: the master pages as the
 *                  trainer's parameters (host device, resident tier)
 *   trace.c        the timeline (SPILLWAY_TRACE), spw_trace_flush
 *
 * Threads and who owns what:
 *
 *   trainer   begin / grad_ready / end / wait_params. grad_ready queues the
 *             device->host copy of a gradient into a staging page on the
 *             d2h stream, followed by a host function.
 *   d2h, h2d  the device backend's copy streams. Their host functions only
 *             move a job to a list and ring the engine's eventfd.
 *   engine    the one thread that touches the session's ring: it pins the
 *             pages a job needs, submits its kernels to the pool once the
 *             pins and the gradient are there, queues the copy back to the
 *             device, and unpins. It sleeps in spw__wait_ring() on the
 *             completion doorbell, its own eventfd and the control socket
 *             at once, so a daemon that dies is noticed at once.
 *   pool      runs each job's kernels tile by tile; the last tile moves the
 *             job to the engine's list.
 *
 * Lock: one mutex (o->lock) guards the lists, the free staging buffers,
 * every chunk's busy/arrivals fields, the counters the trainer waits on and
 * the fatal error; one condition variable (o->cond) announces any change
 * to them. Nothing is called out of the library while it is held except
 * eventfd writes. Calls that need the ring outside the engine (add, read,
 * free) ask the engine to park (spw__opt_ring_acquire) so the ring keeps
 * exactly one user at a time.
 *
 * Windowing: at most `window` jobs (one chunk each) hold pins at once, and
 * there are `window` gradient staging pages and `window` copy-out pages, so
 * the pinned memory is (pages per chunk + 2) * window pages whatever the
 * model's size.
 */
#ifndef SPW_CLIENT_OPTIMIZER_PRIVATE_H
#define SPW_CLIENT_OPTIMIZER_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "client-private.h"
#include "device.h"
#include "kernels.h"
#include "q8.h"
#include "pool.h"
#include "step-policy.h"
#include "trace.h"
#include "util/clock.h"

_Static_assert((int)SPW_TYPE_F32 == (int)SPW_DTYPE_F32 && (int)SPW_TYPE_BF16 == (int)SPW_DTYPE_BF16 &&
	       (int)SPW_TYPE_F16 == (int)SPW_DTYPE_F16, "public and kernel element types agree");

#define TILE SPW_POOL_ADAMW_TILE

/* Roles a job pins: a tensor each up to R__T; the block scales of int8
 * moments (R_MS, R_VS) lie in the optimizer's scale pages (role_at).
 * R_U: the undo copy of the master weights an overlapped optimizer on a
 * persistent session keeps of the tiles it updated in the open step
 * (journal.c): a trainer killed inside the step's updates redoes it from
 * the weights before it. */
enum role { R_P, R_M, R_V, R_G, R_U, R__T, R_MS = R__T, R_VS, R__N };
_Static_assert((int)SPW_STATE_PARAM == R_P && (int)SPW_STATE_EXP_AVG == R_M && (int)SPW_STATE_EXP_AVG_SQ == R_V,
	       "spw_optimizer_read/write's states index the roles");

enum job_kind {
	JOB_ADAM,       /* gradient in staging -> Adam (overlapped, no accumulation) */
	JOB_GRAD,       /* gradient in staging -> fp32 store (cast or add), maybe its norm;
			 * by reference: only the norm, of the trainer's gradient, no pins */
	JOB_GRAD_ADAM,  /* the above, then Adam from the store (overlapped, last micro-batch) */
	JOB_ADAM_STORE, /* Adam from the store (exact mode, after the norm), or by
			 * reference from the trainer's gradient */
	JOB_FETCH,      /* master weights -> cast into a copy page -> the trainer's buffer */
};

/* PREFETCH hints a fetch carries for the tensors predicted to follow it. */
#define FETCH_HINTS 16u

struct chunk;

/*
 * What a job holds from its admission to its end: the pinned pages, its
 * kernels and the pool call that runs them. The window bounds jobs in
 * flight, so the optimizer keeps a window of these (o->runs) and a job
 * takes one at admit; a queued job is a chunk's small plan alone. Every
 * chunk of a large model can be queued at once (exact mode queues them
 * all at the end of a step), so this part is kept out of the chunk.
 */
struct job_run {
	float *ptr[R__N];
	struct spw__kernel_op ops[3];   /* run in order on each tile (job-kernels.c) */
	unsigned nops;
	struct spw__pool_call call;
	atomic_size_t tiles_left;
	struct job_run *next_free;
};

/* 16-aligned: a completion's user data is the job's address with the
 * role (pins 0..R__N-1, unpins R__N..2 R__N-1) in its low four bits. */
struct job {
	_Alignas(16) spw_optimizer *o;
	struct chunk *ch;
	enum job_kind kind;
	bool first, want_norm, copy;
	enum spw_dtype gdt;
	int gbuf, cbuf;
	struct spw_adamw_consts consts;
	unsigned roles;                 /* bit per enum role: pages to pin */
	unsigned npins, pins_back, unpins_left;
	const void *sgrad;              /* the staging page holding the gradient, or the
					 * trainer's gradient (by reference) */
	/* By reference on a device: the gradient to copy into a staging
	 * page (rbuf) before the update runs; pending until it is there
	 * (engine). */
	const void *refetch_src;
	int rbuf;
	bool refetch_pending;
	void *scopy;                    /* the staging page for the copy-out */
	bool h2d_pending;
	enum spw_dtype cdt;             /* type of the copy-out */
	void *dst;                      /* where the copy-out goes on the device */
	bool wait_free;                 /* fetch: the copy waits for the tensor's free_ev */
	struct job_run *run;            /* from admit to the job's end (engine) */
	uint64_t t_pin;
	uint64_t t_d2h, t_kern, t_h2d;     /* span starts, when tracing (trace.h) */
	uint64_t step;                  /* the step whose update (or gradient) this is */
	struct job *next;
	/* Pins and unpins carry the job's address and a role code (< 2 *
	 * R__N) in its low bits. */
} __attribute__((aligned(16)));

struct tensor;
struct spw__view;

struct chunk {
	struct tensor *t;
	uint32_t index;         /* within the tensor */
	uint32_t global;        /* within the optimizer */
	uint64_t off, n;        /* elements */
	uint32_t arrivals;      /* gradients this step (lock) */
	bool busy;              /* job queued or in flight (lock) */
	bool zeroed;            /* moments initialised (engine, between jobs) */
	bool ordered;           /* in this step's arrival order (lock) */
	uint64_t hinted_step;   /* engine */
	/* The gradient store's page was consumed by Adam and its next use
	 * rewrites it (a first arrival): nothing there to read ahead (engine). */
	bool g_spent;
	uint64_t g_step;        /* the step its last first arrival was stored in, 0: none (engine) */
	/* int8 moments: the scale page (index in o->q8_ids) and slot there
	 * holding this chunk's blocks' scales (role_at). */
	uint32_t q8_page, q8_slot;
	double sumsq;           /* this step's gradient square sum (written by the engine) */
	/* Gradients by reference: this step's gradient of the chunk in the
	 * trainer's memory (lock), NULL when none; its type is job.gdt. */
	const void *gref;
	double *partial;        /* per tile */
	struct job job;         /* one at a time per chunk */
};
/* Every chunk of the model has one (4958 for a 162M-parameter GPT at 128
 * KiB pages): what a job needs only in flight lives in struct job_run. */
_Static_assert(sizeof(struct chunk) <= 320, "struct chunk: keep in-flight state in struct job_run");

struct tensor {
	char *name;
	uint32_t group;
	uint64_t count;
	void *dev;              /* NULL: offloaded or viewed, no copy-out after Adam */
	/* The trainer's parameters are the master pages, mapped there
	 * (spw_optimizer_param_view; param-view.c), or NULL. */
	struct spw__view *view;
	enum spw_dtype ptype;
	uint32_t id[R__T];
	bool has_g;
	bool has_u;             /* an undo copy of p (R_U, journal.c) */
	bool frozen;            /* master weights only, never updated */
	/* No gradient this step (spw_optimizer_grad_none; trainer): skipped
	 * at end, as torch.optim skips a parameter whose .grad is None. */
	bool none;
	/* Steps it sat out: its bias correction uses step - lag, as torch
	 * counts steps per parameter (trainer). */
	uint64_t lag;
	uint32_t nchunks;
	struct chunk *chunks;
	uint32_t pending;       /* jobs not done (lock) */
	uint32_t unqueued;      /* jobs whose device copy is not yet on the h2d stream (lock) */
	uint32_t fetch_open;    /* fetch jobs not done (lock) */
	bool fetched;           /* fetched and not released (trainer) */
	/* PREFETCHes the admit of a fetch's first chunk sends (params.c
	 * plans them while that chunk is idle, engine.c sends them). */
	uint32_t nhints;
	uint32_t hint_id[FETCH_HINTS], hint_page[FETCH_HINTS];
	/* Recorded on h2d after each copy of this tensor: the stream a
	 * trainer passes to wait_params waits on it. */
	struct spw__event *ev;
	/* Recorded on the trainer's stream by a fetch: the copy into its
	 * buffer waits until the trainer's earlier work there is done. */
	struct spw__event *free_ev;
};

struct spw_optimizer {
	spw_client *c;
	struct spw__device *dev;
	struct spw__stream *d2h, *h2d;
	struct spw__pool *pool;
	const struct spw_kernels *k;

	enum spw_optimizer_mode mode;
	enum spw_tensor_kind tier;
	enum spw_state_dtype state_dtype;
	struct spw_param_group *groups;
	uint32_t ngroups, accum, window;
	/* SPW_GRAD_BY_REFERENCE: exact mode reads each gradient where the
	 * trainer keeps it (chunk.gref); no store, no staging page for it.
	 * grad_refetch: on a device whose memory the CPU does not read, a
	 * gradient is copied to a staging page for its norm and again, at
	 * the update, to another (rfree). */
	bool grad_ref, grad_refetch;
	bool grad16;            /* SPW_GRAD_STORE_BF16: the gradient store holds bf16 */
	bool master16;          /* SPW_MASTER_BF16: p (and its undo copy) hold bf16 */
	float clip_coef, max_norm;
	bool dynamic;
	struct spw__loss_scale dyn_scale;       /* exact mode's, when dynamic */
	uint32_t growth_interval;
	uint32_t page_size, chunk_elems;
	uint32_t ring_cap;
	bool region_registered;
	bool counted;            /* in c->optimizers (spw_client_reconnect refuses while any lives) */

	uint32_t staging_id;
	void **sbuf;            /* staging pages: grads, copies, refetched grads */
	uint32_t nsbuf;
	int *gfree;             /* free gradient buffers (lock) */
	uint32_t ngfree;
	int *cfree;             /* free copy buffers (engine) */
	uint32_t ncfree;
	int *rfree;             /* free buffers for refetched gradients (engine) */
	uint32_t nrfree;

	struct tensor *tensors;
	uint32_t ntensors;
	/* int8 moments: the scale pages, one-page tensors spw.opt.q8_scales.N
	 * filled with chunks' scales in the order they are added. */
	uint32_t *q8_ids, q8_pages, q8_used;
	struct chunk **chunks;  /* by global index */
	uint32_t nchunks;

	/* step state: the trainer's */
	bool in_step, started;
	uint64_t step;
	float loss_scale;
	uint32_t wait_timeout_ms;
	int daemon_pid;         /* the control socket's peer, 0 when unknown */
	float grad_scale;       /* what the step's consts multiply gradients by */
	float *lrs;
	struct spw_adamw_consts *gconsts;
	uint32_t *order, norder;        /* this step's arrival order (lock) */
	uint32_t *pred, npred, *pos;    /* last step's, and each chunk's place in it (engine) */
	/* Fetch order (trainer): tensors in the order this step fetched them,
	 * and the previous step's, which predicts what comes next. */
	uint32_t *forder, nforder, *fpred, nfpred, fcap;
	struct spw__event *prod_ev;     /* grad_ready: the producer stream's work */

	pthread_mutex_t lock;
	pthread_cond_t cond;
	int wake_fd;
	pthread_t engine;
	bool engine_started;
	/* (lock) */
	bool stop, step_mark, park_req, parked;
	/* Exact mode: the last end sent the STEP mark that also opens the
	 * next step (trainer). */
	bool marked_at_end;
	struct job *ready_head, *ready_tail, *done_head, *h2d_head, *refetch_head;
	uint32_t d2h_open, grad_jobs_open, jobs_open;
	int err;
	char fatal_msg[SPW__ERRMSG_MAX];

	/* engine-local */
	struct job *q_head, *q_tail;
	uint32_t inflight, ring_reserved, hints_inflight;
	struct job_run *runs, *run_free;        /* window of them; the free ones */
	bool hints_off;
	uint64_t hint_step;

	_Atomic uint64_t st_steps, st_d2h, st_h2d, st_chunks, st_adam_ns, st_pin_ns, st_pins,
		st_fast_pins, st_prefetches, st_fetches, st_fetch_bytes, st_fetch_hints;
	atomic_int st_hints;

	/* Persistent sessions (persist.c): the step marks the engine sends
	 * and what a reattached session held. */
	struct {
		bool on;                /* the session is persistent: marks are sent */
		bool resumed;           /* tensors adopted with their state */
		bool adopting;          /* reattached: tensors are adopted, not registered */
		uint64_t resumed_step;  /* the committed step the state holds */
		uint32_t adopted, session_tensors; /* checked at the first begin */
		uint32_t layout_id;
		/* (lock) */
		uint32_t mod_left[2];   /* by step parity: updating jobs not done */
		uint64_t ended;         /* the last step whose end() ran */
		uint64_t acked;         /* COMMITs the daemon has answered up to (free waits) */
		uint32_t scale_bits[2], good[2]; /* what COMMIT(step) carries, by step parity */
		uint32_t coef_bits[2];  /* and the STATS before it: the step's clip coefficient */
		uint64_t adam_ns_seen;  /* st_adam_ns at the last STATS */
		/* engine */
		uint64_t opened, committed;
		/* MARKs in flight, oldest first: a COMMIT's step, 0 for an
		 * OPEN (they complete in order). */
		uint64_t mq[32];
		uint32_t mq_head, mq_n;
		/* The session was left inside step torn's updates (taken
		 * over with that step open): settled (journal.c) before the
		 * state is read, written or stepped. */
		uint64_t torn;
		/* The step spw_optimizer_write opened (SPW_MARK_BY_WRITE) until
		 * its first update marks it open again as an update's. */
		uint64_t write_opened;
		bool settled;           /* journal.c's takeover work is done */
		bool redo;              /* overlapped: step torn is being redone (trainer) */
	} persist;

	/* The tile journal of a persistent session (journal.c). NULL pages:
	 * no journal (a plain session). */
	struct {
		uint32_t id, done_id;
		void **pages, **done_pages;
		uint32_t npages, ndone_pages;
		uint32_t nslots;
		size_t slot_bytes, slots_at, rec_bytes;
		uint32_t units_per_chunk, unit_elems;
		uint64_t words;         /* 64-bit words of one done bitmap */
		_Atomic uint64_t free_slots; /* bit per free slot */
		long kill_at;           /* SPILLWAY_TEST_KILL_AT_TILE, 0: off */
		long delay_us;          /* SPILLWAY_TEST_TILE_DELAY_US, 0: off */
		atomic_long tiles;
	} jn;

	struct spw__trace *trace;       /* NULL: tracing off (trace.h) */
	/* The daemon's I/O log as far as the timeline has it (trace-daemon.c). */
	uint64_t io_seen;
	uint32_t traced_inflight;       /* the engine's last "jobs in flight" counter value */
	uint64_t traced_gauge[2];       /* the daemon's gauges as last put on the timeline, + 1 (0: never) */
	uint64_t traced_gauge_step;     /* the step they were last put on it in */
	struct spw_io_event *io_buf;    /* SPW_IO_LOG_ENTRIES, while tracing */
	uint32_t *io_map, io_map_n;     /* daemon tensor id -> optimizer tensor + 1 (0: none) */
	uint64_t t_step;                /* this step's begin, when tracing */

	char errmsg[SPW__ERRMSG_MAX];
};

/*
 * Waits on o->cond once, lock held, for at most the no-progress timeout
 * (every change to the state the trainer waits on broadcasts o->cond, so
 * a wake counts as progress). On timeout the optimizer is broken with a
 * message naming what (printf-style) and the daemon.
 */
void spw__opt_wait_locked(spw_optimizer *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Waits, lock held, until pred holds, the optimizer is broken, or no
 * progress came for o->wait_timeout_ms (which breaks it); the rest of the
 * arguments say what is waited for, printf-style. */
#define WAIT_UNTIL(opt, pred, ...)                                      \
	do {                                                            \
		while (!(opt)->err && !(pred))                          \
			spw__opt_wait_locked((opt), __VA_ARGS__);       \
	} while (0)

/* Whether t has a spillway tensor for role r. */
static inline bool role_used(const struct tensor *t, unsigned r)
{
	if (t->frozen)
		return r == R_P;
	if (r == R_U)
		return t->has_u;
	return r != R_G || t->has_g;
}

/*
 * Where chunk k's values of role r lie. Chunks hold chunk_elems =
 * page_size / 4 elements, so fp32 values of chunk k fill page k of r's
 * tensor. Moments in a smaller state dtype share pages: chunk k's bf16
 * moments (SPW_STATE_BF16) start at byte k * page_size / 2 of their
 * tensor, two chunks a page; int8 codes (SPW_STATE_INT8) at
 * k * page_size / 4, four a page. int8 blocks' scales (page_size / 256
 * bytes a chunk and moment) are the optimizer's, not the tensor's: one-page
 * tensors spw.opt.q8_scales.N hold 128 chunks' each (exp_avg's then
 * exp_avg_sq's, in slots of page_size / 128), given out to chunks in the
 * order tensors are added, so a small tensor costs no page of its own and
 * the moments take 1 + 1/64 bytes per parameter in the tier. Chunks
 * sharing a page each pin it (pins are counted) and write their own part.
 * role_at() and role_id() are the one place that knows this.
 */
#define Q8_SLOTS_PER_PAGE 128u

static inline bool role_moment(unsigned r)
{
	return r == R_M || r == R_V;
}

static inline bool role_m16(const spw_optimizer *o, unsigned r)
{
	return o->state_dtype == SPW_STATE_BF16 && role_moment(r);
}

static inline bool role_q8(const spw_optimizer *o, unsigned r)
{
	return o->state_dtype == SPW_STATE_INT8 && role_moment(r);
}

/* The roles a job updating moments pins besides R_P (and R_G). */
static inline unsigned roles_moments(const spw_optimizer *o)
{
	return 1u << R_M | 1u << R_V | (o->state_dtype == SPW_STATE_INT8 ? 1u << R_MS | 1u << R_VS : 0u);
}

/* Whether role r holds bf16 master weights (SPW_MASTER_BF16): p and the
 * overlapped optimizer's undo copy of it. */
static inline bool role_p16(const spw_optimizer *o, unsigned r)
{
	return o->master16 && (r == R_P || r == R_U);
}

/* Whether role r holds 16-bit values: bf16 moments, a bf16 gradient
 * store (SPW_GRAD_STORE_BF16) or bf16 master weights; two chunks a page,
 * as bf16 moments. */
static inline bool role_16(const spw_optimizer *o, unsigned r)
{
	return role_m16(o, r) || (r == R_G && o->grad16) || role_p16(o, r);
}

/* Whether chunk k's data of role r fills page k of its tensor alone
 * (fp32 values); 16-bit values share a page between two chunks. A page
 * one chunk's job rewrites whole holds nothing of another's only then. */
static inline bool role_page_own(const spw_optimizer *o, unsigned r)
{
	return !role_16(o, r);
}

/* Whether the kernels read a gradient by reference where the trainer
 * keeps it (host memory); on a device it is copied to staging pages. */
static inline bool grad_in_place(const spw_optimizer *o)
{
	return o->grad_ref && !o->grad_refetch;
}

/* The type of the master weights' values. */
static inline enum spw_dtype master_dtype(const spw_optimizer *o)
{
	return o->master16 ? SPW_DTYPE_BF16 : SPW_DTYPE_F32;
}

/* The type of the gradient store's values. */
static inline enum spw_dtype store_dtype(const spw_optimizer *o)
{
	return o->grad16 ? SPW_DTYPE_BF16 : SPW_DTYPE_F32;
}

/* Bytes of role r per element (the scales': none, see role_chunk_bytes). */
static inline size_t role_elem_bytes(const spw_optimizer *o, unsigned r)
{
	return role_q8(o, r) ? 1 : role_16(o, r) ? 2 : 4;
}

/* Bytes of int8 block scales per full chunk: page_size / 256. */
static inline size_t q8_chunk_scale_bytes(const spw_optimizer *o)
{
	return (size_t)o->chunk_elems / SPW_Q8_BLOCK * 4;
}

/* Byte of the page-aligned tensor role_id() names where chunk k of t
 * keeps its role r data. */
static inline uint64_t role_at(const spw_optimizer *o, unsigned r, const struct tensor *t, uint32_t k)
{
	if (r == R_MS || r == R_VS)
		return (uint64_t)(2 * t->chunks[k].q8_slot + (r == R_VS)) * q8_chunk_scale_bytes(o);
	return (uint64_t)k * o->chunk_elems * role_elem_bytes(o, r);
}

/* The spillway tensor holding chunk k of t's role r data. */
static inline uint32_t role_id(const spw_optimizer *o, unsigned r, const struct tensor *t, uint32_t k)
{
	if (r == R_MS || r == R_VS)
		return o->q8_ids[t->chunks[k].q8_page];
	return t->id[r];
}

static inline uint32_t role_page(const spw_optimizer *o, unsigned r, const struct tensor *t, uint32_t k)
{
	return (uint32_t)(role_at(o, r, t, k) / o->page_size);
}

static inline size_t role_offset(const spw_optimizer *o, unsigned r, const struct tensor *t, uint32_t k)
{
	return (size_t)(role_at(o, r, t, k) % o->page_size);
}

/* Bytes chunk data of n elements takes in role r. */
static inline size_t role_chunk_bytes(const spw_optimizer *o, unsigned r, uint64_t n)
{
	if (r == R_MS || r == R_VS)
		return 4 * (size_t)((n + SPW_Q8_BLOCK - 1) / SPW_Q8_BLOCK);
	return (size_t)n * role_elem_bytes(o, r);
}

/* What a tile of elements [b, e) of a chunk touches in role r: bytes
 * [at, at + len) from the chunk's start in r (job->ptr[r]). Tiles begin
 * on block boundaries. */
struct role_span {
	size_t at, len;
};

static inline struct role_span role_tile(const spw_optimizer *o, unsigned r, size_t b, size_t e)
{
	if (r == R_MS || r == R_VS)
		return (struct role_span){ b / SPW_Q8_BLOCK * 4, role_chunk_bytes(o, r, e - b) };
	return (struct role_span){ b * role_elem_bytes(o, r), (e - b) * role_elem_bytes(o, r) };
}

/* Bytes of tensor role r (< R__T) for count elements. */
static inline uint64_t role_bytes(const spw_optimizer *o, unsigned r, uint64_t count)
{
	return count * role_elem_bytes(o, r);
}

/* ---- optimizer.c ---- */

/* Stores a formatted message in o->errmsg and returns err. */
__attribute__((format(printf, 3, 4)))
int spw__opt_error(spw_optimizer *o, int err, const char *fmt, ...);

/* Whether a group's hyperparameters are in range (optimizer.c). */
bool spw__group_ok(const struct spw_param_group *g);

/* Rings the engine's eventfd. */
void spw__opt_wake(spw_optimizer *o);

/* Records the first fatal error; every waiter gives up. Lock held. */
__attribute__((format(printf, 3, 4)))
void spw__opt_fatal_locked(spw_optimizer *o, int err, const char *fmt, ...);

/* 0, or the broken optimizer's error copied into o->errmsg; _locked with
 * the lock held. */
int spw__opt_broken_locked(spw_optimizer *o);
int spw__opt_broken(spw_optimizer *o);

/* The trainer's stream as a device stream: 1, 0 when there is none to
 * order against, or the error (with its message). */
int spw__opt_borrow(spw_optimizer *o, void *stream, struct spw__stream **ret, const char *what,
		    const char *name);

/* Makes the work queued on `on` from now wait for what the trainer has
 * queued on stream so far. 0 or the error (with its message). */
int spw__opt_after_stream(spw_optimizer *o, void *stream, struct spw__event *ev, struct spw__stream *on,
			  const char *what, const char *name);

/* ---- engine.c ---- */

void *spw__opt_engine_main(void *arg);

/* Host function on d2h: a job's gradient is in its staging page. */
void spw__opt_grad_arrived(void *arg);

/* Queues on the d2h stream the copy of bytes at src (device memory) into
 * dst (a staging page), then fn(arg) once it is there; dst NULL: no copy
 * (a gradient read in place), fn after the producer's work all the same.
 * Counts the bytes copied. Returns 0 or the device's negative errno. */
int spw__opt_d2h(spw_optimizer *o, void *dst, const void *src, size_t bytes, void (*fn)(void *), void *arg);

/* The pool ran a job's last tile: the job goes back to the engine. */
void spw__opt_tiles_done(struct job *j);

/* Appends a job to the engine's queue of jobs to admit. Lock held. */
void spw__opt_queue_locked(spw_optimizer *o, struct job *j);

/* Parks the engine so the caller may use the ring until
 * spw__opt_ring_release(). Returns 0. */
int spw__opt_ring_acquire(spw_optimizer *o);
void spw__opt_ring_release(spw_optimizer *o);

/* ---- persist.c ---- */

/* Whether a job of this kind writes master weights or moments. */
static inline bool job_updates(enum job_kind k)
{
	return k == JOB_ADAM || k == JOB_GRAD_ADAM || k == JOB_ADAM_STORE;
}

/* At spw_optimizer_new: what the attach said of the session. -ESTALE
 * (with the message in c's last error) for a state left mid-update. */
int spw__persist_init(spw_optimizer *o);
/* A tensor of the optimizer's: registered, or adopted on a reattached
 * session. 0 or the client's error. */
int spw__persist_tensor(spw_optimizer *o, const char *name, uint64_t bytes, enum spw_tensor_kind kind,
			uint32_t *id);
/* At the first begin, ring held: the layout record written, or compared
 * with the reattached session's. 0 or the error (with its message). */
int spw__persist_layout(spw_optimizer *o);
/* The layout record's tensor, and the record: what the optimizer holds
 * (mode, tier, chunking, groups, every tensor's name, size, group and
 * device type), its size returned and written into buf when not NULL. */
#define SPW__LAYOUT_NAME "spw.opt.layout"
size_t spw__persist_layout_record(const spw_optimizer *o, unsigned char *buf);
/* The first difference between our record (want) and one left (have,
 * as long), as a sentence. */
void spw__persist_layout_diff(const spw_optimizer *o, const unsigned char *want, const unsigned char *have, char *out,
			      size_t len);
/* Engine: sends OPEN before the first pin of an updating job of a new
 * step. false when the ring has no room now (admit the job later). */
bool spw__persist_open(spw_optimizer *o, const struct job *j);
/* spw_optimizer_write, ring held: OPEN of the next step before the
 * state is written outside a step. 0 or -errno. */
int spw__persist_open_write(spw_optimizer *o);
/* begin of a fresh optimizer's first step on a persistent session: the
 * marks count from it. */
void spw__persist_first_step(spw_optimizer *o, uint64_t step);
/* Engine: sends COMMIT once an ended step's updates are all done. */
void spw__persist_commit(spw_optimizer *o);
/* Engine: a MARK's completion. */
void spw__persist_marked(spw_optimizer *o, int32_t res);

/* ---- journal.c ---- */

/* spw_optimizer_new, after the pool: the journal of a persistent session
 * registered (or adopted and checked on a takeover). 0 or the error in
 * c's last error. */
int spw__journal_open(spw_optimizer *o);
/* 0 when the session's region holds what the pipeline needs with one
 * chunk in flight, nchunks chunks of state added (the journal's done
 * bitmaps grow with them); else -ENOSPC (as for resident state that does
 * not fit) with the sentence (the region,
 * the figure needed and its parts, the fix) as the client's last error
 * (on the NVMe tier only: resident state is refused at registration). */
int spw__region_check(spw_optimizer *o, const char *who, uint64_t nchunks);
/* At the first begin, ring held (inside spw__persist_layout): the done
 * bitmaps' tensor, registered or adopted. 0 or the client's error. */
int spw__journal_done_tensor(spw_optimizer *o);
/* A taken-over session's first read, write or begin: the layout checked,
 * torn tiles put back; exact mode finishes the open step. 0 or the error
 * (with its message). */
int spw__journal_settle(spw_optimizer *o);
/* begin, trainer: the step's record and done bitmap made ready. 0 or the
 * error (with its message). */
int spw__journal_begin(spw_optimizer *o, uint64_t step);
/* exact mode's end, before its updates are queued: the constants a
 * takeover finishes the step with. */
void spw__journal_plan(spw_optimizer *o, uint32_t scale_bits, uint32_t good);
/* The journal's unit: AdamW runs unit by unit inside a tile on a
 * persistent session, each unit's old p, m, v (48 KiB in fp32) in the
 * thread's slot, which stays in the core's caches. Divides TILE and is a
 * multiple of SPW_Q8_BLOCK. */
#define SPW_JOURNAL_UNIT 4096u
_Static_assert(TILE % SPW_JOURNAL_UNIT == 0 && SPW_JOURNAL_UNIT % SPW_Q8_BLOCK == 0, "journal unit");

/* Whether updates are journalled (a persistent session, once begun). */
static inline bool spw__journal_on(const spw_optimizer *o)
{
	return o->jn.done_pages != NULL;
}
/* Pool thread, unit u (elements [u, u + 1) * SPW_JOURNAL_UNIT of the
 * chunk) of an updating job: whether an earlier try of the step updated
 * it already (a redone step); else enter claims a journal slot holding
 * the unit's old bytes [b, e) (its index), and leave marks the unit done
 * and frees the slot. */
bool spw__journal_unit_done(spw_optimizer *o, const struct job *j, size_t u);
int spw__journal_enter(spw_optimizer *o, const struct job *j, size_t u, size_t b, size_t e);
void spw__journal_leave(spw_optimizer *o, const struct job *j, size_t u, int slot);
/* spw_optimizer_read of the master weights (ring held), of a session left
 * inside step torn's overlapped updates: the chunk's tiles updated in it
 * are read from the undo copy instead. 0 or the client's error. */
int spw__journal_undo_fix(spw_optimizer *o, const struct chunk *ch, float *out);
/* SPILLWAY_TEST_KILL_AT_TILE=K (tests only): true at the K-th unit
 * update, which the caller leaves half done and dies. */
bool spw__journal_kill_now(spw_optimizer *o);
/* SPILLWAY_TEST_TILE_DELAY_US=N (tests only): a unit update waits N us
 * before and after its kernel, so that random kills land there. */
void spw__journal_test_delay(const spw_optimizer *o);
/* spw_optimizer_free: the journal's pins released. */
void spw__journal_close(spw_optimizer *o);

/* ---- trace-daemon.c ---- */

/* When tracing, at the first begin (tensors known, engine not yet using
 * them): the map from daemon tensor ids and the copy buffer. */
void spw__opt_trace_disk_map(spw_optimizer *o);
/* When tracing: the daemon's reads and writes since the last call onto
 * the timeline (engine thread, or a caller holding the ring). */
void spw__opt_trace_disk(spw_optimizer *o);

/* ---- param-view.c ---- */

/* At free, before the slots go back: every view still exported becomes
 * private memory holding its last values, at the same address (unmapped by
 * the last export's deleter); the others are unmapped. */
void spw__opt_views_detach(spw_optimizer *o);

/* ---- job-kernels.c ---- */

/* Queues a job's kernels on the pool once its pins are back (engine). */
void spw__opt_start_kernels(spw_optimizer *o, struct job *j);

#endif
