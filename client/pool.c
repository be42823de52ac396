/* SPDX-License-Identifier: MIT */
/*
 * client/pool.c: fixed worker threads on a NUMA node's cores.
 *
 * Threading policy (docs/pipeline.md, "Threads"): the trainer's own compute
 * threads come first. The pool takes the cores they leave, pins a worker to
 * a core only when that core is its own, and polls before sleeping only
 * then; otherwise idle workers go straight to sleep.
 *
 * The client owns the pool (DESIGN.md: kernels/ does no threads); it runs
 * kernels/ over spans for the offload pipeline, tests/kernels and bench.
 *
 * Locks: one, the pool's spinlock (queue head/tail and every call's
 * `claimed`). It is held for a few instructions and never while calling out
 * or sleeping, so there is no lock order to keep. A spinlock rather than a
 * mutex because the hot path must make no system call; a holder that gets
 * preempted (workers may share cores) only makes the others yield.
 *
 * Futex words (each an event count, bumped after the state it announces):
 *   work_seq  bumped by submit and free; idle workers sleep on it.
 *   done_seq  bumped when any call completes; spw__pool_wait sleeps on it.
 * Each has a sleeper count so the waking side skips the futex syscall when
 * nobody sleeps; see the comments at the barriers for why no wake is lost.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include "config.h"
#include "pool.h"
#include "q8.h"
#include "util/clock.h"

#if SPW_HAVE_NUMA
#include <numa.h>
#endif

struct worker {
	pthread_t thread;
	struct spw__pool *pool;
	int cpu;
	unsigned index;
	bool started;
};

/* The running thread's worker number + 1 (0: not a pool worker): the
 * timeline's track for the tiles it runs. */
static _Thread_local unsigned worker_number;

unsigned spw__pool_worker(void)
{
	return worker_number;
}

struct spw__pool {
	atomic_int lock;
	struct spw__pool_call *head, *tail;     /* under lock */

	atomic_uint work_seq;
	atomic_uint work_sleepers;
	atomic_uint done_seq;
	atomic_uint done_sleepers;
	atomic_bool stop;

	uint64_t spin_ns;
	unsigned spin_us;
	int node;
	unsigned nthreads;
	struct worker workers[];
};

static void lock(struct spw__pool *p)
{
	for (unsigned spins = 0;; spins++) {
		int expect = 0;

		/* acquire: the queue state the last holder released is visible. */
		if (!atomic_load_explicit(&p->lock, memory_order_relaxed) &&
		    atomic_compare_exchange_weak_explicit(&p->lock, &expect, 1,
							  memory_order_acquire,
							  memory_order_relaxed))
			return;
		if (spins > 1000)
			sched_yield(); /* holder was preempted; give it the core */
		else
			cpu_relax();
	}
}

static void unlock(struct spw__pool *p)
{
	/* release: publishes queue changes to the next holder. */
	atomic_store_explicit(&p->lock, 0, memory_order_release);
}

static void futex_wait(atomic_uint *w, unsigned val)
{
	/* Returns at once (EAGAIN) when *w != val: the kernel compares and
	 * sleeps atomically, which is what makes the event counts safe. */
	syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w, int n)
{
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static void complete(struct spw__pool *p, struct spw__pool_call *c)
{
	/* release: with the acq_rel count below, every tile's stores are
	 * visible to whoever sees done == 1. After this store the caller may
	 * reuse c, so c is not touched again. */
	atomic_store_explicit(&c->done, 1, memory_order_release);
	/* seq_cst bump then seq_cst read of the sleeper count: either the
	 * waiter registered before our read (we wake it) or its futex_wait
	 * sees done_seq changed and returns. */
	atomic_fetch_add(&p->done_seq, 1);
	if (atomic_load(&p->done_sleepers))
		futex_wake(&p->done_seq, INT_MAX);
}

/* Claims and runs one tile; false when the queue is empty. */
static bool run_one(struct spw__pool *p)
{
	struct spw__pool_call *c;
	size_t t, begin, end;

	lock(p);
	c = p->head;
	if (!c) {
		unlock(p);
		return false;
	}
	t = c->claimed++;
	if (c->claimed == c->ntiles) {
		/* Last tile handed out: nobody looks at c through the queue again. */
		p->head = c->next;
		if (!p->head)
			p->tail = NULL;
	}
	unlock(p);

	begin = t * c->tile;
	end = c->n - begin < c->tile ? c->n : begin + c->tile;
	c->fn(c->arg, t, begin, end);
	/* acq_rel: releases this tile's results, and the last finisher
	 * acquires everyone's before it publishes done. */
	if (atomic_fetch_add_explicit(&c->finished, 1, memory_order_acq_rel) + 1 == c->ntiles)
		complete(p, c);
	return true;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct spw__pool *p = w->pool;

	worker_number = w->index + 1;

	/* Named so that top -H, perf and /proc tell its CPU time from the
	 * trainer's own threads. */
	pthread_setname_np(pthread_self(), "spw-pool");

	for (;;) {
		/* Read the count before looking at the queue: a submit after
		 * this read changes it, so the sleep below cannot miss it. */
		unsigned seq = atomic_load(&p->work_seq);
		uint64_t until;
		bool moved = false;

		if (run_one(p))
			continue;
		if (atomic_load(&p->stop))
			break;
		until = now_ns() + p->spin_ns;
		for (unsigned i = 1; p->spin_ns; i++) {
			if (atomic_load_explicit(&p->work_seq, memory_order_relaxed) != seq) {
				moved = true;
				break;
			}
			cpu_relax();
			if (!(i & 63) && now_ns() >= until)
				break;
		}
		if (moved)
			continue;
		/* seq_cst increment pairs with submit's seq_cst bump-then-read:
		 * either submit sees us and wakes, or futex_wait sees the bump. */
		atomic_fetch_add(&p->work_sleepers, 1);
		futex_wait(&p->work_seq, seq);
		atomic_fetch_sub(&p->work_sleepers, 1);
	}
	return NULL;
}

int spw__pool_submit(struct spw__pool *p, struct spw__pool_call *c)
{
	if (!p || !c || !c->fn || !c->tile)
		return -EINVAL;
	c->next = NULL;
	c->ntiles = c->n / c->tile + (c->n % c->tile != 0);
	c->claimed = 0;
	atomic_store_explicit(&c->finished, 0, memory_order_relaxed);
	atomic_store_explicit(&c->done, 0, memory_order_relaxed);
	if (c->ntiles == 0) {
		atomic_store_explicit(&c->done, 1, memory_order_release);
		return 0;
	}
	/* The unlock releases the fields above to the worker that claims a tile. */
	lock(p);
	if (p->tail)
		p->tail->next = c;
	else
		p->head = c;
	p->tail = c;
	unlock(p);
	atomic_fetch_add(&p->work_seq, 1);
	if (atomic_load(&p->work_sleepers))
		futex_wake(&p->work_seq, c->ntiles < p->nthreads ? (int)c->ntiles : (int)p->nthreads);
	return 0;
}

bool spw__pool_done(const struct spw__pool_call *c)
{
	return atomic_load_explicit(&c->done, memory_order_acquire);
}

void spw__pool_wait(struct spw__pool *p, struct spw__pool_call *c)
{
	uint64_t until = now_ns() + p->spin_ns;

	for (unsigned i = 1; p->spin_ns && !spw__pool_done(c); i++) {
		cpu_relax();
		if (!(i & 63) && now_ns() >= until)
			break;
	}
	for (;;) {
		unsigned seq = atomic_load(&p->done_seq);

		if (spw__pool_done(c))
			return;
		atomic_fetch_add(&p->done_sleepers, 1);
		futex_wait(&p->done_seq, seq);
		atomic_fetch_sub(&p->done_sleepers, 1);
	}
}

unsigned spw__pool_threads(const struct spw__pool *p)
{
	return p->nthreads;
}

int spw__pool_worker_cpu(const struct spw__pool *p, unsigned i)
{
	return i < p->nthreads ? p->workers[i].cpu : -EINVAL;
}

unsigned spw__pool_spin_us(const struct spw__pool *p)
{
	return p->spin_us;
}

struct spw__pool_plan spw__pool_plan(unsigned ncpu, unsigned trainer, unsigned threads, unsigned spin_us)
{
	struct spw__pool_plan pl;

	if (ncpu == 0)
		ncpu = 1;
	if (trainer == 0)
		trainer = 1;
	pl.threads = threads ? threads : ncpu > trainer ? ncpu - trainer : 1;
	pl.pin = trainer < ncpu && pl.threads <= ncpu - trainer;
	pl.spin_us = spin_us ? spin_us : pl.pin ? SPW_POOL_SPIN_US : 0;
	return pl;
}

unsigned spw__pool_trainer_threads(void)
{
	const char *s = getenv("SPILLWAY_TRAINER_THREADS");
	char *end;
	unsigned long n;

	if (!s || !*s)
		return 1;
	errno = 0;
	n = strtoul(s, &end, 10);
	return errno || *end || n < 1 || n > 4096 ? 1 : (unsigned)n;
}

int spw__pool_node(const struct spw__pool *p)
{
	return p->node;
}

/* The CPUs of node (or every allowed one without libnuma) that this process may use. */
static int node_cpus(int *node, int *cpus, int max)
{
	cpu_set_t allowed;
	int n = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return -errno;
#if SPW_HAVE_NUMA
	if (numa_available() >= 0) {
		struct bitmask *bm;

		if (*node < 0) {
			int cpu = sched_getcpu();
			*node = cpu >= 0 ? numa_node_of_cpu(cpu) : 0;
			if (*node < 0)
				*node = 0;
		}
		if (*node > numa_max_node())
			return -EINVAL;
		bm = numa_allocate_cpumask();
		if (!bm)
			return -ENOMEM;
		if (numa_node_to_cpus(*node, bm) < 0) {
			numa_free_cpumask(bm);
			return -EINVAL;
		}
		for (int c = 0; c < CPU_SETSIZE && n < max; c++)
			if (CPU_ISSET(c, &allowed) && (unsigned)c < bm->size && numa_bitmask_isbitset(bm, (unsigned)c))
				cpus[n++] = c;
		numa_free_cpumask(bm);
		return n ? n : -EINVAL;
	}
#endif
	if (*node > 0)
		return -ENOTSUP;
	*node = 0;
	for (int c = 0; c < CPU_SETSIZE && n < max; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[n++] = c;
	return n ? n : -EINVAL;
}

int spw__pool_new(const struct spw__pool_opts *opts, struct spw__pool **ret)
{
	static const struct spw__pool_opts defaults = { .numa_node = -1 };
	struct spw__pool *p;
	struct spw__pool_plan plan;
	int cpus[CPU_SETSIZE], ncpu, node, r = 0;
	cpu_set_t all;

	if (!ret)
		return -EINVAL;
	if (!opts)
		opts = &defaults;
	node = opts->numa_node;
	ncpu = node_cpus(&node, cpus, CPU_SETSIZE);
	if (ncpu < 0)
		return ncpu;
	plan = spw__pool_plan((unsigned)ncpu,
			      opts->trainer_threads ? opts->trainer_threads : spw__pool_trainer_threads(),
			      opts->threads, opts->spin_us);
	if (plan.threads > 4096)
		return -EINVAL;
	p = calloc(1, sizeof(*p) + plan.threads * sizeof(p->workers[0]));
	if (!p)
		return -ENOMEM;
	p->nthreads = plan.threads;
	p->node = node;
	p->spin_us = plan.spin_us;
	p->spin_ns = plan.spin_us * 1000ull;
	CPU_ZERO(&all);
	for (int i = 0; i < ncpu; i++)
		CPU_SET(cpus[i], &all);
	for (unsigned i = 0; i < plan.threads; i++) {
		struct worker *w = &p->workers[i];
		pthread_attr_t attr;
		cpu_set_t one;

		w->pool = p;
		w->index = i;
		/* Pinned workers take the node's last cores: the trainer's
		 * threads, started first, tend to hold the first ones. */
		w->cpu = plan.pin ? cpus[(unsigned)ncpu - plan.threads + i] : -1;
		CPU_ZERO(&one);
		if (plan.pin)
			CPU_SET(w->cpu, &one);
		r = -pthread_attr_init(&attr);
		if (r < 0)
			goto fail;
		/* Placed before it runs, so its stack is first touched on the node. */
		r = -pthread_attr_setaffinity_np(&attr, sizeof(cpu_set_t), plan.pin ? &one : &all);
		if (r == 0)
			r = -pthread_create(&w->thread, &attr, worker_main, w);
		pthread_attr_destroy(&attr);
		if (r < 0)
			goto fail;
		w->started = true;
	}
	*ret = p;
	return 0;
fail:
	spw__pool_free(p);
	return r;
}

struct spw__pool *spw__pool_free(struct spw__pool *p)
{
	if (!p)
		return NULL;
	/* Workers look at stop only when the queue is empty, so queued calls finish. */
	atomic_store(&p->stop, true);
	atomic_fetch_add(&p->work_seq, 1);
	futex_wake(&p->work_seq, INT_MAX);
	for (unsigned i = 0; i < p->nthreads; i++)
		if (p->workers[i].started)
			pthread_join(p->workers[i].thread, NULL);
	free(p);
	return NULL;
}

/* ---- kernels/ over spans ---- */

/* acc[i] += g[i] into a bf16 accumulator (SPW_GRAD_STORE_BF16): widened
 * (exact), the gradient added in fp32, rounded back to the nearest bf16,
 * by the variant's own cast and acc in blocks that stay in L1. Each of
 * the three is exact or correctly rounded per element, so every variant
 * gives the same bits. */
static void acc_bf16(const struct spw_kernels *k, uint16_t *acc, const unsigned char *g, enum spw_dtype gt, size_t n)
{
	float wide[1024];
	size_t gs = spw_dtype_size(gt);

	for (size_t i = 0; i < n; i += 1024) {
		size_t m = n - i < 1024 ? n - i : 1024;

		k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](wide, acc + i, m);
		k->acc[gt](wide, g + i * gs, m);
		k->cast[SPW_DTYPE_BF16][SPW_DTYPE_F32](acc + i, wide, m);
	}
}

/* ADAMW's fp32 kernel for op's state dtype over elements [b, e), with
 * the fp32 weights of element b at p (op->param + b, or a buffer) and the
 * copy written when copy is true. */
static void adamw_span(const struct spw_kernels *k, const struct spw__kernel_op *op, float *p, size_t b, size_t e,
		       bool copy)
{
	const void *src = (const unsigned char *)op->src + b * spw_dtype_size(op->src_dtype);
	enum spw_dtype ct = copy && op->copy ? op->copy_dtype : SPW_DTYPE_NONE;
	void *c = ct != SPW_DTYPE_NONE ? (unsigned char *)op->copy + b * spw_dtype_size(ct) : NULL;
	size_t n = e - b;

	if (op->q8)
		k->adamw_q8[op->src_dtype][ct](op->consts, p, (int8_t *)op->exp_avg + b, op->m_scale + b / SPW_Q8_BLOCK,
					       (uint8_t *)op->exp_avg_sq + b, op->v_scale + b / SPW_Q8_BLOCK, src, c, n);
	else if (op->state_dtype == SPW_DTYPE_BF16)
		k->adamw_m16[op->src_dtype][ct](op->consts, p, (uint16_t *)op->exp_avg + b,
						(uint16_t *)op->exp_avg_sq + b, src, c, n);
	else
		k->adamw[op->src_dtype][ct](op->consts, p, (float *)op->exp_avg + b, (float *)op->exp_avg_sq + b,
					    src, c, n);
}

/* ADAMW over bf16 master weights: each piece widened into a buffer the
 * fp32 kernels update (in L1), rounded back stochastically, and the copy
 * cast from what was stored, so the device gets the master's bits. Pieces
 * start on q8 blocks. */
#define P16_PIECE 1024
_Static_assert(P16_PIECE % SPW_Q8_BLOCK == 0, "pieces start on q8 blocks");

static void adamw_p16(const struct spw_kernels *k, const struct spw__kernel_op *op, size_t b, size_t e)
{
	float buf[P16_PIECE] __attribute__((aligned(64)));
	uint16_t *p = (uint16_t *)(void *)op->param;
	size_t cs = spw_dtype_size(op->copy_dtype);

	for (size_t pb = b; pb < e; pb += P16_PIECE) {
		size_t n = e - pb < P16_PIECE ? e - pb : P16_PIECE;

		k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](buf, p + pb, n);
		adamw_span(k, op, buf, pb, pb + n, false);
		k->round_sr(p + pb, buf, n, op->sr_key, op->sr_index + pb);
		if (op->copy)
			k->cast[op->copy_dtype][SPW_DTYPE_BF16]((unsigned char *)op->copy + pb * cs, p + pb, n);
	}
}

double spw__kernel_op_run(const struct spw_kernels *k, const struct spw__kernel_op *op, size_t b,
			  size_t e)
{
	size_t n = e - b, ss = spw_dtype_size(op->src_dtype);
	const unsigned char *src = (const unsigned char *)op->src + b * ss;

	switch (op->op) {
	case SPW_POOL_ADAMW:
		if (op->p16)
			adamw_p16(k, op, b, e);
		else
			adamw_span(k, op, op->param + b, b, e, true);
		break;
	case SPW_POOL_SUMSQ:
		return k->sumsq[op->src_dtype](src, n);
	case SPW_POOL_NONFINITE:
		return k->nonfinite[op->src_dtype](src, n) ? 1.0 : 0.0;
	case SPW_POOL_CAST:
		k->cast[op->dst_dtype][op->src_dtype](
			(unsigned char *)op->dst + b * spw_dtype_size(op->dst_dtype), src, n);
		break;
	case SPW_POOL_ACC:
		if (op->dst_dtype == SPW_DTYPE_BF16)
			acc_bf16(k, (uint16_t *)op->dst + b, src, op->src_dtype, n);
		else
			k->acc[op->src_dtype]((float *)op->dst + b, src, n);
		break;
	}
	return 0.0;
}

double spw__sumsq_fold(const double *partial, size_t ntiles)
{
	double s = 0.0;

	for (size_t i = 0; i < ntiles; i++)
		s += partial[i];
	return s;
}

static void kernel_tile(void *arg, size_t tile, size_t b, size_t e)
{
	struct spw__pool_kcall *kc = arg;
	double r;

	/* One inf or nan settles a NONFINITE call: later tiles skip the scan. */
	if (kc->op == SPW_POOL_NONFINITE && atomic_load_explicit(&kc->nonfinite, memory_order_relaxed))
		return;
	r = spw__kernel_op_run(kc->k, &kc->kop, b, e);
	if (kc->op == SPW_POOL_SUMSQ)
		kc->partial[tile] = r;
	else if (kc->op == SPW_POOL_NONFINITE && r != 0.0)
		atomic_store_explicit(&kc->nonfinite, 1, memory_order_relaxed);
}

static bool dtype_ok(enum spw_dtype t)
{
	return (unsigned)t < SPW_DTYPE_COUNT;
}

int spw__pool_kernel_submit(struct spw__pool *p, struct spw__pool_kcall *kc)
{
	size_t tile = SPW_POOL_ADAMW_TILE;

	if (!kc || !dtype_ok(kc->src_dtype) || (kc->n && !kc->src))
		return -EINVAL;
	switch (kc->op) {
	case SPW_POOL_ADAMW:
		if ((unsigned)kc->copy_dtype > SPW_DTYPE_NONE ||
		    (kc->copy_dtype != SPW_DTYPE_NONE && kc->n && !kc->copy) ||
		    (kc->n && (!kc->param || !kc->exp_avg || !kc->exp_avg_sq)) ||
		    (kc->state_dtype != SPW_DTYPE_F32 && kc->state_dtype != SPW_DTYPE_BF16) ||
		    (kc->q8 && kc->n && (!kc->m_scale || !kc->v_scale)))
			return -EINVAL;
		if (kc->copy_dtype == SPW_DTYPE_NONE)
			kc->copy = NULL;
		break;
	case SPW_POOL_SUMSQ: {
		/* Tiles from n alone: the pipeline's, or at most MAX_PARTIALS of
		 * them, multiples of 32 so each tile's lanes line up with the
		 * span's. */
		size_t per = kc->n / SPW_POOL_MAX_PARTIALS + 1;

		if (per > tile)
			tile = (per + 31) & ~(size_t)31;
		memset(kc->partial, 0, sizeof(kc->partial));
		break;
	}
	case SPW_POOL_NONFINITE:
		tile = 65536;
		break;
	case SPW_POOL_CAST:
	case SPW_POOL_ACC:
		if (!dtype_ok(kc->dst_dtype) || (kc->n && !kc->dst))
			return -EINVAL;
		if (kc->op == SPW_POOL_ACC && kc->dst_dtype != SPW_DTYPE_F32 && kc->dst_dtype != SPW_DTYPE_BF16)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (!kc->k)
		kc->k = spw_kernels();
	atomic_store_explicit(&kc->nonfinite, 0, memory_order_relaxed);
	kc->kop = (struct spw__kernel_op){
		.op = kc->op, .src = kc->src, .src_dtype = kc->src_dtype, .dst = kc->dst,
		.dst_dtype = kc->dst_dtype, .consts = &kc->consts, .param = kc->param,
		.exp_avg = kc->exp_avg, .exp_avg_sq = kc->exp_avg_sq, .state_dtype = kc->state_dtype,
		.q8 = kc->q8, .m_scale = kc->m_scale, .v_scale = kc->v_scale, .copy = kc->copy,
		.copy_dtype = kc->copy_dtype, .p16 = kc->p16, .sr_key = kc->sr_key, .sr_index = kc->sr_index,
	};
	kc->call.fn = kernel_tile;
	kc->call.arg = kc;
	kc->call.n = kc->n;
	kc->call.tile = tile;
	return spw__pool_submit(p, &kc->call);
}

double spw__pool_sumsq_result(const struct spw__pool_kcall *kc)
{
	return spw__sumsq_fold(kc->partial, kc->call.ntiles);
}
