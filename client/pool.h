/* SPDX-License-Identifier: MIT */
/*
 * client/pool.h: the CPU thread pool that runs kernels/ over big spans.
 *
 * Worker threads are created once, on the cores of the chosen NUMA node
 * (see spw__pool_plan for how many, and when each gets a core of its own). A parallel call is a caller-owned struct spw__pool_call (on the
 * stack or inside a bigger object): submitting it allocates nothing and,
 * while the workers are awake, makes no system call. Calls queue in FIFO
 * order; each is cut into tiles of call->tile elements that the workers
 * claim one at a time, so several calls can be in flight (the pipeline
 * queues chunk k+1 while chunk k runs) and each reports its own completion.
 *
 * Tiling depends only on n and the tile size, never on the thread count,
 * and every kernel is elementwise or reduces per tile in a fixed order, so
 * a result is bit-identical with 1 or N threads.
 *
 * Idle workers sleep on a futex: an idle pool costs no CPU. They poll
 * for spin_us first only when each has a core the trainer does not use;
 * a worker that shares a core with the trainer's compute never spins.
 */
#ifndef SPW_CLIENT_POOL_H
#define SPW_CLIENT_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

struct spw__pool;

struct spw__pool_opts {
	unsigned threads;       /* 0: the node's allowed cores less the trainer's */
	int numa_node;          /* -1: the node the creating thread runs on */
	unsigned spin_us;       /* idle polling before sleeping; 0: the plan's */
	unsigned trainer_threads; /* compute threads of the trainer itself; 0:
				   * $SPILLWAY_TRAINER_THREADS, else 1 */
};

/* Default idle polling of a worker that has a core of its own. */
#define SPW_POOL_SPIN_US 100u

/*
 * The pool's shape on ncpu usable cores when the trainer computes with
 * `trainer` threads of its own:
 *   threads  `threads` when given, else ncpu - trainer, at least 1;
 *   pin      each worker pinned to a core of its own, the last cores of
 *            the node, only when workers and trainer fit (threads +
 *            trainer <= ncpu); otherwise workers may run on any core of
 *            the node and the scheduler places them;
 *   spin_us  `spin_us` when given, else SPW_POOL_SPIN_US when pinned and
 *            0 otherwise: spinning on a core the trainer computes on
 *            takes it from the trainer.
 */
struct spw__pool_plan {
	unsigned threads;
	bool pin;
	unsigned spin_us;
};
struct spw__pool_plan spw__pool_plan(unsigned ncpu, unsigned trainer, unsigned threads, unsigned spin_us);

/* $SPILLWAY_TRAINER_THREADS when it is a number from 1 to 4096, else 1. */
unsigned spw__pool_trainer_threads(void);

/* Runs elements [begin, end) of a call; tile = begin / call->tile. */
typedef void (*spw__pool_fn)(void *arg, size_t tile, size_t begin, size_t end);

/*
 * One parallel call. The caller fills fn, arg, n and tile, submits, and
 * keeps the struct alive and untouched until spw__pool_done() returns true
 * or spw__pool_wait() returns. Fields below the line are the pool's.
 */
struct spw__pool_call {
	spw__pool_fn fn;
	void *arg;
	size_t n;               /* elements */
	size_t tile;            /* elements per tile, > 0 */

	struct spw__pool_call *next;    /* queue link, under the pool lock */
	size_t ntiles;
	size_t claimed;                 /* under the pool lock */
	atomic_size_t finished;         /* tiles run to the end */
	atomic_uint done;               /* 1 once every tile has finished (release) */
};

/*
 * Starts the workers. Returns 0 and sets *ret, or: -EINVAL for a node that
 * does not exist or has no core this process may run on; -ENOTSUP for a
 * node other than -1/0 without libnuma; -ENOMEM; or the error of
 * pthread_create. On error *ret is untouched and nothing is left running.
 */
int spw__pool_new(const struct spw__pool_opts *opts, struct spw__pool **ret);

/* Finishes every queued call, stops and joins the workers, frees. NULL is
 * fine. Returns NULL. */
struct spw__pool *spw__pool_free(struct spw__pool *p);

unsigned spw__pool_threads(const struct spw__pool *p);

/* The CPU worker i is pinned to (-1: not pinned, any core of the node),
 * the NUMA node the pool serves, its idle polling in microseconds. */
int spw__pool_worker_cpu(const struct spw__pool *p, unsigned i);
unsigned spw__pool_spin_us(const struct spw__pool *p);
int spw__pool_node(const struct spw__pool *p);

/*
 * Queues a call. Returns 0, or -EINVAL when fn is NULL or tile is 0. A call
 * with n == 0 is complete on return. Never call from inside a tile.
 */
int spw__pool_submit(struct spw__pool *p, struct spw__pool_call *c);

/* The calling thread's pool worker number from 1, or 0 when it is not a
 * pool worker (a thread that runs tiles itself). For the timeline. */
unsigned spw__pool_worker(void);

/* True once every tile of c has run; its results are then visible. */
bool spw__pool_done(const struct spw__pool_call *c);

/* Blocks (briefly polling, then on a futex) until c is done. */
void spw__pool_wait(struct spw__pool *p, struct spw__pool_call *c);

/* ---- kernels/ over spans: one dispatch for the pool's calls and the pipeline's jobs ---- */

enum spw__pool_op {
	SPW_POOL_ADAMW,         /* adamw(param, exp_avg, exp_avg_sq, src -> copy) */
	SPW_POOL_SUMSQ,         /* sum of src[i]^2 */
	SPW_POOL_NONFINITE,     /* any inf/nan in src */
	SPW_POOL_CAST,          /* dst = src converted */
	SPW_POOL_ACC,           /* dst += src: dst fp32, or bf16 (widened, added, rounded) */
};

#define SPW_POOL_ADAMW_TILE 16384       /* 16K elements: ~300 KB of streams, fits L2 */
#define SPW_POOL_MAX_PARTIALS 256       /* per-tile sums kept by one SUMSQ call */

/*
 * One kernel over a span, every pointer at the span's element 0. src and
 * src_dtype are the gradient (ADAMW, ACC) or the input (the others); dst
 * is dst_dtype (CAST) or float (ACC); copy is NULL with copy_dtype
 * SPW_DTYPE_NONE (ADAMW without a low-precision copy).
 */
struct spw__kernel_op {
	enum spw__pool_op op;
	const void *src;
	enum spw_dtype src_dtype;
	void *dst;
	enum spw_dtype dst_dtype;
	const struct spw_adamw_consts *consts;  /* ADAMW */
	float *param;                           /* ADAMW */
	void *exp_avg, *exp_avg_sq;             /* ADAMW: of state_dtype */
	enum spw_dtype state_dtype;             /* ADAMW: SPW_DTYPE_F32 (0) or SPW_DTYPE_BF16 */
	/* ADAMW with 8-bit moments (kernels' adamw_q8): exp_avg, exp_avg_sq
	 * are the codes, these the block scales; spans start on blocks. */
	bool q8;
	float *m_scale, *v_scale;
	void *copy;
	enum spw_dtype copy_dtype;
	/* ADAMW with bf16 master weights (SPW_MASTER_BF16): param holds bf16;
	 * each tile is widened, updated in fp32 and rounded back
	 * stochastically with kernels' round_sr(key, sr_index + element),
	 * then the copy is cast from the rounded weights. */
	bool p16;
	uint32_t sr_key;
	uint64_t sr_index;
};

/*
 * Runs op over elements [begin, end) of its span with the kernel table k:
 * the one place kernels/ is called over a span. Returns the sum of squares
 * for SUMSQ, 1 or 0 (an inf or nan seen or not) for NONFINITE, 0 for the
 * others. Validates nothing (spw__pool_kernel_submit does).
 */
double spw__kernel_op_run(const struct spw_kernels *k, const struct spw__kernel_op *op, size_t begin,
			  size_t end);

/*
 * The one reduction of a gradient's square sums: per-tile sums added in
 * tile order, so the total depends on the tiling alone, never on the
 * thread count or on which worker ran which tile. The pipeline's norm is
 * this over each chunk's SPW_POOL_ADAMW_TILE tiles, then the chunks' sums
 * in (tensor, chunk) order.
 */
double spw__sumsq_fold(const double *partial, size_t ntiles);

/*
 * A kernel call: one op over a whole span, cut into tiles on the pool. Fill
 * the inputs for op (as struct spw__kernel_op says), then
 * spw__pool_kernel_submit(). Tiles are SPW_POOL_ADAMW_TILE elements (SUMSQ:
 * more when the span would need over SPW_POOL_MAX_PARTIALS of them, a
 * multiple of 32; NONFINITE: 65536).
 */
struct spw__pool_kcall {
	struct spw__pool_call call;
	enum spw__pool_op op;
	const struct spw_kernels *k;    /* NULL: spw_kernels() */
	size_t n;
	const void *src;
	enum spw_dtype src_dtype;
	void *dst;                      /* CAST: dst_dtype; ACC: float */
	enum spw_dtype dst_dtype;
	/* ADAMW */
	struct spw_adamw_consts consts;
	float *param;
	void *exp_avg, *exp_avg_sq;     /* of state_dtype */
	enum spw_dtype state_dtype;     /* SPW_DTYPE_F32 (0) or SPW_DTYPE_BF16 */
	bool q8;                        /* int8 codes in exp_avg/_sq, block scales here: */
	float *m_scale, *v_scale;
	void *copy;                     /* NULL with copy_dtype SPW_DTYPE_NONE */
	enum spw_dtype copy_dtype;
	bool p16;                       /* bf16 param, as struct spw__kernel_op */
	uint32_t sr_key;
	uint64_t sr_index;
	/* results */
	atomic_uint nonfinite;
	double partial[SPW_POOL_MAX_PARTIALS];
	/* the pool's: the inputs above as one op */
	struct spw__kernel_op kop;
};

/* Returns 0 or -EINVAL (bad dtype, op or missing pointer). */
int spw__pool_kernel_submit(struct spw__pool *p, struct spw__pool_kcall *kc);

/* The sum of squares of a finished SUMSQ call: spw__sumsq_fold() of its
 * tiles' sums, so independent of the thread count, and over a span of at
 * most SPW_POOL_MAX_PARTIALS tiles equal to the pipeline's sum of a chunk. */
double spw__pool_sumsq_result(const struct spw__pool_kcall *kc);

#endif
