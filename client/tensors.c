/* SPDX-License-Identifier: MIT */
/*
 * client/tensors.c: adding tensors to an optimizer (spw_optimizer_add,
 * _add_offloaded, _add_frozen): their spillway tensors, chunks and initial
 * master weights.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimizer-private.h"
#include "util/names.h"

#define MAX_NAME 200

/* Writes the initial master weights chunk by chunk, cast to the master
 * dtype (fp32: exact from bf16 and fp16; bf16: rounded to nearest even).
 * The ring is ours. */
static int write_init(spw_optimizer *o, const struct tensor *t, const void *init, enum spw_dtype dt)
{
	size_t es = spw_dtype_size(dt);

	for (uint32_t k = 0; k < t->nchunks; k++) {
		const struct chunk *ch = &t->chunks[k];
		uint32_t page = role_page(o, R_P, t, k);
		unsigned char *p;
		int r = spw_pin(o->c, t->id[R_P], page, (void **)&p);

		if (r < 0)
			return r;
		o->k->cast[master_dtype(o)][dt](p + role_offset(o, R_P, t, k), (const unsigned char *)init + ch->off * es,
						ch->n);
		r = spw_unpin(o->c, t->id[R_P], page, SPW_DIRTY);
		if (r < 0)
			return r;
	}
	return 0;
}

static const char *const role_suffix[R__T] = { "param", "exp_avg", "exp_avg_sq", "grad", "param_undo" };

/* Unregisters the scale pages from first on (not adopted ones: they are a
 * persistent session's state). The ring is ours. */
static void q8_drop_pages(spw_optimizer *o, uint32_t first)
{
	for (uint32_t i = first; i < o->q8_pages && !o->persist.adopting; i++)
		spw_tensor_unregister(o->c, o->q8_ids[i]);
	o->q8_pages = first;
}

/* int8 moments: a slot in the scale pages for each chunk of t, a new page
 * registered (or, reattached, adopted) whenever the last is full. On
 * failure the pages and slots are as before. The ring is ours. */
static int q8_assign(spw_optimizer *o, struct tensor *t)
{
	uint32_t pages0 = o->q8_pages, used0 = o->q8_used;

	if (o->state_dtype != SPW_STATE_INT8 || t->frozen)
		return 0;
	for (uint32_t k = 0; k < t->nchunks; k++) {
		if (o->q8_pages == 0 || o->q8_used == Q8_SLOTS_PER_PAGE) {
			uint32_t *v = realloc(o->q8_ids, (o->q8_pages + 1) * sizeof(*v));
			char full[64];
			int r = v ? 0 : -ENOMEM;

			if (v) {
				o->q8_ids = v;
				snprintf(full, sizeof(full), "spw.opt.q8_scales.%u", o->q8_pages);
				r = spw__persist_tensor(o, full, o->page_size, o->tier, &o->q8_ids[o->q8_pages]);
			}
			if (r < 0) {
				q8_drop_pages(o, pages0);
				o->q8_used = used0;
				return r;
			}
			o->q8_pages++;
			o->q8_used = 0;
		}
		t->chunks[k].q8_page = o->q8_pages - 1;
		t->chunks[k].q8_slot = o->q8_used++;
	}
	return 0;
}

/* Checks shared by every add; 0 or the error (with its message). */
static int add_check(spw_optimizer *o, const char *name, uint64_t count, uint32_t *ret_tensor)
{
	int r;

	if ((r = spw__opt_broken(o)) < 0)
		return r;
	if (!name || !name_valid(name, MAX_NAME))
		return spw__opt_error(o, -EINVAL, "add: a tensor name is 1..%d bytes of visible ASCII but '\"' and '\\', "
				     "not starting with '.' or '/', without \"..\" (docs/api.md, Names)", MAX_NAME);
	if (count == 0 || !ret_tensor)
		return spw__opt_error(o, -EINVAL, "add %s: count is 0 or ret_tensor is NULL", name);
	if (o->started || o->persist.settled)
		return spw__opt_error(o, -EBUSY, "add %s: tensors are added before the first step (and, on a session "
				      "taken over inside a step's updates, before the first read)", name);
	for (uint32_t i = 0; i < o->ntensors; i++)
		if (!strcmp(o->tensors[i].name, name))
			return spw__opt_error(o, -EEXIST, "add %s: the optimizer has a tensor of that name", name);
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
	uint32_t nch, i, registered = 0, q8_pages0 = o->q8_pages, q8_used0 = o->q8_used;
	int r;

	nch = (uint32_t)((count + o->chunk_elems - 1) / o->chunk_elems);
	/* The journal's done bitmaps grow with the chunks: the add that
	 * makes the region too small says so (spw_optimizer_new checked it
	 * for one page of them). */
	if (!frozen) {
		char who[MAX_NAME + 32];

		snprintf(who, sizeof(who), "add %s", name);
		r = spw__region_check(o, who, (uint64_t)o->nchunks + nch);
		if (r < 0)
			return spw__opt_error(o, r, "%s", spw_client_last_error(o->c));
	}

	tv = realloc(o->tensors, (o->ntensors + 1) * sizeof(*tv));
	if (!tv)
		return spw__opt_error(o, -ENOMEM, "add %s: out of memory", name);
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
		return spw__opt_error(o, -ENOMEM, "add %s: out of memory", name);

	t = &o->tensors[o->ntensors];
	*t = (struct tensor){
		.name = strdup(name), .chunks = calloc(nch, sizeof(*t->chunks)),
		.group = group, .count = count, .dev = dev_params, .ptype = param_type, .nchunks = nch,
		.frozen = frozen, .has_g = !frozen && !o->grad_ref && (o->mode == SPW_OPT_EXACT || o->accum > 1),
		/* Overlapped updates on a persistent session keep the weights
		 * they replace until the step commits (journal.c). */
		.has_u = !frozen && o->mode == SPW_OPT_OVERLAPPED && o->jn.pages,
	};
	if (!t->name || !t->chunks)
		goto oom;
	if (spw__event_create(o->dev, &t->ev) < 0 || spw__event_create(o->dev, &t->free_ev) < 0) {
		char buf[256];

		r = spw__opt_error(o, -ENOMEM, "add %s: creating device events: %s", name,
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
		/* Resumed moments are the session's: never taken as zero. */
		ch->zeroed = o->persist.resumed;
		if (!ch->partial)
			goto oom;
	}

	spw__opt_ring_acquire(o);
	for (registered = 0; registered < R__T; registered++) {
		char full[MAX_NAME + 32];

		if (!role_used(t, registered))
			continue;
		snprintf(full, sizeof(full), "spw.opt.%s.%s", name, role_suffix[registered]);
		r = spw__persist_tensor(o, full, role_bytes(o, registered, count),
					(enum spw_tensor_kind)(o->tier | (registered == R_U ? SPW_TENSOR_SCRATCH : 0)),
					&t->id[registered]);
		if (r < 0)
			break;
	}
	if (r >= 0)
		r = q8_assign(o, t);
	/* Resumed: the session's state is the truth, init is not used. */
	if (r >= 0 && !o->persist.resumed)
		r = write_init(o, t, init, init_type);
	if (r < 0) {
		spw__opt_error(o, r, "add %s: %s%s", name, spw_client_last_error(o->c),
			       (r == -EEXIST || r == -ENOENT) && o->persist.adopting && registered == R_G
			       ? " (was the session left by an optimizer with another grad_store, fp32 or bf16?)"
			       : (r == -EEXIST || r == -ENOENT) && o->persist.adopting && registered == R_P
			       ? " (was the session left by another model, or by an optimizer of another master "
				 "dtype, fp32 or bf16?)"
			       : (r == -EEXIST || r == -ENOENT) && o->persist.adopting
			       ? " (was the session left by an optimizer of another state_dtype, or, with int8 "
				 "moments, by an older spillway that kept three chunks' codes and scales a page?)"
			       : "");
		for (i = 0; i < registered && i < R__T && !o->persist.adopting; i++)
			if (role_used(t, i))
				spw_tensor_unregister(o->c, t->id[i]);
		q8_drop_pages(o, q8_pages0);
		o->q8_used = q8_used0;
		spw__opt_ring_release(o);
		goto undo;
	}
	spw__opt_ring_release(o);

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
	r = spw__opt_error(o, -ENOMEM, "add %s: out of memory", name);
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
		return spw__opt_error(o, -EINVAL, "add %s: bad group (%u of %u), count, type or NULL pointer", name,
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
		return spw__opt_error(o, -EINVAL, "add %s: bad group (%u of %u) or NULL init", name, group, o->ngroups);
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
		return spw__opt_error(o, -EINVAL, "add_frozen %s: init is NULL or its type is not SPW_TYPE_F32, _BF16 "
				      "or _F16", name);
	return add_tensor(o, name, 0, count, init, (enum spw_dtype)init_type, NULL, SPW_DTYPE_NONE, true,
			  ret_tensor);
}

SPW_EXPORT uint32_t spw_optimizer_chunks(const spw_optimizer *o, uint32_t tensor)
{
	return o && tensor < o->ntensors ? o->tensors[tensor].nchunks : 0;
}
