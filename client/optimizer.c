/* SPDX-License-Identifier: MIT */
/*
 * client/optimizer.c: an optimizer's life (spw_optimizer_new / _free), the
 * helpers every file of the pipeline uses (errors, waking the engine, the
 * trainer's streams), sync and stats. optimizer-private.h says which file
 * does what.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "optimizer-private.h"
#include "opts.h"

#define DEFAULT_WINDOW 4u
#define DEFAULT_WAIT_TIMEOUT_MS 60000u

__attribute__((format(printf, 3, 4)))
int spw__opt_error(spw_optimizer *o, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(o->errmsg, sizeof(o->errmsg), fmt, ap);
	va_end(ap);
	return err;
}

void spw__opt_wake(spw_optimizer *o)
{
	uint64_t one = 1;

	/* EAGAIN: the counter is saturated, a wakeup is pending anyway. */
	if (write(o->wake_fd, &one, sizeof(one)) < 0) {
		/* nothing else to do: the engine also wakes every second */
	}
}

/* Records the first fatal error; every waiter gives up. Lock held. */
__attribute__((format(printf, 3, 4)))
void spw__opt_fatal_locked(spw_optimizer *o, int err, const char *fmt, ...)
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
int spw__opt_broken_locked(spw_optimizer *o)
{
	if (!o->err)
		return 0;
	memcpy(o->errmsg, o->fatal_msg, sizeof(o->errmsg));
	return o->err;
}

int spw__opt_broken(spw_optimizer *o)
{
	int r;

	pthread_mutex_lock(&o->lock);
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

/*
 * The trainer's stream as a device stream. 1 when there is one, 0 when
 * stream is NULL or, on the host backend, not a stream of this device
 * (the trainer's work is then complete at the call, as the header says),
 * or the error.
 */
int spw__opt_borrow(spw_optimizer *o, void *stream, struct spw__stream **ret, const char *what,
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
		return spw__opt_error(o, r, "%s %s: using the stream: %s", what, name,
				      spw__device_errmsg(o->dev, buf, sizeof(buf)));
	return 1;
}

/* Makes the work queued on `on` from now wait for what the trainer has
 * queued on stream so far (an event recorded there, waited on here). */
int spw__opt_after_stream(spw_optimizer *o, void *stream, struct spw__event *ev, struct spw__stream *on,
			  const char *what, const char *name)
{
	struct spw__stream *s;
	char buf[256];
	int r = spw__opt_borrow(o, stream, &s, what, name);

	if (r <= 0)
		return r;
	r = spw__event_record(o->dev, ev, s);
	if (r >= 0)
		r = spw__stream_wait_event(o->dev, on, ev);
	if (r < 0)
		return spw__opt_error(o, r, "%s %s: ordering after the stream: %s", what, name,
				      spw__device_errmsg(o->dev, buf, sizeof(buf)));
	return 0;
}

/* The no-progress waits time out on CLOCK_MONOTONIC: a clock step must
 * not fire (or postpone) them. */
static void init_cond(pthread_cond_t *cond)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

/* The daemon's pid, for messages about a daemon that stopped answering. */
static int daemon_pid(const spw_client *c)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (c->ctl < 0 || getsockopt(c->ctl, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	return (int)cr.pid;
}

void spw__opt_wait_locked(spw_optimizer *o, const char *fmt, ...)
{
	struct timespec ts;
	char what[192];
	va_list ap;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += o->wait_timeout_ms / 1000;
	ts.tv_nsec += (long)(o->wait_timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (pthread_cond_timedwait(&o->cond, &o->lock, &ts) != ETIMEDOUT)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	spw__opt_fatal_locked(o, -ETIMEDOUT,
			      "%s: no progress for %u ms with %u job%s in flight: spillwayd (pid %d) does not "
			      "answer; it may be stopped (SIGSTOP) or its disk stuck. The optimizer is broken "
			      "(free it); raise wait_timeout_ms if the daemon is only slow",
			      what, o->wait_timeout_ms, o->jobs_open, o->jobs_open == 1 ? "" : "s", o->daemon_pid);
}

/* Bytes as "1.5 MiB" for a message. */
static const char *mib(uint64_t bytes, char *buf, size_t len)
{
	snprintf(buf, len, "%.2f MiB", (double)bytes / (1 << 20));
	return buf;
}

int spw__region_check(spw_optimizer *o, const char *who, uint64_t nchunks)
{
	/* On the NVMe tier the state comes and goes through the region's
	 * slots, and the least the pipeline runs with is one chunk in
	 * flight (the window never goes below it): its pages of p, m and v,
	 * of the gradient store (exact mode, or accumulation) and of the
	 * undo copy (persistent overlapped mode) pinned at once, with its
	 * two staging pages; an int8 chunk pins its scale page too. Pinned
	 * for the optimizer's life beside them: the journal's pages and its
	 * done bitmaps (two bits a unit, on the state's tier). Resident state
	 * needs no such check: the daemon refuses its registration naming
	 * the region. */
	uint32_t slots = (uint32_t)(o->c->region_bytes / o->page_size);
	uint32_t state = 3 + (o->mode == SPW_OPT_EXACT || o->accum > 1) + (o->mode == SPW_OPT_OVERLAPPED && o->jn.pages);
	uint32_t q8 = o->state_dtype == SPW_STATE_INT8;
	uint32_t done = 0, need;
	char a[32], b[32], jn[96] = "";

	if (o->tier != SPW_TENSOR_SWAPPABLE)
		return 0;
	if (o->jn.pages) {
		uint64_t words = (nchunks * o->jn.units_per_chunk + 63) / 64;

		done = (uint32_t)((2 * (words ? words : 1) * 8 + o->page_size - 1) / o->page_size);
	}
	need = o->jn.npages + done + 2 + state + q8;
	if (slots >= need)
		return 0;
	if (o->jn.pages)
		snprintf(jn, sizeof(jn), ", %u of the update journal (%u of them its done bitmaps)", o->jn.npages + done,
			 done);
	/* Within SPW__ERRMSG_MAX with the longest names. */
	return spw__error(o->c, -ENOSPC,
			  "%s: session %s's region of %s (%u pages of %u KiB) is too small for this optimizer on the "
			  "NVMe tier: it needs %u pages (%s) with one chunk in flight, the least: 2 staging, %u of state "
			  "(p, m, v%s%s%s)%s. Attach with region_bytes of at least %llu (Session(region_bytes=), "
			  "OffloadAdamW(region_bytes=))", who, o->c->session, mib(o->c->region_bytes, a, sizeof(a)), slots,
			  o->page_size >> 10, need, mib((uint64_t)need * o->page_size, b, sizeof(b)), state + q8,
			  o->mode == SPW_OPT_EXACT || o->accum > 1 ? ", grads" : "",
			  o->mode == SPW_OPT_OVERLAPPED && o->jn.pages ? ", undo copy" : "", q8 ? ", int8 scales" : "", jn,
			  (unsigned long long)need * o->page_size);
}

bool spw__group_ok(const struct spw_param_group *g)
{
	return isfinite(g->lr) && g->lr >= 0.0f && g->beta1 >= 0.0f && g->beta1 < 1.0f &&
	       g->beta2 >= 0.0f && g->beta2 < 1.0f && isfinite(g->eps) && g->eps >= 0.0f &&
	       isfinite(g->weight_decay) && g->weight_decay >= 0.0f;
}

SPW_EXPORT const char *spw_optimizer_last_error(const spw_optimizer *o)
{
	return o ? o->errmsg : "no optimizer (NULL)";
}

/* Why gradients by reference cannot hold with these options (the ones
 * known before the session and device are), or NULL. */
static const char *grad_ref_refusal(const struct spw_optimizer_opts *opts)
{
	if (opts->mode != SPW_OPT_EXACT)
		return "needs SPW_OPT_EXACT (overlapped mode runs Adam as each gradient arrives and keeps none)";
	if (opts->accumulation > 1)
		return "needs accumulation 1 (micro-batches' gradients are summed into the store)";
	return NULL;
}

SPW_EXPORT int spw_optimizer_new(spw_client *c, const struct spw_optimizer_opts *caller_opts,
				 spw_optimizer **ret)
{
	struct spw_session_info info = { .size = sizeof(info) };
	struct spw__pool_opts po = { .numa_node = -1 };
	struct spw_optimizer_opts oo, *opts = &oo;
	char err[256];
	const char *why;
	spw_optimizer *o;
	uint32_t i, w, spare, gstage;
	int r;

	if (!c || !caller_opts || !ret)
		return c ? spw__error(c, -EINVAL, "spw_optimizer_new: opts and ret must not be NULL") : -EINVAL;
	r = spw__opts_in(&oo, sizeof(oo), caller_opts, SPW__OPTIMIZER_OPTS_SIZE_VER0,
			 "struct spw_optimizer_opts", err, sizeof(err));
	if (r < 0)
		return spw__error(c, r, "spw_optimizer_new: %s", err);
	if (!opts->groups ||
	    opts->ngroups == 0 || opts->ngroups > 65536 ||
	    (opts->mode != SPW_OPT_OVERLAPPED && opts->mode != SPW_OPT_EXACT) ||
	    (opts->tier != SPW_TENSOR_RESIDENT && opts->tier != SPW_TENSOR_SWAPPABLE) ||
	    (unsigned)opts->state_dtype > SPW_STATE_INT8 || (unsigned)opts->grad_store > SPW_GRAD_STORE_BF16 ||
	    (unsigned)opts->master_dtype > SPW_MASTER_BF16 ||
	    !(opts->clip_coef >= 0.0f) || !isfinite(opts->clip_coef) || !(opts->max_norm >= 0.0f) ||
	    !(opts->init_loss_scale >= 0.0f))
		return c ? spw__error(c, -EINVAL, "spw_optimizer_new: bad options (groups, mode, tier, state_dtype, "
				      "grad_store, master_dtype or a coefficient)")
			 : -EINVAL;
	if (opts->grad_store == SPW_GRAD_BY_REFERENCE && (why = grad_ref_refusal(opts)))
		return spw__error(c, -EINVAL, "spw_optimizer_new: grad_store SPW_GRAD_BY_REFERENCE: %s", why);
	for (i = 0; i < opts->ngroups; i++)
		if (!spw__group_ok(&opts->groups[i]))
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
	init_cond(&o->cond);
	/* Zero, also from a caller whose struct ends before it (opts.h). */
	o->wait_timeout_ms = opts->wait_timeout_ms ? opts->wait_timeout_ms : DEFAULT_WAIT_TIMEOUT_MS;
	o->daemon_pid = daemon_pid(c);
	o->mode = opts->mode;
	o->tier = opts->tier;
	o->state_dtype = opts->state_dtype;
	o->ngroups = opts->ngroups;
	o->accum = opts->accumulation ? opts->accumulation : 1;
	o->clip_coef = opts->clip_coef > 0.0f ? opts->clip_coef : 1.0f;
	o->max_norm = opts->max_norm;
	o->dynamic = opts->dynamic_loss_scale != 0;
	o->dyn_scale.scale = opts->init_loss_scale > 0.0f ? opts->init_loss_scale : 65536.0f;
	o->growth_interval = opts->growth_interval ? opts->growth_interval : 2000;
	o->page_size = info.page_size;
	o->chunk_elems = info.page_size / 4;
	o->ring_cap = info.cq_entries < info.sq_entries ? info.cq_entries : info.sq_entries;
	o->k = spw_kernels();
	atomic_store(&o->st_hints, 1);
	o->trace = spw__trace_new(c->trace_path);
	o->grad_ref = opts->grad_store == SPW_GRAD_BY_REFERENCE;
	o->grad16 = opts->grad_store == SPW_GRAD_STORE_BF16;
	o->master16 = opts->master_dtype == SPW_MASTER_BF16;
	r = spw__persist_init(o);
	if (r < 0)
		goto fail;
	/* A trainer killed inside a step's updates takes its gradients with
	 * it: the takeover finishes the step from the store (journal.c). */
	if (o->grad_ref && o->persist.on) {
		r = spw__error(c, -EINVAL, "spw_optimizer_new: grad_store SPW_GRAD_BY_REFERENCE: not on a persistent "
			       "session (a takeover finishes a step killed inside its updates from the stored "
			       "gradients, and a dead trainer's own are gone)");
		goto fail;
	}
	po.threads = opts->threads;
	r = spw__pool_new(&po, &o->pool);
	if (r < 0) {
		spw__error(c, r, "spw_optimizer_new: starting the thread pool: %s", spw_strerror(r));
		goto fail;
	}
	/* The journal's slots and bitmaps are resident pages the window
	 * cannot use (journal.c). */
	r = spw__journal_open(o);
	if (r < 0)
		goto fail;
	w = opts->window ? opts->window : DEFAULT_WINDOW;
	/* Each chunk in flight pins up to 4 pages of its own and uses 2
	 * staging pages; int8 moments' jobs also pin the scale pages, which
	 * the window's chunks share (two at most: 128 chunks a page). The
	 * ring must carry every pin of the window (6 with the scales) with
	 * room for hints. */
	spare = opts->state_dtype == SPW_STATE_INT8 ? 2 : 0;
	if (w > o->ring_cap / 8)
		w = o->ring_cap / 8;
	/* The journal's pages stay pinned (journal.c), and an overlapped
	 * optimizer on a persistent session pins an undo page too. */
	{
		uint32_t held = spare + (o->jn.pages ? o->jn.npages + 1 : 0);
		uint32_t left = info.slots > held ? info.slots - held : 0;
		uint32_t per = o->jn.pages && o->mode == SPW_OPT_OVERLAPPED ? 7 : 6;

		if (w > left / per)
			w = left / per;
	}
	if (w == 0)
		w = 1;
	o->window = w;
	/* Too small a region fails here, naming what it needs, rather than
	 * at a pin inside a step. */
	r = spw__region_check(o, "spw_optimizer_new", 0);
	if (r < 0)
		goto fail;

	o->groups = calloc(o->ngroups, sizeof(*o->groups));
	o->lrs = calloc(o->ngroups, sizeof(*o->lrs));
	o->gconsts = calloc(o->ngroups, sizeof(*o->gconsts));
	o->sbuf = calloc(3 * w, sizeof(*o->sbuf));
	o->gfree = calloc(w, sizeof(*o->gfree));
	o->cfree = calloc(w, sizeof(*o->cfree));
	o->rfree = calloc(w, sizeof(*o->rfree));
	o->runs = calloc(w, sizeof(*o->runs));
	if (!o->groups || !o->lrs || !o->gconsts || !o->sbuf || !o->gfree || !o->cfree || !o->rfree || !o->runs) {
		r = -ENOMEM;
		goto fail;
	}
	for (i = w; i-- > 0;) {
		o->runs[i].next_free = o->run_free;
		o->run_free = &o->runs[i];
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
	/* A GPU's gradients are not memory the CPU kernels can read: they
	 * are copied in twice instead (for the norm, for the update), which
	 * costs the copy engine what the store would cost the tier. */
	o->grad_refetch = o->grad_ref && strcmp(spw__device_name(o->dev), "host") != 0;
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

	/* Staging pages stay pinned for the optimizer's life: their
	 * addresses are where the copy streams read and write. Gradients by
	 * reference are read where they are: copy-out pages only; on a
	 * device, a window of pages for the gradients as they arrive and
	 * one for their second copy at the updates (pools apart: an update
	 * never waits for a page a gradient behind it in the queue holds). */
	gstage = grad_in_place(o) ? 0 : w;
	o->nsbuf = gstage + w + (o->grad_refetch ? w : 0);
	r = spw__persist_tensor(o, "spw.opt.staging", (uint64_t)o->nsbuf * o->page_size, SPW_TENSOR_RESIDENT,
				&o->staging_id);
	if (r < 0)
		goto fail;
	for (i = 0; i < o->nsbuf; i++) {
		r = spw_pin(c, o->staging_id, i, &o->sbuf[i]);
		if (r < 0)
			goto fail;
	}
	for (i = 0; i < w; i++) {
		if (i < gstage)
			o->gfree[i] = (int)i;
		o->cfree[i] = (int)(gstage + i);
		if (o->grad_refetch)
			o->rfree[i] = (int)(gstage + w + i);
	}
	o->ngfree = gstage;
	o->ncfree = w;
	o->nrfree = o->grad_refetch ? w : 0;

	r = pthread_create(&o->engine, NULL, spw__opt_engine_main, o);
	if (r) {
		r = spw__error(c, -r, "spw_optimizer_new: starting the engine thread: %s", strerror(r));
		goto fail;
	}
	o->engine_started = true;
	o->counted = true;
	c->optimizers++;
	*ret = o;
	return 0;
fail:
	spw_optimizer_free(o);
	return r;
}

SPW_EXPORT spw_optimizer *spw_optimizer_free(spw_optimizer *o)
{
	uint32_t i;

	if (!o)
		return NULL;
	if (o->counted)
		o->c->optimizers--;
	if (o->engine_started) {
		pthread_mutex_lock(&o->lock);
		/* The last step is committed before the engine goes (a
		 * persistent session's daemon would think it open), and no
		 * mark's answer is left for a later user of the client. */
		WAIT_UNTIL(o, o->jobs_open == 0 && o->d2h_open == 0 && o->persist.acked >= o->persist.ended,
			   "free: the work in flight");
		o->stop = true;
		pthread_cond_broadcast(&o->cond);
		pthread_mutex_unlock(&o->lock);
		spw__opt_wake(o);
		pthread_join(o->engine, NULL);
	}
	/* Kernels and copies may still run after an error: let them end
	 * before their memory goes. */
	o->pool = spw__pool_free(o->pool);
	/* Nothing writes the master pages now; the trainer's parameters
	 * keep their values when the slots go back. */
	spw__opt_views_detach(o);
	if (o->dev) {
		spw__stream_destroy(o->dev, o->d2h);
		spw__stream_destroy(o->dev, o->h2d);
	}
	spw__journal_close(o);
	if (!o->c->dead && !o->err) {
		for (i = 0; i < o->nsbuf && o->sbuf && o->sbuf[i]; i++)
			spw_unpin(o->c, o->staging_id, i, SPW_CLEAN);
		if (o->staging_id != UINT32_MAX && !o->persist.on)
			spw_tensor_unregister(o->c, o->staging_id);
		/* A persistent session's tensors are its state: they stay
		 * until it detaches or is dropped. */
		for (i = 0; i < o->ntensors && !o->persist.on; i++)
			for (unsigned r = 0; r < R__T; r++)
				if (role_used(&o->tensors[i], r))
					spw_tensor_unregister(o->c, o->tensors[i].id[r]);
		for (i = 0; i < o->q8_pages && !o->persist.on; i++)
			spw_tensor_unregister(o->c, o->q8_ids[i]);
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
	/* Every span has ended (the pool, streams and engine are gone);
	 * a write error reaches only spw_trace_flush()'s callers. */
	if (!o->c->dead)
		spw__opt_trace_disk(o);
	spw__trace_free(o->trace);
	free(o->io_buf);
	free(o->io_map);
	for (i = 0; i < o->ntensors; i++) {
		for (uint32_t k = 0; k < o->tensors[i].nchunks; k++)
			free(o->tensors[i].chunks[k].partial);
		free(o->tensors[i].chunks);
		free(o->tensors[i].name);
	}
	free(o->tensors);
	free(o->q8_ids);
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
	free(o->rfree);
	free(o->runs);
	if (o->wake_fd >= 0)
		close(o->wake_fd);
	pthread_cond_destroy(&o->cond);
	pthread_mutex_destroy(&o->lock);
	free(o);
	return NULL;
}

SPW_EXPORT int spw_optimizer_sync(spw_optimizer *o)
{
	int r;

	if (!o)
		return -EINVAL;
	pthread_mutex_lock(&o->lock);
	/* On a persistent session the ended steps are committed too: a
	 * trainer killed after sync resumes after its last step. */
	WAIT_UNTIL(o, o->jobs_open == 0 && o->d2h_open == 0 && (!o->persist.on || o->persist.acked >= o->persist.ended),
		   "sync: the ended steps' work");
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

static void fill_stats(spw_optimizer *o, struct spw_optimizer_stats *st);

SPW_EXPORT int spw_optimizer_stats(spw_optimizer *o, struct spw_optimizer_stats *st)
{
	struct spw_optimizer_stats all = { .size = sizeof(all) };

	if (!o || !st)
		return -EINVAL;
	fill_stats(o, &all);
	/* Callers built before the fetch counters pass the shorter struct. */
	return spw__info_out(st, &all, sizeof(all), SPW__OPTIMIZER_STATS_SIZE_VER0,
			     "struct spw_optimizer_stats", o->errmsg, sizeof(o->errmsg));
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
