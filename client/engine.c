/* SPDX-License-Identifier: MIT */
/*
 * client/engine.c: the engine thread, the one user of the session's ring.
 * It admits queued jobs while the window has room, pins their pages,
 * starts their kernels when the pins are back, queues the copy back to the
 * device, unpins, sends read-ahead hints, and parks when another call
 * needs the ring.
 *
 * It never spins (docs/pipeline.md, "Threading policy"): when a pass makes
 * no progress it sleeps in spw__wait_ring() with its eventfd as the extra
 * fd, which skips the ring's polling window and goes straight to poll()
 * on the doorbell, the eventfd and the control socket. On a host with few
 * cores a polling engine would take a core the trainer computes on.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "optimizer-private.h"

/* User data of ring ops that belong to no job; job pointers are far above. */
#define UD_STEP 1u
#define UD_PREFETCH 2u
#define UD_FETCH_HINT 3u
#define UD_MARK 4u /* persist.c */
#define UD_STATS 5u /* persist.c */
_Static_assert(2 * R__N <= 16 && _Alignof(struct job) >= 16, "a job's user data holds its role in 4 bits");

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

/* Moves a job onto one of the engine's lists and wakes it. */
static void hand_over(spw_optimizer *o, struct job **list, struct job *j)
{
	pthread_mutex_lock(&o->lock);
	push(list, j);
	pthread_mutex_unlock(&o->lock);
	spw__opt_wake(o);
}

void spw__opt_tiles_done(struct job *j)
{
	hand_over(j->o, &j->o->done_head, j);
}

/* ---- host functions on the copy streams ---- */

void spw__opt_grad_arrived(void *arg)
{
	struct job *j = arg;
	spw_optimizer *o = j->o;

	TRACE_JOB(o, SPW_TRACK_D2H, "d2h grad", j->t_d2h, j);
	pthread_mutex_lock(&o->lock);
	o->d2h_open--;
	spw__opt_queue_locked(o, j);
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
	spw__opt_wake(o);
}

int spw__opt_d2h(spw_optimizer *o, void *dst, const void *src, size_t bytes, void (*fn)(void *), void *arg)
{
	int r = dst ? spw__memcpy_d2h_async(o->dev, dst, src, bytes, o->d2h) : 0;

	if (r >= 0)
		r = spw__launch_host_fn(o->dev, o->d2h, fn, arg);
	if (r >= 0 && dst)
		atomic_fetch_add_explicit(&o->st_d2h, bytes, memory_order_relaxed);
	return r;
}

/* An update's gradient copied in again (by reference on a device). */
static void grad_refetched(void *arg)
{
	struct job *j = arg;

	TRACE_JOB(j->o, SPW_TRACK_D2H, "d2h grad again", j->t_d2h, j);
	hand_over(j->o, &j->o->refetch_head, j);
}

static void params_arrived(void *arg)
{
	struct job *j = arg;

	TRACE_JOB(j->o, SPW_TRACK_H2D, j->kind == JOB_FETCH ? "h2d fetch" : "h2d params", j->t_h2d, j);
	hand_over(j->o, &j->o->h2d_head, j);
}

/* ---- the engine ---- */

static void engine_fatal(spw_optimizer *o, int err, const char *what)
{
	pthread_mutex_lock(&o->lock);
	spw__opt_fatal_locked(o, err, "%s: %s", what, spw_client_last_error(o->c));
	pthread_mutex_unlock(&o->lock);
}

static unsigned popcount(unsigned x)
{
	return (unsigned)__builtin_popcount(x);
}

static uint32_t tensor_id(const struct job *j, enum role r)
{
	return role_id(j->o, r, j->ch->t, j->ch->index);
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
			/* The undo copy is written before it is read. */
			if ((r == R_G && (!c->t->has_g || c->g_spent)) || r == R_U)
				continue;
			/* Both moments' scales share a page. */
			if ((r == R_MS && o->state_dtype != SPW_STATE_INT8) || r == R_VS)
				continue;
			if (o->hints_inflight + o->ring_reserved + 1 > o->ring_cap)
				return;
			if (spw__submit_op(o->c, SPW_OP_PREFETCH, 0, role_id(o, r, c->t, c->index),
					   role_page(o, r, c->t, c->index),
					   UD_PREFETCH) < 0)
				return;
			o->hints_inflight++;
		}
		c->hinted_step = o->hint_step;
	}
}

/* Sends the PREFETCHes a fetch carries (its first chunk's job): the
 * master pages of the tensors the previous step fetched next, planned in
 * the tensor (params.c) before the job was queued. */
static void hint_fetch(spw_optimizer *o, struct job *j)
{
	struct tensor *t = j->ch->t;
	uint32_t i;

	if (j->ch->index != 0 || o->hints_off || o->tier != SPW_TENSOR_SWAPPABLE)
		return;
	for (i = 0; i < t->nhints; i++) {
		if (o->hints_inflight + o->ring_reserved + 1 > o->ring_cap)
			break;
		if (spw__submit_op(o->c, SPW_OP_PREFETCH, 0, t->hint_id[i], t->hint_page[i], UD_FETCH_HINT) < 0)
			break;
		o->hints_inflight++;
	}
	t->nhints = 0;
}

/* Whether a first arrival may pin its gradient store page for overwrite:
 * always where the chunk has the page to itself. A bf16 store's page holds
 * two chunks (role_at), and the other's half may hold a gradient its
 * update has not read yet, or one stored this step: then the page is read
 * first. Dead is spent by its update, or never stored by this optimizer
 * (a takeover finishes the step it found before any other begins). */
static bool store_page_dead(const spw_optimizer *o, const struct job *j)
{
	const struct tensor *t = j->ch->t;
	uint32_t k = j->ch->index ^ 1u;

	if (!o->grad16 || k >= t->nchunks)
		return true;
	return t->chunks[k].g_step != j->step && (t->chunks[k].g_spent || t->chunks[k].g_step == 0);
}

/* Queues the copy of j's gradient from the device into its staging page
 * (rbuf), after which grad_refetched() lets its kernels run. The trainer
 * keeps the gradient until the step's updates are done (spillway.h).
 * Returns false when the optimizer broke. */
static bool refetch(spw_optimizer *o, struct job *j)
{
	char buf[256];
	int r;

	j->t_d2h = TRACE_NOW(o);
	r = spw__opt_d2h(o, (void *)j->sgrad, j->refetch_src, j->ch->n * spw_dtype_size(j->gdt), grad_refetched, j);
	if (r < 0) {
		pthread_mutex_lock(&o->lock);
		spw__opt_fatal_locked(o, r, "%s chunk %u: copying the gradient again for its update: %s",
				      j->ch->t->name, j->ch->index, spw__device_errmsg(o->dev, buf, sizeof(buf)));
		pthread_mutex_unlock(&o->lock);
		return false;
	}
	j->refetch_src = NULL;
	return true;
}

/* Whether a job admitted has all it reads: its pages pinned and, by
 * reference on a device, its gradient copied in again. */
static bool inputs_in(const struct job *j)
{
	return j->pins_back == j->npins && !j->refetch_pending;
}

/* Pins the pages of the queued jobs while the window has room. */
static bool admit(spw_optimizer *o)
{
	bool progress = false;

	while (o->q_head && o->inflight < o->window && o->run_free) {
		struct job *j = o->q_head;
		unsigned np = popcount(j->roles);

		if (o->ring_reserved + o->hints_inflight + np > o->ring_cap)
			break;
		/* The daemon learns a step's updates began before any page of
		 * it is handed out for writing. */
		if (!spw__persist_open(o, j) || o->ring_reserved + o->hints_inflight + np > o->ring_cap)
			break;
		o->q_head = j->next;
		if (!o->q_head)
			o->q_tail = NULL;
		o->inflight++;
		o->ring_reserved += np;
		j->run = o->run_free;
		o->run_free = j->run->next_free;
		memset(j->run->ptr, 0, sizeof(j->run->ptr));
		j->npins = np;
		j->pins_back = 0;
		j->cbuf = j->copy ? o->cfree[--o->ncfree] : -1;
		j->scopy = j->cbuf >= 0 ? o->sbuf[j->cbuf] : NULL;
		/* A pool of its own, a page per job in flight like the
		 * copy-out's: an update never waits for one. */
		j->rbuf = j->refetch_src ? o->rfree[--o->nrfree] : -1;
		j->refetch_pending = j->refetch_src != NULL;
		if (j->rbuf >= 0)
			j->sgrad = o->sbuf[j->rbuf];
		j->t_pin = now_ns();
		for (unsigned r = 0; r < R__N; r++) {
			/* A first arrival rewrites its store page whole: the
			 * daemon need not read it (SPW_PIN_OVERWRITE). */
			bool store_first = r == R_G && j->kind == JOB_GRAD && j->first;
			bool rewrite = store_first && store_page_dead(o, j);
			int e;

			/* The undo copy of the weights is rewritten whole, but
			 * in the redo of a torn step (journal.c), where the
			 * tiles done before keep theirs, and where its page
			 * holds another chunk's copy too (bf16 weights). */
			if (r == R_U)
				rewrite = j->step != o->persist.torn && role_page_own(o, R_U);

			if (!(j->roles & (1u << r)))
				continue;
			if (store_first) {
				j->ch->g_spent = false;
				j->ch->g_step = j->step;
			}
			/* The client's error as it is: -ECONNRESET (the daemon
			 * gone, a trainer may reconnect) or not. */
			e = spw__submit_op(o->c, SPW_OP_PIN, rewrite ? SPW_PIN_OVERWRITE : 0, tensor_id(j, r),
					   role_page(o, r, j->ch->t, j->ch->index), (uint64_t)(uintptr_t)j | r);
			if (e < 0) {
				engine_fatal(o, e, "pin");
				return true;
			}
		}
		if (j->kind == JOB_FETCH)
			hint_fetch(o, j);
		else
			hint_ahead(o, j->ch);
		if (j->refetch_src && !refetch(o, j))
			return true;
		/* A job that pins nothing (a gradient's norm by reference)
		 * has all its pages now. */
		if (inputs_in(j))
			spw__opt_start_kernels(o, j);
		progress = true;
	}
	return progress;
}

static void finish_job(spw_optimizer *o, struct job *j)
{
	struct chunk *ch = j->ch;

	if (j->cbuf >= 0)
		o->cfree[o->ncfree++] = j->cbuf;
	j->cbuf = -1;
	if (j->rbuf >= 0)
		o->rfree[o->nrfree++] = j->rbuf;
	j->rbuf = -1;
	j->run->next_free = o->run_free;
	o->run_free = j->run;
	j->run = NULL;
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
	int r;

	if (j->want_norm)
		ch->sumsq = spw__sumsq_fold(ch->partial, (ch->n + TILE - 1) / TILE);
	if (j->kind == JOB_ADAM_STORE || j->kind == JOB_GRAD_ADAM)
		ch->g_spent = true;
	if (j->kind != JOB_GRAD && j->kind != JOB_FETCH) {
		ch->zeroed = true;
		atomic_fetch_add_explicit(&o->st_chunks, 1, memory_order_relaxed);
	}

	pthread_mutex_lock(&o->lock);
	/* Its writes are in the region: the step may commit once its
	 * other updates are too. */
	if (job_updates(j->kind))
		o->persist.mod_left[j->step & 1]--;
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
		j->t_h2d = TRACE_NOW(o);
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
			spw__opt_fatal_locked(o, r, "copying %s chunk %u to the device: %s", ch->t->name, ch->index,
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
	/* The undo copy first: while p is still pinned, the daemon can let
	 * it take over p's disk copy instead of writing it (below). */
	for (unsigned i = 0; i < R__N; i++) {
		unsigned ro = i == 0 ? R_U : i == R_U ? 0 : i, fl = SPW_DIRTY;

		if (!(j->roles & (1u << ro)))
			continue;
		/* The store is read for the last time by Adam: no write-back;
		 * a fetch only reads. */
		if ((ro == R_G && j->kind != JOB_GRAD) || j->kind == JOB_FETCH)
			fl = SPW_CLEAN;
		/* An undo copy written whole holds what p's page held when
		 * pinned: when that came from disk, it is p's disk copy. Not
		 * where two chunks share the pages (bf16 weights), each
		 * writing its half in its own job. */
		if (ro == R_U && j->kind != JOB_FETCH && j->step != o->persist.torn && o->tier == SPW_TENSOR_SWAPPABLE &&
		    role_page_own(o, R_U) && (o->c->features & SPW_FEAT_UNPIN_COPY))
			r = spw_submit_unpin_copy(o->c, tensor_id(j, ro), role_page(o, ro, ch->t, ch->index),
						  tensor_id(j, R_P), role_page(o, R_P, ch->t, ch->index),
						  (uint64_t)(uintptr_t)j | (R__N + ro));
		else
			r = spw__submit_op(o->c, SPW_OP_UNPIN, (uint8_t)fl, tensor_id(j, ro),
					   role_page(o, ro, ch->t, ch->index), (uint64_t)(uintptr_t)j | (R__N + ro));
		if (r < 0) {
			engine_fatal(o, r, "unpin");
			return;
		}
	}
	/* Nothing to unpin: no completion will finish the job. */
	if (j->unpins_left == 0 && !j->h2d_pending)
		finish_job(o, j);
}

static void completion(spw_optimizer *o, const struct spw_completion *cp)
{
	struct job *j;
	unsigned role;

	if (cp->user_data == UD_MARK) {
		spw__persist_marked(o, cp->res);
		return;
	}
	if (cp->user_data == UD_STATS) {
		o->hints_inflight--; /* figures for status only: nothing waits on them */
		return;
	}
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
	j = (struct job *)(uintptr_t)(cp->user_data & ~(uint64_t)15);
	role = (unsigned)(cp->user_data & 15);
	if (cp->res < 0) {
		pthread_mutex_lock(&o->lock);
		spw__opt_fatal_locked(o, cp->res, "%s %s page %u of tensor %s: %s", role < R__N ? "pinning" : "unpinning",
			              (const char *[]){ "master weights", "exp_avg", "exp_avg_sq", "gradient", "undo copy",
						"exp_avg's scales in", "exp_avg_sq's scales in" }[role % R__N],
			              j->ch->index, j->ch->t->name, spw_strerror(cp->res));
		pthread_mutex_unlock(&o->lock);
		return;
	}
	if (role < R__N) {
		unsigned char *p = spw_slot_ptr(o->c, (uint32_t)cp->res);

		j->run->ptr[role] = (float *)(p + role_offset(o, role, j->ch->t, j->ch->index));
		j->pins_back++;
		if (inputs_in(j))
			spw__opt_start_kernels(o, j);
		return;
	}
	if (--j->unpins_left == 0 && !j->h2d_pending)
		finish_job(o, j);
}

void *spw__opt_engine_main(void *arg)
{
	spw_optimizer *o = arg;

	for (;;) {
		struct job *ready, *done, *h2d, *refetched;
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
		refetched = o->refetch_head;
		o->refetch_head = NULL;
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
		if (spw__opt_broken(o) == 0) {
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
			while (refetched) {
				struct job *j = refetched;

				refetched = j->next;
				j->refetch_pending = false;
				if (inputs_in(j))
					spw__opt_start_kernels(o, j);
				progress = true;
			}
			spw__persist_commit(o);
			if (o->trace)
				spw__opt_trace_disk(o);
			progress |= admit(o);
			/* The window's use, when it changed: jobs holding pins. */
			if (o->trace && o->inflight != o->traced_inflight) {
				o->traced_inflight = o->inflight;
				spw__trace_counter(o->trace, "jobs in flight", now_ns(), o->inflight);
			}
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
		if (spw__opt_broken(o)) {
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
 * so the caller may use the client directly until spw__opt_ring_release(). */
int spw__opt_ring_acquire(spw_optimizer *o)
{
	pthread_mutex_lock(&o->lock);
	o->park_req = true;
	pthread_mutex_unlock(&o->lock);
	spw__opt_wake(o);
	pthread_mutex_lock(&o->lock);
	while (!o->parked)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
	return 0;
}

void spw__opt_ring_release(spw_optimizer *o)
{
	pthread_mutex_lock(&o->lock);
	o->park_req = false;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

void spw__opt_queue_locked(spw_optimizer *o, struct job *j)
{
	j->next = NULL;
	if (o->ready_tail)
		o->ready_tail->next = j;
	else
		o->ready_head = j;
	o->ready_tail = j;
}
