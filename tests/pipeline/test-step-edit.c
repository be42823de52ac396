/* SPDX-License-Identifier: MIT */
/*
 * test-step-edit: what a trainer changes in a step besides handing
 * gradients over, against a real spillwayd with the host
 * backend. Each case runs the library twice, once with the call under test
 * and once arranged so that the same update comes out without it, and
 * compares master weights and moments bit for bit.
 *
 *   none      grad_none: a tensor without a gradient is not updated, and its
 *             next update uses its own step count (equal to an optimizer
 *             that never saw the skipped step); not in the norm (exact)
 *   replace   exact mode: a gradient taken back and handed over again gives
 *             the step the second gradient alone; overlapped mode refuses
 *   settings  set_group between steps (both modes) and within an exact
 *             step, set_clip and set_loss_scale, each equal to an
 *             optimizer made with those settings
 *   misuse    every bad call gets a clear error
 *
 *   test-step-edit none|replace|settings|misuse
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "pipeline-fixture.h"
#include "test.h"

#define CHUNK (PAGE / 4)
#define N (3 * CHUNK + 100) /* four chunks, the last one short */

static const struct spw_param_group group = {
	.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

struct rig {
	spw_client *c;
	spw_optimizer *o;
	int n;
	uint32_t id[2];
	float dev[2][N];
};

/* An optimizer over n tensors; tensor i starts from fill(seed first + i). */
static void rig_open(struct rig *r, const struct spw_test_daemon *d, const char *session,
		     enum spw_optimizer_mode mode, const struct spw_param_group *g, float max_norm,
		     int n, unsigned first)
{
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = mode, .tier = SPW_TENSOR_RESIDENT, .groups = g, .ngroups = 1,
		.max_norm = max_norm, .threads = 2, .window = 2, .device = "host",
	};
	static float init[N];
	char name[32];

	memset(r, 0, sizeof(*r));
	r->c = connect_client(d, session, 16u << 20);
	r->n = n;
	if (spw_optimizer_new(r->c, &oo, &r->o) < 0) {
		fprintf(stderr, "spw_optimizer_new: %s\n", spw_client_last_error(r->c));
		exit(1);
	}
	for (int i = 0; i < n; i++) {
		fill(init, N, first + (unsigned)i);
		snprintf(name, sizeof(name), "t%d", i);
		ASSERT_OK(spw_optimizer_add(r->o, name, 0, N, init, r->dev[i], SPW_TYPE_F32, &r->id[i]));
	}
}

static void rig_close(struct rig *r)
{
	spw_optimizer_free(r->o);
	spw_client_free(r->c);
}

static void grad(struct rig *r, int i, const float *g)
{
	ASSERT_OK(spw_optimizer_grad_ready(r->o, r->id[i], SPW_ALL_CHUNKS, g, N * 4, SPW_TYPE_F32, NULL));
}

static struct spw_step_result end(struct rig *r)
{
	struct spw_step_result res = { .size = sizeof(res) };

	ASSERT_OK(spw_optimizer_end(r->o, &res));
	ASSERT_OK(spw_optimizer_sync(r->o));
	return res;
}

/* Tensor ia of a and tensor ib of b hold the same master weights and
 * moments, bit for bit, and the device copies agree. */
static void same_state(struct rig *a, int ia, struct rig *b, int ib, const char *what)
{
	static float x[N], y[N];

	for (int s = SPW_STATE_PARAM; s <= SPW_STATE_EXP_AVG_SQ; s++) {
		ASSERT_OK(spw_optimizer_read(a->o, a->id[ia], s, x));
		ASSERT_OK(spw_optimizer_read(b->o, b->id[ib], s, y));
		if (memcmp(x, y, sizeof(x))) {
			size_t k = 0;

			while (x[k] == y[k])
				k++;
			fprintf(stderr, "%s: state %d differs at %zu: %.9g vs %.9g\n", what, s, k,
				(double)x[k], (double)y[k]);
			exit(1);
		}
	}
	ASSERT_TRUE(!memcmp(a->dev[ia], b->dev[ib], sizeof(a->dev[ia])));
}

static float g1[N], g2[N], g3[N], h1[N], h3[N];

static void make_grads(void)
{
	fill(g1, N, 101);
	fill(g2, N, 102);
	fill(g3, N, 103);
	fill(h1, N, 201);
	fill(h3, N, 203);
	for (size_t i = 0; i < N; i++) { /* small, so that max_norm cuts below */
		g1[i] *= 0.01f, g2[i] *= 0.01f, g3[i] *= 0.01f, h1[i] *= 0.01f, h3[i] *= 0.01f;
	}
}

static double sumsq(const float *g)
{
	double s = 0.0;

	for (size_t i = 0; i < N; i++)
		s += (double)g[i] * g[i];
	return s;
}

static void case_none(void)
{
	struct spw_test_daemon d;
	static float before[N];

	make_grads();
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	for (int mode = SPW_OPT_OVERLAPPED; mode <= SPW_OPT_EXACT; mode++) {
		struct rig a, c;
		struct spw_step_result res;

		/* a: x and y; y has no gradient in step 2. c: y alone, which
		 * sees y's two gradients as its steps 1 and 2. */
		rig_open(&a, &d, "edit/a", mode, &group, 0.0f, 2, 1);
		rig_open(&c, &d, "edit/c", mode, &group, 0.0f, 1, 2);

		ASSERT_OK(spw_optimizer_begin(a.o, 1, NULL, 0.0f));
		grad(&a, 0, g1);
		grad(&a, 1, h1);
		end(&a);
		ASSERT_OK(spw_optimizer_read(a.o, a.id[1], SPW_STATE_PARAM, before));

		ASSERT_OK(spw_optimizer_begin(a.o, 2, NULL, 0.0f));
		grad(&a, 0, g2);
		ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[1]));
		res = end(&a);
		if (mode == SPW_OPT_EXACT) /* the norm has x's gradient alone */
			ASSERT_TRUE(fabs(res.grad_norm - sqrt(sumsq(g2))) <= 1e-9 * res.grad_norm);
		{
			static float now[N];

			ASSERT_OK(spw_optimizer_read(a.o, a.id[1], SPW_STATE_PARAM, now));
			ASSERT_TRUE(!memcmp(now, before, sizeof(now))); /* no decay either */
		}

		ASSERT_OK(spw_optimizer_begin(a.o, 3, NULL, 0.0f));
		grad(&a, 0, g3);
		grad(&a, 1, h3);
		end(&a);

		ASSERT_OK(spw_optimizer_begin(c.o, 1, NULL, 0.0f));
		grad(&c, 0, h1);
		end(&c);
		ASSERT_OK(spw_optimizer_begin(c.o, 2, NULL, 0.0f));
		grad(&c, 0, h3);
		end(&c);
		same_state(&a, 1, &c, 0, "y after sitting step 2 out");

		/* A step where nothing has a gradient moves nothing and counts
		 * for no tensor: step 4 is then begun again. */
		ASSERT_OK(spw_optimizer_begin(a.o, 4, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[0]));
		ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[1]));
		end(&a);
		ASSERT_OK(spw_optimizer_begin(a.o, 4, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[0]));
		grad(&a, 1, g1);
		end(&a);
		ASSERT_OK(spw_optimizer_begin(c.o, 3, NULL, 0.0f));
		grad(&c, 0, g1);
		end(&c);
		same_state(&a, 1, &c, 0, "y after an empty step");
		rig_close(&c);
		rig_close(&a);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_replace(void)
{
	struct spw_test_daemon d;
	struct rig a, b;
	struct spw_step_result ra, rb;

	make_grads();
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	rig_open(&a, &d, "edit/a", SPW_OPT_EXACT, &group, 0.05f, 2, 1);
	rig_open(&b, &d, "edit/b", SPW_OPT_EXACT, &group, 0.05f, 2, 1);
	for (uint64_t s = 1; s <= 3; s++) {
		/* a: x first gets g3 (taken back), then g1; b gets g1 only */
		ASSERT_OK(spw_optimizer_begin(a.o, s, NULL, 0.0f));
		grad(&a, 0, g3);
		grad(&a, 1, h1);
		ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[0]));
		grad(&a, 0, g1);
		ra = end(&a);
		ASSERT_OK(spw_optimizer_begin(b.o, s, NULL, 0.0f));
		grad(&b, 0, g1);
		grad(&b, 1, h1);
		rb = end(&b);
		ASSERT_TRUE(ra.grad_norm == rb.grad_norm);
		ASSERT_TRUE(ra.clip_coef == rb.clip_coef);
		ASSERT_TRUE(ra.clip_coef < 1.0f);
		same_state(&a, 0, &b, 0, "x handed over again");
		same_state(&a, 1, &b, 1, "y beside it");
	}
	rig_close(&b);
	rig_close(&a);

	/* overlapped mode ran Adam on arrival: nothing to take back */
	rig_open(&a, &d, "edit/a", SPW_OPT_OVERLAPPED, &group, 0.0f, 2, 1);
	ASSERT_OK(spw_optimizer_begin(a.o, 1, NULL, 0.0f));
	ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[1])); /* before any gradient: fine */
	grad(&a, 0, g1);
	ASSERT_EQ(spw_optimizer_grad_none(a.o, a.id[0]), -EALREADY);
	ASSERT_CONTAINS(spw_optimizer_last_error(a.o), "t0");
	end(&a);
	rig_close(&a);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* b, made with group g, takes a's state (after a's first step). */
static void take_state(struct rig *b, struct rig *a)
{
	static float x[N];

	for (int s = SPW_STATE_PARAM; s <= SPW_STATE_EXP_AVG_SQ; s++)
		for (int i = 0; i < a->n; i++) {
			ASSERT_OK(spw_optimizer_read(a->o, a->id[i], s, x));
			ASSERT_OK(spw_optimizer_write(b->o, b->id[i], s, x));
		}
}

static void case_settings(void)
{
	struct spw_param_group g2p = { .lr = 3e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f,
				       .weight_decay = 0.1f };
	struct spw_test_daemon d;
	static float scaled[N];

	make_grads();
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	for (int mode = SPW_OPT_OVERLAPPED; mode <= SPW_OPT_EXACT; mode++) {
		struct rig a, b;

		/* between steps: a changes its group, b is made with it */
		rig_open(&a, &d, "edit/a", mode, &group, 0.0f, 2, 1);
		rig_open(&b, &d, "edit/b", mode, &g2p, 0.0f, 2, 1);
		ASSERT_OK(spw_optimizer_begin(a.o, 1, NULL, 0.0f));
		grad(&a, 0, g1);
		grad(&a, 1, h1);
		end(&a);
		take_state(&b, &a);
		ASSERT_OK(spw_optimizer_set_group(a.o, 0, &g2p));
		ASSERT_OK(spw_optimizer_begin(a.o, 2, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_begin(b.o, 2, NULL, 0.0f));
		grad(&a, 0, g2);
		grad(&b, 0, g2);
		grad(&a, 1, h3);
		if (mode == SPW_OPT_EXACT) /* within the step: still in time */
			ASSERT_OK(spw_optimizer_set_group(a.o, 0, &group));
		grad(&b, 1, h3);
		end(&a);
		if (mode == SPW_OPT_EXACT)
			ASSERT_OK(spw_optimizer_set_group(b.o, 0, &group)); /* b too, before its end */
		end(&b);
		same_state(&a, 0, &b, 0, "set_group");
		same_state(&a, 1, &b, 1, "set_group");
		rig_close(&b);
		rig_close(&a);
	}

	/* set_clip and set_loss_scale in the open step, exact mode */
	{
		struct rig a, b;
		struct spw_step_result ra, rb;

		rig_open(&a, &d, "edit/a", SPW_OPT_EXACT, &group, 0.0f, 1, 1);
		rig_open(&b, &d, "edit/b", SPW_OPT_EXACT, &group, 0.05f, 1, 1);
		for (size_t i = 0; i < N; i++)
			scaled[i] = g1[i] * 1024.0f;
		ASSERT_OK(spw_optimizer_begin(a.o, 1, NULL, 0.0f));
		grad(&a, 0, scaled);
		ASSERT_OK(spw_optimizer_set_clip(a.o, 0.05f));
		ASSERT_OK(spw_optimizer_set_loss_scale(a.o, 1024.0f));
		ra = end(&a);
		ASSERT_OK(spw_optimizer_begin(b.o, 1, NULL, 0.0f));
		grad(&b, 0, g1);
		rb = end(&b);
		ASSERT_TRUE(ra.clip_coef < 1.0f);
		ASSERT_TRUE(ra.clip_coef == rb.clip_coef);
		ASSERT_TRUE(ra.grad_norm == rb.grad_norm);
		ASSERT_TRUE(ra.loss_scale == 1024.0f);
		same_state(&a, 0, &b, 0, "set_clip + set_loss_scale");
		rig_close(&b);
		rig_close(&a);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_misuse(void)
{
	struct spw_param_group bad = group;
	struct spw_test_daemon d;
	struct rig a;

	make_grads();
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	rig_open(&a, &d, "edit/a", SPW_OPT_OVERLAPPED, &group, 0.0f, 1, 1);
	ASSERT_EQ(spw_optimizer_grad_none(NULL, 0), -EINVAL);
	ASSERT_EQ(spw_optimizer_grad_none(a.o, a.id[0]), -EPROTO);
	ASSERT_CONTAINS(spw_optimizer_last_error(a.o), "no step is open");
	ASSERT_EQ(spw_optimizer_set_clip(a.o, 1.0f), -EINVAL); /* overlapped */
	ASSERT_CONTAINS(spw_optimizer_last_error(a.o), "SPW_OPT_EXACT");
	ASSERT_EQ(spw_optimizer_set_loss_scale(a.o, 2.0f), -EINVAL);
	bad.beta1 = 1.0f;
	ASSERT_EQ(spw_optimizer_set_group(a.o, 0, &bad), -EINVAL);
	ASSERT_EQ(spw_optimizer_set_group(a.o, 1, &group), -EINVAL);
	ASSERT_EQ(spw_optimizer_set_group(a.o, 0, NULL), -EINVAL);
	ASSERT_EQ(spw_optimizer_set_lag(a.o, 7, 1), -EINVAL);
	ASSERT_OK(spw_optimizer_set_lag(a.o, a.id[0], 3));
	ASSERT_EQ(spw_optimizer_begin(a.o, 3, NULL, 0.0f), -EINVAL); /* its step would be 0 */
	ASSERT_CONTAINS(spw_optimizer_last_error(a.o), "t0");
	ASSERT_OK(spw_optimizer_begin(a.o, 4, NULL, 0.0f));
	ASSERT_EQ(spw_optimizer_set_lag(a.o, a.id[0], 0), -EBUSY);
	ASSERT_EQ(spw_optimizer_grad_none(a.o, 9), -EINVAL);
	grad(&a, 0, g1);
	end(&a);
	rig_close(&a);

	rig_open(&a, &d, "edit/a", SPW_OPT_EXACT, &group, 0.0f, 1, 1);
	ASSERT_EQ(spw_optimizer_set_loss_scale(a.o, 2.0f), -EPROTO); /* no step open */
	ASSERT_OK(spw_optimizer_begin(a.o, 1, NULL, 0.0f));
	ASSERT_EQ(spw_optimizer_set_loss_scale(a.o, 0.0f), -EINVAL);
	ASSERT_EQ(spw_optimizer_set_loss_scale(a.o, INFINITY), -EINVAL);
	ASSERT_EQ(spw_optimizer_set_clip(a.o, -1.0f), -EINVAL);
	/* a tensor marked and never handed over again is skipped: end is fine */
	ASSERT_OK(spw_optimizer_grad_none(a.o, a.id[0]));
	end(&a);
	rig_close(&a);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "none", case_none }, { "replace", case_replace }, { "settings", case_settings },
		{ "misuse", case_misuse },
	};

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			return 0;
		}
	fprintf(stderr, "usage: test-step-edit none|replace|settings|misuse\n");
	return 2;
}
