/* SPDX-License-Identifier: MIT */
/*
 * test-pipeline: the offload pipeline, read as a set of API examples.
 *
 * Each case trains the example MLP (examples/mlp.h) for a few steps, once
 * with a plain in-memory AdamW that calls kernels/ directly and once with
 * spillway's optimizer, and checks that the final master weights, exp_avg
 * and exp_avg_sq are the same bits. A small page size (64 KiB) cuts the
 * tensors into many chunks, so the windowing and ordering are exercised.
 *
 * The resume cases stop a run, carry its state into a fresh optimizer
 * with spw_optimizer_write() and go on, which must change no bit.
 *
 *   test-pipeline three-way|swappable|exact|misuse|death|write|resume
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "pipeline-fixture.h"
#include "mlp-fixture.h"
#include "kernels.h"
#include "handover.h"
#include "mlp.h"
#include "test.h"
#include "session-figure.h"

struct run_cfg {
	enum spw_optimizer_mode mode;
	enum spw_tensor_kind tier;
	uint32_t accum;         /* micro-batches per step */
	int steps;
	float max_norm;         /* exact mode */
	float clip_coef;        /* overlapped mode */
	bool fp16;              /* gradients handed over as fp16, scaled by a dynamic loss scale */
	float init_scale;
	uint64_t region;
};

/* What a run leaves: every tensor's state, and how many steps it skipped. */
struct run_out {
	struct mlp_state st;
	int skipped;
	double last_norm;
};

static const struct spw_param_group group = {
	.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

/* The gradient the trainer hands over: fp32 as backward made it, or fp16
 * of gradient * loss scale (overflowing to inf, as a real fp16 run would). */
static void to_f16(uint16_t *dst, const float *g, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = spw_f32_to_f16(g[i] * scale);
}

/* ---- (a) the plain run: torch's AdamW through kernels/ directly ---- */

static void run_plain(const struct run_cfg *rc, struct run_out *out)
{
	const struct spw_kernels *k = spw_kernels();
	struct mlp *m = mlp_model();
	struct mlp_task *task;
	const struct mlp_tensor *t;
	float *acc[MAXT], x[BATCH * 64], loss, scale = rc->init_scale;
	int32_t y[BATCH];
	int n, good = 0;

	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	mlp_state_alloc(&out->st, t, n);
	for (int i = 0; i < n; i++)
		ASSERT_TRUE((acc[i] = calloc(t[i].count, 4)) != NULL);
	for (int step = 1; step <= rc->steps; step++) {
		double total = 0.0, norm;
		float coef = 1.0f, ls = rc->fp16 ? scale : 1.0f;
		bool skip = false;

		for (uint32_t mb = 0; mb < rc->accum; mb++) {
			mlp_task_batch(task, (uint64_t)(step - 1) * rc->accum + mb, BATCH, x, y);
			ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
			ASSERT_OK(mlp_backward(m, NULL, NULL));
			for (int i = 0; i < n; i++) {
				if (rc->fp16) {
					/* What the device would hand over, back in fp32 (exact). */
					uint16_t *h = malloc(t[i].count * 2);

					to_f16(h, t[i].grad, t[i].count, ls);
					if (mb == 0)
						k->cast[SPW_DTYPE_F32][SPW_DTYPE_F16](acc[i], h, t[i].count);
					else
						k->acc[SPW_DTYPE_F16](acc[i], h, t[i].count);
					free(h);
				} else if (mb == 0) {
					memcpy(acc[i], t[i].grad, t[i].count * 4);
				} else {
					k->acc[SPW_DTYPE_F32](acc[i], t[i].grad, t[i].count);
				}
			}
		}
		for (int i = 0; i < n; i++)
			add_sumsq(k, acc[i], t[i].count, &total);
		norm = sqrt(total) / (double)ls;
		if (rc->mode == SPW_OPT_OVERLAPPED) {
			coef = rc->clip_coef > 0.0f ? rc->clip_coef : 1.0f;
		} else if (!isfinite(total)) {
			skip = true;
		} else if (rc->max_norm > 0.0f) {
			double c = (double)rc->max_norm / (norm + 1e-6);

			coef = c < 1.0 ? (float)c : 1.0f;
		}
		out->last_norm = norm;
		if (skip) {
			out->skipped++;
			scale *= 0.5f;
			good = 0;
			continue;
		}
		if (rc->fp16 && ++good >= 2000) {
			scale *= 2.0f;
			good = 0;
		}
		for (int i = 0; i < n; i++) {
			struct spw_adamw_hparams hp = { .lr = group.lr, .beta1 = group.beta1, .beta2 = group.beta2,
							.eps = group.eps, .weight_decay = group.weight_decay,
							.grad_scale = coef / ls, .step = (uint64_t)step };
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hp, &kc));
			k->adamw[SPW_DTYPE_F32][SPW_DTYPE_NONE](&kc, t[i].param, out->st.m[i], out->st.v[i], acc[i],
								NULL, t[i].count);
		}
	}
	for (int i = 0; i < n; i++) {
		memcpy(out->st.p[i], t[i].param, t[i].count * 4);
		free(acc[i]);
	}
	mlp_task_free(task);
	mlp_free(m);
}

/* ---- (b), (c) the same run through spillway ---- */

struct trainer {
	struct handover hv;     /* first: give() casts back */
	spw_optimizer *opt;
	const struct run_cfg *rc;
	uint32_t id[MAXT];
	uint16_t *h[MAXT];      /* fp16 gradients, alive until sync_grads */
	float scale;
};

static int hand_over(struct handover *hv, const struct mlp_tensor *t, int index)
{
	struct trainer *tr = (struct trainer *)hv;

	if (tr->rc->fp16) {
		to_f16(tr->h[index], t->grad, t->count, tr->scale);
		return spw_optimizer_grad_ready(tr->opt, tr->id[index], SPW_ALL_CHUNKS, tr->h[index],
						t->count * 2, SPW_TYPE_F16, NULL);
	}
	return spw_optimizer_grad_ready(tr->opt, tr->id[index], SPW_ALL_CHUNKS, t->grad, t->count * 4,
					SPW_TYPE_F32, NULL);
}

static spw_optimizer *make_opt(spw_client *c, const struct run_cfg *rc, int *err)
{
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = rc->mode, .tier = rc->tier, .groups = &group, .ngroups = 1,
		.accumulation = rc->accum, .clip_coef = rc->clip_coef, .max_norm = rc->max_norm,
		.dynamic_loss_scale = rc->fp16, .init_loss_scale = rc->init_scale, .threads = 2,
		.device = "host",
	};
	spw_optimizer *o = NULL;

	*err = spw_optimizer_new(c, &oo, &o);
	if (*err < 0)
		fprintf(stderr, "spw_optimizer_new: %s\n", spw_client_last_error(c));
	return o;
}

/*
 * Runs steps first..rc->steps; with from, a fresh optimizer first takes
 * from's state (saved after step first - 1) as a resumed run would.
 * Returns 0, or -EOPNOTSUPP when the daemon refuses the tier.
 */
static int run_spillway_from(const struct spw_test_daemon *d, const struct run_cfg *rc, int first,
			     const struct run_out *from, struct run_out *out)
{
	struct trainer tr = { .hv.give = hand_over, .rc = rc, .scale = rc->init_scale };
	struct mlp *m = mlp_model();
	struct mlp_task *task;
	const struct mlp_tensor *t;
	spw_client *c = connect_client(d, "pipeline/0", rc->region);
	float x[BATCH * 64], loss, last_coef = -1.0f;
	int32_t y[BATCH];
	int n, r;

	tr.opt = make_opt(c, rc, &r);
	ASSERT_OK(r);
	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	mlp_state_alloc(&out->st, t, n);
	/* The model's own arrays serve as the "device" buffers on the host
	 * backend: the optimizer copies every update back into them. */
	for (int i = 0; i < n; i++) {
		r = spw_optimizer_add(tr.opt, t[i].name, 0, t[i].count, t[i].param, t[i].param, SPW_TYPE_F32,
				      &tr.id[i]);
		if (r == -EOPNOTSUPP) {
			fprintf(stderr, "add: %s\n", spw_optimizer_last_error(tr.opt));
			goto refused;
		}
		ASSERT_OK(r);
		ASSERT_TRUE((tr.h[i] = malloc(t[i].count * 2)) != NULL);
	}
	for (int i = 0; from && i < n; i++) {
		ASSERT_OK(spw_optimizer_write(tr.opt, tr.id[i], SPW_STATE_PARAM, from->st.p[i]));
		ASSERT_OK(spw_optimizer_write(tr.opt, tr.id[i], SPW_STATE_EXP_AVG, from->st.m[i]));
		ASSERT_OK(spw_optimizer_write(tr.opt, tr.id[i], SPW_STATE_EXP_AVG_SQ, from->st.v[i]));
		/* The device parameters are the caller's to restore. */
		memcpy(t[i].param, from->st.p[i], t[i].count * 4);
	}
	for (int step = first; step <= rc->steps; step++) {
		struct spw_step_result res = { .size = sizeof(res) };

		ASSERT_OK(spw_optimizer_begin(tr.opt, (uint64_t)step, NULL, 0.0f));
		for (uint32_t mb = 0; mb < rc->accum; mb++) {
			/* Forward needs every layer's updated parameters. */
			for (int i = 0; i < n; i++)
				ASSERT_OK(spw_optimizer_wait_params(tr.opt, tr.id[i], NULL));
			mlp_task_batch(task, (uint64_t)(step - 1) * rc->accum + mb, BATCH, x, y);
			ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
			ASSERT_OK(mlp_backward(m, handover_on_grad, &tr.hv));
			ASSERT_OK(handover_flush(&tr.hv));
			/* Backward of the next micro-batch rewrites the gradients. */
			ASSERT_OK(spw_optimizer_sync_grads(tr.opt));
		}
		ASSERT_OK(spw_optimizer_end(tr.opt, &res));
		out->skipped += res.skipped;
		out->last_norm = res.grad_norm;
		last_coef = res.clip_coef >= 0.0f && res.clip_coef <= 1.0f ? res.clip_coef : -1.0f;
		tr.scale = res.next_loss_scale;
	}
	ASSERT_OK(spw_optimizer_sync(tr.opt));
	for (int i = 0; i < n; i++) {
		ASSERT_OK(spw_optimizer_read(tr.opt, tr.id[i], SPW_STATE_PARAM, out->st.p[i]));
		ASSERT_OK(spw_optimizer_read(tr.opt, tr.id[i], SPW_STATE_EXP_AVG, out->st.m[i]));
		ASSERT_OK(spw_optimizer_read(tr.opt, tr.id[i], SPW_STATE_EXP_AVG_SQ, out->st.v[i]));
		/* The device copy is the master, bit for bit (fp32 copy-out). */
		ASSERT_EQ(memcmp(out->st.p[i], t[i].param, t[i].count * 4), 0);
	}
	/* Exact mode keeps a gradient store; each step's first arrival
	 * rewrites its pages whole, so on the NVMe tier they are pinned for
	 * overwrite (no read), and the results above are still bit-exact. */
	if (rc->mode == SPW_OPT_EXACT && rc->tier == SPW_TENSOR_SWAPPABLE)
		ASSERT_TRUE(session_figure(d->status, "pipeline/0", "tier.overwrites") >= (double)(rc->steps - first + 1));
	r = 0;
	goto done;
refused:
	r = -EOPNOTSUPP;
done:
	for (int i = 0; i < n; i++)
		free(tr.h[i]);
	spw_optimizer_free(tr.opt);
	/* Every step was committed to the daemon (free waits for the last
	 * COMMIT's answer), which shows it and the time between steps. */
	if (tr.opt && r == 0) {
		ASSERT_EQ(session_figure(d->status, "pipeline/0", "committed_step"), (double)rc->steps);
		ASSERT_TRUE(rc->steps - first < 2 || session_figure(d->status, "pipeline/0", "step_s") > 0);
		/* And the optimizer's own figures of that step (MARK STATS):
		 * its kernels ran, and the clip coefficient it reported. */
		ASSERT_TRUE(session_figure(d->status, "pipeline/0", "adam_s") > 0);
		ASSERT_TRUE(fabs(session_figure(d->status, "pipeline/0", "clip_coef") - (double)last_coef) < 1e-6);
	}
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	mlp_task_free(task);
	mlp_free(m);
	return r;
}

static int run_spillway(const struct spw_test_daemon *d, const struct run_cfg *rc, struct run_out *out)
{
	return run_spillway_from(d, rc, 1, NULL, out);
}

static void assert_same(const struct run_out *a, const struct run_out *b, const char *what)
{
	struct mlp *m = mlp_model();
	const struct mlp_tensor *t;
	int n;

	t = mlp_tensors(m, &n);
	ASSERT_EQ(a->st.n, b->st.n);
	ASSERT_EQ(a->skipped, b->skipped);
	for (int i = 0; i < n; i++) {
		size_t bytes = t[i].count * 4;

		if (memcmp(a->st.p[i], b->st.p[i], bytes) || memcmp(a->st.m[i], b->st.m[i], bytes) ||
		    memcmp(a->st.v[i], b->st.v[i], bytes))
			TEST_FAIL("%s: tensor %s differs from the reference run", what, t[i].name);
	}
	mlp_free(m);
}

static int compare(const struct spw_test_daemon *d, struct run_cfg rc, const char *what)
{
	struct run_out plain, spw;
	int r;

	run_plain(&rc, &plain);
	r = run_spillway(d, &rc, &spw);
	if (r == 0) {
		assert_same(&plain, &spw, what);
		/* Same norm, computed the same way. */
		if (!(plain.last_norm == spw.last_norm || (isnan(plain.last_norm) && isnan(spw.last_norm))))
			TEST_FAIL("%s: norm %.17g vs the plain run's %.17g", what, spw.last_norm, plain.last_norm);
		fprintf(stderr, "%s: bit-identical (%d steps, %d skipped, last norm %.6g)\n", what, rc.steps,
			plain.skipped, plain.last_norm);
	}
	mlp_state_free(&plain.st);
	mlp_state_free(&spw.st);
	return r;
}

/* ---- the cases ---- */

static void case_three_way(void)
{
	struct spw_test_daemon d;
	struct run_cfg rc = { .tier = SPW_TENSOR_RESIDENT, .steps = 4, .region = 16u << 20 };

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	rc.mode = SPW_OPT_OVERLAPPED, rc.accum = 1, rc.clip_coef = 0.5f;
	ASSERT_OK(compare(&d, rc, "overlapped"));
	rc.accum = 4;
	ASSERT_OK(compare(&d, rc, "overlapped, accumulation 4"));
	rc.mode = SPW_OPT_EXACT, rc.accum = 1, rc.clip_coef = 0.0f;
	ASSERT_OK(compare(&d, rc, "exact"));
	rc.accum = 4;
	ASSERT_OK(compare(&d, rc, "exact, accumulation 4"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_swappable(void)
{
	struct spw_test_daemon d;
	/* The state of the 64-512-512-10 MLP is about 3.6 MB; 12 pages of
	 * 64 KiB are under a quarter of it. */
	struct run_cfg rc = { .tier = SPW_TENSOR_SWAPPABLE, .steps = 3, .region = 12 * PAGE };
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	rc.mode = SPW_OPT_OVERLAPPED, rc.accum = 1;
	r = compare(&d, rc, "swappable, overlapped");
	if (r == -EOPNOTSUPP) {
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		SKIP("the daemon refuses swappable tensors (EOPNOTSUPP: no NVMe tier in this build)");
	}
	ASSERT_OK(r);
	rc.accum = 4;
	ASSERT_OK(compare(&d, rc, "swappable, overlapped, accumulation 4"));
	rc.mode = SPW_OPT_EXACT, rc.accum = 1, rc.max_norm = 1.0f;
	ASSERT_OK(compare(&d, rc, "swappable, exact"));
	rc.accum = 4;
	ASSERT_OK(compare(&d, rc, "swappable, exact, accumulation 4"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_exact(void)
{
	struct spw_test_daemon d;
	struct run_cfg rc = { .mode = SPW_OPT_EXACT, .tier = SPW_TENSOR_RESIDENT, .steps = 6,
			      .region = 16u << 20, .accum = 1 };
	struct run_out plain;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	/* A max_norm far below the gradients' norm: every step clips. */
	rc.max_norm = 0.05f;
	ASSERT_OK(compare(&d, rc, "exact, clip to 0.05"));
	/* fp16 with a loss scale so large that the first steps overflow:
	 * they are skipped and the scale halves until the gradients fit. */
	rc.max_norm = 1.0f, rc.fp16 = true, rc.init_scale = 1u << 20, rc.steps = 8;
	run_plain(&rc, &plain);
	ASSERT_GT(plain.skipped, 0);
	ASSERT_LT(plain.skipped, rc.steps);
	mlp_state_free(&plain.st);
	ASSERT_OK(compare(&d, rc, "exact, fp16, dynamic loss scale"));
	rc.accum = 4;
	ASSERT_OK(compare(&d, rc, "exact, fp16, dynamic loss scale, accumulation 4"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_misuse(void)
{
	struct spw_test_daemon d;
	struct run_cfg rc = { .mode = SPW_OPT_OVERLAPPED, .tier = SPW_TENSOR_RESIDENT, .accum = 1 };
	struct spw_step_result res = { .size = sizeof(res) };
	spw_client *c;
	spw_optimizer *o;
	float init[100] = { 0 }, dev[100], g[100] = { 0 };
	uint32_t id, id2;
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "pipeline/0", 4u << 20);
	o = make_opt(c, &rc, &r);
	ASSERT_OK(r);
	ASSERT_OK(spw_optimizer_add(o, "w", 0, 100, init, dev, SPW_TYPE_F32, &id));
	ASSERT_EQ(spw_optimizer_add(o, "w", 0, 100, init, dev, SPW_TYPE_F32, &id2), -EEXIST);
	ASSERT_EQ(spw_optimizer_add(o, "x", 3, 100, init, dev, SPW_TYPE_F32, &id2), -EINVAL);
	ASSERT_EQ(spw_optimizer_add(o, "has space", 0, 100, init, dev, SPW_TYPE_F32, &id2), -EINVAL);

	/* Outside a step. */
	ASSERT_EQ(spw_optimizer_end(o, &res), -EPROTO);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "no step is open");
	ASSERT_EQ(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL), -EPROTO);
	ASSERT_EQ(spw_optimizer_begin(o, 0, NULL, 0.0f), -EINVAL);

	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_EQ(spw_optimizer_begin(o, 2, NULL, 0.0f), -EBUSY);
	ASSERT_EQ(spw_optimizer_add(o, "late", 0, 100, init, dev, SPW_TYPE_F32, &id2), -EBUSY);
	/* Unknown tensor, unknown chunk, wrong type, wrong size. */
	ASSERT_EQ(spw_optimizer_grad_ready(o, 9, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL), -EINVAL);
	ASSERT_EQ(spw_optimizer_grad_ready(o, id, 1, g, sizeof(g), SPW_TYPE_F32, NULL), -EINVAL);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "no chunk 1");
	ASSERT_EQ(spw_optimizer_grad_ready(o, id, 0, g, sizeof(g), (enum spw_type)7, NULL), -EINVAL);
	ASSERT_EQ(spw_optimizer_grad_ready(o, id, 0, g, sizeof(g) - 4, SPW_TYPE_F32, NULL), -EMSGSIZE);
	ASSERT_EQ(spw_optimizer_grad_ready(o, id, 0, g, sizeof(g), SPW_TYPE_BF16, NULL), -EMSGSIZE);
	/* end before every gradient came: the step stays open. */
	ASSERT_EQ(spw_optimizer_end(o, &res), -ENODATA);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "tensor w chunk 0 got 0 of its 1 gradient");
	ASSERT_OK(spw_optimizer_grad_ready(o, id, 0, g, sizeof(g), SPW_TYPE_F32, NULL));
	/* Twice in a step. */
	ASSERT_EQ(spw_optimizer_grad_ready(o, id, 0, g, sizeof(g), SPW_TYPE_F32, NULL), -EALREADY);
	ASSERT_OK(spw_optimizer_end(o, &res));
	ASSERT_EQ(res.skipped, 0);
	ASSERT_EQ(spw_optimizer_wait_params(o, 5, NULL), -EINVAL);
	ASSERT_OK(spw_optimizer_wait_params(o, id, NULL));

	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* Deterministic values of either sign, never all zero (so a wrongly
 * zeroed page shows). */
static void fill_scaled(float *a, size_t n, uint32_t seed, float scale)
{
	uint32_t x = seed * 2654435761u + 1u;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		a[i] = scale * ((float)(x >> 8) / (float)(1u << 24) - 0.25f);
	}
}

/* Round trips through spw_optimizer_write/read on one tier; the moments
 * written before any update survive it. */
static void write_round_trip(const struct spw_test_daemon *d, enum spw_tensor_kind tier, uint64_t region)
{
	struct run_cfg rc = { .mode = SPW_OPT_OVERLAPPED, .tier = tier, .accum = 1 };
	struct spw_step_result res = { .size = sizeof(res) };
	/* Four chunks, the last one short. */
	enum { N = 3 * CHUNK + 17 };
	static float init[N], dev[N], dev2[N], in[3][N], out[N], zero[N];
	spw_client *c = connect_client(d, "pipeline/0", region);
	spw_optimizer *o;
	uint32_t w, w2, f;
	int r;

	o = make_opt(c, &rc, &r);
	ASSERT_OK(r);
	fill_scaled(init, N, 1, 1.0f);
	r = spw_optimizer_add(o, "w", 0, N, init, dev, SPW_TYPE_F32, &w);
	if (r == -EOPNOTSUPP) {
		fprintf(stderr, "write, tier %d: %s (skipped)\n", (int)tier, spw_optimizer_last_error(o));
		spw_optimizer_free(o);
		ASSERT_OK(spw_client_detach(c));
		spw_client_free(c);
		return;
	}
	ASSERT_OK(r);
	ASSERT_OK(spw_optimizer_add(o, "w2", 0, N, init, dev2, SPW_TYPE_F32, &w2));
	ASSERT_OK(spw_optimizer_add_frozen(o, "f", N, init, SPW_TYPE_F32, &f));

	/* Every state of w, exact, before any update. */
	for (int which = 0; which < 3; which++) {
		fill_scaled(in[which], N, 10u + (uint32_t)which, which == 2 ? 1e-3f : 1.0f);
		if (which == 2)
			for (size_t i = 0; i < N; i++)
				in[2][i] = fabsf(in[2][i]);
		ASSERT_OK(spw_optimizer_write(o, w, (enum spw_optimizer_state)which, in[which]));
	}
	for (int which = 0; which < 3; which++) {
		ASSERT_OK(spw_optimizer_read(o, w, (enum spw_optimizer_state)which, out));
		ASSERT_EQ(memcmp(out, in[which], sizeof(out)), 0);
	}
	/* w2 gets only exp_avg: its exp_avg_sq reads as zeros. */
	ASSERT_OK(spw_optimizer_write(o, w2, SPW_STATE_EXP_AVG, in[1]));
	ASSERT_OK(spw_optimizer_read(o, w2, SPW_STATE_EXP_AVG_SQ, out));
	ASSERT_EQ(memcmp(out, zero, sizeof(out)), 0);
	/* A frozen tensor's values, yes; moments it has none. */
	ASSERT_OK(spw_optimizer_write(o, f, SPW_STATE_PARAM, in[0]));
	ASSERT_OK(spw_optimizer_read(o, f, SPW_STATE_PARAM, out));
	ASSERT_EQ(memcmp(out, in[0], sizeof(out)), 0);
	ASSERT_EQ(spw_optimizer_write(o, f, SPW_STATE_EXP_AVG, in[1]), -EINVAL);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "frozen");
	ASSERT_EQ(spw_optimizer_write(o, f, SPW_STATE_EXP_AVG_SQ, in[2]), -EINVAL);

	/* Misuse. */
	ASSERT_EQ(spw_optimizer_write(NULL, w, SPW_STATE_PARAM, in[0]), -EINVAL);
	ASSERT_EQ(spw_optimizer_write(o, 99, SPW_STATE_PARAM, in[0]), -EINVAL);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "no tensor 99");
	ASSERT_EQ(spw_optimizer_write(o, w, (enum spw_optimizer_state)3, in[0]), -EINVAL);
	ASSERT_EQ(spw_optimizer_write(o, w, SPW_STATE_PARAM, NULL), -EINVAL);

	/* A step with zero gradients: written moments are decayed, not
	 * zeroed (m = beta1 m, v = beta2 v), and w2's v stays zero. */
	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_EQ(spw_optimizer_write(o, w, SPW_STATE_PARAM, in[0]), -EBUSY);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "a step is open");
	ASSERT_OK(spw_optimizer_grad_ready(o, w, SPW_ALL_CHUNKS, zero, sizeof(zero), SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_grad_ready(o, w2, SPW_ALL_CHUNKS, zero, sizeof(zero), SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_end(o, &res));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_EXP_AVG, out));
	for (size_t i = 0; i < N; i++)
		ASSERT_TRUE(fabsf(out[i] - group.beta1 * in[1][i]) <= 1e-6f * fabsf(in[1][i]));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_EXP_AVG_SQ, out));
	for (size_t i = 0; i < N; i++)
		ASSERT_TRUE(fabsf(out[i] - group.beta2 * in[2][i]) <= 1e-6f * fabsf(in[2][i]));
	ASSERT_OK(spw_optimizer_read(o, w2, SPW_STATE_EXP_AVG, out));
	for (size_t i = 0; i < N; i++)
		ASSERT_TRUE(fabsf(out[i] - group.beta1 * in[1][i]) <= 1e-6f * fabsf(in[1][i]));
	ASSERT_OK(spw_optimizer_read(o, w2, SPW_STATE_EXP_AVG_SQ, out));
	ASSERT_EQ(memcmp(out, zero, sizeof(out)), 0);
	/* After an update: written exactly again. */
	ASSERT_OK(spw_optimizer_write(o, w, SPW_STATE_EXP_AVG, in[1]));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_EXP_AVG, out));
	ASSERT_EQ(memcmp(out, in[1], sizeof(out)), 0);

	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	fprintf(stderr, "write, tier %d: exact round trips, moments kept by the first update\n", (int)tier);
}

static void case_write(void)
{
	struct spw_test_daemon d;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	write_round_trip(&d, SPW_TENSOR_RESIDENT, 16u << 20);
	/* 8 pages for 4 tensors of 4 chunks: the pages go to NVMe. */
	write_round_trip(&d, SPW_TENSOR_SWAPPABLE, 8 * PAGE);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* Steps 1..steps uninterrupted, against 1..stop, the state read out and
 * written into a fresh optimizer that goes on from stop + 1. Returns 0 or
 * -EOPNOTSUPP. */
static int resume(const struct spw_test_daemon *d, struct run_cfg rc, int stop, const char *what)
{
	struct run_out whole, part, rest;
	int steps = rc.steps, r;

	r = run_spillway(d, &rc, &whole);
	if (r < 0) {
		mlp_state_free(&whole.st);
		return r;
	}
	rc.steps = stop;
	ASSERT_OK(run_spillway(d, &rc, &part));
	rc.steps = steps;
	ASSERT_OK(run_spillway_from(d, &rc, stop + 1, &part, &rest));
	assert_same(&whole, &rest, what);
	fprintf(stderr, "%s: resumed after step %d of %d, bit-identical\n", what, stop, steps);
	mlp_state_free(&whole.st);
	mlp_state_free(&part.st);
	mlp_state_free(&rest.st);
	return 0;
}

static void case_resume(void)
{
	struct spw_test_daemon d;
	struct run_cfg rc = { .mode = SPW_OPT_OVERLAPPED, .tier = SPW_TENSOR_RESIDENT, .steps = 5,
			      .region = 16u << 20, .accum = 1 };
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	ASSERT_OK(resume(&d, rc, 2, "resident, overlapped"));
	rc.mode = SPW_OPT_EXACT, rc.max_norm = 0.05f;
	ASSERT_OK(resume(&d, rc, 3, "resident, exact, clipped"));
	rc.tier = SPW_TENSOR_SWAPPABLE, rc.region = 12 * PAGE;
	r = resume(&d, rc, 2, "swappable, exact, clipped");
	if (r == -EOPNOTSUPP) {
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		SKIP("the daemon refuses swappable tensors (EOPNOTSUPP: no NVMe tier in this build)");
	}
	ASSERT_OK(r);
	rc.mode = SPW_OPT_OVERLAPPED, rc.max_norm = 0.0f, rc.accum = 2;
	ASSERT_OK(resume(&d, rc, 3, "swappable, overlapped, accumulation 2"));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void case_death(void)
{
	struct spw_test_daemon d;
	struct run_cfg rc = { .mode = SPW_OPT_EXACT, .tier = SPW_TENSOR_RESIDENT, .accum = 1 };
	struct spw_step_result res = { .size = sizeof(res) };
	static float init[200000], dev[200000], g[200000];
	spw_client *c;
	spw_optimizer *o;
	uint32_t a, b;
	double t0;
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "pipeline/0", 16u << 20);
	o = make_opt(c, &rc, &r);
	ASSERT_OK(r);
	ASSERT_OK(spw_optimizer_add(o, "a", 0, 200000, init, dev, SPW_TYPE_F32, &a));
	ASSERT_OK(spw_optimizer_add(o, "b", 0, 200000, init, dev, SPW_TYPE_F32, &b));
	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_OK(spw_optimizer_grad_ready(o, b, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));

	/* Mid-step: half the gradients are in. */
	spw_test_daemon_kill(&d);
	t0 = now_s();
	r = spw_optimizer_grad_ready(o, a, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL);
	if (r == 0)
		r = spw_optimizer_end(o, &res);
	ASSERT_EQ(r, -ECONNRESET);
	/* Noticed the hang-up, not a timeout: well inside the 60 s of the
	 * default wait_timeout_ms (a tighter bound would fail a loaded
	 * machine, not a hang). */
	ASSERT_LT(now_s() - t0, 20.0);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "spillwayd closed the connection");
	/* Broken for good, and says so at once. */
	ASSERT_EQ(spw_optimizer_begin(o, 2, NULL, 0.0f), -ECONNRESET);
	ASSERT_EQ(spw_optimizer_sync(o), -ECONNRESET);
	spw_optimizer_free(o);
	spw_client_free(c);
	spw_test_daemon_cleanup(&d);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "three-way", case_three_way }, { "swappable", case_swappable }, { "exact", case_exact },
		{ "misuse", case_misuse },       { "death", case_death },
		{ "write", case_write },         { "resume", case_resume },
	};

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			return 0;
		}
	fprintf(stderr, "usage: test-pipeline three-way|swappable|exact|misuse|death|write|resume\n");
	return 2;
}
