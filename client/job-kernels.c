/* SPDX-License-Identifier: MIT */
/*
 * client/job-kernels.c: the kernels of one job, tile by tile on the pool.
 */
#include <string.h>

#include "optimizer-private.h"

#define FAST_PIN_NS 200000ull

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
	 * orders every tile's stores before it, and the lock hand-off in
	 * spw__opt_tiles_done() carries them to the engine. */
	if (atomic_fetch_sub(&j->tiles_left, 1) == 1)
		spw__opt_tiles_done(j);
}

void spw__opt_start_kernels(spw_optimizer *o, struct job *j)
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
