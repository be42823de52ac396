/* SPDX-License-Identifier: MIT */
/*
 * client/step.c: the step as the trainer drives it: begin, grad_ready (the
 * gradient's copy and the job it sets off), sync_grads and end (the norm,
 * clipping, exact mode's updates, the dynamic loss scale).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "optimizer-private.h"
#include "step-policy.h"
#include "opts.h"

static int prepare_at(spw_optimizer *o, uint32_t g, float grad_scale, uint64_t step,
		      struct spw_adamw_consts *out)
{
	struct spw_adamw_hparams hp = {
		.lr = o->lrs[g], .beta1 = o->groups[g].beta1, .beta2 = o->groups[g].beta2,
		.eps = o->groups[g].eps, .weight_decay = o->groups[g].weight_decay,
		.grad_scale = grad_scale, .step = step,
	};

	return spw_adamw_prepare(&hp, out);
}

static int prepare(spw_optimizer *o, uint32_t g, float grad_scale, struct spw_adamw_consts *out)
{
	o->grad_scale = grad_scale;
	return prepare_at(o, g, grad_scale, o->step, out);
}

/* The constants of an update of t: the group's, unless t sat steps out
 * (begin checked that step - lag >= 1). */
static struct spw_adamw_consts tensor_consts(spw_optimizer *o, const struct tensor *t)
{
	struct spw_adamw_consts c = o->gconsts[t->group];

	if (t->lag)
		prepare_at(o, t->group, o->grad_scale, o->step - t->lag, &c);
	return c;
}

SPW_EXPORT int spw_optimizer_begin(spw_optimizer *o, uint64_t step, const float *lrs, float loss_scale)
{
	uint32_t g;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = spw__opt_broken(o)) < 0)
		return r;
	if (o->in_step)
		return spw__opt_error(o, -EBUSY, "begin %ju: step %ju is still open (call spw_optimizer_end)",
				      (uintmax_t)step, (uintmax_t)o->step);
	if (step == 0 || !isfinite(loss_scale) || loss_scale < 0.0f)
		return spw__opt_error(o, -EINVAL, "begin: the step number starts at 1 and the loss scale is finite, >= 0");
	if (o->ntensors == 0)
		return spw__opt_error(o, -EINVAL, "begin: the optimizer has no tensors (spw_optimizer_add)");
	for (uint32_t i = 0; i < o->ntensors; i++)
		if (o->tensors[i].lag >= step)
			return spw__opt_error(o, -EINVAL, "begin %ju: tensor %s sat out %ju steps, so its "
					      "step would be below 1 (spw_optimizer_set_lag)", (uintmax_t)step,
					      o->tensors[i].name, (uintmax_t)o->tensors[i].lag);
	if (!o->started && o->persist.resumed && step != o->persist.resumed_step + 1 &&
	    !(step == o->persist.resumed_step && o->c->persist.skipped))
		return spw__opt_error(o, -EINVAL, "begin %ju: the session resumed after step %ju, so this step is %ju "
				      "(spw_optimizer_resumed_step() + 1)", (uintmax_t)step,
				      (uintmax_t)o->persist.resumed_step,
				      (uintmax_t)(o->persist.resumed_step + (o->c->persist.skipped ? 0 : 1)));
	/* A fresh optimizer on a persistent session counts from the step it
	 * begins first (a trainer that loaded a checkpoint goes on from its
	 * step): the steps before it are not waited for. */
	if (!o->started && o->persist.on && !o->persist.resumed && !o->persist.torn)
		spw__persist_first_step(o, step);
	/* The layout checked or recorded; a session taken over inside a
	 * step's updates put right (journal.c). */
	if (!o->started && (r = spw__journal_settle(o)) < 0)
		return r;
	if ((r = spw__journal_begin(o, step)) < 0)
		return r;
	for (g = 0; g < o->ngroups; g++) {
		float lr = lrs ? lrs[g] : o->groups[g].lr;

		if (!isfinite(lr) || lr < 0.0f)
			return spw__opt_error(o, -EINVAL, "begin: learning rate of group %u is %g", g, (double)lr);
		o->lrs[g] = lr;
	}
	o->step = step;
	o->loss_scale = loss_scale > 0.0f ? loss_scale : o->dynamic ? o->dyn_scale.scale : 1.0f;
	for (g = 0; g < o->ngroups; g++)
		if (prepare(o, g, o->clip_coef / o->loss_scale, &o->gconsts[g]) < 0)
			return spw__opt_error(o, -EINVAL, "begin: group %u's hyperparameters give no valid update", g);
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
	spw__opt_wake(o);
	o->in_step = true;
	o->t_step = TRACE_NOW(o);
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
	j->step = o->step;
	j->first = ch->arrivals == 1;
	j->copy = false;
	j->want_norm = last;
	if (o->mode == SPW_OPT_OVERLAPPED && o->accum == 1) {
		j->kind = JOB_ADAM;
		j->roles = 1u << R_P | roles_moments(o) | (ch->t->has_u ? 1u << R_U : 0);
	} else if (o->mode == SPW_OPT_OVERLAPPED && last) {
		j->kind = JOB_GRAD_ADAM;
		j->roles = 1u << R_P | roles_moments(o) | 1u << R_G | (ch->t->has_u ? 1u << R_U : 0);
	} else {
		/* By reference (no store): the norm alone, pinning nothing. */
		j->kind = JOB_GRAD;
		j->roles = ch->t->has_g ? 1u << R_G : 0;
	}
	j->wait_free = false;
	if (j->kind != JOB_GRAD) {
		set_copy(ch, j);
		j->consts = tensor_consts(o, ch->t);
		o->persist.mod_left[o->step & 1]++;
	}
}

/* The tensor a call inside an open step names, or NULL with *r set: the
 * optimizer broken, no step open, no such tensor (with the message). */
static struct tensor *open_step_tensor(spw_optimizer *o, const char *op, uint32_t tensor, int *r)
{
	if (!o) {
		*r = -EINVAL;
		return NULL;
	}
	if ((*r = spw__opt_broken(o)) < 0)
		return NULL;
	if (!o->in_step) {
		*r = spw__opt_error(o, -EPROTO, "%s: no step is open (call spw_optimizer_begin first)", op);
		return NULL;
	}
	if (tensor >= o->ntensors) {
		*r = spw__opt_error(o, -EINVAL, "%s: no tensor %u (the optimizer has %u)", op, tensor, o->ntensors);
		return NULL;
	}
	return &o->tensors[tensor];
}

SPW_EXPORT int spw_optimizer_grad_ready(spw_optimizer *o, uint32_t tensor, uint32_t chunk,
					const void *grad, size_t bytes, enum spw_type type,
					void *stream)
{
	struct tensor *t;
	uint32_t first, last;
	uint64_t span;
	size_t es;
	bool in_place;
	int r;

	if (!(t = open_step_tensor(o, "grad_ready", tensor, &r)))
		return r;
	if (t->frozen)
		return spw__opt_error(o, -EINVAL, "grad_ready %s: the tensor is frozen (it takes no gradients)", t->name);
	if (chunk != SPW_ALL_CHUNKS && chunk >= t->nchunks)
		return spw__opt_error(o, -EINVAL, "grad_ready %s: no chunk %u (it has %u)", t->name, chunk, t->nchunks);
	if ((unsigned)type > SPW_TYPE_F16 || !grad)
		return spw__opt_error(o, -EINVAL, "grad_ready %s: %s", t->name,
				      grad ? "the type is not SPW_TYPE_F32, _BF16 or _F16" : "grad is NULL");
	in_place = grad_in_place(o);
	first = chunk == SPW_ALL_CHUNKS ? 0 : chunk;
	last = chunk == SPW_ALL_CHUNKS ? t->nchunks - 1 : chunk;
	es = spw_dtype_size((enum spw_dtype)type);
	span = t->chunks[last].off + t->chunks[last].n - t->chunks[first].off;
	if (bytes != span * es)
		return spw__opt_error(o, -EMSGSIZE, "grad_ready %s: %zu bytes given, the span holds %ju elements of %zu bytes",
				      t->name, bytes, (uintmax_t)span, es);
	pthread_mutex_lock(&o->lock);
	for (uint32_t k = first; k <= last; k++)
		if (t->chunks[k].arrivals >= o->accum) {
			pthread_mutex_unlock(&o->lock);
			return spw__opt_error(o, -EALREADY, "grad_ready %s chunk %u: already handed over %u time%s this step",
					      t->name, k, o->accum, o->accum > 1 ? "s" : "");
		}
	pthread_mutex_unlock(&o->lock);
	/* The copies below are queued after this wait on the d2h stream, so
	 * they read the gradient only once the producer has written it. */
	if ((r = spw__opt_after_stream(o, stream, o->prod_ev, o->d2h, "grad_ready", t->name)) < 0)
		return r;

	for (uint32_t k = first; k <= last; k++) {
		struct chunk *ch = &t->chunks[k];
		struct job *j = &ch->job;
		/* Chunk k's elements in the caller's gradient. */
		const unsigned char *src = (const unsigned char *)grad + (ch->off - t->chunks[first].off) * es;
		char buf[256];

		pthread_mutex_lock(&o->lock);
		/* A chunk takes its next gradient once its last job is done,
		 * and a free staging page bounds what is in flight (none is
		 * needed by reference on the host). */
		WAIT_UNTIL(o, !ch->busy && (in_place || o->ngfree > 0), "grad_ready %s chunk %u: a free staging page",
			   t->name, k);
		if ((r = spw__opt_broken_locked(o)) < 0) {
			pthread_mutex_unlock(&o->lock);
			return r;
		}
		ch->arrivals++;
		ch->busy = true;
		t->none = false;
		plan_job(o, ch, (enum spw_dtype)type);
		if (in_place) {
			j->gbuf = -1;
			j->sgrad = src;
		} else {
			j->gbuf = o->gfree[--o->ngfree];
			j->sgrad = o->sbuf[j->gbuf];
		}
		if (o->grad_ref)
			ch->gref = src;
		/* A chunk taken back by grad_none and handed over again keeps
		 * its first place. */
		if (!ch->ordered && o->norder < o->nchunks) {
			o->order[o->norder++] = ch->global;
			ch->ordered = true;
		}
		o->d2h_open++;
		o->grad_jobs_open++;
		o->jobs_open++;
		t->pending++;
		pthread_mutex_unlock(&o->lock);

		j->t_d2h = TRACE_NOW(o);
		/* By reference nothing is copied: the job still goes through
		 * the d2h stream, after the producer's work. */
		r = spw__opt_d2h(o, in_place ? NULL : (void *)j->sgrad, src, ch->n * es, spw__opt_grad_arrived, j);
		if (r < 0) {
			pthread_mutex_lock(&o->lock);
			spw__opt_fatal_locked(o, r, "grad_ready %s chunk %u: copying the gradient: %s", t->name, k,
				              spw__device_errmsg(o->dev, buf, sizeof(buf)));
			r = spw__opt_broken_locked(o);
			pthread_mutex_unlock(&o->lock);
			return r;
		}
	}
	return 0;
}

SPW_EXPORT int spw_optimizer_sync_grads(spw_optimizer *o)
{
	int r;

	if (!o)
		return -EINVAL;
	pthread_mutex_lock(&o->lock);
	WAIT_UNTIL(o, o->d2h_open == 0, "sync_grads: the gradient copies");
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

/*
 * After a step: a tensor without a gradient keeps its step (its lag
 * grows), unless nothing moved at all (a skipped step, or no gradient
 * anywhere), in which case the caller repeats the step number, as torch
 * counts no step. The marks are for one step.
 */
static void settle_lags(spw_optimizer *o, bool skipped)
{
	bool moved = false;
	uint32_t i;

	for (i = 0; i < o->ntensors && !skipped; i++)
		moved |= !o->tensors[i].frozen && !o->tensors[i].none;
	for (i = 0; i < o->ntensors; i++) {
		if (moved && o->tensors[i].none)
			o->tensors[i].lag++;
		o->tensors[i].none = false;
	}
}

SPW_EXPORT int spw_optimizer_grad_none(spw_optimizer *o, uint32_t tensor)
{
	struct tensor *t;
	int r;

	if (!(t = open_step_tensor(o, "grad_none", tensor, &r)))
		return r;
	if (t->frozen)
		return spw__opt_error(o, -EINVAL, "grad_none %s: the tensor is frozen (it takes no gradients)",
				      t->name);
	pthread_mutex_lock(&o->lock);
	/* Overlapped mode runs Adam on the last micro-batch's arrival: that
	 * cannot be taken back. */
	if (o->mode == SPW_OPT_OVERLAPPED)
		for (uint32_t k = 0; k < t->nchunks; k++)
			if (t->chunks[k].arrivals >= o->accum) {
				pthread_mutex_unlock(&o->lock);
				return spw__opt_error(o, -EALREADY, "grad_none %s: chunk %u was already updated "
						      "this step (overlapped mode applies gradients as they "
						      "arrive; SPW_OPT_EXACT can take them back)", t->name, k);
			}
	for (uint32_t k = 0; k < t->nchunks; k++) {
		struct chunk *ch = &t->chunks[k];

		/* Its gradient job writes the store and the square sum: wait
		 * for it, then forget both. */
		WAIT_UNTIL(o, !ch->busy, "grad_none %s chunk %u: its gradient's copy", t->name, k);
		if ((r = spw__opt_broken_locked(o)) < 0) {
			pthread_mutex_unlock(&o->lock);
			return r;
		}
		ch->arrivals = 0;
		ch->sumsq = 0.0;
		ch->gref = NULL;
	}
	t->none = true;
	pthread_mutex_unlock(&o->lock);
	return 0;
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
	if (res && (r = spw__struct_size_check(res, SPW__STEP_RESULT_SIZE_VER0, "struct spw_step_result",
						 o->errmsg, sizeof(o->errmsg))) < 0)
		return r;
	if ((r = spw__opt_broken(o)) < 0)
		return r;
	if (!o->in_step)
		return spw__opt_error(o, -EPROTO, "end: no step is open (call spw_optimizer_begin first)");
	pthread_mutex_lock(&o->lock);
	for (i = 0; i < o->nchunks; i++) {
		struct chunk *ch = o->chunks[i];

		if (ch->arrivals < o->accum && !ch->t->none) {
			pthread_mutex_unlock(&o->lock);
			return spw__opt_error(o, -ENODATA, "end: tensor %s chunk %u got %u of its %u gradient%s this step",
					      ch->t->name, ch->index, ch->arrivals, o->accum, o->accum > 1 ? "s" : "");
		}
	}
	/* Exact mode re-uses each chunk's job for the update, so every
	 * earlier job must be over; overlapped mode waits for the kernels. */
	WAIT_UNTIL(o, o->grad_jobs_open == 0 && (o->mode == SPW_OPT_OVERLAPPED || o->jobs_open == 0),
		   "end: the step's gradients");
	if ((r = spw__opt_broken_locked(o)) < 0) {
		pthread_mutex_unlock(&o->lock);
		return r;
	}
	/* Fixed order (tensor, chunk), so the norm is the same however the
	 * gradients arrived: each chunk's spw__sumsq_fold(), added in order. */
	for (i = 0; i < o->nchunks; i++)
		total += o->chunks[i]->sumsq;
	norm = spw__grad_norm(total, o->loss_scale);
	out.nonfinite = !isfinite(total);
	out.loss_scale = o->loss_scale;
	if (o->mode == SPW_OPT_OVERLAPPED) {
		coef = o->clip_coef;
	} else if (out.nonfinite) {
		skip = true;
	} else {
		coef = spw__clip_coef(norm, o->max_norm);
		for (uint32_t g = 0; g < o->ngroups; g++)
			prepare(o, g, coef / o->loss_scale, &o->gconsts[g]);
		{
			/* What this step's COMMIT will carry, recorded with its
			 * constants before its first update (journal.c). */
			struct spw__loss_scale next = o->dynamic ? spw__loss_scale_next(o->dyn_scale, false,
											 o->growth_interval)
								 : o->dyn_scale;
			float ns = o->dynamic ? next.scale : o->loss_scale;
			uint32_t bits;

			memcpy(&bits, &ns, sizeof(bits));
			spw__journal_plan(o, bits, o->dynamic ? next.good_steps & 0x7fffffffu : 0);
		}
		/* The next forward needs the first layers first: the reverse
		 * of the order backward produced them in. */
		for (i = o->norder; i-- > 0;) {
			struct chunk *ch = o->chunks[o->order[i]];
			struct job *j = &ch->job;

			if (ch->t->none)
				continue;
			j->kind = JOB_ADAM_STORE;
			j->step = o->step;
			o->persist.mod_left[o->step & 1]++;
			j->roles = 1u << R_P | roles_moments(o) | (ch->t->has_g ? 1u << R_G : 0);
			j->wait_free = false;
			set_copy(ch, j);
			j->want_norm = false;
			j->gbuf = -1;
			/* By reference: the gradient grad_ready was given, in
			 * its own type (j->gdt, from its plan_job); on a device
			 * the engine copies it in again first (admit()). */
			j->sgrad = grad_in_place(o) ? ch->gref : NULL;
			j->refetch_src = o->grad_refetch ? ch->gref : NULL;
			j->consts = tensor_consts(o, ch->t);
			ch->busy = true;
			ch->t->pending++;
			o->jobs_open++;
			spw__opt_queue_locked(o, j);
		}
	}
	for (i = 0; i < o->nchunks; i++) {
		o->chunks[i]->arrivals = 0;
		o->chunks[i]->ordered = false;
		o->chunks[i]->gref = NULL;
	}
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
	spw__opt_wake(o);

	if (o->dynamic && o->mode == SPW_OPT_EXACT)
		o->dyn_scale = spw__loss_scale_next(o->dyn_scale, skip, o->growth_interval);
	settle_lags(o, skip);
	out.grad_norm = norm;
	out.clip_coef = coef;
	out.skipped = skip;
	out.next_loss_scale = o->dynamic ? o->dyn_scale.scale : o->loss_scale;
	/* The step is over for the trainer: the engine commits it once its
	 * updates are in (persist.c). */
	pthread_mutex_lock(&o->lock);
	o->persist.ended = o->step;
	memcpy(&o->persist.scale_bits[o->step & 1], &out.next_loss_scale, sizeof(o->persist.scale_bits[0]));
	o->persist.good[o->step & 1] = (o->dynamic ? o->dyn_scale.good_steps & 0x7fffffffu : 0) | (uint32_t)skip << 31;
	memcpy(&o->persist.coef_bits[o->step & 1], &coef, sizeof(o->persist.coef_bits[0]));
	pthread_mutex_unlock(&o->lock);
	spw__opt_wake(o);
	TRACE_SPAN(o, SPW_TRACK_TRAINER, "step", o->t_step, now_ns(), UINT32_MAX, UINT32_MAX, o->step);
	o->in_step = false;
	atomic_fetch_add_explicit(&o->st_steps, 1, memory_order_relaxed);
	if (res)
		spw__info_out(res, &out, sizeof(out), SPW__STEP_RESULT_SIZE_VER0, "struct spw_step_result",
			      NULL, 0); /* cannot fail: checked above */
	return 0;
}
