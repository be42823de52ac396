/* SPDX-License-Identifier: MIT */
/*
 * client/job-kernels.c: the kernels of one job, tile by tile on the pool.
 * Once its pins are back, a job lists its kernels as ops, which each tile
 * runs in order through spw__kernel_op_run() (pool.c, the one dispatch to
 * kernels/); the tiles' square sums are folded by the engine
 * (spw__sumsq_fold()); the last tile gives the job back to the engine.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "optimizer-private.h"

#define FAST_PIN_NS 200000ull

/* The kernels a job runs on each tile, in order, over its pinned and
 * staging pages. */
static void plan_ops(struct job *j)
{
	float *g = j->run->ptr[R_G];
	struct spw__kernel_op *op = j->run->ops;
	struct spw__kernel_op adam = {
		.op = SPW_POOL_ADAMW, .consts = &j->consts,
		.param = j->run->ptr[R_P], .exp_avg = j->run->ptr[R_M], .exp_avg_sq = j->run->ptr[R_V],
		.state_dtype = j->o->state_dtype == SPW_STATE_BF16 ? SPW_DTYPE_BF16 : SPW_DTYPE_F32,
		.q8 = j->o->state_dtype == SPW_STATE_INT8,
		.m_scale = j->run->ptr[R_MS], .v_scale = j->run->ptr[R_VS],
		.copy = j->copy ? j->scopy : NULL, .copy_dtype = j->copy ? j->cdt : SPW_DTYPE_NONE,
		/* bf16 weights' random bits (kernels/sr.h): the tensor's
		 * place and the step, so a redo or a resumed run draws the
		 * same ones. */
		.p16 = j->o->master16,
		.sr_key = j->o->master16 ? spw_sr_key((uint32_t)(j->ch->t - j->o->tensors), j->step) : 0,
		.sr_index = j->ch->off,
	};

	switch (j->kind) {
	case JOB_ADAM:
		if (j->want_norm)
			*op++ = (struct spw__kernel_op){ .op = SPW_POOL_SUMSQ, .src = j->sgrad, .src_dtype = j->gdt };
		adam.src = j->sgrad;
		adam.src_dtype = j->gdt;
		*op++ = adam;
		break;
	case JOB_GRAD:
	case JOB_GRAD_ADAM:
		/* By reference (no store): the norm of the trainer's gradient.
		 * Its square sum is the stored fp32 copy's: sumsq widens each
		 * element to fp32 exactly as the cast does, and the tiles and
		 * lanes are the same. */
		if (!(j->roles & 1u << R_G)) {
			if (j->want_norm)
				*op++ = (struct spw__kernel_op){ .op = SPW_POOL_SUMSQ, .src = j->sgrad,
								 .src_dtype = j->gdt };
			break;
		}
		/* The first micro-batch overwrites the store: its old contents
		 * are last step's. */
		*op++ = (struct spw__kernel_op){ .op = j->first ? SPW_POOL_CAST : SPW_POOL_ACC, .src = j->sgrad,
						 .src_dtype = j->gdt, .dst = g, .dst_dtype = store_dtype(j->o) };
		if (j->want_norm)
			*op++ = (struct spw__kernel_op){ .op = SPW_POOL_SUMSQ, .src = g, .src_dtype = store_dtype(j->o) };
		if (j->kind == JOB_GRAD)
			break;
		/* fall through */
	case JOB_ADAM_STORE:
		/* By reference AdamW widens the trainer's gradient itself, to
		 * the same fp32 values the store would hold. */
		adam.src = j->roles & 1u << R_G ? g : j->sgrad;
		adam.src_dtype = j->roles & 1u << R_G ? store_dtype(j->o) : j->gdt;
		*op++ = adam;
		break;
	case JOB_FETCH:
		/* Through a copy page, not from the slot: the page is unpinned
		 * (and may be evicted) before the device has read it. */
		*op++ = (struct spw__kernel_op){ .op = SPW_POOL_CAST, .src = j->run->ptr[R_P],
						 .src_dtype = master_dtype(j->o), .dst = j->scopy, .dst_dtype = j->cdt };
		break;
	}
	j->run->nops = (unsigned)(op - j->run->ops);
}

/* Span names on the trace (trace.h), by job kind. */
static const char *const kind_name[] = {
	[JOB_ADAM] = "adam", [JOB_GRAD] = "grad", [JOB_GRAD_ADAM] = "grad+adam",
	[JOB_ADAM_STORE] = "adam (store)", [JOB_FETCH] = "fetch cast",
};

/* A tile's span on its worker's track, by job kind. */
static const char *const tile_name[] = {
	[JOB_ADAM] = "tile: adam", [JOB_GRAD] = "tile: grad", [JOB_GRAD_ADAM] = "tile: grad+adam",
	[JOB_ADAM_STORE] = "tile: adam (store)", [JOB_FETCH] = "tile: fetch cast",
};

/* Fresh pages of a tensor may hold anything (a slot's earlier tenant), so
 * the moments start as torch's zeros, the first time a chunk is updated,
 * instead of costing a pass at add time. [b, e) starts on an int8 block. */
static void zero_moments(struct job *j, size_t b, size_t e)
{
	spw_optimizer *o = j->o;
	unsigned roles = roles_moments(o);

	/* int8: zero codes of a zero scale are a block of zeros. */
	for (unsigned r = R_M; r < R__N; r++) {
		struct role_span sp = role_tile(o, r, b, e);

		if ((roles & 1u << r) && (j->roles & 1u << r))
			memset((unsigned char *)j->run->ptr[r] + sp.at, 0, sp.len);
	}
}

/*
 * An update on a persistent session (journal.c): the tile's other ops
 * first, whole (the square sum is the tile's, as without the journal),
 * then AdamW (always the last op) unit by unit, each unit's old bytes in
 * the thread's journal slot while it runs. A unit an earlier try of this
 * step already updated (a redone step after a takeover) is not updated
 * again; the device gets its master weights as they are.
 */
static void journalled_tile(struct job *j, size_t tile, size_t b, size_t e)
{
	spw_optimizer *o = j->o;
	const struct spw__kernel_op *adam = &j->run->ops[j->run->nops - 1];

	for (unsigned i = 0; i + 1 < j->run->nops; i++) {
		double s = spw__kernel_op_run(o->k, &j->run->ops[i], b, e);

		if (j->run->ops[i].op == SPW_POOL_SUMSQ)
			j->ch->partial[tile] = s;
	}
	for (size_t ub = b; ub < e; ub += SPW_JOURNAL_UNIT) {
		size_t ue = e - ub < SPW_JOURNAL_UNIT ? e : ub + SPW_JOURNAL_UNIT, u = ub / SPW_JOURNAL_UNIT;
		int slot;

		if (spw__journal_unit_done(o, j, u)) {
			if (j->copy) {
				struct spw__kernel_op cast = { .op = SPW_POOL_CAST, .src = j->run->ptr[R_P],
							       .src_dtype = master_dtype(o), .dst = j->scopy,
							       .dst_dtype = j->cdt };

				spw__kernel_op_run(o->k, &cast, ub, ue);
			}
			continue;
		}
		slot = spw__journal_enter(o, j, u, ub, ue);
		if (!j->ch->zeroed)
			zero_moments(j, ub, ue);
		if (spw__journal_kill_now(o)) {
			/* Tests only: die with the unit half updated. */
			spw__kernel_op_run(o->k, adam, ub, ub + (ue - ub) / 2);
			kill(getpid(), SIGKILL);
		}
		spw__journal_test_delay(o);
		spw__kernel_op_run(o->k, adam, ub, ue);
		spw__journal_test_delay(o);
		spw__journal_leave(o, j, u, slot);
	}
}

static void job_tile(void *arg, size_t tile, size_t b, size_t e)
{
	struct job *j = arg;
	struct chunk *ch = j->ch;
	spw_optimizer *o = j->o;
	bool adam = j->kind != JOB_GRAD && j->kind != JOB_FETCH;
	uint64_t t0 = now_ns(), t1;

	if (adam && spw__journal_on(o)) {
		journalled_tile(j, tile, b, e);
		goto out;
	}
	if (adam && !ch->zeroed)
		zero_moments(j, b, e);
	for (unsigned i = 0; i < j->run->nops; i++) {
		double s = spw__kernel_op_run(o->k, &j->run->ops[i], b, e);

		if (j->run->ops[i].op == SPW_POOL_SUMSQ)
			ch->partial[tile] = s;
	}
out:
	t1 = now_ns();
	atomic_fetch_add_explicit(&o->st_adam_ns, t1 - t0, memory_order_relaxed);
	/* Each worker's own track: which tiles it ran, when. */
	if (o->trace)
		spw__trace_span_on(o->trace, SPW_TRACK_WORKER, spw__pool_worker(), tile_name[j->kind], t0, t1,
				   (uint32_t)(ch->t - o->tensors), ch->index);
	/* The last tile hands the job to the engine. The seq_cst decrement
	 * orders every tile's stores before it, and the lock hand-off in
	 * spw__opt_tiles_done() carries them to the engine. */
	if (atomic_fetch_sub(&j->run->tiles_left, 1) == 1) {
		TRACE_JOB(o, SPW_TRACK_KERNELS, kind_name[j->kind], j->t_kern, j);
		spw__opt_tiles_done(j);
	}
}

void spw__opt_start_kernels(spw_optimizer *o, struct job *j)
{
	size_t ntiles = (j->ch->n + TILE - 1) / TILE;
	uint64_t now = now_ns(), dt = now - j->t_pin;

	atomic_fetch_add_explicit(&o->st_pin_ns, dt, memory_order_relaxed);
	atomic_fetch_add_explicit(&o->st_pins, j->npins, memory_order_relaxed);
	if (dt < FAST_PIN_NS)
		atomic_fetch_add_explicit(&o->st_fast_pins, j->npins, memory_order_relaxed);
	TRACE_SPAN(o, SPW_TRACK_PIN, "pin wait", j->t_pin, now, (uint32_t)(j->ch->t - o->tensors), j->ch->index,
		   UINT64_MAX);
	j->t_kern = now;
	memset(j->ch->partial, 0, ntiles * sizeof(double));
	plan_ops(j);
	atomic_store(&j->run->tiles_left, ntiles);
	j->run->call.fn = job_tile;
	j->run->call.arg = j;
	j->run->call.n = j->ch->n;
	j->run->call.tile = TILE;
	spw__pool_submit(o->pool, &j->run->call);
}
