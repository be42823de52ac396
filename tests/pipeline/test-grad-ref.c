/* SPDX-License-Identifier: MIT */
/*
 * test-grad-ref: exact mode's gradients by reference
 * (spw_optimizer_opts.grad_store = SPW_GRAD_BY_REFERENCE) against a real
 * spillwayd with the host device.
 *
 *   same    two optimizers over one model, one storing the gradients in
 *           the tier and one reading them where the trainer keeps them:
 *           every step's result (norm, clip coefficient, skip) and the
 *           final master weights and moments are bit-identical; with
 *           clipping, a loss scale, bf16 gradients, a step with an inf
 *           (skipped), a gradient taken back and handed over again, a
 *           tensor without a gradient, and on the swappable tier
 *   region  by reference the session holds no gradient store: one tensor
 *           fewer per trainable tensor and that many pages fewer (plus
 *           the gradients' staging pages); no gradient bytes copied
 *   device  as same, by reference on a device whose memory the CPU may
 *           not read (device "cuda": tests/device/sim-plugin.c, the host
 *           backend under that name): each gradient is copied in for its
 *           norm and again for its update, into staging pages, and the
 *           session still holds no store
 *   refuse  -EINVAL naming the reason for overlapped mode, accumulation,
 *           a persistent session and an unknown grad_store
 *
 *   test-grad-ref same|region|device|refuse
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "../device/sim-plugin.h"
#include "harness.h"
#include "pipeline-fixture.h"
#include "session-figure.h"
#include "test.h"

#define CHUNK (PAGE / 4)
#define N0 (3 * CHUNK + 123)   /* four chunks, the last short */
#define N1 (CHUNK / 2 + 7)     /* one short chunk */
#define STEPS 5
#define WINDOW 2u

static const struct spw_param_group group = {
	.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

static const uint64_t counts[2] = { N0, N1 };

/* One way of running the steps: what the two optimizers share. */
struct config {
	const char *what;
	enum spw_tensor_kind tier;
	enum spw_type gtype;    /* the gradients' type */
	float max_norm;         /* 0: no clipping */
	float loss_scale;       /* what the gradients are multiplied by; 0: none */
	const char *ref_device; /* the by-reference optimizer's device; NULL: host */
};

static struct spw_optimizer_opts opts_for(enum spw_optimizer_mode mode, enum spw_tensor_kind tier,
					  enum spw_grad_store store, float max_norm)
{
	return (struct spw_optimizer_opts){
		.size = sizeof(struct spw_optimizer_opts), .mode = mode, .tier = tier, .groups = &group,
		.ngroups = 1, .threads = 2, .window = WINDOW, .device = "host", .max_norm = max_norm,
		.grad_store = store,
	};
}

/* Where the optimizer with this store should see host memory p: on the
 * sim plugin's "cuda" device, at its device address (dereferencing it
 * faults, so the library must copy). */
static void *seen_at(const struct config *cf, enum spw_grad_store store, void *p)
{
	return store == SPW_GRAD_BY_REFERENCE && cf->ref_device ? sim_device_ptr(p) : p;
}

static spw_optimizer *make_opt(spw_client *c, const struct config *cf, enum spw_grad_store store, uint32_t ids[2],
			       float *dev[2])
{
	struct spw_optimizer_opts oo = opts_for(SPW_OPT_EXACT, cf->tier, store, cf->max_norm);
	spw_optimizer *o = NULL;
	static float init[N0];

	if (store == SPW_GRAD_BY_REFERENCE && cf->ref_device)
		oo.device = cf->ref_device;
	if (spw_optimizer_new(c, &oo, &o) < 0)
		TEST_FAIL("%s: spw_optimizer_new: %s", cf->what, spw_client_last_error(c));
	for (int t = 0; t < 2; t++) {
		fill(init, counts[t], 10 + (unsigned)t);
		memcpy(dev[t], init, counts[t] * 4);
		ASSERT_OK(spw_optimizer_add(o, t ? "b" : "a", 0, counts[t], init, seen_at(cf, store, dev[t]), SPW_TYPE_F32,
					    &ids[t]));
	}
	return o;
}

/* Step s's gradient of tensor t (variant v: a second gradient handed over
 * in place of the first), scaled by the loss scale, in the config's type;
 * g is the fp32 values, out what grad_ready gets. */
static void make_grad(const struct config *cf, int t, uint64_t s, int v, float *g, void *out)
{
	float scale = cf->loss_scale > 0.0f ? cf->loss_scale : 1.0f;

	fill(g, counts[t], 1000u * (unsigned)s + 10u * (unsigned)t + (unsigned)v);
	for (uint64_t i = 0; i < counts[t]; i++)
		g[i] *= scale;
	if (s == 3 && t == 1)
		g[5] = INFINITY; /* this step overflows: skipped */
	if (cf->gtype == SPW_TYPE_F32) {
		memcpy(out, g, counts[t] * 4);
		return;
	}
	for (uint64_t i = 0; i < counts[t]; i++) {
		uint32_t u;

		memcpy(&u, &g[i], 4);
		((uint16_t *)out)[i] = (uint16_t)(u >> 16); /* bf16 by truncation: any bf16 will do */
	}
}

static size_t gbytes(const struct config *cf, int t)
{
	return counts[t] * (cf->gtype == SPW_TYPE_F32 ? 4 : 2);
}

/* Hands over step s's gradients to o: tensor 0 gets variant 0, which
 * step 2 takes back for variant 1; tensor 1 has none at step 4. The
 * buffers stay as they are until the step's updates are done. */
static void give_step(spw_optimizer *o, const struct config *cf, const uint32_t ids[2], uint64_t s,
		      void *buf[2][2])
{
	for (int t = 1; t >= 0; t--) {
		if (t == 1 && s == 4) {
			ASSERT_OK(spw_optimizer_grad_none(o, ids[t]));
			continue;
		}
		ASSERT_OK(spw_optimizer_grad_ready(o, ids[t], SPW_ALL_CHUNKS, buf[t][0], gbytes(cf, t), cf->gtype,
						   NULL));
		if (t == 0 && s == 2) {
			ASSERT_OK(spw_optimizer_grad_none(o, ids[t]));
			ASSERT_OK(spw_optimizer_grad_ready(o, ids[t], SPW_ALL_CHUNKS, buf[t][1], gbytes(cf, t),
							   cf->gtype, NULL));
		}
	}
}

static void compare(const struct spw_test_daemon *d, const struct config *cf)
{
	static float g[N0], dev[2][2][N0];
	static uint32_t gbuf[2][2][N0];
	void *buf[2][2] = { { gbuf[0][0], gbuf[0][1] }, { gbuf[1][0], gbuf[1][1] } };
	spw_client *c[2];
	spw_optimizer *o[2];
	uint32_t ids[2][2];
	bool skipped = false;

	c[0] = connect_client(d, "gref/store", 16u << 20);
	c[1] = connect_client(d, "gref/ref", 16u << 20);
	for (int k = 0; k < 2; k++)
		o[k] = make_opt(c[k], cf, k ? SPW_GRAD_BY_REFERENCE : SPW_GRAD_STORE, ids[k],
				(float *[]){ dev[k][0], dev[k][1] });
	for (uint64_t s = 1; s <= STEPS; s++) {
		struct spw_step_result res[2] = { { .size = sizeof(res[0]) }, { .size = sizeof(res[1]) } };

		for (int t = 0; t < 2; t++)
			for (int v = 0; v < 2; v++)
				make_grad(cf, t, s, v, g, buf[t][v]);
		for (int k = 0; k < 2; k++) {
			enum spw_grad_store store = k ? SPW_GRAD_BY_REFERENCE : SPW_GRAD_STORE;
			void *seen[2][2] = { { seen_at(cf, store, buf[0][0]), seen_at(cf, store, buf[0][1]) },
					     { seen_at(cf, store, buf[1][0]), seen_at(cf, store, buf[1][1]) } };

			ASSERT_OK(spw_optimizer_begin(o[k], s, NULL, cf->loss_scale));
			give_step(o[k], cf, ids[k], s, seen);
			ASSERT_OK(spw_optimizer_end(o[k], &res[k]));
			/* The gradients are read until the updates are done. */
			ASSERT_OK(spw_optimizer_sync(o[k]));
		}
		if (memcmp(&res[0].grad_norm, &res[1].grad_norm, sizeof(double)) ||
		    memcmp(&res[0].clip_coef, &res[1].clip_coef, sizeof(float)) || res[0].skipped != res[1].skipped ||
		    res[0].nonfinite != res[1].nonfinite)
			TEST_FAIL("%s step %ju: store: norm %.17g coef %.9g skipped %d; by reference: norm %.17g "
				  "coef %.9g skipped %d", cf->what, (uintmax_t)s, res[0].grad_norm,
				  (double)res[0].clip_coef, res[0].skipped, res[1].grad_norm, (double)res[1].clip_coef,
				  res[1].skipped);
		skipped |= res[0].skipped != 0;
		if (cf->max_norm > 0.0f && !res[0].skipped)
			ASSERT_TRUE(res[0].clip_coef < 1.0f); /* clipping is at work */
	}
	ASSERT_TRUE(skipped); /* step 3's inf */
	same_opt_state(o, ids, counts, cf->what); /* the store against by reference */
	if (memcmp(dev[0][0], dev[1][0], N0 * 4) || memcmp(dev[0][1], dev[1][1], N1 * 4))
		TEST_FAIL("%s: the device parameters differ", cf->what);
	for (int k = 0; k < 2; k++) {
		spw_optimizer_free(o[k]);
		spw_client_free(c[k]);
	}
	fprintf(stderr, "%s: bit-identical over %d steps\n", cf->what, STEPS);
}

static void case_same(void)
{
	static const struct config cfs[] = {
		{ "fp32 gradients", SPW_TENSOR_RESIDENT, SPW_TYPE_F32, 0.0f, 0.0f, NULL },
		{ "fp32 gradients, clipped", SPW_TENSOR_RESIDENT, SPW_TYPE_F32, 1.0f, 0.0f, NULL },
		{ "fp32 gradients, loss scale 1024, clipped", SPW_TENSOR_RESIDENT, SPW_TYPE_F32, 1.0f, 1024.0f, NULL },
		{ "bf16 gradients, loss scale 256, clipped", SPW_TENSOR_RESIDENT, SPW_TYPE_BF16, 2.0f, 256.0f, NULL },
		{ "swappable tier, clipped", SPW_TENSOR_SWAPPABLE, SPW_TYPE_F32, 1.0f, 0.0f, NULL },
	};
	struct spw_test_daemon d;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	for (size_t i = 0; i < sizeof(cfs) / sizeof(cfs[0]); i++)
		compare(&d, &cfs[i]);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* On the host device nothing is copied; on another one each gradient
 * twice (for its norm, for its update) through the staging pages. */
static void region(const char *ref_device)
{
	const struct config cf = { "region", SPW_TENSOR_RESIDENT, SPW_TYPE_F32, 1.0f, 0.0f, ref_device };
	static float g0[N0], g1[N1], dev[2][2][N0];
	static const char *const names[2] = { "gref/store", "gref/ref" };
	struct spw_optimizer_stats st = { .size = sizeof(st) };
	struct spw_test_daemon d;
	double slots[2], tensors[2];
	spw_client *c[2];
	spw_optimizer *o[2];
	uint32_t ids[2][2];

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	fill(g0, N0, 5);
	fill(g1, N1, 6);
	for (int k = 0; k < 2; k++) {
		c[k] = connect_client(&d, names[k], 16u << 20);
		o[k] = make_opt(c[k], &cf, k ? SPW_GRAD_BY_REFERENCE : SPW_GRAD_STORE, ids[k],
				(float *[]){ dev[k][0], dev[k][1] });
		ASSERT_OK(spw_optimizer_begin(o[k], 1, NULL, 0.0f));
		enum spw_grad_store store = k ? SPW_GRAD_BY_REFERENCE : SPW_GRAD_STORE;

		ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][1], SPW_ALL_CHUNKS, seen_at(&cf, store, g1), sizeof(g1),
						   SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][0], SPW_ALL_CHUNKS, seen_at(&cf, store, g0), sizeof(g0),
						   SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o[k], NULL));
		ASSERT_OK(spw_optimizer_sync(o[k]));
		slots[k] = session_figure(d.status, names[k], "slots_used");
		tensors[k] = session_figure(d.status, names[k], "tensors");
		ASSERT_TRUE(slots[k] > 0 && tensors[k] > 0);
	}
	fprintf(stderr, "store: %.0f tensors, %.0f slots; by reference: %.0f tensors, %.0f slots\n", tensors[0],
		slots[0], tensors[1], slots[1]);
	/* One gradient store per trainable tensor (4 + 1 pages); the host
	 * reads in place, without the window's gradient staging pages, and
	 * a device takes a second window of them for the updates' copies. */
	ASSERT_TRUE(tensors[0] - tensors[1] == 2.0);
	ASSERT_TRUE(slots[0] - slots[1] == 4.0 + 1.0 + (ref_device ? -(double)WINDOW : (double)WINDOW));
	ASSERT_OK(spw_optimizer_stats(o[1], &st));
	ASSERT_UEQ(st.bytes_d2h, ref_device ? 2 * (sizeof(g0) + sizeof(g1)) : 0);
	for (int k = 0; k < 2; k++) {
		spw_optimizer_free(o[k]);
		spw_client_free(c[k]);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_region(void)
{
	region(NULL);
}

/* By reference on a device: every configuration of case_same, and the
 * region's figures with the copies counted. */
static void case_device(void)
{
	static const struct config cfs[] = {
		{ "device: fp32 gradients, clipped", SPW_TENSOR_RESIDENT, SPW_TYPE_F32, 1.0f, 0.0f, "cuda" },
		{ "device: fp32 gradients, loss scale 1024, clipped", SPW_TENSOR_RESIDENT, SPW_TYPE_F32, 1.0f, 1024.0f,
		  "cuda" },
		{ "device: bf16 gradients, loss scale 256, clipped", SPW_TENSOR_RESIDENT, SPW_TYPE_BF16, 2.0f, 256.0f,
		  "cuda" },
		{ "device: swappable tier, clipped", SPW_TENSOR_SWAPPABLE, SPW_TYPE_F32, 1.0f, 0.0f, "cuda" },
		{ "device: swappable tier, bf16 gradients", SPW_TENSOR_SWAPPABLE, SPW_TYPE_BF16, 0.0f, 0.0f, "cuda" },
	};
	struct spw_test_daemon d;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	for (size_t i = 0; i < sizeof(cfs) / sizeof(cfs[0]); i++)
		compare(&d, &cfs[i]);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	region("cuda");
}

/* spw_optimizer_new with oo on c fails with -EINVAL and a sentence
 * holding why; c stays usable. */
static void expect_refused(spw_client *c, struct spw_optimizer_opts oo, const char *why)
{
	spw_optimizer *o = NULL;

	ASSERT_EQ(spw_optimizer_new(c, &oo, &o), -EINVAL);
	ASSERT_TRUE(o == NULL);
	ASSERT_CONTAINS(spw_client_last_error(c), why);
	fprintf(stderr, "refused: %s\n", spw_client_last_error(c));
}

static void case_refuse(void)
{
	struct spw_attach_opts pa = { .size = sizeof(pa), .session = "gref/persistent", .region_bytes = 16u << 20,
				      .page_size = PAGE, .persistent = 1, .lease_s = 60 };
	struct spw_test_daemon d;
	struct spw_optimizer_opts oo;
	spw_optimizer *o = NULL;
	spw_client *c, *p;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "gref/refuse", 16u << 20);
	expect_refused(c, opts_for(SPW_OPT_OVERLAPPED, SPW_TENSOR_RESIDENT, SPW_GRAD_BY_REFERENCE, 0.0f),
		       "needs SPW_OPT_EXACT");
	oo = opts_for(SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, SPW_GRAD_BY_REFERENCE, 0.0f);
	oo.accumulation = 2;
	expect_refused(c, oo, "needs accumulation 1");
	oo = opts_for(SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, SPW_GRAD_BY_REFERENCE, 0.0f);
	oo.grad_store = (enum spw_grad_store)7;
	expect_refused(c, oo, "grad_store");
	/* Nothing was left behind: the same options with the store work. */
	oo = opts_for(SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, SPW_GRAD_STORE, 0.0f);
	oo.accumulation = 2;
	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	spw_optimizer_free(o);
	spw_client_free(c);

	ASSERT_OK(spw_client_new(NULL, &p));
	ASSERT_OK(spw_client_connect(p, d.control));
	ASSERT_OK(spw_client_attach(p, &pa));
	expect_refused(p, opts_for(SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, SPW_GRAD_BY_REFERENCE, 0.0f),
		       "not on a persistent session");
	spw_client_free(p);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		TEST_FAIL("usage: test-grad-ref same|region|device|refuse");
	if (!strcmp(argv[1], "same"))
		case_same();
	else if (!strcmp(argv[1], "region"))
		case_region();
	else if (!strcmp(argv[1], "device"))
		case_device();
	else if (!strcmp(argv[1], "refuse"))
		case_refuse();
	else
		TEST_FAIL("unknown case %s", argv[1]);
	return 0;
}
