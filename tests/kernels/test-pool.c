/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-pool.c: the thread pool. Same input, bit-identical
 * output with 1, 2 and 5 threads (and with one kernel call over the whole
 * span); queued calls complete one by one; an idle pool uses no CPU.
 */
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include "kt.h"
#include "pool.h"

#define N (1000003)

struct state {
	float *p, *m, *v;
	uint16_t *g, *copy;
	float *acc;
	uint16_t *cast;
	double ss;
	unsigned nonfinite;
};

static float *p0, *m0, *v0;
static uint16_t *g0;

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	ASSERT_TRUE(p != NULL);
	return p;
}

static void state_init(struct state *s)
{
	s->p = xmalloc(N * 4);
	s->m = xmalloc(N * 4);
	s->v = xmalloc(N * 4);
	s->acc = xmalloc(N * 4);
	s->copy = xmalloc(N * 2);
	s->cast = xmalloc(N * 2);
	memcpy(s->p, p0, N * 4);
	memcpy(s->m, m0, N * 4);
	memcpy(s->v, v0, N * 4);
	memcpy(s->acc, p0, N * 4);
	s->g = g0;
}

static void state_free(struct state *s)
{
	free(s->p);
	free(s->m);
	free(s->v);
	free(s->acc);
	free(s->copy);
	free(s->cast);
}

static void state_same(const struct state *a, const struct state *b)
{
	ASSERT_EQ(memcmp(a->p, b->p, N * 4), 0);
	ASSERT_EQ(memcmp(a->m, b->m, N * 4), 0);
	ASSERT_EQ(memcmp(a->v, b->v, N * 4), 0);
	ASSERT_EQ(memcmp(a->copy, b->copy, N * 2), 0);
	ASSERT_EQ(memcmp(a->acc, b->acc, N * 4), 0);
	ASSERT_EQ(memcmp(a->cast, b->cast, N * 2), 0);
	ASSERT_EQ(memcmp(&a->ss, &b->ss, sizeof(double)), 0);
	ASSERT_EQ(a->nonfinite, b->nonfinite);
}

static struct spw_adamw_consts consts(uint64_t step)
{
	struct spw_adamw_hparams hp = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					.weight_decay = 0.01f, .grad_scale = 0.25f, .step = step };
	struct spw_adamw_consts k;

	ASSERT_OK(spw_adamw_prepare(&hp, &k));
	return k;
}

/* Two AdamW steps, then sumsq / nonfinite / acc / cast, all through the pool. */
static void run(struct spw__pool *pool, struct state *s)
{
	static struct spw__pool_kcall kc[6];

	for (uint64_t step = 1; step <= 2; step++) {
		kc[0] = (struct spw__pool_kcall){
			.op = SPW_POOL_ADAMW, .n = N, .src = s->g, .src_dtype = SPW_DTYPE_BF16,
			.consts = consts(step), .param = s->p, .exp_avg = s->m, .exp_avg_sq = s->v,
			.copy = s->copy, .copy_dtype = SPW_DTYPE_BF16,
		};
		ASSERT_OK(spw__pool_kernel_submit(pool, &kc[0]));
		spw__pool_wait(pool, &kc[0].call);
	}
	/* These four are independent: queue them all, then wait. */
	kc[1] = (struct spw__pool_kcall){ .op = SPW_POOL_SUMSQ, .n = N, .src = s->g, .src_dtype = SPW_DTYPE_BF16 };
	kc[2] = (struct spw__pool_kcall){ .op = SPW_POOL_NONFINITE, .n = N, .src = s->p, .src_dtype = SPW_DTYPE_F32 };
	kc[3] = (struct spw__pool_kcall){ .op = SPW_POOL_ACC, .n = N, .src = s->g, .src_dtype = SPW_DTYPE_BF16,
					  .dst = s->acc, .dst_dtype = SPW_DTYPE_F32 };
	kc[4] = (struct spw__pool_kcall){ .op = SPW_POOL_CAST, .n = N, .src = s->p, .src_dtype = SPW_DTYPE_F32,
					  .dst = s->cast, .dst_dtype = SPW_DTYPE_F16 };
	for (int i = 1; i <= 4; i++)
		ASSERT_OK(spw__pool_kernel_submit(pool, &kc[i]));
	for (int i = 4; i >= 1; i--)
		spw__pool_wait(pool, &kc[i].call);
	s->ss = spw__pool_sumsq_result(&kc[1]);
	s->nonfinite = atomic_load(&kc[2].nonfinite);
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

static void noop(void *arg, size_t tile, size_t b, size_t e)
{
	atomic_fetch_add((atomic_size_t *)arg, e - b);
}

/* The threading policy: the trainer's threads first, pinning and polling
 * only for workers with a core of their own. */
static void test_plan(void)
{
	static const struct {
		unsigned ncpu, trainer, threads, spin_us;
		unsigned want_threads;
		bool want_pin;
		unsigned want_spin;
	} t[] = {
		{ 2, 1, 0, 0, 1, true, SPW_POOL_SPIN_US },      /* one core each */
		{ 2, 2, 0, 0, 1, false, 0 },                    /* torch on both: share, never spin */
		{ 2, 8, 0, 0, 1, false, 0 },
		{ 1, 1, 0, 0, 1, false, 0 },
		{ 16, 1, 0, 0, 15, true, SPW_POOL_SPIN_US },
		{ 16, 8, 0, 0, 8, true, SPW_POOL_SPIN_US },
		{ 4, 0, 0, 0, 3, true, SPW_POOL_SPIN_US },     /* 0: the trainer's own thread */
		{ 2, 1, 2, 0, 2, false, 0 },                    /* asked for more than is free */
		{ 16, 2, 4, 0, 4, true, SPW_POOL_SPIN_US },
		{ 2, 2, 0, 30, 1, false, 30 },                  /* an explicit spin is kept */
	};
	struct spw__pool *pool;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct spw__pool_plan pl = spw__pool_plan(t[i].ncpu, t[i].trainer, t[i].threads, t[i].spin_us);

		ASSERT_EQ(pl.threads, t[i].want_threads);
		ASSERT_EQ(pl.pin, t[i].want_pin);
		ASSERT_EQ(pl.spin_us, t[i].want_spin);
	}
	unsetenv("SPILLWAY_TRAINER_THREADS");
	ASSERT_EQ(spw__pool_trainer_threads(), 1);
	setenv("SPILLWAY_TRAINER_THREADS", "3", 1);
	ASSERT_EQ(spw__pool_trainer_threads(), 3);
	setenv("SPILLWAY_TRAINER_THREADS", "0", 1);
	ASSERT_EQ(spw__pool_trainer_threads(), 1);
	setenv("SPILLWAY_TRAINER_THREADS", "2x", 1);
	ASSERT_EQ(spw__pool_trainer_threads(), 1);

	/* A trainer that computes on every allowed core: one worker, free to
	 * run anywhere, that sleeps as soon as it is idle. */
	setenv("SPILLWAY_TRAINER_THREADS", "4096", 1);
	ASSERT_OK(spw__pool_new(NULL, &pool));
	ASSERT_EQ(spw__pool_threads(pool), 1);
	ASSERT_EQ(spw__pool_worker_cpu(pool, 0), -1);
	ASSERT_EQ(spw__pool_spin_us(pool), 0);
	pool = spw__pool_free(pool);
	/* The option wins over the environment. */
	{
		struct spw__pool_opts o = { .numa_node = -1, .trainer_threads = 1, .threads = 1 };
		cpu_set_t allowed;

		ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
		ASSERT_OK(spw__pool_new(&o, &pool));
		if (CPU_COUNT(&allowed) >= 2) {
			ASSERT_TRUE(CPU_ISSET(spw__pool_worker_cpu(pool, 0), &allowed));
			ASSERT_EQ(spw__pool_spin_us(pool), SPW_POOL_SPIN_US);
		}
		pool = spw__pool_free(pool);
	}
	unsetenv("SPILLWAY_TRAINER_THREADS");
}

int main(void)
{
	static const unsigned threads[] = { 1, 2, 5 };
	struct state ref, st;
	uint64_t seed = 7;
	struct spw__pool *pool;
	cpu_set_t allowed;

	test_plan();
	p0 = xmalloc(N * 4);
	m0 = xmalloc(N * 4);
	v0 = xmalloc(N * 4);
	g0 = xmalloc(N * 2);
	for (size_t i = 0; i < N; i++) {
		p0[i] = kt_uniform(&seed, -1, 1);
		m0[i] = kt_uniform(&seed, -0.1f, 0.1f);
		v0[i] = kt_uniform(&seed, 0, 0.01f);
		g0[i] = spw_f32_to_bf16(kt_uniform(&seed, -4, 4));
	}

	/* Reference: each kernel once over the whole span, no pool. */
	{
		const struct spw_kernels *k = spw_kernels();
		struct spw_adamw_consts k1 = consts(1), k2 = consts(2);
		double partial[SPW_POOL_MAX_PARTIALS];
		size_t tile = SPW_POOL_ADAMW_TILE, ntiles = 0;

		state_init(&ref);
		k->adamw[SPW_DTYPE_BF16][SPW_DTYPE_BF16](&k1, ref.p, ref.m, ref.v, ref.g, ref.copy, N);
		k->adamw[SPW_DTYPE_BF16][SPW_DTYPE_BF16](&k2, ref.p, ref.m, ref.v, ref.g, ref.copy, N);
		/* sumsq: the documented tiling (SPW_POOL_ADAMW_TILE for N), the
		 * tiles' sums added in tile order, as the pipeline sums a chunk */
		for (size_t t = 0; t * tile < N; t++, ntiles++)
			partial[t] = k->sumsq[SPW_DTYPE_BF16](ref.g + t * tile, N - t * tile < tile ? N - t * tile : tile);
		ref.ss = 0.0;
		for (size_t t = 0; t < ntiles; t++)
			ref.ss += partial[t];
		ref.nonfinite = k->nonfinite[SPW_DTYPE_F32](ref.p, N);
		k->acc[SPW_DTYPE_BF16](ref.acc, ref.g, N);
		k->cast[SPW_DTYPE_F16][SPW_DTYPE_F32](ref.cast, ref.p, N);
		fprintf(stderr, "sumsq %.17g via %s\n", ref.ss, k->name);
	}

	ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
		struct spw__pool_opts o = { .threads = threads[t], .numa_node = -1 };

		ASSERT_OK(spw__pool_new(&o, &pool));
		ASSERT_EQ(spw__pool_threads(pool), threads[t]);
		/* Pinned workers sit on allowed cores; unpinned ones (-1) only
		 * when the plan for this host says they share cores. */
		for (unsigned i = 0; i < threads[t]; i++) {
			int cpu = spw__pool_worker_cpu(pool, i);
			struct spw__pool_plan pl = spw__pool_plan((unsigned)CPU_COUNT(&allowed),
								  spw__pool_trainer_threads(), threads[t], 0);

			if (pl.pin)
				ASSERT_TRUE(cpu >= 0 && CPU_ISSET(cpu, &allowed));
			else
				ASSERT_EQ(cpu, -1);
		}
		state_init(&st);
		run(pool, &st);
		state_same(&st, &ref);
		state_free(&st);
		fprintf(stderr, "%u threads: bit-identical\n", threads[t]);
		pool = spw__pool_free(pool);
		ASSERT_TRUE(pool == NULL);
	}

	/* Default size, many queued calls on disjoint chunks, each completing on its own. */
	ASSERT_OK(spw__pool_new(NULL, &pool));
	ASSERT_GE(spw__pool_threads(pool), 1);
	{
		enum { CALLS = 24 };
		static struct spw__pool_kcall kc[CALLS];
		struct spw_adamw_consts k1 = consts(1), k2 = consts(2);
		size_t chunk = N / CALLS + 1;
		double t0, t1;
		atomic_size_t count = 0;
		struct spw__pool_call c;
		int polls = 0;

		state_init(&st);
		for (int step = 1; step <= 2; step++) {
			for (int i = 0; i < CALLS; i++) {
				size_t b = (size_t)i * chunk, n = b >= N ? 0 : (N - b < chunk ? N - b : chunk);

				kc[i] = (struct spw__pool_kcall){
					.op = SPW_POOL_ADAMW, .n = n, .src = st.g + b, .src_dtype = SPW_DTYPE_BF16,
					.consts = step == 1 ? k1 : k2, .param = st.p + b, .exp_avg = st.m + b,
					.exp_avg_sq = st.v + b, .copy = st.copy + b, .copy_dtype = SPW_DTYPE_BF16,
				};
				ASSERT_OK(spw__pool_kernel_submit(pool, &kc[i]));
			}
			/* Poll the first, wait for the rest in reverse order. */
			while (!spw__pool_done(&kc[0].call))
				polls++;
			for (int i = CALLS - 1; i >= 0; i--) {
				spw__pool_wait(pool, &kc[i].call);
				ASSERT_TRUE(spw__pool_done(&kc[i].call));
			}
		}
		ASSERT_EQ(memcmp(st.p, ref.p, N * 4), 0);
		ASSERT_EQ(memcmp(st.copy, ref.copy, N * 2), 0);
		state_free(&st);

		/* Bad calls; an empty one is done at once. */
		c = (struct spw__pool_call){ .fn = noop, .arg = &count, .n = 10, .tile = 0 };
		ASSERT_EQ(spw__pool_submit(pool, &c), -EINVAL);
		c.tile = 4;
		c.n = 0;
		ASSERT_OK(spw__pool_submit(pool, &c));
		ASSERT_TRUE(spw__pool_done(&c));
		c.n = 1001;
		ASSERT_OK(spw__pool_submit(pool, &c));
		spw__pool_wait(pool, &c);
		ASSERT_EQ(atomic_load(&count), 1001);
		{
			struct spw__pool_kcall bad = { .op = SPW_POOL_CAST, .n = 5, .src = g0,
						       .src_dtype = SPW_DTYPE_BF16, .dst = NULL };
			ASSERT_EQ(spw__pool_kernel_submit(pool, &bad), -EINVAL);
			bad.op = 99;
			ASSERT_EQ(spw__pool_kernel_submit(pool, &bad), -EINVAL);
		}

		/* Start-up cost of a one-tile call, workers awake (printed, not asserted). */
		t0 = (double)clock();
		{
			struct timespec a, b;
			clock_gettime(CLOCK_MONOTONIC, &a);
			for (int i = 0; i < 2000; i++) {
				c.n = 64;
				c.tile = 64;
				ASSERT_OK(spw__pool_submit(pool, &c));
				spw__pool_wait(pool, &c);
			}
			clock_gettime(CLOCK_MONOTONIC, &b);
			fprintf(stderr, "one-tile call round trip: %.1f us\n",
				((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 2000 / 1e3);
		}
		(void)t0;

		/* Idle: workers must be asleep, not spinning. */
		usleep(20000);
		t0 = cpu_s();
		usleep(300000);
		t1 = cpu_s();
		fprintf(stderr, "idle pool of %u threads: %.1f ms CPU in 300 ms; %d polls\n",
			spw__pool_threads(pool), (t1 - t0) * 1e3, polls);
		ASSERT_TRUE(t1 - t0 < 0.03);
	}
	pool = spw__pool_free(pool);
	ASSERT_TRUE(spw__pool_free(NULL) == NULL);
	state_free(&ref);
	free(p0);
	free(m0);
	free(v0);
	free(g0);
	return 0;
}
