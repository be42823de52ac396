/* SPDX-License-Identifier: MIT */
/*
 * test-master-dtype: the optimizer with its master weights stored as bf16
 * (spw_optimizer_opts.master_dtype = SPW_MASTER_BF16), rounded
 * stochastically at each update (kernels/sr.h).
 *
 *   exact      the example MLP trained through spillway (resident tier,
 *              overlapped and exact modes, 1 and 2 threads; fp32, bf16
 *              and int8 moments) equals a plain loop that widens each
 *              tensor's bf16 weights, runs kernels/' AdamW on the whole
 *              tensor and rounds back with round_sr(spw_sr_key(tensor,
 *              step), element): weights and moments bit-identical, and
 *              the device copy is the stored weight widened. Small pages
 *              cut every tensor into chunks two of which share a page of
 *              weights.
 *   swappable  the same on the NVMe tier, the region under 1/3 of the state
 *   write      spw_optimizer_write/read of the weights round to the
 *              nearest bf16 and widen exactly; the tier holds half the
 *              weight pages; a parameter view is refused, naming why
 *   adopt      a persistent session's trainer dies after 3 steps; the
 *              next takes it over and trains 3 more: bit-identical to 6
 *              steps straight (the random bits are the step's, not the
 *              process's). An optimizer with fp32 master weights is
 *              refused that session (its layout says bf16).
 *   converge   the MLP trained 400 steps: bf16 master weights' held-out
 *              loss no more than 2% above fp32's, with int8 moments too
 *              no more than 3% (printed; one-sided as state-dtype's)
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "kernels.h"
#include "mlp.h"
#include "q8.h"
#include "sr.h"
#include "pipeline-fixture.h"
#include "mlp-fixture.h"
#include "mlp-run.h"
#include "session-figure.h"
#include "test.h"

struct cfg {
	enum spw_optimizer_mode mode;
	enum spw_tensor_kind tier;
	enum spw_state_dtype sd;
	enum spw_master_dtype md;
	int steps;
	uint32_t threads;
	uint64_t region;
};

static const struct spw_param_group group = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					      .weight_decay = 0.01f };

/* One tensor's moments in any state dtype, for the plain loop. */
struct moments {
	void *m, *v;
	float *ms, *vs;
};

static void moments_alloc(struct moments *s, size_t count)
{
	size_t nb = (count + SPW_Q8_BLOCK - 1) / SPW_Q8_BLOCK;

	ASSERT_TRUE((s->m = calloc(count, 4)) && (s->v = calloc(count, 4)));
	ASSERT_TRUE((s->ms = calloc(nb, 4)) && (s->vs = calloc(nb, 4)));
}

static void moments_read(const struct moments *s, enum spw_state_dtype sd, size_t count, float *m, float *v)
{
	const struct spw_kernels *k = spw_kernels();

	for (size_t j = 0; sd == SPW_STATE_INT8 && j < count; j++) {
		m[j] = spw_q8_dec_m(((int8_t *)s->m)[j], s->ms[j / SPW_Q8_BLOCK]);
		v[j] = spw_q8_dec_v(((uint8_t *)s->v)[j], s->vs[j / SPW_Q8_BLOCK]);
	}
	if (sd == SPW_STATE_BF16) {
		k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](m, s->m, count);
		k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](v, s->v, count);
	} else if (sd == SPW_STATE_F32) {
		memcpy(m, s->m, count * 4);
		memcpy(v, s->v, count * 4);
	}
	free(s->m);
	free(s->v);
	free(s->ms);
	free(s->vs);
}

/* One AdamW update of fp32 weights p in the state dtype's kernel. */
static void adamw(enum spw_state_dtype sd, const struct spw_adamw_consts *kc, float *p, struct moments *s,
		  const float *g, size_t count)
{
	const struct spw_kernels *k = spw_kernels();

	if (sd == SPW_STATE_INT8)
		k->adamw_q8[SPW_DTYPE_F32][SPW_DTYPE_NONE](kc, p, s->m, s->ms, s->v, s->vs, g, NULL, count);
	else if (sd == SPW_STATE_BF16)
		k->adamw_m16[SPW_DTYPE_F32][SPW_DTYPE_NONE](kc, p, s->m, s->v, g, NULL, count);
	else
		k->adamw[SPW_DTYPE_F32][SPW_DTYPE_NONE](kc, p, s->m, s->v, g, NULL, count);
}

/* The reference: bf16 master weights by hand over kernels/, whole tensors
 * at once. The model's parameters are the trainer's fp32 values until the
 * first update, then the stored bf16 weights widened (the copy-out). */
static void run_plain(const struct cfg *c, struct mlp_run *o)
{
	const struct spw_kernels *k = spw_kernels();
	struct mlp *m = mlp_model();
	struct mlp_task *task;
	const struct mlp_tensor *t;
	struct moments s[MAXT];
	uint16_t *w[MAXT];
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	int n;

	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	mlp_state_alloc(&o->st, t, n);
	for (int i = 0; i < n; i++) {
		moments_alloc(&s[i], t[i].count);
		ASSERT_TRUE((w[i] = malloc(t[i].count * 2)) != NULL);
		k->cast[SPW_DTYPE_BF16][SPW_DTYPE_F32](w[i], t[i].param, t[i].count);
	}
	for (int step = 1; step <= c->steps; step++) {
		mlp_task_batch(task, (uint64_t)step - 1, BATCH, x, y);
		ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
		ASSERT_OK(mlp_backward(m, NULL, NULL));
		for (int i = 0; i < n; i++) {
			struct spw_adamw_hparams hp = { .lr = group.lr, .beta1 = group.beta1, .beta2 = group.beta2,
							.eps = group.eps, .weight_decay = group.weight_decay,
							.grad_scale = 1.0f, .step = (uint64_t)step };
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hp, &kc));
			k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](t[i].param, w[i], t[i].count);
			adamw(c->sd, &kc, t[i].param, &s[i], t[i].grad, t[i].count);
			k->round_sr(w[i], t[i].param, t[i].count, spw_sr_key((uint32_t)i, (uint64_t)step), 0);
			k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](t[i].param, w[i], t[i].count);
		}
	}
	for (int i = 0; i < n; i++) {
		memcpy(o->st.p[i], t[i].param, t[i].count * 4);
		moments_read(&s[i], c->sd, t[i].count, o->st.m[i], o->st.v[i]);
		free(w[i]);
	}
	o->eval_loss = mlp_eval_loss(m, task);
	mlp_task_free(task);
	mlp_free(m);
}

/* The same run through spillway. Returns 0 or -EOPNOTSUPP (no NVMe tier). */
static int run_spillway(const struct spw_test_daemon *d, const struct cfg *c, struct mlp_run *o)
{
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = c->mode, .tier = c->tier, .groups = &group, .ngroups = 1,
		.threads = c->threads, .device = "host", .state_dtype = c->sd, .master_dtype = c->md,
	};

	return mlp_run_spillway(d, "master/0", c->region, &oo, c->steps, o);
}

static void assert_same(const struct mlp_run *a, const struct mlp_run *b, const char *what)
{
	struct mlp *m = mlp_model();
	const struct mlp_tensor *t;
	int n;

	t = mlp_tensors(m, &n);
	mlp_runs_same(a, b, what);
	for (int i = 0; i < n; i++) {
		/* Every weight read back is a bf16 value. */
		for (size_t j = 0; j < t[i].count; j++) {
			uint32_t u;

			memcpy(&u, &b->st.p[i][j], 4);
			if (u & 0xffffu)
				TEST_FAIL("%s: %s weight %zu is not a bf16 value", what, t[i].name, j);
		}
	}
	mlp_free(m);
}

static int compare(const struct spw_test_daemon *d, struct cfg c, const char *what)
{
	struct mlp_run plain, spw;
	int r;

	run_plain(&c, &plain);
	r = run_spillway(d, &c, &spw);
	if (r == 0) {
		assert_same(&plain, &spw, what);
		fprintf(stderr, "%s: bit-identical to the plain run over kernels/ (%d steps)\n", what, c.steps);
	}
	mlp_state_free(&plain.st);
	if (r == 0)
		mlp_state_free(&spw.st);
	return r;
}

static void case_exact(void)
{
	struct spw_test_daemon d;
	struct cfg c = { .tier = SPW_TENSOR_RESIDENT, .md = SPW_MASTER_BF16, .steps = 5, .region = 16u << 20 };

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c.mode = SPW_OPT_OVERLAPPED, c.threads = 1;
	ASSERT_OK(compare(&d, c, "overlapped, fp32 moments, 1 thread"));
	c.threads = 2;
	ASSERT_OK(compare(&d, c, "overlapped, fp32 moments, 2 threads"));
	c.mode = SPW_OPT_EXACT;
	ASSERT_OK(compare(&d, c, "exact, fp32 moments, 2 threads"));
	c.sd = SPW_STATE_BF16, c.threads = 1;
	ASSERT_OK(compare(&d, c, "exact, bf16 moments, 1 thread"));
	c.sd = SPW_STATE_INT8;
	ASSERT_OK(compare(&d, c, "exact, int8 moments, 1 thread"));
	c.mode = SPW_OPT_OVERLAPPED, c.threads = 2;
	ASSERT_OK(compare(&d, c, "overlapped, int8 moments, 2 threads"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_swappable(void)
{
	struct spw_test_daemon d;
	/* bf16 master (0.6 MB) + fp32 moments (2.4 MB): 12 pages of 64 KiB
	 * are under a third of it. */
	struct cfg c = { .tier = SPW_TENSOR_SWAPPABLE, .md = SPW_MASTER_BF16, .steps = 3, .region = 12 * PAGE,
			 .threads = 2 };
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	c.mode = SPW_OPT_OVERLAPPED;
	r = compare(&d, c, "swappable, overlapped");
	if (r == -EOPNOTSUPP) {
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		SKIP("the daemon refuses swappable tensors (EOPNOTSUPP: no NVMe tier in this build)");
	}
	ASSERT_OK(r);
	c.mode = SPW_OPT_EXACT, c.sd = SPW_STATE_INT8;
	ASSERT_OK(compare(&d, c, "swappable, exact, int8 moments"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_write(void)
{
	/* 6 chunks and a bit: weight pages of 1 (fp32) or 2 (bf16) chunks. */
	const uint64_t n = 6 * CHUNK + 1000;
	struct spw_test_daemon d;
	float *in = malloc(n * 4), *back = malloc(n * 4), *dev = calloc(n, 4);
	double slots[2];

	ASSERT_TRUE(in && back && dev);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	for (int md = 0; md < 2; md++) {
		struct spw_optimizer_opts oo = { .size = sizeof(oo), .tier = SPW_TENSOR_RESIDENT, .groups = &group,
						 .ngroups = 1, .threads = 1, .device = "host", .master_dtype = md };
		spw_client *c = connect_client(&d, "master/0", 16u << 20);
		spw_optimizer *o;
		void *view;
		size_t bytes;
		uint32_t id;

		ASSERT_OK(spw_optimizer_new(c, &oo, &o));
		for (uint64_t i = 0; i < n; i++)
			in[i] = (float)(i % 977) * 1.2345678e-3f - 0.5f + (i == 5 ? NAN : 0.0f);
		ASSERT_OK(spw_optimizer_add(o, "w", 0, n, in, dev, SPW_TYPE_F32, &id));
		slots[md] = session_figure(d.status, "master/0", "slots_used");
		/* Written at add and written again: rounded to nearest even. */
		for (int pass = 0; pass < 2; pass++) {
			if (pass)
				ASSERT_OK(spw_optimizer_write(o, id, SPW_STATE_PARAM, in));
			ASSERT_OK(spw_optimizer_read(o, id, SPW_STATE_PARAM, back));
			for (uint64_t i = 0; i < n; i++) {
				float want = md ? spw_bf16_to_f32(spw_f32_to_bf16(in[i])) : in[i];
				uint32_t a, b;

				memcpy(&a, &back[i], 4);
				memcpy(&b, &want, 4);
				if (isnan(want) ? !isnan(back[i]) : a != b)
					TEST_FAIL("master %d pass %d weight %llu: read %a, want %a", md, pass,
						  (unsigned long long)i, back[i], want);
			}
			for (uint64_t i = 0; i < n; i++)
				in[i] = -in[i];
		}
		/* A view shows fp32 weights: refused for bf16 ones, saying why. */
		if (md) {
			ASSERT_EQ(spw_optimizer_param_view(o, id, &view, &bytes), -EOPNOTSUPP);
			ASSERT_TRUE(strstr(spw_optimizer_last_error(o), "bf16") != NULL);
		}
		spw_optimizer_free(o);
		ASSERT_OK(spw_client_detach(c));
		spw_client_free(c);
	}
	/* 7 chunks: 7 weight pages, or 4 of two chunks each. */
	fprintf(stderr, "resident slots: fp32 master %.0f, bf16 master %.0f\n", slots[0], slots[1]);
	ASSERT_TRUE(slots[0] - slots[1] == 7 - 4);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	free(in);
	free(back);
	free(dev);
}

/* ---- adopt: a persistent session taken over ---- */

#define ADOPT_N (3 * CHUNK + 123)

/* Steps [from, to] of tensor "w" on session name: weights, gradients and
 * the optimizer's settings fixed, so every run is the same run. Returns
 * the optimizer, synced; *ret its client. */
static spw_optimizer *adopt_steps(const struct spw_test_daemon *d, const char *name, uint32_t threads,
				  uint64_t from, uint64_t to, spw_client **ret)
{
	static float w[ADOPT_N], dev[ADOPT_N], g[ADOPT_N];
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .tier = SPW_TENSOR_RESIDENT, .groups = &group,
					 .ngroups = 1, .threads = threads, .device = "host", .mode = SPW_OPT_EXACT,
					 .master_dtype = SPW_MASTER_BF16 };
	spw_client *c = connect_persistent(d, name);
	spw_optimizer *o;
	uint32_t id;

	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	for (uint32_t i = 0; i < ADOPT_N; i++)
		w[i] = (float)(i % 97) * 1.01e-2f;
	ASSERT_OK(spw_optimizer_add(o, "w", 0, ADOPT_N, w, dev, SPW_TYPE_F32, &id));
	ASSERT_EQ(spw_optimizer_resumed_step(o), from - 1);
	for (uint64_t step = from; step <= to; step++) {
		for (uint32_t i = 0; i < ADOPT_N; i++)
			g[i] = (float)((i * 7 + step * 13) % 29) * 1e-3f - 1.4e-2f;
		ASSERT_OK(spw_optimizer_begin(o, step, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o, NULL));
	}
	ASSERT_OK(spw_optimizer_sync(o));
	*ret = c;
	return o;
}

/* The weights after steps [from, to], then detached. */
static void adopt_train(const struct spw_test_daemon *d, const char *name, uint32_t threads, uint64_t from,
			uint64_t to, float *out)
{
	spw_client *c;
	spw_optimizer *o = adopt_steps(d, name, threads, from, to, &c);

	ASSERT_OK(spw_optimizer_read(o, 0, SPW_STATE_PARAM, out));
	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
}

static void case_adopt(void)
{
	static float straight[ADOPT_N], resumed[ADOPT_N];
	struct spw_test_daemon d;
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .tier = SPW_TENSOR_RESIDENT, .groups = &group,
					 .ngroups = 1, .threads = 1, .device = "host", .mode = SPW_OPT_EXACT };
	static float w[ADOPT_N], dev[ADOPT_N];
	spw_client *c;
	spw_optimizer *o;
	uint32_t id;
	pid_t pid;
	int st, r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	adopt_train(&d, "master/straight", 2, 1, 6, straight);
	/* A trainer that dies after step 3, without detaching. */
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		spw_client *dead;

		adopt_steps(&d, "master/taken", 1, 1, 3, &dead);
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* fp32 master weights do not fit the session: refused, by name. */
	c = connect_persistent(&d, "master/taken");
	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	r = spw_optimizer_add(o, "w", 0, ADOPT_N, w, dev, SPW_TYPE_F32, &id);
	if (r == 0)
		r = spw_optimizer_begin(o, 4, NULL, 0.0f);
	fprintf(stderr, "fp32 master over the bf16 session: %s\n", spw_optimizer_last_error(o));
	ASSERT_TRUE(r < 0);
	ASSERT_TRUE(strstr(spw_optimizer_last_error(o), "master dtype") != NULL);
	spw_optimizer_free(o);
	spw_client_free(c);
	adopt_train(&d, "master/taken", 2, 4, 6, resumed);
	if (memcmp(straight, resumed, sizeof(straight)))
		TEST_FAIL("taken over after step 3, the weights after step 6 differ from 6 steps straight");
	fprintf(stderr, "adopt: taken over after step 3, bit-identical to 6 steps straight\n");
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_converge(void)
{
	struct spw_test_daemon d;
	struct cfg c = { .mode = SPW_OPT_OVERLAPPED, .tier = SPW_TENSOR_RESIDENT, .steps = 400, .region = 16u << 20,
			 .threads = 2 };
	struct mlp_run f32, b16, b16q8;
	double first, rel, relq;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	first = mlp_untrained_loss();
	ASSERT_OK(run_spillway(&d, &c, &f32));
	c.md = SPW_MASTER_BF16;
	ASSERT_OK(run_spillway(&d, &c, &b16));
	c.sd = SPW_STATE_INT8;
	ASSERT_OK(run_spillway(&d, &c, &b16q8));
	rel = (b16.eval_loss - f32.eval_loss) / f32.eval_loss;
	relq = (b16q8.eval_loss - f32.eval_loss) / f32.eval_loss;
	fprintf(stderr, "converge: held-out loss before %.6f; after %d steps fp32 master %.6f, bf16 master %.6f "
		"(%+.4f%%), bf16 master with int8 moments %.6f (%+.4f%%)\n", first, c.steps, f32.eval_loss,
		b16.eval_loss, 100.0 * rel, b16q8.eval_loss, 100.0 * relq);
	ASSERT_TRUE(f32.eval_loss < 0.5 * first);
	ASSERT_TRUE(b16.eval_loss <= 1.02 * f32.eval_loss);
	ASSERT_TRUE(b16q8.eval_loss <= 1.03 * f32.eval_loss);
	mlp_state_free(&f32.st);
	mlp_state_free(&b16.st);
	mlp_state_free(&b16q8.st);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "exact", case_exact }, { "swappable", case_swappable }, { "write", case_write },
		{ "adopt", case_adopt }, { "converge", case_converge },
	};

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			return 0;
		}
	fprintf(stderr, "usage: test-master-dtype exact|swappable|write|adopt|converge\n");
	return 2;
}
