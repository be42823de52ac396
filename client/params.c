/* SPDX-License-Identifier: MIT */
/*
 * client/params.c: the trainer's parameters: wait_params after a step,
 * spw_params_fetch / _release, and the fetch order that predicts which
 * master pages to read ahead.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "optimizer-private.h"

SPW_EXPORT int spw_optimizer_wait_params(spw_optimizer *o, uint32_t tensor, void *stream)
{
	struct spw__stream *s = NULL;
	struct tensor *t;
	char buf[256];
	int r, on_stream;

	if (!o)
		return -EINVAL;
	if (tensor >= o->ntensors)
		return spw__opt_error(o, -EINVAL, "wait_params: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if ((on_stream = spw__opt_borrow(o, stream, &s, "wait_params", t->name)) < 0)
		return on_stream;
	pthread_mutex_lock(&o->lock);
	/* A viewed tensor has no copies: its updates land in the trainer's
	 * parameters when their kernels end, which the host waits for. */
	if (t->view) {
		WAIT_UNTIL(o, t->pending == 0, "wait_params %s: its updates", t->name);
		r = spw__opt_broken_locked(o);
		pthread_mutex_unlock(&o->lock);
		return r;
	}
	/* With a stream, the host waits only until every copy is queued on
	 * h2d (the Adam or cast before it has run); the stream waits for the
	 * copies themselves. Without, the host waits for them to land. */
	if (on_stream)
		WAIT_UNTIL(o, t->unqueued == 0, "wait_params %s: its updates", t->name);
	else
		WAIT_UNTIL(o, t->pending == 0, "wait_params %s: its updates", t->name);
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	if (r < 0 || !on_stream)
		return r;
	r = spw__stream_wait_event(o->dev, s, t->ev);
	if (r < 0)
		return spw__opt_error(o, r, "wait_params %s: making the stream wait: %s", t->name,
				      spw__device_errmsg(o->dev, buf, sizeof(buf)));
	return 0;
}

/* The fetch order: the tensors the previous step fetched after the
 * fetch at position at (when that one fetched the same tensor), as
 * PREFETCH hints for their master pages, at most FETCH_HINTS. */
static void plan_fetch_hints(spw_optimizer *o, uint32_t at, struct tensor *t)
{
	uint32_t tensor = (uint32_t)(t - o->tensors);

	t->nhints = 0;
	if (o->tier != SPW_TENSOR_SWAPPABLE || at >= o->nfpred || o->fpred[at] != tensor)
		return;
	for (uint32_t i = at + 1; i < o->nfpred && t->nhints < FETCH_HINTS; i++) {
		const struct tensor *n = &o->tensors[o->fpred[i]];

		for (uint32_t k = 0; k < n->nchunks && t->nhints < FETCH_HINTS; k++) {
			t->hint_id[t->nhints] = n->id[R_P];
			t->hint_page[t->nhints++] = k;
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
	if ((r = spw__opt_broken(o)) < 0)
		return r;
	if (tensor >= o->ntensors)
		return spw__opt_error(o, -EINVAL, "fetch: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if (!dst || (unsigned)type > SPW_TYPE_F16)
		return spw__opt_error(o, -EINVAL, "fetch %s: %s", t->name,
				      dst ? "the type is not SPW_TYPE_F32, _BF16 or _F16" : "dst is NULL");
	es = spw_dtype_size((enum spw_dtype)type);
	if (bytes != t->count * es)
		return spw__opt_error(o, -EMSGSIZE, "fetch %s: %zu bytes given, the tensor holds %ju elements of %zu bytes",
				      t->name, bytes, (uintmax_t)t->count, es);
	if (t->fetched)
		return spw__opt_error(o, -EALREADY, "fetch %s: fetched already (call spw_params_release first)", t->name);
	/* The copies into dst, queued later by the engine, wait for the
	 * trainer's earlier work on stream (which may still read dst): the
	 * event is recorded now and waited on just before each copy, so h2d
	 * is held up no earlier than it must be. */
	if ((waited = spw__opt_borrow(o, stream, &s, "fetch", t->name)) < 0)
		return waited;
	if (waited && (r = spw__event_record(o->dev, t->free_ev, s)) < 0)
		return spw__opt_error(o, r, "fetch %s: recording an event on the stream: %s", t->name,
				      spw__device_errmsg(o->dev, buf, sizeof(buf)));

	if (o->nforder == o->fcap) {
		uint32_t cap = o->fcap ? 2 * o->fcap : 64;
		uint32_t *a = realloc(o->forder, cap * sizeof(*a)), *b;

		if (a)
			o->forder = a;
		b = a ? realloc(o->fpred, cap * sizeof(*b)) : NULL;
		if (!b)
			return spw__opt_error(o, -ENOMEM, "fetch %s: out of memory", t->name);
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
		WAIT_UNTIL(o, !ch->busy, "fetch %s: chunk %u's update", t->name, ch->index);
		if ((r = spw__opt_broken_locked(o)) < 0) {
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
			plan_fetch_hints(o, at, t);
		t->unqueued++;
		t->pending++;
		t->fetch_open++;
		o->jobs_open++;
		spw__opt_queue_locked(o, j);
		pthread_mutex_unlock(&o->lock);
		spw__opt_wake(o);
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
		return spw__opt_error(o, -EINVAL, "release: no tensor %u (the optimizer has %u)", tensor, o->ntensors);
	t = &o->tensors[tensor];
	if (!t->fetched)
		return spw__opt_error(o, -EPROTO, "release %s: not fetched (spw_params_fetch first)", t->name);
	pthread_mutex_lock(&o->lock);
	/* Nothing may write the buffer once the trainer has it back. */
	WAIT_UNTIL(o, t->fetch_open == 0, "release %s: its fetch", t->name);
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	t->fetched = false;
	return r;
}
