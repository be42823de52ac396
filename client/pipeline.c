/* SPDX-License-Identifier: MIT */
/*
 * client/pipeline.c: the offload pipeline behind spw_optimizer_*.
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
 * free) ask the engine to park (ring_acquire) so the ring keeps exactly one
 * user at a time.
 *
 * Windowing: at most `window` jobs (one chunk each) hold pins at once, and
 * there are `window` gradient staging pages and `window` copy-out pages, so
 * the pinned memory is (pages per chunk + 2) * window pages whatever the
 * model's size.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "client-private.h"
#include "device.h"
#include "kernels.h"
#include "pool.h"

_Static_assert((int)SPW_TYPE_F32 == (int)SPW_DTYPE_F32 && (int)SPW_TYPE_BF16 == (int)SPW_DTYPE_BF16 &&
	       (int)SPW_TYPE_F16 == (int)SPW_DTYPE_F16, "public and kernel element types agree");

#define TILE SPW_POOL_ADAMW_TILE
#define DEFAULT_WINDOW 4u
#define FAST_PIN_NS 200000ull
#define MAX_NAME 200

enum role { R_P, R_M, R_V, R_G, R__N };

enum job_kind {
	JOB_ADAM,       /* gradient in staging -> Adam (overlapped, no accumulation) */
	JOB_GRAD,       /* gradient in staging -> fp32 store (cast or add), maybe its norm */
	JOB_GRAD_ADAM,  /* the above, then Adam from the store (overlapped, last micro-batch) */
	JOB_ADAM_STORE, /* Adam from the store (exact mode, after the norm) */
	JOB_FETCH,      /* master weights -> cast into a copy page -> the trainer's buffer */
};

/* User data of ring ops that belong to no job; job pointers are far above. */
#define UD_STEP 1u
#define UD_PREFETCH 2u
#define UD_FETCH_HINT 3u
/* PREFETCH hints a fetch carries for the tensors predicted to follow it. */
#define FETCH_HINTS 16u

struct chunk;

struct job {
	spw_optimizer *o;
	struct chunk *ch;
	enum job_kind kind;
	bool first, want_norm, copy;
	enum spw_dtype gdt;
	int gbuf, cbuf;
	struct spw_adamw_consts consts;
	unsigned roles;                 /* bit per enum role: pages to pin */
	unsigned npins, pins_back, unpins_left;
	float *ptr[R__N];
	const void *sgrad;              /* the staging page holding the gradient */
	void *scopy;                    /* the staging page for the copy-out */
	bool h2d_pending;
	enum spw_dtype cdt;             /* type of the copy-out */
	void *dst;                      /* where the copy-out goes on the device */
	bool wait_free;                 /* fetch: the copy waits for the tensor's free_ev */
	uint32_t nhints;                /* fetch: PREFETCHes to send when admitted */
	uint32_t hint_id[FETCH_HINTS], hint_page[FETCH_HINTS];
	uint64_t t_pin;
	struct spw__pool_call call;
	atomic_size_t tiles_left;
	struct job *next;
};

struct tensor;

struct chunk {
	struct tensor *t;
	uint32_t index;         /* within the tensor */
	uint32_t global;        /* within the optimizer */
	uint64_t off, n;        /* elements */
	uint32_t arrivals;      /* gradients this step (lock) */
	bool busy;              /* job queued or in flight (lock) */
	bool zeroed;            /* moments initialised (engine, between jobs) */
	uint64_t hinted_step;   /* engine */
	double sumsq;           /* this step's gradient square sum (written by the engine) */
	double *partial;        /* per tile */
	struct job job;         /* one at a time per chunk */
};

struct tensor {
	char *name;
	uint32_t group;
	uint64_t count;
	void *dev;              /* NULL: offloaded, no copy-out after Adam */
	enum spw_dtype ptype;
	uint32_t id[R__N];
	bool has_g;
	bool frozen;            /* master weights only, never updated */
	uint32_t nchunks;
	struct chunk *chunks;
	uint32_t pending;       /* jobs not done (lock) */
	uint32_t unqueued;      /* jobs whose device copy is not yet on the h2d stream (lock) */
	uint32_t fetch_open;    /* fetch jobs not done (lock) */
	bool fetched;           /* fetched and not released (trainer) */
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
	struct spw_param_group *groups;
	uint32_t ngroups, accum, window;
	float clip_coef, max_norm;
	bool dynamic;
	float scale;
	uint32_t growth_interval, good_steps;
	uint32_t page_size, chunk_elems;
	uint32_t ring_cap;
	bool region_registered;

	uint32_t staging_id;
	void **sbuf;            /* 2 * window staging pages: grads [0, w), copies [w, 2w) */
	int *gfree;             /* free gradient buffers (lock) */
	uint32_t ngfree;
	int *cfree;             /* free copy buffers (engine) */
	uint32_t ncfree;

	struct tensor *tensors;
	uint32_t ntensors;
	struct chunk **chunks;  /* by global index */
	uint32_t nchunks;

	/* step state: the trainer's */
	bool in_step, started;
	uint64_t step;
	float loss_scale;
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
	struct job *ready_head, *ready_tail, *done_head, *h2d_head;
	uint32_t d2h_open, grad_jobs_open, jobs_open;
	int err;
	char fatal_msg[SPW__ERRMSG_MAX];

	/* engine-local */
	struct job *q_head, *q_tail;
	uint32_t inflight, ring_reserved, hints_inflight;
	bool hints_off;
	uint64_t hint_step;

	_Atomic uint64_t st_steps, st_d2h, st_h2d, st_chunks, st_adam_ns, st_pin_ns, st_pins,
		st_fast_pins, st_prefetches, st_fetches, st_fetch_bytes, st_fetch_hints;
	atomic_int st_hints;

	char errmsg[SPW__ERRMSG_MAX];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 3, 4)))
static int opt_error(spw_optimizer *o, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(o->errmsg, sizeof(o->errmsg), fmt, ap);
	va_end(ap);
	return err;
}

static void wake(spw_optimizer *o)
{
	uint64_t one = 1;

	/* EAGAIN: the counter is saturated, a wakeup is pending anyway. */
	if (write(o->wake_fd, &one, sizeof(one)) < 0) {
		/* nothing else to do: the engine also wakes every second */
	}
}

/* Records the first fatal error; every waiter gives up. Lock held. */
__attribute__((format(printf, 3, 4)))
static void fatal_locked(spw_optimizer *o, int err, const char *fmt, ...)
{
	va_list ap;

	if (o->err)
		return;
	o->err = err;
	va_start(ap, fmt);
	vsnprintf(o->fatal_msg, sizeof(o->fatal_msg), fmt, ap);
	va_end(ap);
	pthread_cond_broadcast(&o->cond);
}

/* The broken optimizer's error, copied into the caller's message. Lock held. */
static int broken_locked(spw_optimizer *o)
{
	if (!o->err)
		return 0;
	memcpy(o->errmsg, o->fatal_msg, sizeof(o->errmsg));
	return o->err;
}

static int broken(spw_optimizer *o)
{
	int r;

	pthread_mutex_lock(&o->lock);
	r = broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

static void push(struct job **head, struct job *j)
{
	j->next = *head;
	*head = j;
}

/* Reverses a LIFO list taken from push() into arrival order. */
static struct job *reverse(struct job *j)
{
	struct job *out = NULL;

	while (j) {
		struct job *n = j->next;

		j->next = out;
		out = j;
		j = n;
	}
	return out;
}

/* ---- the kernels of one job, per tile, on the pool ---- */

static void job_tile(void *arg, size_t tile, size_t b, size_t e)
{
	struct job *j = arg;
	struct chunk *ch = j->ch;
	spw_optimizer *o = j->o;
	const struct spw_kernels *k = o->k;
	size_t n = e - b;
	const unsigned char *sg = j->sgrad ? (const unsigned char *)j->sgrad + b * spw_dtype_size(j->gdt) : NULL;
	float *p = j->ptr[R_P], *m = j->ptr[R_M], *v = j->ptr[R_V], *g = j->ptr[R_G];
	enum spw_dtype cdt = j->copy ? j->cdt : SPW_DTYPE_NONE;
	void *copy = j->copy ? (unsigned char *)j->scopy + b * spw_dtype_size(cdt) : NULL;
	bool adam = j->kind != JOB_GRAD && j->kind != JOB_FETCH;
	uint64_t t0 = now_ns();

	/* Fresh pages of a tensor may hold anything (a slot's earlier
	 * tenant), so the moments start as torch's zeros here, the first
	 * time a chunk is updated, instead of costing a pass at add time. */
	if (adam && !ch->zeroed) {
		memset(m + b, 0, n * sizeof(float));
		memset(v + b, 0, n * sizeof(float));
	}
	switch (j->kind) {
	case JOB_ADAM:
		if (j->want_norm)
			ch->partial[tile] = k->sumsq[j->gdt](sg, n);
		k->adamw[j->gdt][cdt](&j->consts, p + b, m + b, v + b, sg, copy, n);
		break;
	case JOB_GRAD:
	case JOB_GRAD_ADAM:
		/* The first micro-batch overwrites the store: its old contents
		 * are last step's. */
		if (j->first)
			k->cast[SPW_DTYPE_F32][j->gdt](g + b, sg, n);
		else
			k->acc[j->gdt](g + b, sg, n);
		if (j->want_norm)
			ch->partial[tile] = k->sumsq[SPW_DTYPE_F32](g + b, n);
		if (j->kind == JOB_GRAD_ADAM)
			k->adamw[SPW_DTYPE_F32][cdt](&j->consts, p + b, m + b, v + b, g + b, copy, n);
		break;
	case JOB_ADAM_STORE:
		k->adamw[SPW_DTYPE_F32][cdt](&j->consts, p + b, m + b, v + b, g + b, copy, n);
		break;
	case JOB_FETCH:
		/* Through a copy page, not from the slot: the page is unpinned
		 * (and may be evicted) before the device has read it. */
		k->cast[cdt][SPW_DTYPE_F32](copy, p + b, n);
		break;
	}
	atomic_fetch_add_explicit(&o->st_adam_ns, now_ns() - t0, memory_order_relaxed);
	/* The last tile hands the job to the engine. The seq_cst decrement
	 * orders every tile's stores before it, and the lock hand-off below
	 * carries them to the engine. */
	if (atomic_fetch_sub(&j->tiles_left, 1) == 1) {
		pthread_mutex_lock(&o->lock);
		push(&o->done_head, j);
		pthread_mutex_unlock(&o->lock);
		wake(o);
	}
}

/* ---- host functions on the copy streams ---- */

static void grad_arrived(void *arg)
{
	struct job *j = arg;
	spw_optimizer *o = j->o;

	pthread_mutex_lock(&o->lock);
	o->d2h_open--;
	j->next = NULL;
	if (o->ready_tail)
		o->ready_tail->next = j;
	else
		o->ready_head = j;
	o->ready_tail = j;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
	wake(o);
}

static void params_arrived(void *arg)
{
	struct job *j = arg;
	spw_optimizer *o = j->o;

	pthread_mutex_lock(&o->lock);
	push(&o->h2d_head, j);
	pthread_mutex_unlock(&o->lock);
	wake(o);
}

/* ---- the engine ---- */

static void engine_fatal(spw_optimizer *o, int err, const char *what)
{
	pthread_mutex_lock(&o->lock);
	fatal_locked(o, err, "%s: %s", what, spw_client_last_error(o->c));
	pthread_mutex_unlock(&o->lock);
}

static unsigned popcount(unsigned x)
{
	return (unsigned)__builtin_popcount(x);
}

/* Whether t has a spillway tensor for role r. */
static bool role_used(const struct tensor *t, unsigned r)
{
	if (t->frozen)
		return r == R_P;
	return r != R_G || t->has_g;
}

static uint32_t tensor_id(const struct job *j, enum role r)
{
	return j->ch->t->id[r];
}

/* Hints the daemon at the pages of the chunks predicted to come next. */
static void hint_ahead(spw_optimizer *o, const struct chunk *ch)
{
	uint32_t at, end, i;

	if (o->hints_off || o->tier != SPW_TENSOR_SWAPPABLE || ch->global >= o->nchunks ||
	    o->pos[ch->global] == UINT32_MAX)
		return;
	at = o->pos[ch->global];
	end = at + 2 * o->window + 1;
	if (end > o->npred)
		end = o->npred;
	for (i = at; i < end; i++) {
		struct chunk *c = o->chunks[o->pred[i]];

		if (c->hinted_step == o->hint_step)
			continue;
		for (unsigned r = 0; r < R__N; r++) {
			if (r == R_G && !c->t->has_g)
				continue;
			if (o->hints_inflight + o->ring_reserved + 1 > o->ring_cap)
				return;
			if (spw__submit_op(o->c, SPW_OP_PREFETCH, 0, c->t->id[r], c->index, UD_PREFETCH) < 0)
				return;
			o->hints_inflight++;
		}
		c->hinted_step = o->hint_step;
	}
}

/* Sends the PREFETCHes a fetch carries: the master pages of the tensors
 * the previous step fetched next. */
static void hint_fetch(spw_optimizer *o, struct job *j)
{
	uint32_t i;

	if (o->hints_off || o->tier != SPW_TENSOR_SWAPPABLE)
		return;
	for (i = 0; i < j->nhints; i++) {
		if (o->hints_inflight + o->ring_reserved + 1 > o->ring_cap)
			break;
		if (spw__submit_op(o->c, SPW_OP_PREFETCH, 0, j->hint_id[i], j->hint_page[i], UD_FETCH_HINT) < 0)
			break;
		o->hints_inflight++;
	}
	j->nhints = 0;
}

/* Pins the pages of the queued jobs while the window has room. */
static bool admit(spw_optimizer *o)
{
	bool progress = false;

	while (o->q_head && o->inflight < o->window) {
		struct job *j = o->q_head;
		unsigned np = popcount(j->roles);

		if (o->ring_reserved + o->hints_inflight + np > o->ring_cap)
			break;
		o->q_head = j->next;
		if (!o->q_head)
			o->q_tail = NULL;
		o->inflight++;
		o->ring_reserved += np;
		j->npins = np;
		j->pins_back = 0;
		j->cbuf = j->copy ? o->cfree[--o->ncfree] : -1;
		j->scopy = j->cbuf >= 0 ? o->sbuf[j->cbuf] : NULL;
		j->t_pin = now_ns();
		for (unsigned r = 0; r < R__N; r++) {
			if (!(j->roles & (1u << r)))
				continue;
			if (spw__submit_op(o->c, SPW_OP_PIN, 0, tensor_id(j, r), j->ch->index,
					   (uint64_t)(uintptr_t)j | r) < 0) {
				engine_fatal(o, spw_client_last_error(o->c)[0] ? -ECONNRESET : -EIO, "pin");
				return true;
			}
		}
		if (j->kind == JOB_FETCH)
			hint_fetch(o, j);
		else
			hint_ahead(o, j->ch);
		progress = true;
	}
	return progress;
}

static void start_kernels(spw_optimizer *o, struct job *j)
{
	size_t ntiles = (j->ch->n + TILE - 1) / TILE;
	uint64_t dt = now_ns() - j->t_pin;

	atomic_fetch_add_explicit(&o->st_pin_ns, dt, memory_order_relaxed);
	atomic_fetch_add_explicit(&o->st_pins, j->npins, memory_order_relaxed);
	if (dt < FAST_PIN_NS)
		atomic_fetch_add_explicit(&o->st_fast_pins, j->npins, memory_order_relaxed);
	memset(j->ch->partial, 0, ntiles * sizeof(double));
	atomic_store(&j->tiles_left, ntiles);
	j->call.fn = job_tile;
	j->call.arg = j;
	j->call.n = j->ch->n;
	j->call.tile = TILE;
	spw__pool_submit(o->pool, &j->call);
}

static void finish_job(spw_optimizer *o, struct job *j)
{
	struct chunk *ch = j->ch;

	if (j->cbuf >= 0)
		o->cfree[o->ncfree++] = j->cbuf;
	j->cbuf = -1;
	o->inflight--;
	o->ring_reserved -= j->npins;
	pthread_mutex_lock(&o->lock);
	ch->busy = false;
	ch->t->pending--;
	if (j->kind == JOB_FETCH)
		ch->t->fetch_open--;
	o->jobs_open--;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

/* A job's kernels ran: release its gradient page, send the parameters
 * back, unpin. */
static void kernels_done(spw_optimizer *o, struct job *j)
{
	struct chunk *ch = j->ch;
	size_t ntiles = (ch->n + TILE - 1) / TILE;
	double s = 0.0;
	int r;

	/* Tile order, so the sum is the same whatever ran where. */
	for (size_t i = 0; i < ntiles; i++)
		s += ch->partial[i];
	if (j->want_norm)
		ch->sumsq = s;
	if (j->kind != JOB_GRAD && j->kind != JOB_FETCH) {
		ch->zeroed = true;
		atomic_fetch_add_explicit(&o->st_chunks, 1, memory_order_relaxed);
	}

	pthread_mutex_lock(&o->lock);
	if (j->gbuf >= 0)
		o->gfree[o->ngfree++] = j->gbuf;
	j->gbuf = -1;
	j->sgrad = NULL;
	if (j->kind != JOB_ADAM_STORE && j->kind != JOB_FETCH)
		o->grad_jobs_open--;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);

	if (j->copy) {
		size_t bytes = ch->n * spw_dtype_size(j->cdt);

		r = 0;
		if (j->wait_free)
			r = spw__stream_wait_event(o->dev, o->h2d, ch->t->free_ev);
		if (r >= 0)
			r = spw__memcpy_h2d_async(o->dev, j->dst, j->scopy, bytes, o->h2d);
		/* Recorded before unqueued drops, so a stream that waits on ev
		 * once unqueued is 0 waits for this copy too. */
		if (r >= 0)
			r = spw__event_record(o->dev, ch->t->ev, o->h2d);
		if (r >= 0)
			r = spw__launch_host_fn(o->dev, o->h2d, params_arrived, j);
		if (r < 0) {
			char buf[256];

			pthread_mutex_lock(&o->lock);
			fatal_locked(o, r, "copying %s chunk %u to the device: %s", ch->t->name, ch->index,
				     spw__device_errmsg(o->dev, buf, sizeof(buf)));
			pthread_mutex_unlock(&o->lock);
			return;
		}
		j->h2d_pending = true;
		pthread_mutex_lock(&o->lock);
		ch->t->unqueued--;
		pthread_cond_broadcast(&o->cond);
		pthread_mutex_unlock(&o->lock);
		atomic_fetch_add_explicit(j->kind == JOB_FETCH ? &o->st_fetch_bytes : &o->st_h2d, bytes,
					  memory_order_relaxed);
	}
	j->unpins_left = j->npins;
	for (unsigned ro = 0; ro < R__N; ro++) {
		unsigned fl = SPW_DIRTY;

		if (!(j->roles & (1u << ro)))
			continue;
		/* The store is read for the last time by Adam: no write-back;
		 * a fetch only reads. */
		if ((ro == R_G && j->kind != JOB_GRAD) || j->kind == JOB_FETCH)
			fl = SPW_CLEAN;
		if (spw__submit_op(o->c, SPW_OP_UNPIN, (uint8_t)fl, tensor_id(j, ro), ch->index,
				   (uint64_t)(uintptr_t)j | (R__N + ro)) < 0) {
			engine_fatal(o, -ECONNRESET, "unpin");
			return;
		}
	}
}

static void completion(spw_optimizer *o, const struct spw_completion *cp)
{
	struct job *j;
	unsigned role;

	if (cp->user_data == UD_STEP || cp->user_data == UD_PREFETCH || cp->user_data == UD_FETCH_HINT) {
		o->hints_inflight--;
		if (cp->res == -EOPNOTSUPP) {
			/* A daemon without the NVMe tier's hints: stop asking. */
			o->hints_off = true;
			atomic_store(&o->st_hints, 0);
		} else if (cp->user_data != UD_STEP && cp->res >= 0) {
			atomic_fetch_add_explicit(&o->st_prefetches, 1, memory_order_relaxed);
			if (cp->user_data == UD_FETCH_HINT)
				atomic_fetch_add_explicit(&o->st_fetch_hints, 1, memory_order_relaxed);
		}
		return;
	}
	j = (struct job *)(uintptr_t)(cp->user_data & ~(uint64_t)7);
	role = (unsigned)(cp->user_data & 7);
	if (cp->res < 0) {
		pthread_mutex_lock(&o->lock);
		fatal_locked(o, cp->res, "%s %s page %u of tensor %s: %s", role < R__N ? "pinning" : "unpinning",
			     (const char *[]){ "master weights", "exp_avg", "exp_avg_sq", "gradient" }[role % R__N],
			     j->ch->index, j->ch->t->name, spw_strerror(cp->res));
		pthread_mutex_unlock(&o->lock);
		return;
	}
	if (role < R__N) {
		void *p = spw_slot_ptr(o->c, (uint32_t)cp->res);

		j->ptr[role] = p;
		if (++j->pins_back == j->npins)
			start_kernels(o, j);
		return;
	}
	if (--j->unpins_left == 0 && !j->h2d_pending)
		finish_job(o, j);
}

static void *engine_main(void *arg)
{
	spw_optimizer *o = arg;

	for (;;) {
		struct job *ready, *done, *h2d;
		bool progress = false, stop, mark, park;
		uint64_t v;
		int r;

		if (read(o->wake_fd, &v, sizeof(v)) < 0) {
			/* EAGAIN: nothing was signalled */
		}
		pthread_mutex_lock(&o->lock);
		ready = o->ready_head;
		o->ready_head = o->ready_tail = NULL;
		done = reverse(o->done_head);
		o->done_head = NULL;
		h2d = reverse(o->h2d_head);
		o->h2d_head = NULL;
		stop = o->stop;
		mark = o->step_mark;
		o->step_mark = false;
		park = o->park_req;
		pthread_mutex_unlock(&o->lock);

		if (ready) {
			if (o->q_tail)
				o->q_tail->next = ready;
			else
				o->q_head = ready;
			while (ready->next)
				ready = ready->next;
			o->q_tail = ready;
		}
		/* After a fatal error the ring is not touched again; jobs
		 * stay where they are and the waiters see the error. */
		if (broken(o) == 0) {
			if (mark) {
				o->hint_step++;
				if (!o->hints_off && o->hints_inflight + o->ring_reserved < o->ring_cap &&
				    spw__submit_op(o->c, SPW_OP_STEP, 0, 0, 0, UD_STEP) == 0)
					o->hints_inflight++;
			}
			/* Take next first: once its copy is queued, a job's
			 * link belongs to the h2d list. */
			while (done) {
				struct job *j = done;

				done = j->next;
				kernels_done(o, j);
				progress = true;
			}
			while (h2d) {
				struct job *j = h2d;

				h2d = j->next;
				j->h2d_pending = false;
				if (j->unpins_left == 0)
					finish_job(o, j);
				progress = true;
			}
			progress |= admit(o);
			for (;;) {
				struct spw_completion cq[32];
				int n = spw_reap(o->c, cq, 32, 0);

				if (n < 0) {
					engine_fatal(o, n, "waiting for the daemon");
					break;
				}
				for (int i = 0; i < n; i++)
					completion(o, &cq[i]);
				if (n == 0)
					break;
				progress = true;
			}
		}
		if (stop)
			break;
		if (park) {
			/* Hand the ring to the caller until it is done with it. */
			pthread_mutex_lock(&o->lock);
			o->parked = true;
			pthread_cond_broadcast(&o->cond);
			while (o->park_req && !o->stop)
				pthread_cond_wait(&o->cond, &o->lock);
			o->parked = false;
			pthread_mutex_unlock(&o->lock);
			continue;
		}
		if (progress)
			continue;
		if (broken(o)) {
			struct pollfd pfd = { .fd = o->wake_fd, .events = POLLIN };

			poll(&pfd, 1, 1000);
			continue;
		}
		r = spw__wait_ring(o->c, 1000, o->wake_fd);
		if (r < 0 && r != -ETIMEDOUT && r != -EINTR)
			engine_fatal(o, r, "waiting for the daemon");
	}
	return NULL;
}

/* Stops the engine at a point where it holds no ring operation half done,
 * so the caller may use the client directly until ring_release(). */
static int ring_acquire(spw_optimizer *o)
{
	pthread_mutex_lock(&o->lock);
	o->park_req = true;
	pthread_mutex_unlock(&o->lock);
	wake(o);
	pthread_mutex_lock(&o->lock);
	while (!o->parked)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static void ring_release(spw_optimizer *o)
{
	pthread_mutex_lock(&o->lock);
	o->park_req = false;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

/* ---- public API ---- */

static bool group_ok(const struct spw_param_group *g)
{
	return isfinite(g->lr) && g->lr >= 0.0f && g->beta1 >= 0.0f && g->beta1 < 1.0f &&
	       g->beta2 >= 0.0f && g->beta2 < 1.0f && isfinite(g->eps) && g->eps >= 0.0f &&
	       isfinite(g->weight_decay) && g->weight_decay >= 0.0f;
}

SPW_EXPORT const char *spw_optimizer_last_error(const spw_optimizer *o)
{
	return o ? o->errmsg : "no optimizer (NULL)";
}

SPW_EXPORT int spw_optimizer_new(spw_client *c, const struct spw_optimizer_opts *opts,
				 spw_optimizer **ret)
{
	struct spw_session_info info = { .size = sizeof(info) };
	struct spw__pool_opts po = { .numa_node = -1 };
	char err[256];
	spw_optimizer *o;
	uint32_t i, w;
	int r;

	if (!c || !opts || !ret || opts->size < sizeof(struct spw_optimizer_opts) || !opts->groups ||
	    opts->ngroups == 0 || opts->ngroups > 1024 ||
	    (opts->mode != SPW_OPT_OVERLAPPED && opts->mode != SPW_OPT_EXACT) ||
	    (opts->tier != SPW_TENSOR_RESIDENT && opts->tier != SPW_TENSOR_SWAPPABLE) ||
	    !(opts->clip_coef >= 0.0f) || !isfinite(opts->clip_coef) || !(opts->max_norm >= 0.0f) ||
	    !(opts->init_loss_scale >= 0.0f))
		return c ? spw__error(c, -EINVAL, "spw_optimizer_new: bad options (groups, mode, tier or a coefficient)")
			 : -EINVAL;
	for (i = 0; i < opts->ngroups; i++)
		if (!group_ok(&opts->groups[i]))
			return spw__error(c, -EINVAL, "spw_optimizer_new: param group %u: a hyperparameter is out of range", i);
	r = spw_client_info(c, &info);
	if (r < 0)
		return spw__error(c, r, "spw_optimizer_new: no session attached (call spw_client_attach first)");

	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->c = c;
	o->wake_fd = -1;
	o->staging_id = UINT32_MAX;
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cond, NULL);
	o->mode = opts->mode;
	o->tier = opts->tier;
	o->ngroups = opts->ngroups;
	o->accum = opts->accumulation ? opts->accumulation : 1;
	o->clip_coef = opts->clip_coef > 0.0f ? opts->clip_coef : 1.0f;
	o->max_norm = opts->max_norm;
	o->dynamic = opts->dynamic_loss_scale != 0;
	o->scale = opts->init_loss_scale > 0.0f ? opts->init_loss_scale : 65536.0f;
	o->growth_interval = opts->growth_interval ? opts->growth_interval : 2000;
	o->page_size = info.page_size;
	o->chunk_elems = info.page_size / 4;
	o->ring_cap = info.cq_entries < info.sq_entries ? info.cq_entries : info.sq_entries;
	o->k = spw_kernels();
	atomic_store(&o->st_hints, 1);
	w = opts->window ? opts->window : DEFAULT_WINDOW;
	/* Each chunk in flight pins up to 4 pages and uses 2 staging pages;
	 * the ring must carry every pin of the window with room for hints. */
	if (w > o->ring_cap / 8)
		w = o->ring_cap / 8;
	if (w > info.slots / 6)
		w = info.slots / 6;
	if (w == 0)
		w = 1;
	o->window = w;

	o->groups = calloc(o->ngroups, sizeof(*o->groups));
	o->lrs = calloc(o->ngroups, sizeof(*o->lrs));
	o->gconsts = calloc(o->ngroups, sizeof(*o->gconsts));
	o->sbuf = calloc(2 * w, sizeof(*o->sbuf));
	o->gfree = calloc(w, sizeof(*o->gfree));
	o->cfree = calloc(w, sizeof(*o->cfree));
	if (!o->groups || !o->lrs || !o->gconsts || !o->sbuf || !o->gfree || !o->cfree) {
		r = -ENOMEM;
		goto fail;
	}
	memcpy(o->groups, opts->groups, o->ngroups * sizeof(*o->groups));

	o->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (o->wake_fd < 0) {
		r = spw__error(c, -errno, "spw_optimizer_new: eventfd: %s", strerror(errno));
		goto fail;
	}
	r = spw__device_open(opts->device, &o->dev, err, sizeof(err));
	if (r < 0) {
		spw__error(c, r, "spw_optimizer_new: %s", err);
		goto fail;
	}
	/* Page-locks the region for the cuda backend's DMA; the host backend
	 * only keeps note. */
	r = spw__host_register(o->dev, c->region, c->region_bytes);
	if (r < 0) {
		spw__error(c, r, "spw_optimizer_new: registering the region with the %s device: %s",
			   spw__device_name(o->dev), spw__device_errmsg(o->dev, err, sizeof(err)));
		goto fail;
	}
	o->region_registered = true;
	if ((r = spw__stream_create(o->dev, &o->d2h)) < 0 || (r = spw__stream_create(o->dev, &o->h2d)) < 0 ||
	    (r = spw__event_create(o->dev, &o->prod_ev)) < 0) {
		spw__error(c, r, "spw_optimizer_new: creating copy streams: %s",
			   spw__device_errmsg(o->dev, err, sizeof(err)));
		goto fail;
	}
	po.threads = opts->threads;
	r = spw__pool_new(&po, &o->pool);
	if (r < 0) {
		spw__error(c, r, "spw_optimizer_new: starting the thread pool: %s", spw_strerror(r));
		goto fail;
	}

	/* Staging pages stay pinned for the optimizer's life: their
	 * addresses are where the copy streams read and write. */
	r = spw_tensor_register(c, "spw.opt.staging", (uint64_t)2 * w * o->page_size, SPW_TENSOR_RESIDENT,
				&o->staging_id, NULL);
	if (r < 0)
		goto fail;
	for (i = 0; i < 2 * w; i++) {
		r = spw_pin(c, o->staging_id, i, &o->sbuf[i]);
		if (r < 0)
			goto fail;
	}
	for (i = 0; i < w; i++) {
		o->gfree[i] = (int)i;
		o->cfree[i] = (int)(w + i);
	}
	o->ngfree = o->ncfree = w;

	r = pthread_create(&o->engine, NULL, engine_main, o);
	if (r) {
		r = spw__error(c, -r, "spw_optimizer_new: starting the engine thread: %s", strerror(r));
		goto fail;
	}
	o->engine_started = true;
	*ret = o;
	return 0;
fail:
	spw_optimizer_free(o);
	return r;
}

/* Waits, lock held, until cond holds or the optimizer is broken. */
#define WAIT_UNTIL(opt, pred)                                           \
	do {                                                            \
		while (!(opt)->err && !(pred))                          \
			pthread_cond_wait(&(opt)->cond, &(opt)->lock);  \
	} while (0)

SPW_EXPORT spw_optimizer *spw_optimizer_free(spw_optimizer *o)
{
	uint32_t i;

	if (!o)
		return NULL;
	if (o->engine_started) {
		pthread_mutex_lock(&o->lock);
		WAIT_UNTIL(o, o->jobs_open == 0 && o->d2h_open == 0);
		o->stop = true;
		pthread_cond_broadcast(&o->cond);
		pthread_mutex_unlock(&o->lock);
		wake(o);
		pthread_join(o->engine, NULL);
	}
	/* Kernels and copies may still run after an error: let them end
	 * before their memory goes. */
	o->pool = spw__pool_free(o->pool);
	if (o->dev) {
		spw__stream_destroy(o->dev, o->d2h);
		spw__stream_destroy(o->dev, o->h2d);
	}
	if (!o->c->dead && !o->err) {
		for (i = 0; i < 2 * o->window && o->sbuf && o->sbuf[i]; i++)
			spw_unpin(o->c, o->staging_id, i, SPW_CLEAN);
		if (o->staging_id != UINT32_MAX)
			spw_tensor_unregister(o->c, o->staging_id);
		for (i = 0; i < o->ntensors; i++)
			for (unsigned r = 0; r < R__N; r++)
				if (role_used(&o->tensors[i], r))
					spw_tensor_unregister(o->c, o->tensors[i].id[r]);
	}
	if (o->dev) {
		/* After the streams: no queued record or wait refers to them. */
		for (i = 0; i < o->ntensors; i++) {
			spw__event_destroy(o->dev, o->tensors[i].ev);
			spw__event_destroy(o->dev, o->tensors[i].free_ev);
		}
		spw__event_destroy(o->dev, o->prod_ev);
	}
	if (o->region_registered)
		spw__host_unregister(o->dev, o->c->region);
	o->dev = spw__device_close(o->dev);
	for (i = 0; i < o->ntensors; i++) {
		for (uint32_t k = 0; k < o->tensors[i].nchunks; k++)
			free(o->tensors[i].chunks[k].partial);
		free(o->tensors[i].chunks);
		free(o->tensors[i].name);
	}
	free(o->tensors);
	free(o->chunks);
	free(o->order);
	free(o->pred);
	free(o->pos);
	free(o->forder);
	free(o->fpred);
	free(o->groups);
	free(o->lrs);
	free(o->gconsts);
	free(o->sbuf);
	free(o->gfree);
	free(o->cfree);
	if (o->wake_fd >= 0)
		close(o->wake_fd);
	pthread_cond_destroy(&o->cond);
	pthread_mutex_destroy(&o->lock);
	free(o);
	return NULL;
}

static bool name_ok(const char *name)
{
	size_t n;

	if (!name)
		return false;
	n = strlen(name);
	if (n == 0 || n > MAX_NAME)
		return false;
	for (size_t i = 0; i < n; i++)
		if (name[i] < 0x21 || name[i] > 0x7e)
			return false;
	return true;
}

/* Writes the initial master weights page by page, cast to fp32 (exact
 * from bf16 and fp16). The ring is ours. */
static int write_init(spw_optimizer *o, const struct tensor *t, const void *init, enum spw_dtype dt)
{
	size_t es = spw_dtype_size(dt);

	for (uint32_t k = 0; k < t->nchunks; k++) {
		const struct chunk *ch = &t->chunks[k];
		void *p;
		int r = spw_pin(o->c, t->id[R_P], k, &p);

		if (r < 0)
			return r;
		o->k->cast[SPW_DTYPE_F32][dt](p, (const unsigned char *)init + ch->off * es, ch->n);
		r = spw_unpin(o->c, t->id[R_P], k, SPW_DIRTY);
		if (r < 0)
			return r;
	}
	return 0;
}

static const char *const role_suffix[R__N] = { "param", "exp_avg", "exp_avg_sq", "grad" };

/* Checks shared by every add; 0 or the error (with its message). */
static int add_check(spw_optimizer *o, const char *name, uint64_t count, uint32_t *ret_tensor)
{
	int r;

	if ((r = broken(o)) < 0)
		return r;
	if (!name_ok(name))
		return opt_error(o, -EINVAL, "add: a tensor name is printable ASCII without spaces, 1..%d bytes", MAX_NAME);
	if (count == 0 || !ret_tensor)
		return opt_error(o, -EINVAL, "add %s: count is 0 or ret_tensor is NULL", name);
	if (o->started)
		return opt_error(o, -EBUSY, "add %s: tensors are added before the first step", name);
	for (uint32_t i = 0; i < o->ntensors; i++)
		if (!strcmp(o->tensors[i].name, name))
			return opt_error(o, -EEXIST, "add %s: the optimizer has a tensor of that name", name);
	return 0;
}

/* Registers a tensor's spillway tensors and writes its initial weights.
 * dev NULL: no copy-out after Adam. Frozen tensors have master weights
 * only and take no part in steps (their chunks are not in o->chunks). */
static int add_tensor(spw_optimizer *o, const char *name, uint32_t group, uint64_t count,
		      const void *init, enum spw_dtype init_type, void *dev_params,
		      enum spw_dtype param_type, bool frozen, uint32_t *ret_tensor)
{
	struct tensor *tv, *t;
	struct chunk **cv;
	uint32_t *ov, *pv, *posv;
	uint32_t nch, i, registered = 0;
	int r;

	nch = (uint32_t)((count + o->chunk_elems - 1) / o->chunk_elems);

	tv = realloc(o->tensors, (o->ntensors + 1) * sizeof(*tv));
	if (!tv)
		return opt_error(o, -ENOMEM, "add %s: out of memory", name);
	o->tensors = tv;
	/* realloc may have moved the tensors: point every chunk home again,
	 * whether or not this add succeeds. */
	for (i = 0; i < o->ntensors; i++)
		for (uint32_t k = 0; k < o->tensors[i].nchunks; k++)
			o->tensors[i].chunks[k].t = &o->tensors[i];
	cv = realloc(o->chunks, (o->nchunks + nch) * sizeof(*cv));
	if (!cv)
		return -ENOMEM;
	o->chunks = cv;
	ov = realloc(o->order, (o->nchunks + nch) * sizeof(*ov));
	if (ov)
		o->order = ov;
	pv = realloc(o->pred, (o->nchunks + nch) * sizeof(*pv));
	if (pv)
		o->pred = pv;
	posv = realloc(o->pos, (o->nchunks + nch) * sizeof(*posv));
	if (posv)
		o->pos = posv;
	if (!ov || !pv || !posv)
		return opt_error(o, -ENOMEM, "add %s: out of memory", name);

	t = &o->tensors[o->ntensors];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	t->chunks = calloc(nch, sizeof(*t->chunks));
	if (!t->name || !t->chunks)
		goto oom;
	t->group = group;
	t->count = count;
	t->dev = dev_params;
	t->ptype = param_type;
	t->nchunks = nch;
	t->frozen = frozen;
	t->has_g = !frozen && (o->mode == SPW_OPT_EXACT || o->accum > 1);
	if (spw__event_create(o->dev, &t->ev) < 0 || spw__event_create(o->dev, &t->free_ev) < 0) {
		char buf[256];

		r = opt_error(o, -ENOMEM, "add %s: creating device events: %s", name,
			      spw__device_errmsg(o->dev, buf, sizeof(buf)));
		goto undo;
	}
	for (i = 0; i < nch; i++) {
		struct chunk *ch = &t->chunks[i];

		ch->index = i;
		ch->global = frozen ? UINT32_MAX : o->nchunks + i;
		ch->off = (uint64_t)i * o->chunk_elems;
		ch->n = count - ch->off < o->chunk_elems ? count - ch->off : o->chunk_elems;
		ch->partial = calloc((ch->n + TILE - 1) / TILE, sizeof(double));
		ch->job.o = o;
		ch->job.ch = ch;
		ch->job.gbuf = ch->job.cbuf = -1;
		if (!ch->partial)
			goto oom;
	}

	ring_acquire(o);
	for (registered = 0; registered < R__N; registered++) {
		char full[MAX_NAME + 32];

		if (!role_used(t, registered))
			continue;
		snprintf(full, sizeof(full), "spw.opt.%s.%s", name, role_suffix[registered]);
		r = spw_tensor_register(o->c, full, count * sizeof(float), o->tier, &t->id[registered], NULL);
		if (r < 0)
			break;
	}
	if (r >= 0)
		r = write_init(o, t, init, init_type);
	if (r < 0) {
		opt_error(o, r, "add %s: %s", name, spw_client_last_error(o->c));
		for (i = 0; i < registered && i < R__N; i++)
			if (role_used(t, i))
				spw_tensor_unregister(o->c, t->id[i]);
		ring_release(o);
		goto undo;
	}
	ring_release(o);

	for (i = 0; i < nch && !frozen; i++) {
		o->chunks[o->nchunks + i] = &t->chunks[i];
		/* Until a step has shown the real order, registration order
		 * is the guess for hints. */
		o->pred[o->nchunks + i] = o->nchunks + i;
		o->pos[o->nchunks + i] = o->nchunks + i;
	}
	if (!frozen) {
		o->nchunks += nch;
		o->npred = o->nchunks;
	}
	for (i = 0; i < nch; i++)
		t->chunks[i].t = t;
	*ret_tensor = o->ntensors++;
	return 0;
oom:
	r = opt_error(o, -ENOMEM, "add %s: out of memory", name);
undo:
	if (t->chunks)
		for (i = 0; i < nch; i++)
			free(t->chunks[i].partial);
	spw__event_destroy(o->dev, t->ev);
	spw__event_destroy(o->dev, t->free_ev);
	free(t->chunks);
	free(t->name);
	return r;
}

SPW_EXPORT int spw_optimizer_add(spw_optimizer *o, const char *name, uint32_t group,
				 uint64_t count, const float *init, void *dev_params,
				 enum spw_type param_type, uint32_t *ret_tensor)
{
	int r;

	if (!o)
		return -EINVAL;
	if ((r = add_check(o, name, count, ret_tensor)) < 0)
		return r;
	if (group >= o->ngroups || !init || !dev_params || (unsigned)param_type > SPW_TYPE_F16)
		return opt_error(o, -EINVAL, "add %s: bad group (%u of %u), count, type or NULL pointer", name,
				 group, o->ngroups);
	return add_tensor(o, name, group, count, init, SPW_DTYPE_F32, dev_params,
			  (enum spw_dtype)param_type, false, ret_tensor);
}

SPW_EXPORT int spw_optimizer_add_offloaded(spw_optimizer *o, const char *name, uint32_t group,
					   uint64_t count, const float *init, uint32_t *ret_tensor)
{
	int r;

	if (!o)
		return -EINVAL;
	if ((r = add_check(o, name, count, ret_tensor)) < 0)
		return r;
	if (group >= o->ngroups || !init)
		return opt_error(o, -EINVAL, "add %s: bad group (%u of %u) or NULL init", name, group, o->ngroups);
	return add_tensor(o, name, group, count, init, SPW_DTYPE_F32, NULL, SPW_DTYPE_NONE, false, ret_tensor);
}

SPW_EXPORT int spw_optimizer_add_frozen(spw_optimizer *o, const char *name, uint64_t count,
					const void *init, enum spw_type init_type, uint32_t *ret_tensor)
{
	int r;

	if (!o)
		return -EINVAL;
	if ((r = add_check(o, name, count, ret_tensor)) < 0)
		return r;
	if (!init || (unsigned)init_type > SPW_TYPE_F16)
		return opt_error(o, -EINVAL, "add_frozen %s: init is NULL or its type is not SPW_TYPE_F32, _BF16 "
				 "or _F16", name);
	return add_tensor(o, name, 0, count, init, (enum spw_dtype)init_type, NULL, SPW_DTYPE_NONE, true,
			  ret_tensor);
}

SPW_EXPORT uint32_t spw_optimizer_chunks(const spw_optimizer *o, uint32_t tensor)
{
	return o && tensor < o->ntensors ? o->tensors[tensor].nchunks : 0;
}

static int prepare(spw_optimizer *o, uint32_t g, float grad_scale, struct spw_adamw_consts *out)
{
	struct spw_adamw_hparams hp = {
		.lr = o->lrs[g], .beta1 = o->groups[g].beta1, .beta2 = o->groups[g].beta2,
		.eps = o->groups[g].eps, .weight_decay = o->groups[g].weight_decay,
		.grad_scale = grad_scale, .step = o->step,
	};

	return spw_adamw_prepare(&hp, out);
}

SPW_EXPORT int spw_optimizer_begin(spw_optimizer *o, uint64_t step, const float *lrs, float loss_scale)
{
	uint32_t g;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = broken(o)) < 0)
		return r;
	if (o->in_step)
		return opt_error(o, -EBUSY, "begin %ju: step %ju is still open (call spw_optimizer_end)",
				 (uintmax_t)step, (uintmax_t)o->step);
	if (step == 0 || !isfinite(loss_scale) || loss_scale < 0.0f)
		return opt_error(o, -EINVAL, "begin: the step number starts at 1 and the loss scale is finite, >= 0");
	if (o->ntensors == 0)
		return opt_error(o, -EINVAL, "begin: the optimizer has no tensors (spw_optimizer_add)");
	for (g = 0; g < o->ngroups; g++) {
		float lr = lrs ? lrs[g] : o->groups[g].lr;

		if (!isfinite(lr) || lr < 0.0f)
			return opt_error(o, -EINVAL, "begin: learning rate of group %u is %g", g, (double)lr);
		o->lrs[g] = lr;
	}
	o->step = step;
	o->loss_scale = loss_scale > 0.0f ? loss_scale : o->dynamic ? o->scale : 1.0f;
	for (g = 0; g < o->ngroups; g++)
		if (prepare(o, g, o->clip_coef / o->loss_scale, &o->gconsts[g]) < 0)
			return opt_error(o, -EINVAL, "begin: group %u's hyperparameters give no valid update", g);
	/* Each step's fetches predict the next step's. */
	if (o->nforder) {
		uint32_t *tmp = o->fpred;

		o->fpred = o->forder;
		o->forder = tmp;
		o->nfpred = o->nforder;
		o->nforder = 0;
	}
	pthread_mutex_lock(&o->lock);
	o->norder = 0;
	/* After an exact step's end the pager's recording runs on from the
	 * updates into this step's gradients: one order per cycle, whose
	 * read-ahead wraps from the last gradients into the next updates.
	 * A second mark here would cut it into two halves that each
	 * contradict the other. */
	if (!o->marked_at_end)
		o->step_mark = true;
	o->marked_at_end = false;
	pthread_mutex_unlock(&o->lock);
	wake(o);
	o->in_step = true;
	o->started = true;
	return 0;
}

/* Sends an update's copy-out to the tensor's device buffer, when it has
 * one. Lock held. */
static void set_copy(struct chunk *ch, struct job *j)
{
	struct tensor *t = ch->t;

	j->copy = t->dev != NULL;
	if (!j->copy)
		return;
	j->cdt = t->ptype;
	j->dst = (unsigned char *)t->dev + ch->off * spw_dtype_size(t->ptype);
	t->unqueued++;
}

/* Chooses what a gradient's arrival sets off. Lock held. */
static void plan_job(spw_optimizer *o, struct chunk *ch, enum spw_dtype gdt)
{
	struct job *j = &ch->job;
	bool last = ch->arrivals == o->accum;

	j->gdt = gdt;
	j->first = ch->arrivals == 1;
	j->copy = false;
	j->want_norm = last;
	if (o->mode == SPW_OPT_OVERLAPPED && o->accum == 1) {
		j->kind = JOB_ADAM;
		j->roles = 1u << R_P | 1u << R_M | 1u << R_V;
	} else if (o->mode == SPW_OPT_OVERLAPPED && last) {
		j->kind = JOB_GRAD_ADAM;
		j->roles = 1u << R_P | 1u << R_M | 1u << R_V | 1u << R_G;
	} else {
		j->kind = JOB_GRAD;
		j->roles = 1u << R_G;
	}
	j->wait_free = false;
	j->nhints = 0;
	if (j->kind != JOB_GRAD) {
		set_copy(ch, j);
		j->consts = o->gconsts[ch->t->group];
	}
}

/*
 * The trainer's stream as a device stream. 1 when there is one, 0 when
 * stream is NULL or, on the host backend, not a stream of this device
 * (the trainer's work is then complete at the call, as the header says),
 * or the error.
 */
static int borrow(spw_optimizer *o, void *stream, struct spw__stream **ret, const char *what,
		  const char *name)
{
	char buf[256];
	int r;

	if (!stream)
		return 0;
	r = spw__stream_borrow(o->dev, stream, ret);
	if (r == -ENOENT && !strcmp(spw__device_name(o->dev), "host"))
		return 0;
	if (r < 0)
		return opt_error(o, r, "%s %s: using the stream: %s", what, name,
				 spw__device_errmsg(o->dev, buf, sizeof(buf)));
	return 1;
}

/* Makes the work queued on `on` from now wait for what the trainer has
 * queued on stream so far (an event recorded there, waited on here). */
static int after_stream(spw_optimizer *o, void *stream, struct spw__event *ev, struct spw__stream *on,
			const char *what, const char *name)
{
	struct spw__stream *s;
	char buf[256];
	int r = borrow(o, stream, &s, what, name);

	if (r <= 0)
		return r;
	r = spw__event_record(o->dev, ev, s);
	if (r >= 0)
		r = spw__stream_wait_event(o->dev, on, ev);
	if (r < 0)
		return opt_error(o, r, "%s %s: ordering after the stream: %s", what, name,
				 spw__device_errmsg(o->dev, buf, sizeof(buf)));
	return 0;
}

SPW_EXPORT int spw_optimizer_grad_ready(spw_optimizer *o, uint32_t tensor, uint32_t chunk,
					const void *grad, size_t bytes, enum spw_type type,
					void *stream)
{
	struct tensor *t;
	uint32_t first, last;
	uint64_t span;
	size_t es;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = broken(o)) < 0)
		return r;
	if (!o->in_step)
		return opt_error(o, -EPROTO, "grad_ready: no step is open (call spw_optimizer_begin first)");
	if (tensor >= o->ntensors)
		return opt_error(o, -EINVAL, "grad_ready: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if (t->frozen)
		return opt_error(o, -EINVAL, "grad_ready %s: the tensor is frozen (it takes no gradients)", t->name);
	if (chunk != SPW_ALL_CHUNKS && chunk >= t->nchunks)
		return opt_error(o, -EINVAL, "grad_ready %s: no chunk %u (it has %u)", t->name, chunk, t->nchunks);
	if ((unsigned)type > SPW_TYPE_F16 || !grad)
		return opt_error(o, -EINVAL, "grad_ready %s: %s", t->name,
				 grad ? "the type is not SPW_TYPE_F32, _BF16 or _F16" : "grad is NULL");
	first = chunk == SPW_ALL_CHUNKS ? 0 : chunk;
	last = chunk == SPW_ALL_CHUNKS ? t->nchunks - 1 : chunk;
	es = spw_dtype_size((enum spw_dtype)type);
	span = t->chunks[last].off + t->chunks[last].n - t->chunks[first].off;
	if (bytes != span * es)
		return opt_error(o, -EMSGSIZE, "grad_ready %s: %zu bytes given, the span holds %ju elements of %zu bytes",
				 t->name, bytes, (uintmax_t)span, es);
	pthread_mutex_lock(&o->lock);
	for (uint32_t k = first; k <= last; k++)
		if (t->chunks[k].arrivals >= o->accum) {
			pthread_mutex_unlock(&o->lock);
			return opt_error(o, -EALREADY, "grad_ready %s chunk %u: already handed over %u time%s this step",
					 t->name, k, o->accum, o->accum > 1 ? "s" : "");
		}
	pthread_mutex_unlock(&o->lock);
	/* The copies below are queued after this wait on the d2h stream, so
	 * they read the gradient only once the producer has written it. */
	if ((r = after_stream(o, stream, o->prod_ev, o->d2h, "grad_ready", t->name)) < 0)
		return r;

	for (uint32_t k = first; k <= last; k++) {
		struct chunk *ch = &t->chunks[k];
		struct job *j = &ch->job;
		char buf[256];

		pthread_mutex_lock(&o->lock);
		/* A chunk takes its next gradient once its last job is done,
		 * and a free staging page bounds what is in flight. */
		WAIT_UNTIL(o, !ch->busy && o->ngfree > 0);
		if ((r = broken_locked(o)) < 0) {
			pthread_mutex_unlock(&o->lock);
			return r;
		}
		ch->arrivals++;
		ch->busy = true;
		plan_job(o, ch, (enum spw_dtype)type);
		j->gbuf = o->gfree[--o->ngfree];
		j->sgrad = o->sbuf[j->gbuf];
		if (ch->arrivals == 1 && o->norder < o->nchunks)
			o->order[o->norder++] = ch->global;
		o->d2h_open++;
		o->grad_jobs_open++;
		o->jobs_open++;
		t->pending++;
		pthread_mutex_unlock(&o->lock);

		r = spw__memcpy_d2h_async(o->dev, (void *)j->sgrad,
					  (const unsigned char *)grad + (ch->off - t->chunks[first].off) * es,
					  ch->n * es, o->d2h);
		if (r >= 0)
			r = spw__launch_host_fn(o->dev, o->d2h, grad_arrived, j);
		if (r < 0) {
			pthread_mutex_lock(&o->lock);
			fatal_locked(o, r, "grad_ready %s chunk %u: copying the gradient: %s", t->name, k,
				     spw__device_errmsg(o->dev, buf, sizeof(buf)));
			r = broken_locked(o);
			pthread_mutex_unlock(&o->lock);
			return r;
		}
		atomic_fetch_add_explicit(&o->st_d2h, ch->n * es, memory_order_relaxed);
	}
	return 0;
}

SPW_EXPORT int spw_optimizer_sync_grads(spw_optimizer *o)
{
	int r;

	if (!o)
		return -EINVAL;
	pthread_mutex_lock(&o->lock);
	WAIT_UNTIL(o, o->d2h_open == 0);
	r = broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

static void queue_locked(spw_optimizer *o, struct job *j)
{
	j->next = NULL;
	if (o->ready_tail)
		o->ready_tail->next = j;
	else
		o->ready_head = j;
	o->ready_tail = j;
}

SPW_EXPORT int spw_optimizer_end(spw_optimizer *o, struct spw_step_result *res)
{
	struct spw_step_result out = { .size = sizeof(out) };
	double total = 0.0, norm;
	float coef = 1.0f;
	bool skip = false;
	uint32_t i;
	int r;

	if (!o)
		return -EINVAL;
	if (res && res->size < sizeof(*res))
		return opt_error(o, -EINVAL, "end: res->size is smaller than struct spw_step_result");
	if ((r = broken(o)) < 0)
		return r;
	if (!o->in_step)
		return opt_error(o, -EPROTO, "end: no step is open (call spw_optimizer_begin first)");
	pthread_mutex_lock(&o->lock);
	for (i = 0; i < o->nchunks; i++) {
		struct chunk *ch = o->chunks[i];

		if (ch->arrivals < o->accum) {
			pthread_mutex_unlock(&o->lock);
			return opt_error(o, -ENODATA, "end: tensor %s chunk %u got %u of its %u gradient%s this step",
					 ch->t->name, ch->index, ch->arrivals, o->accum, o->accum > 1 ? "s" : "");
		}
	}
	/* Exact mode re-uses each chunk's job for the update, so every
	 * earlier job must be over; overlapped mode waits for the kernels. */
	WAIT_UNTIL(o, o->grad_jobs_open == 0 && (o->mode == SPW_OPT_OVERLAPPED || o->jobs_open == 0));
	if ((r = broken_locked(o)) < 0) {
		pthread_mutex_unlock(&o->lock);
		return r;
	}
	/* Fixed order (tensor, chunk), so the norm is the same however the
	 * gradients arrived. */
	for (i = 0; i < o->nchunks; i++)
		total += o->chunks[i]->sumsq;
	norm = sqrt(total) / (double)o->loss_scale;
	out.nonfinite = !isfinite(total);
	out.loss_scale = o->loss_scale;
	if (o->mode == SPW_OPT_OVERLAPPED) {
		coef = o->clip_coef;
	} else if (out.nonfinite) {
		skip = true;
	} else {
		if (o->max_norm > 0.0f) {
			double c = (double)o->max_norm / (norm + 1e-6);

			coef = c < 1.0 ? (float)c : 1.0f;
		}
		for (uint32_t g = 0; g < o->ngroups; g++)
			prepare(o, g, coef / o->loss_scale, &o->gconsts[g]);
		/* The next forward needs the first layers first: the reverse
		 * of the order backward produced them in. */
		for (i = o->norder; i-- > 0;) {
			struct chunk *ch = o->chunks[o->order[i]];
			struct job *j = &ch->job;

			j->kind = JOB_ADAM_STORE;
			j->roles = 1u << R_P | 1u << R_M | 1u << R_V | 1u << R_G;
			j->wait_free = false;
			j->nhints = 0;
			set_copy(ch, j);
			j->want_norm = false;
			j->gbuf = -1;
			j->sgrad = NULL;
			j->consts = o->gconsts[ch->t->group];
			ch->busy = true;
			ch->t->pending++;
			o->jobs_open++;
			queue_locked(o, j);
		}
	}
	for (i = 0; i < o->nchunks; i++)
		o->chunks[i]->arrivals = 0;
	/* Hints for the next step follow this step's order: the reverse
	 * one for exact mode's updates, which come first. */
	for (i = 0; i < o->norder; i++) {
		uint32_t c = o->mode == SPW_OPT_EXACT && !skip ? o->order[o->norder - 1 - i] : o->order[i];

		o->pred[i] = c;
		o->pos[c] = i;
	}
	o->npred = o->norder;
	o->step_mark = o->mode == SPW_OPT_EXACT && !skip;
	o->marked_at_end = o->step_mark;
	pthread_mutex_unlock(&o->lock);
	wake(o);

	if (o->dynamic && o->mode == SPW_OPT_EXACT) {
		if (skip) {
			o->scale *= 0.5f;
			o->good_steps = 0;
		} else if (++o->good_steps >= o->growth_interval) {
			o->scale *= 2.0f;
			o->good_steps = 0;
		}
	}
	out.grad_norm = norm;
	out.clip_coef = coef;
	out.skipped = skip;
	out.next_loss_scale = o->dynamic ? o->scale : o->loss_scale;
	o->in_step = false;
	atomic_fetch_add_explicit(&o->st_steps, 1, memory_order_relaxed);
	if (res)
		*res = out;
	return 0;
}

SPW_EXPORT int spw_optimizer_wait_params(spw_optimizer *o, uint32_t tensor, void *stream)
{
	struct spw__stream *s = NULL;
	struct tensor *t;
	char buf[256];
	int r, on_stream;

	if (!o)
		return -EINVAL;
	if (tensor >= o->ntensors)
		return opt_error(o, -EINVAL, "wait_params: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if ((on_stream = borrow(o, stream, &s, "wait_params", t->name)) < 0)
		return on_stream;
	pthread_mutex_lock(&o->lock);
	/* With a stream, the host waits only until every copy is queued on
	 * h2d (the Adam or cast before it has run); the stream waits for the
	 * copies themselves. Without, the host waits for them to land. */
	if (on_stream)
		WAIT_UNTIL(o, t->unqueued == 0);
	else
		WAIT_UNTIL(o, t->pending == 0);
	r = broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	if (r < 0 || !on_stream)
		return r;
	r = spw__stream_wait_event(o->dev, s, t->ev);
	if (r < 0)
		return opt_error(o, r, "wait_params %s: making the stream wait: %s", t->name,
				 spw__device_errmsg(o->dev, buf, sizeof(buf)));
	return 0;
}

/* The fetch order: the tensors the previous step fetched after the
 * fetch at position at (when that one fetched the same tensor), as
 * PREFETCH hints for their master pages, at most FETCH_HINTS. */
static void plan_fetch_hints(spw_optimizer *o, uint32_t at, uint32_t tensor, struct job *j)
{
	j->nhints = 0;
	if (o->tier != SPW_TENSOR_SWAPPABLE || at >= o->nfpred || o->fpred[at] != tensor)
		return;
	for (uint32_t i = at + 1; i < o->nfpred && j->nhints < FETCH_HINTS; i++) {
		const struct tensor *n = &o->tensors[o->fpred[i]];

		for (uint32_t k = 0; k < n->nchunks && j->nhints < FETCH_HINTS; k++) {
			j->hint_id[j->nhints] = n->id[R_P];
			j->hint_page[j->nhints++] = k;
		}
	}
}

SPW_EXPORT int spw_params_fetch(spw_optimizer *o, uint32_t tensor, void *dst, size_t bytes,
				enum spw_type type, void *stream)
{
	struct spw__stream *s = NULL;
	struct tensor *t;
	char buf[256];
	size_t es;
	uint32_t at;
	int r, waited;

	if (!o)
		return -EINVAL;
	if ((r = broken(o)) < 0)
		return r;
	if (tensor >= o->ntensors)
		return opt_error(o, -EINVAL, "fetch: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if (!dst || (unsigned)type > SPW_TYPE_F16)
		return opt_error(o, -EINVAL, "fetch %s: %s", t->name,
				 dst ? "the type is not SPW_TYPE_F32, _BF16 or _F16" : "dst is NULL");
	es = spw_dtype_size((enum spw_dtype)type);
	if (bytes != t->count * es)
		return opt_error(o, -EMSGSIZE, "fetch %s: %zu bytes given, the tensor holds %ju elements of %zu bytes",
				 t->name, bytes, (uintmax_t)t->count, es);
	if (t->fetched)
		return opt_error(o, -EALREADY, "fetch %s: fetched already (call spw_params_release first)", t->name);
	/* The copies into dst, queued later by the engine, wait for the
	 * trainer's earlier work on stream (which may still read dst): the
	 * event is recorded now and waited on just before each copy, so h2d
	 * is held up no earlier than it must be. */
	if ((waited = borrow(o, stream, &s, "fetch", t->name)) < 0)
		return waited;
	if (waited && (r = spw__event_record(o->dev, t->free_ev, s)) < 0)
		return opt_error(o, r, "fetch %s: recording an event on the stream: %s", t->name,
				 spw__device_errmsg(o->dev, buf, sizeof(buf)));

	if (o->nforder == o->fcap) {
		uint32_t cap = o->fcap ? 2 * o->fcap : 64;
		uint32_t *a = realloc(o->forder, cap * sizeof(*a)), *b;

		if (a)
			o->forder = a;
		b = a ? realloc(o->fpred, cap * sizeof(*b)) : NULL;
		if (!b)
			return opt_error(o, -ENOMEM, "fetch %s: out of memory", t->name);
		o->fpred = b;
		o->fcap = cap;
	}
	at = o->nforder;
	o->forder[o->nforder++] = tensor;

	for (uint32_t k = 0; k < t->nchunks; k++) {
		struct chunk *ch = &t->chunks[k];
		struct job *j = &ch->job;

		pthread_mutex_lock(&o->lock);
		/* After the chunk's pending update (the fetch sees it), and
		 * never beside one (the update writes what the fetch reads). */
		WAIT_UNTIL(o, !ch->busy);
		if ((r = broken_locked(o)) < 0) {
			pthread_mutex_unlock(&o->lock);
			return r;
		}
		ch->busy = true;
		j->kind = JOB_FETCH;
		j->roles = 1u << R_P;
		j->first = j->want_norm = false;
		j->gbuf = -1;
		j->sgrad = NULL;
		j->copy = true;
		j->cdt = (enum spw_dtype)type;
		j->dst = (unsigned char *)dst + ch->off * es;
		j->wait_free = waited > 0;
		if (k == 0)
			plan_fetch_hints(o, at, tensor, j);
		else
			j->nhints = 0;
		t->unqueued++;
		t->pending++;
		t->fetch_open++;
		o->jobs_open++;
		queue_locked(o, j);
		pthread_mutex_unlock(&o->lock);
		wake(o);
	}
	t->fetched = true;
	atomic_fetch_add_explicit(&o->st_fetches, 1, memory_order_relaxed);
	return 0;
}

SPW_EXPORT int spw_params_release(spw_optimizer *o, uint32_t tensor)
{
	struct tensor *t;
	int r;

	if (!o)
		return -EINVAL;
	if (tensor >= o->ntensors)
		return opt_error(o, -EINVAL, "release: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if (!t->fetched)
		return opt_error(o, -EPROTO, "release %s: not fetched (spw_params_fetch first)", t->name);
	pthread_mutex_lock(&o->lock);
	/* Nothing may write the buffer once the trainer has it back. */
	WAIT_UNTIL(o, t->fetch_open == 0);
	r = broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	t->fetched = false;
	return r;
}

SPW_EXPORT int spw_optimizer_sync(spw_optimizer *o)
{
	int r;

	if (!o)
		return -EINVAL;
	pthread_mutex_lock(&o->lock);
	WAIT_UNTIL(o, o->jobs_open == 0 && o->d2h_open == 0);
	r = broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

/* What read and write check before touching a tensor's state, then the
 * sync after which no job holds a pin on it or reads its chunks' flags. */
static int state_access(spw_optimizer *o, const char *verb, uint32_t tensor, enum spw_optimizer_state which,
			const void *buf, struct tensor **ret)
{
	struct tensor *t;
	int r;

	if (tensor >= o->ntensors || (unsigned)which > SPW_STATE_EXP_AVG_SQ || !buf)
		return opt_error(o, -EINVAL, "%s: no tensor %u or state %d, or the buffer is NULL", verb, tensor,
				 (int)which);
	if (o->in_step)
		return opt_error(o, -EBUSY, "%s: a step is open", verb);
	t = &o->tensors[tensor];
	if (t->frozen && which != SPW_STATE_PARAM)
		return opt_error(o, -EINVAL, "%s %s: a frozen tensor has no optimizer state", verb, t->name);
	if ((r = spw_optimizer_sync(o)) < 0)
		return r;
	*ret = t;
	return 0;
}

SPW_EXPORT int spw_optimizer_read(spw_optimizer *o, uint32_t tensor, enum spw_optimizer_state which,
				  float *out)
{
	struct tensor *t;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = state_access(o, "read", tensor, which, out, &t)) < 0)
		return r;
	ring_acquire(o);
	for (uint32_t k = 0; k < t->nchunks && r >= 0; k++) {
		const struct chunk *ch = &t->chunks[k];
		void *p;

		r = spw_pin(o->c, t->id[which], k, &p);
		if (r < 0)
			break;
		/* Moments never updated are torch's zeros, whatever the page holds. */
		if (which != SPW_STATE_PARAM && !ch->zeroed)
			memset(out + ch->off, 0, ch->n * sizeof(float));
		else
			memcpy(out + ch->off, p, ch->n * sizeof(float));
		r = spw_unpin(o->c, t->id[which], k, SPW_CLEAN);
	}
	ring_release(o);
	if (r < 0)
		return opt_error(o, r, "read %s: %s", t->name, spw_client_last_error(o->c));
	return 0;
}

/* Copies n values into page k of tensor id, which the caller's ring holds
 * (in NULL: zeros), and hands it back dirty so the daemon keeps them. */
static int put_page(spw_optimizer *o, uint32_t id, uint32_t k, const float *in, uint64_t n)
{
	void *p;
	int r = spw_pin(o->c, id, k, &p);

	if (r < 0)
		return r;
	if (in)
		memcpy(p, in, n * sizeof(float));
	else
		memset(p, 0, n * sizeof(float));
	return spw_unpin(o->c, id, k, SPW_DIRTY);
}

SPW_EXPORT int spw_optimizer_write(spw_optimizer *o, uint32_t tensor, enum spw_optimizer_state which,
				   const float *in)
{
	struct tensor *t;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = state_access(o, "write", tensor, which, in, &t)) < 0)
		return r;
	/* Parking the engine orders our writes of ch->zeroed before the next
	 * job's reads. */
	ring_acquire(o);
	for (uint32_t k = 0; k < t->nchunks && r >= 0; k++) {
		struct chunk *ch = &t->chunks[k];

		if (which == SPW_STATE_PARAM || ch->zeroed) {
			r = put_page(o, t->id[which], k, in + ch->off, ch->n);
			continue;
		}
		/* A chunk never updated would have both moments zeroed by its
		 * first update, wiping what is written now: zero the other
		 * moment's page here instead (it may hold a slot's earlier
		 * tenant) and mark the chunk initialised. */
		r = put_page(o, t->id[which == SPW_STATE_EXP_AVG ? R_V : R_M], k, NULL, ch->n);
		if (r >= 0)
			r = put_page(o, t->id[which], k, in + ch->off, ch->n);
		if (r >= 0)
			ch->zeroed = true;
	}
	ring_release(o);
	if (r < 0)
		return opt_error(o, r, "write %s: %s", t->name, spw_client_last_error(o->c));
	return 0;
}

static void fill_stats(spw_optimizer *o, struct spw_optimizer_stats *st);

SPW_EXPORT int spw_optimizer_stats(spw_optimizer *o, struct spw_optimizer_stats *st)
{
	struct spw_optimizer_stats all = { .size = sizeof(all) };
	size_t size;

	/* Callers built before the fetch counters pass the shorter struct. */
	if (!o || !st || st->size < offsetof(struct spw_optimizer_stats, fetches))
		return -EINVAL;
	size = st->size < sizeof(all) ? st->size : sizeof(all);
	fill_stats(o, &all);
	memcpy(st, &all, size);
	st->size = size;
	return 0;
}

static void fill_stats(spw_optimizer *o, struct spw_optimizer_stats *st)
{
	st->steps = atomic_load(&o->st_steps);
	st->bytes_d2h = atomic_load(&o->st_d2h);
	st->bytes_h2d = atomic_load(&o->st_h2d);
	st->chunks = atomic_load(&o->st_chunks);
	st->adam_s = (double)atomic_load(&o->st_adam_ns) * 1e-9;
	st->pin_wait_s = (double)atomic_load(&o->st_pin_ns) * 1e-9;
	st->pins = atomic_load(&o->st_pins);
	st->fast_pins = atomic_load(&o->st_fast_pins);
	st->prefetches = atomic_load(&o->st_prefetches);
	st->hints = atomic_load(&o->st_hints);
	st->fetches = atomic_load(&o->st_fetches);
	st->bytes_fetched = atomic_load(&o->st_fetch_bytes);
	st->fetch_prefetches = atomic_load(&o->st_fetch_hints);
}

/* For in-tree tests: the optimizer's device, to make streams of it that
 * stand for a trainer's (the host backend's "native" streams). */
struct spw__device *spw__optimizer_device(spw_optimizer *o)
{
	return o ? o->dev : NULL;
}
