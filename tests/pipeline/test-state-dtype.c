/* SPDX-License-Identifier: MIT */
/*
 * test-state-dtype: the optimizer with its moments stored as bf16 or as
 * 8-bit blockwise codes (spw_optimizer_opts.state_dtype = SPW_STATE_BF16,
 * SPW_STATE_INT8).
 *
 *   exact      the example MLP trained through spillway (resident tier,
 *              overlapped and exact modes, 1 and 2 threads) equals a plain
 *              loop calling kernels/' adamw_m16 or adamw_q8 on whole
 *              tensors: master weights and both moments bit-identical.
 *              Small pages cut every tensor into chunks that share moment
 *              pages.
 *   swappable  the same on the NVMe tier, the region under 1/3 of the state
 *   write      spw_optimizer_write/read of the moments round to bf16
 *              (nearest even) and widen exactly, or code and decode int8
 *              blocks; the tiers hold 12 (bf16) and 7 (int8: four chunks'
 *              codes a page, one page of scales for both tensors) of the
 *              22 moment pages of an fp32 optimizer, tensors of 7 and 4
 *              chunks here
 *   old-layout a persistent session left with int8 moments in the older
 *              layout (three chunks' codes and scales a page) is refused,
 *              with a sentence naming the older layout, never misread:
 *              its moment tensors' sizes differ (add: -EEXIST), and where
 *              they would not, its layout record says version 1 (begin:
 *              -ESTALE). The sessions are made old by hand from new ones.
 *   converge   the MLP trained 400 steps with fp32, bf16 and int8 moments:
 *              bf16's final loss on a held-out set no more than 1% above
 *              fp32's, int8's no more than 2% (all printed, and why
 *              one-sided: case_converge)
 */
#include <errno.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "kernels.h"
#include "mlp.h"
#include "q8.h"
#include "pipeline-fixture.h"
#include "mlp-fixture.h"
#include "mlp-run.h"
#include "session-figure.h"
#include "test.h"

struct cfg {
	enum spw_optimizer_mode mode;
	enum spw_tensor_kind tier;
	enum spw_state_dtype sd;
	int steps;
	float clip_coef;        /* overlapped */
	float max_norm;         /* exact */
	uint32_t threads;
	uint64_t region;
	float lr;
};

static struct spw_param_group group_of(const struct cfg *c)
{
	return (struct spw_param_group){ .lr = c->lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					 .weight_decay = 0.01f };
}

/* The reference: AdamW with bf16 or int8 moments straight from kernels/,
 * whole tensors at once (chunks hold a whole number of int8 blocks, so the
 * blocks are the pipeline's). */
static void run_plain(const struct cfg *c, struct mlp_run *o)
{
	const struct spw_kernels *k = spw_kernels();
	struct spw_param_group g = group_of(c);
	struct mlp *m = mlp_model();
	struct mlp_task *task;
	const struct mlp_tensor *t;
	uint16_t *mh[MAXT], *vh[MAXT];
	int8_t *mq[MAXT];
	uint8_t *vq[MAXT];
	float *msc[MAXT], *vsc[MAXT];
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	int n;

	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	mlp_state_alloc(&o->st, t, n);
	for (int i = 0; i < n; i++) {
		size_t nb = (t[i].count + SPW_Q8_BLOCK - 1) / SPW_Q8_BLOCK;

		ASSERT_TRUE((mh[i] = calloc(t[i].count, 2)) && (vh[i] = calloc(t[i].count, 2)));
		ASSERT_TRUE((mq[i] = calloc(t[i].count, 1)) && (vq[i] = calloc(t[i].count, 1)));
		ASSERT_TRUE((msc[i] = calloc(nb, 4)) && (vsc[i] = calloc(nb, 4)));
	}
	for (int step = 1; step <= c->steps; step++) {
		double total = 0.0, norm;
		float coef = 1.0f;

		mlp_task_batch(task, (uint64_t)step - 1, BATCH, x, y);
		ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
		ASSERT_OK(mlp_backward(m, NULL, NULL));
		for (int i = 0; i < n; i++)
			add_sumsq(k, t[i].grad, t[i].count, &total);
		norm = sqrt(total);
		if (c->mode == SPW_OPT_OVERLAPPED && c->clip_coef > 0.0f)
			coef = c->clip_coef;
		else if (c->mode == SPW_OPT_EXACT && c->max_norm > 0.0f && (double)c->max_norm / (norm + 1e-6) < 1.0)
			coef = (float)((double)c->max_norm / (norm + 1e-6));
		for (int i = 0; i < n; i++) {
			struct spw_adamw_hparams hp = { .lr = g.lr, .beta1 = g.beta1, .beta2 = g.beta2, .eps = g.eps,
							.weight_decay = g.weight_decay, .grad_scale = coef,
							.step = (uint64_t)step };
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hp, &kc));
			if (c->sd == SPW_STATE_INT8)
				k->adamw_q8[SPW_DTYPE_F32][SPW_DTYPE_NONE](&kc, t[i].param, mq[i], msc[i], vq[i], vsc[i],
									   t[i].grad, NULL, t[i].count);
			else
				k->adamw_m16[SPW_DTYPE_F32][SPW_DTYPE_NONE](&kc, t[i].param, mh[i], vh[i], t[i].grad,
									    NULL, t[i].count);
		}
	}
	for (int i = 0; i < n; i++) {
		memcpy(o->st.p[i], t[i].param, t[i].count * 4);
		k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](o->st.m[i], mh[i], t[i].count);
		k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](o->st.v[i], vh[i], t[i].count);
		for (size_t j = 0; c->sd == SPW_STATE_INT8 && j < t[i].count; j++) {
			o->st.m[i][j] = spw_q8_dec_m(mq[i][j], msc[i][j / SPW_Q8_BLOCK]);
			o->st.v[i][j] = spw_q8_dec_v(vq[i][j], vsc[i][j / SPW_Q8_BLOCK]);
		}
		free(mh[i]);
		free(vh[i]);
		free(mq[i]);
		free(vq[i]);
		free(msc[i]);
		free(vsc[i]);
	}
	o->eval_loss = mlp_eval_loss(m, task);
	mlp_task_free(task);
	mlp_free(m);
}

/* The same run through spillway. Returns 0 or -EOPNOTSUPP (no NVMe tier). */
static int run_spillway(const struct spw_test_daemon *d, const struct cfg *c, struct mlp_run *o)
{
	struct spw_param_group g = group_of(c);
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = c->mode, .tier = c->tier, .groups = &g, .ngroups = 1,
		.clip_coef = c->clip_coef, .max_norm = c->max_norm, .threads = c->threads, .device = "host",
		.state_dtype = c->sd,
	};

	return mlp_run_spillway(d, "state/0", c->region, &oo, c->steps, o);
}

static void assert_same(const struct mlp_run *a, const struct mlp_run *b, const char *what)
{
	struct mlp *m = mlp_model();
	const struct mlp_tensor *t;
	int n;

	t = mlp_tensors(m, &n);
	mlp_runs_same(a, b, what);
	for (int i = 0; i < n; i++) {
		/* bf16 moments: the low 16 bits of every value read back are 0. */
		for (size_t j = 0; !strstr(what, "int8") && j < t[i].count; j++) {
			uint32_t u, w;

			memcpy(&u, &b->st.m[i][j], 4);
			memcpy(&w, &b->st.v[i][j], 4);
			if ((u | w) & 0xffffu)
				TEST_FAIL("%s: %s moment %zu is not a bf16 value", what, t[i].name, j);
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
	struct cfg c = { .tier = SPW_TENSOR_RESIDENT, .sd = SPW_STATE_BF16, .steps = 5, .region = 16u << 20,
			 .lr = 1e-3f };

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c.mode = SPW_OPT_OVERLAPPED, c.clip_coef = 0.5f, c.threads = 1;
	ASSERT_OK(compare(&d, c, "overlapped, 1 thread"));
	c.threads = 2;
	ASSERT_OK(compare(&d, c, "overlapped, 2 threads"));
	c.mode = SPW_OPT_EXACT, c.clip_coef = 0.0f, c.max_norm = 1.0f;
	ASSERT_OK(compare(&d, c, "exact, 2 threads"));
	c.threads = 1;
	ASSERT_OK(compare(&d, c, "exact, 1 thread"));
	c.sd = SPW_STATE_INT8;
	ASSERT_OK(compare(&d, c, "int8, exact, 1 thread"));
	c.mode = SPW_OPT_OVERLAPPED, c.max_norm = 0.0f, c.threads = 2;
	ASSERT_OK(compare(&d, c, "int8, overlapped, 2 threads"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_swappable(void)
{
	struct spw_test_daemon d;
	/* fp32 master (1.2 MB) + bf16 moments (1.2 MB): 12 pages of 64 KiB
	 * are about a third of it. */
	struct cfg c = { .tier = SPW_TENSOR_SWAPPABLE, .sd = SPW_STATE_BF16, .steps = 3, .region = 12 * PAGE,
			 .lr = 1e-3f, .threads = 2 };
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	c.mode = SPW_OPT_OVERLAPPED;
	r = compare(&d, c, "swappable, overlapped");
	if (r == -EOPNOTSUPP) {
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		SKIP("the daemon refuses swappable tensors (EOPNOTSUPP: no NVMe tier in this build)");
	}
	ASSERT_OK(r);
	c.mode = SPW_OPT_EXACT, c.max_norm = 1.0f;
	ASSERT_OK(compare(&d, c, "swappable, exact"));
	c.sd = SPW_STATE_INT8;
	ASSERT_OK(compare(&d, c, "swappable, int8, exact"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* Slots the session's resident pages hold, from the status document. */
static double slots_used(const struct spw_test_daemon *d)
{
	return session_figure(d->status, "state/0", "slots_used");
}

/* What an int8 moment written as in[] reads back as: element i coded
 * with its block's scale (the block's largest |value| by its bits). Chunks
 * start on blocks, so blocks are the whole array's. */
static float q8_round_trip(const float *in, uint64_t n, uint64_t i, bool m)
{
	uint64_t b = i / SPW_Q8_BLOCK * SPW_Q8_BLOCK, e = b + SPW_Q8_BLOCK < n ? b + SPW_Q8_BLOCK : n;
	uint32_t mx = 0;
	float s;

	for (uint64_t j = b; j < e; j++)
		if (spw_q8_absbits(in[j]) > mx)
			mx = spw_q8_absbits(in[j]);
	s = spw_q8_of_bits(mx);
	return m ? spw_q8_dec_m(spw_q8_enc_m(in[i], spw_q8_km(s)), s)
		 : spw_q8_dec_v(spw_q8_enc_v(in[i], spw_q8_kv(s)), s);
}

static void case_write(void)
{
	static const struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
	/* 6 chunks and a bit: moment pages of 1, 2 (bf16) or 4 (int8) chunks. */
	const uint64_t n = 6 * CHUNK + 1000;
	struct spw_test_daemon d;
	float *in = malloc(n * 4), *back = malloc(n * 4), *dev = calloc(n, 4);
	double bytes[3];

	ASSERT_TRUE(in && back && dev);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	for (int sd = 0; sd < 3; sd++) {
		struct spw_optimizer_opts oo = { .size = sizeof(oo), .tier = SPW_TENSOR_RESIDENT, .groups = &g,
						 .ngroups = 1, .threads = 1, .device = "host", .state_dtype = sd };
		spw_client *c = connect_client(&d, "state/0", 16u << 20);
		spw_optimizer *o;
		uint32_t id, id_b;

		ASSERT_OK(spw_optimizer_new(c, &oo, &o));
		for (uint64_t i = 0; i < n; i++)
			in[i] = (float)(i % 977) * 1.2345678e-3f - 0.5f;
		ASSERT_OK(spw_optimizer_add(o, "w", 0, n, in, dev, SPW_TYPE_F32, &id));
		/* 4 chunks: their int8 codes fill a page a moment exactly, and
		 * their scales go to the scale page "w"'s are in. */
		ASSERT_OK(spw_optimizer_add(o, "b", 0, 4 * CHUNK, in, dev, SPW_TYPE_F32, &id_b));
		bytes[sd] = slots_used(&d);
		for (int which = SPW_STATE_EXP_AVG; which <= SPW_STATE_EXP_AVG_SQ; which++) {
			for (uint64_t i = 0; i < n; i++)
				in[i] = (float)((i * 7919) % 10007) * (which == SPW_STATE_EXP_AVG ? 3.3e-5f : 1.1e-9f) +
					(i == 5 ? NAN : 0.0f);
			ASSERT_OK(spw_optimizer_write(o, id, which, in));
			ASSERT_OK(spw_optimizer_read(o, id, which, back));
			for (uint64_t i = 0; i < n; i++) {
				float want = sd == SPW_STATE_BF16 ? spw_bf16_to_f32(spw_f32_to_bf16(in[i])) : in[i];
				uint32_t a, b;

				if (sd == SPW_STATE_INT8)
					want = q8_round_trip(in, n, i, which == SPW_STATE_EXP_AVG);

				memcpy(&a, &back[i], 4);
				memcpy(&b, &want, 4);
				if (isnan(want) ? !isnan(back[i]) : a != b)
					TEST_FAIL("state %d moment %d element %llu: read %a, want %a", sd, which,
						  (unsigned long long)i, back[i], want);
			}
		}
		/* The master weights stay fp32, bit for bit. */
		ASSERT_OK(spw_optimizer_read(o, id, SPW_STATE_PARAM, back));
		for (uint64_t i = 0; i < n; i++)
			ASSERT_TRUE(back[i] == (float)(i % 977) * 1.2345678e-3f - 0.5f);
		spw_optimizer_free(o);
		ASSERT_OK(spw_client_detach(c));
		spw_client_free(c);
	}
	/* The staging pages and master weights are the same in all: the
	 * difference is the moments' pages, 2 x (7 + 4) (fp32), 2 x (4 + 2)
	 * (bf16) or 2 x (2 + 1) + 1 (int8: 7 chunks' codes take 1.75 pages a
	 * moment, 4 chunks' one, and one scale page holds all their scales;
	 * scales in each tensor would take 2 x (2 + 2)). */
	fprintf(stderr, "resident slots: fp32 state %.0f, bf16 state %.0f, int8 state %.0f\n", bytes[0], bytes[1],
		bytes[2]);
	ASSERT_TRUE(bytes[0] - bytes[1] == 2.0 * (11 - 6));
	ASSERT_TRUE(bytes[0] - bytes[2] == 2.0 * 11 - (2.0 * 3 + 1));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	free(in);
	free(back);
	free(dev);
}

/* One chunk of "w": 4096 codes a moment, 16 scales; the older layout kept
 * the scales after the codes in the moment's tensor, 4160 bytes. */
#define OLD_N 4096u
#define OLD_SESSION "state/old"

static spw_optimizer *int8_optimizer(spw_client *c, const struct spw_param_group *g)
{
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .tier = SPW_TENSOR_RESIDENT, .groups = g, .ngroups = 1,
					 .threads = 1, .device = "host", .state_dtype = SPW_STATE_INT8 };
	spw_optimizer *o;

	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	return o;
}

/* Runs fn in a child that exits without detaching, as a trainer dies. */
static void in_dying_child(void (*fn)(const struct spw_test_daemon *), const struct spw_test_daemon *d)
{
	pid_t pid = fork();
	int st;

	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		fn(d);
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static const struct spw_param_group old_group = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };

/* Three committed steps of an int8 optimizer on tensor "w". */
static void old_train(const struct spw_test_daemon *d)
{
	static float w[OLD_N], dev[OLD_N], g[OLD_N];
	spw_client *c = connect_persistent(d, OLD_SESSION);
	spw_optimizer *o = int8_optimizer(c, &old_group);
	uint32_t id;

	for (uint32_t i = 0; i < OLD_N; i++) {
		w[i] = (float)(i % 97) * 1e-2f;
		g[i] = (float)(i % 13) * 1e-3f - 5e-3f;
	}
	ASSERT_OK(spw_optimizer_add(o, "w", 0, OLD_N, w, dev, SPW_TYPE_F32, &id));
	for (uint64_t step = 1; step <= 3; step++) {
		ASSERT_OK(spw_optimizer_begin(o, step, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o, NULL));
	}
	ASSERT_OK(spw_optimizer_sync(o));
}

/* What an optimizer before the packed layout wrote as its layout record:
 * version word 1 (the record's second uint32). */
static void old_record(const struct spw_test_daemon *d)
{
	spw_client *c = connect_persistent(d, OLD_SESSION);
	/* The record: 6 words, then per tensor 24 bytes and its name. */
	uint32_t id, *head;

	ASSERT_OK(spw_tensor_adopt(c, "spw.opt.layout", 6 * 4 + 24 + 1, SPW_TENSOR_RESIDENT, &id, NULL));
	ASSERT_OK(spw_pin(c, id, 0, (void **)&head));
	ASSERT_EQ(head[1], 2); /* the packed layout's */
	head[1] = 1;
	ASSERT_OK(spw_unpin(c, id, 0, SPW_DIRTY));
}

/* And the size it gave an int8 moment tensor: codes, then scales. */
static void old_sizes(const struct spw_test_daemon *d)
{
	spw_client *c = connect_persistent(d, OLD_SESSION);
	uint32_t id;

	ASSERT_OK(spw_tensor_adopt(c, "spw.opt.w.exp_avg", OLD_N, SPW_TENSOR_RESIDENT, &id, NULL));
	ASSERT_OK(spw_tensor_unregister(c, id));
	ASSERT_OK(spw_tensor_register(c, "spw.opt.w.exp_avg", OLD_N + 4 * OLD_N / SPW_Q8_BLOCK, SPW_TENSOR_RESIDENT,
				      &id, NULL));
}

/* An int8 optimizer taking OLD_SESSION over: the error of add (or, when
 * add succeeds, of the first begin) and its message. */
static int take_over(const struct spw_test_daemon *d, char *msg, size_t len)
{
	static float w[OLD_N], dev[OLD_N];
	spw_client *c = connect_persistent(d, OLD_SESSION);
	spw_optimizer *o = int8_optimizer(c, &old_group);
	uint32_t id;
	int r = spw_optimizer_add(o, "w", 0, OLD_N, w, dev, SPW_TYPE_F32, &id);

	if (r == 0)
		r = spw_optimizer_begin(o, 4, NULL, 0.0f);
	snprintf(msg, len, "%s", spw_optimizer_last_error(o));
	fprintf(stderr, "taking the old layout over: %d: %s\n", r, msg);
	spw_optimizer_free(o);
	spw_client_free(c);
	return r;
}

static void case_old_layout(void)
{
	struct spw_test_daemon d;
	spw_client *c;
	char msg[1024];

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	/* Sizes that match, a record that does not. */
	in_dying_child(old_train, &d);
	in_dying_child(old_record, &d);
	ASSERT_EQ(take_over(&d, msg, sizeof(msg)), -ESTALE);
	ASSERT_TRUE(strstr(msg, "layout of an older spillway") != NULL);
	/* Sizes that do not match. */
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_drop(c, OLD_SESSION));
	in_dying_child(old_train, &d);
	in_dying_child(old_sizes, &d);
	ASSERT_EQ(take_over(&d, msg, sizeof(msg)), -EEXIST);
	ASSERT_TRUE(strstr(msg, "older spillway") != NULL);
	ASSERT_OK(spw_client_drop(c, OLD_SESSION));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_converge(void)
{
	struct spw_test_daemon d;
	struct cfg c = { .mode = SPW_OPT_OVERLAPPED, .tier = SPW_TENSOR_RESIDENT, .steps = 400,
			 .region = 16u << 20, .lr = 1e-3f, .threads = 2 };
	struct mlp_run f32, b16, q8;
	double first, rel, rel8;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	first = mlp_untrained_loss();
	c.sd = SPW_STATE_F32;
	ASSERT_OK(run_spillway(&d, &c, &f32));
	c.sd = SPW_STATE_BF16;
	ASSERT_OK(run_spillway(&d, &c, &b16));
	c.sd = SPW_STATE_INT8;
	ASSERT_OK(run_spillway(&d, &c, &q8));
	rel = (b16.eval_loss - f32.eval_loss) / f32.eval_loss;
	rel8 = (q8.eval_loss - f32.eval_loss) / f32.eval_loss;
	fprintf(stderr, "converge: held-out loss before %.6f; after %d steps fp32 state %.6f, bf16 state %.6f "
		"(%+.4f%%), int8 state %.6f (%+.4f%%)\n", first, c.steps, f32.eval_loss, b16.eval_loss, 100.0 * rel,
		q8.eval_loss, 100.0 * rel8);
	/*
	 * Training did something, and bf16 moments end no worse than fp32
	 * ones, within 1%. One-sided: the two runs' trajectories part, and
	 * on this task, which the MLP learns by heart, the distance between
	 * two sound runs grows with the steps: measured while writing this,
	 * bf16 minus fp32 was -0.6% after 200 steps, -1.7% after 400 and
	 * -10.7% after 1000 (bf16 lower each time), so "within 1% either
	 * way" would test where the trajectories went, not the state's
	 * precision.
	 */
	ASSERT_TRUE(f32.eval_loss < 0.5 * first);
	ASSERT_TRUE(b16.eval_loss <= 1.01 * f32.eval_loss);
	/* int8 moments: no more than 2% worse. */
	ASSERT_TRUE(q8.eval_loss <= 1.02 * f32.eval_loss);
	mlp_state_free(&f32.st);
	mlp_state_free(&b16.st);
	mlp_state_free(&q8.st);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "exact", case_exact }, { "swappable", case_swappable },
		{ "write", case_write }, { "old-layout", case_old_layout }, { "converge", case_converge },
	};

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			return 0;
		}
	fprintf(stderr, "usage: test-state-dtype exact|swappable|write|old-layout|converge\n");
	return 2;
}
