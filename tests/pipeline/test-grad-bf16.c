/* SPDX-License-Identifier: MIT */
/*
 * test-grad-bf16: a gradient store in bf16 (spw_optimizer_opts.grad_store =
 * SPW_GRAD_STORE_BF16) against a real spillwayd with the host device.
 *
 *   same    bf16 gradients, accumulation 1: the store's bf16 holds them as
 *           they are, so every step's result (norm, clip coefficient,
 *           skip) and the final master weights, moments and device
 *           parameters are bit-identical to an fp32 store's; with
 *           clipping, a loss scale, a step with an inf (skipped), a
 *           gradient taken back and handed over again, a tensor without a
 *           gradient, two chunks a store page, on both tiers (the NVMe
 *           tier's region small enough that the store's pages go to disk)
 *   evict   a chunk stored first, its store page pushed out to disk, then
 *           the chunk that shares the page: the page is read back, not
 *           overwritten (bit-identical to an fp32 store)
 *   accum   fp32 gradients over micro-batches: each stored sum is the
 *           stored bf16 widened, the gradient added in fp32, rounded to
 *           bf16. An fp32-store optimizer handed that sum (computed here)
 *           as one gradient ends bit-identical, in exact mode and in
 *           overlapped mode (whose store holds the micro-batches' sums)
 *   region  the store takes half the pages: 2 + 1 for the tensors here
 *           against 4 + 1
 *   layout  a persistent session's optimizer with an fp32 store is not
 *           taken over by one with a bf16 store: refused, naming the
 *           store's tensor
 *
 *   test-grad-bf16 same|evict|accum|region|layout
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "pipeline-fixture.h"
#include "session-figure.h"
#include "test.h"
#include "../../kernels/convert.h"

#define CHUNK (PAGE / 4)
#define N0 (3 * CHUNK + 123)   /* four chunks, the last short: two store pages */
#define N1 (CHUNK / 2 + 7)     /* one short chunk, alone on its store page */
#define STEPS 6
#define WINDOW 2u

static const struct spw_param_group group = {
	.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

static const uint64_t counts[2] = { N0, N1 };

struct config {
	const char *what;
	enum spw_tensor_kind tier;
	float max_norm;         /* 0: no clipping */
	float loss_scale;       /* what the gradients are multiplied by; 0: none */
	uint64_t region;
};

static float bf16_round(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	u = (uint32_t)spw_f32_bits_to_bf16(u) << 16;
	memcpy(&x, &u, 4);
	return x;
}

static spw_optimizer *make_opt(spw_client *c, enum spw_optimizer_mode mode, enum spw_tensor_kind tier,
			       enum spw_grad_store store, uint32_t accum, float max_norm, uint32_t ids[2],
			       float *dev[2])
{
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = mode, .tier = tier, .groups = &group, .ngroups = 1, .threads = 2,
		.window = WINDOW, .device = "host", .max_norm = max_norm, .grad_store = store,
		.accumulation = accum, .clip_coef = mode == SPW_OPT_OVERLAPPED ? 0.5f : 0.0f,
	};
	spw_optimizer *o = NULL;
	static float init[N0];

	if (spw_optimizer_new(c, &oo, &o) < 0)
		TEST_FAIL("spw_optimizer_new: %s", spw_client_last_error(c));
	for (int t = 0; t < 2; t++) {
		fill(init, counts[t], 10 + (unsigned)t);
		memcpy(dev[t], init, counts[t] * 4);
		ASSERT_OK(spw_optimizer_add(o, t ? "b" : "a", 0, counts[t], init, dev[t], SPW_TYPE_F32, &ids[t]));
	}
	return o;
}

/* Both optimizers' master weights, moments and device parameters equal. */
static void same_state(spw_optimizer *o[2], uint32_t ids[2][2], float dev[2][2][N0], const char *what)
{
	same_opt_state(o, ids, counts, what); /* the fp32 store against the bf16 one */
	for (int t = 0; t < 2; t++) {
		if (memcmp(dev[0][t], dev[1][t], counts[t] * 4))
			TEST_FAIL("%s: tensor %d's device parameters differ", what, t);
	}
	fprintf(stderr, "%s: bit-identical over %d steps\n", what, STEPS);
}

/* Step s's bf16 gradient of tensor t (variant v), scaled. */
static void make_grad16(const struct config *cf, int t, uint64_t s, int v, uint16_t *out)
{
	static float g[N0];
	float scale = cf->loss_scale > 0.0f ? cf->loss_scale : 1.0f;

	fill(g, counts[t], 1000u * (unsigned)s + 10u * (unsigned)t + (unsigned)v);
	if (s == 3 && t == 1)
		g[5] = INFINITY; /* this step overflows: skipped */
	for (uint64_t i = 0; i < counts[t]; i++) {
		uint32_t u;
		float x = g[i] * scale;

		memcpy(&u, &x, 4);
		out[i] = spw_f32_bits_to_bf16(u);
	}
}

static void compare_same(const struct spw_test_daemon *d, const struct config *cf)
{
	static float dev[2][2][N0];
	static uint16_t gbuf[2][2][N0];
	spw_client *c[2];
	spw_optimizer *o[2];
	uint32_t ids[2][2];
	bool skipped = false;

	c[0] = connect_client(d, "g16/fp32", cf->region);
	c[1] = connect_client(d, "g16/bf16", cf->region);
	for (int k = 0; k < 2; k++)
		o[k] = make_opt(c[k], SPW_OPT_EXACT, cf->tier, k ? SPW_GRAD_STORE_BF16 : SPW_GRAD_STORE, 1,
				cf->max_norm, ids[k], (float *[]){ dev[k][0], dev[k][1] });
	for (uint64_t s = 1; s <= STEPS; s++) {
		struct spw_step_result res[2] = { { .size = sizeof(res[0]) }, { .size = sizeof(res[1]) } };

		for (int t = 0; t < 2; t++)
			for (int v = 0; v < 2; v++)
				make_grad16(cf, t, s, v, gbuf[t][v]);
		for (int k = 0; k < 2; k++) {
			ASSERT_OK(spw_optimizer_begin(o[k], s, NULL, cf->loss_scale));
			for (int t = 1; t >= 0; t--) {
				if (t == 1 && s == 4) {
					ASSERT_OK(spw_optimizer_grad_none(o[k], ids[k][t]));
					continue;
				}
				ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][t], SPW_ALL_CHUNKS, gbuf[t][0],
								   counts[t] * 2, SPW_TYPE_BF16, NULL));
				if (t == 0 && s == 2) {
					ASSERT_OK(spw_optimizer_grad_none(o[k], ids[k][t]));
					ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][t], SPW_ALL_CHUNKS, gbuf[t][1],
									   counts[t] * 2, SPW_TYPE_BF16, NULL));
				}
			}
			ASSERT_OK(spw_optimizer_end(o[k], &res[k]));
			ASSERT_OK(spw_optimizer_sync(o[k]));
		}
		if (memcmp(&res[0].grad_norm, &res[1].grad_norm, sizeof(double)) ||
		    memcmp(&res[0].clip_coef, &res[1].clip_coef, sizeof(float)) || res[0].skipped != res[1].skipped)
			TEST_FAIL("%s step %ju: fp32 store: norm %.17g coef %.9g skipped %d; bf16 store: norm %.17g "
				  "coef %.9g skipped %d", cf->what, (uintmax_t)s, res[0].grad_norm,
				  (double)res[0].clip_coef, res[0].skipped, res[1].grad_norm, (double)res[1].clip_coef,
				  res[1].skipped);
		skipped |= res[0].skipped != 0;
		if (cf->max_norm > 0.0f && !res[0].skipped)
			ASSERT_TRUE(res[0].clip_coef < 1.0f); /* clipping is at work */
	}
	ASSERT_TRUE(skipped); /* step 3's inf */
	if (cf->tier == SPW_TENSOR_SWAPPABLE) {
		/* The store's pages went to disk and came back. */
		double rd = session_figure(d->status, "g16/bf16", "tier.read_bytes");

		fprintf(stderr, "%s: the bf16 session read %.0f bytes from disk\n", cf->what, rd);
		ASSERT_TRUE(rd > 0);
	}
	same_state(o, ids, dev, cf->what);
	for (int k = 0; k < 2; k++) {
		spw_optimizer_free(o[k]);
		spw_client_free(c[k]);
	}
}

static void case_same(void)
{
	static const struct config cfs[] = {
		{ "bf16 gradients", SPW_TENSOR_RESIDENT, 0.0f, 0.0f, 16u << 20 },
		{ "bf16 gradients, loss scale 256, clipped", SPW_TENSOR_RESIDENT, 2.0f, 256.0f, 16u << 20 },
		/* Exact mode on the NVMe tier needs a few pages a chunk in
		 * flight and the staging pages: 12 keep less than the
		 * state (18 pages and more). */
		{ "swappable tier, clipped", SPW_TENSOR_SWAPPABLE, 2.0f, 0.0f, 12u * PAGE },
	};
	struct spw_test_daemon d;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	for (size_t i = 0; i < sizeof(cfs) / sizeof(cfs[0]); i++)
		compare_same(&d, &cfs[i]);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* A chunk's first arrival pins the bf16 store page it shares with its
 * neighbour for overwrite (no read) only while the neighbour's half holds
 * nothing live. Here chunk 0 of tensor a is stored, then tensor c's
 * gradients push a's store page out to disk, then chunks 1-3 come: chunk
 * 1 must read the page back, or chunk 0's gradient is lost. */
#define NC (16 * CHUNK)

static void case_evict(void)
{
	static float dev[2][2][NC], init[NC], g[NC];
	static uint16_t g16[NC];
	static const uint64_t n[2] = { N0, NC };
	struct spw_test_daemon d;
	spw_client *c[2];
	spw_optimizer *o[2];
	uint32_t ids[2][2];

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	for (int k = 0; k < 2; k++) {
		struct spw_optimizer_opts oo = {
			.size = sizeof(oo), .mode = SPW_OPT_EXACT, .tier = SPW_TENSOR_SWAPPABLE, .groups = &group,
			.ngroups = 1, .threads = 2, .window = WINDOW, .device = "host",
			.grad_store = k ? SPW_GRAD_STORE_BF16 : SPW_GRAD_STORE,
		};

		struct spw_attach_opts a = { .size = sizeof(a), .session = k ? "g16/evict-bf16" : "g16/evict-fp32",
					     .region_bytes = 12u * PAGE, .page_size = PAGE,
					     .flags = SPW_ATTACH_SWAP_BYTES, .swap_bytes = 16u << 20 };

		ASSERT_OK(spw_client_new(NULL, &c[k]));
		ASSERT_OK(spw_client_connect(c[k], d.control));
		ASSERT_OK(spw_client_attach(c[k], &a));
		ASSERT_OK(spw_optimizer_new(c[k], &oo, &o[k]));
		for (int t = 0; t < 2; t++) {
			fill(init, n[t], 20 + (unsigned)t);
			memcpy(dev[k][t], init, n[t] * 4);
			if (spw_optimizer_add(o[k], t ? "c" : "a", 0, n[t], init, dev[k][t], SPW_TYPE_F32,
					      &ids[k][t]) < 0)
				TEST_FAIL("spw_optimizer_add: %s", spw_optimizer_last_error(o[k]));
		}
	}
	for (uint64_t s = 1; s <= 3; s++) {
		for (int k = 0; k < 2; k++) {
			ASSERT_OK(spw_optimizer_begin(o[k], s, NULL, 0.0f));
			for (int part = 0; part < 3; part++) {
				int t = part == 1;
				uint32_t first = part == 2 ? 1 : 0, last = part == 0 ? 1 : spw_optimizer_chunks(o[k], ids[k][t]);

				fill(g, n[t], 300u * (unsigned)s + (unsigned)t);
				for (uint64_t i = 0; i < n[t]; i++) {
					uint32_t u;

					memcpy(&u, &g[i], 4);
					g16[i] = spw_f32_bits_to_bf16(u);
				}
				for (uint32_t ch = first; ch < last; ch++) {
					uint64_t b = (uint64_t)ch * CHUNK, e = b + CHUNK < n[t] ? b + CHUNK : n[t];

					ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][t], ch, g16 + b, (e - b) * 2,
									   SPW_TYPE_BF16, NULL));
				}
				ASSERT_OK(spw_optimizer_sync_grads(o[k]));
			}
			ASSERT_OK(spw_optimizer_end(o[k], NULL));
			ASSERT_OK(spw_optimizer_sync(o[k]));
		}
	}
	same_opt_state(o, ids, n, "evict: the fp32 store against the bf16 one");
	fprintf(stderr, "chunk 0's gradient survived its page's trip to disk: bit-identical\n");
	for (int k = 0; k < 2; k++) {
		spw_optimizer_free(o[k]);
		spw_client_free(c[k]);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* accum micro-batches of fp32 gradients into a bf16 store (k = 1) against
 * their bf16 running sum handed to an fp32-store optimizer at once (k = 0). */
static void compare_accum(const struct spw_test_daemon *d, enum spw_optimizer_mode mode, enum spw_tensor_kind tier,
			  uint32_t accum, const char *what)
{
	static float dev[2][2][N0], g[N0], sum[2][N0];
	spw_client *c[2];
	spw_optimizer *o[2];
	uint32_t ids[2][2];

	c[0] = connect_client(d, "g16/sum", tier == SPW_TENSOR_SWAPPABLE ? 12u * PAGE : 16u << 20);
	c[1] = connect_client(d, "g16/accum", tier == SPW_TENSOR_SWAPPABLE ? 12u * PAGE : 16u << 20);
	o[0] = make_opt(c[0], mode, tier, SPW_GRAD_STORE, 1, 0.0f, ids[0], (float *[]){ dev[0][0], dev[0][1] });
	o[1] = make_opt(c[1], mode, tier, SPW_GRAD_STORE_BF16, accum, 0.0f, ids[1],
			(float *[]){ dev[1][0], dev[1][1] });
	for (uint64_t s = 1; s <= STEPS; s++) {
		ASSERT_OK(spw_optimizer_begin(o[1], s, NULL, 0.0f));
		for (uint32_t mb = 0; mb < accum; mb++) {
			for (int t = 0; t < 2; t++) {
				fill(g, counts[t], 7000u * (unsigned)s + 100u * mb + (unsigned)t);
				for (uint64_t i = 0; i < counts[t]; i++)
					sum[t][i] = mb ? bf16_round(sum[t][i] + g[i]) : bf16_round(g[i]);
				ASSERT_OK(spw_optimizer_grad_ready(o[1], ids[1][t], SPW_ALL_CHUNKS, g, counts[t] * 4,
								   SPW_TYPE_F32, NULL));
				/* The library reads it asynchronously. */
				ASSERT_OK(spw_optimizer_sync_grads(o[1]));
			}
		}
		ASSERT_OK(spw_optimizer_end(o[1], NULL));
		ASSERT_OK(spw_optimizer_sync(o[1]));
		ASSERT_OK(spw_optimizer_begin(o[0], s, NULL, 0.0f));
		for (int t = 0; t < 2; t++)
			ASSERT_OK(spw_optimizer_grad_ready(o[0], ids[0][t], SPW_ALL_CHUNKS, sum[t], counts[t] * 4,
							   SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o[0], NULL));
		ASSERT_OK(spw_optimizer_sync(o[0]));
	}
	same_state(o, ids, dev, what);
	for (int k = 0; k < 2; k++) {
		spw_optimizer_free(o[k]);
		spw_client_free(c[k]);
	}
}

static void case_accum(void)
{
	struct spw_test_daemon d;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	compare_accum(&d, SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, 3, "exact, accumulation 3");
	compare_accum(&d, SPW_OPT_EXACT, SPW_TENSOR_SWAPPABLE, 2, "exact, accumulation 2, swappable tier");
	compare_accum(&d, SPW_OPT_OVERLAPPED, SPW_TENSOR_RESIDENT, 4, "overlapped, accumulation 4");
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_region(void)
{
	static const char *const names[2] = { "g16/fp32", "g16/bf16" };
	static float g0[N0], g1[N1], dev[2][2][N0];
	struct spw_test_daemon d;
	double slots[2];
	spw_client *c[2];
	spw_optimizer *o[2];
	uint32_t ids[2][2];

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	fill(g0, N0, 5);
	fill(g1, N1, 6);
	for (int k = 0; k < 2; k++) {
		c[k] = connect_client(&d, names[k], 16u << 20);
		o[k] = make_opt(c[k], SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, k ? SPW_GRAD_STORE_BF16 : SPW_GRAD_STORE, 1,
				0.0f, ids[k], (float *[]){ dev[k][0], dev[k][1] });
		ASSERT_OK(spw_optimizer_begin(o[k], 1, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][1], SPW_ALL_CHUNKS, g1, sizeof(g1), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_grad_ready(o[k], ids[k][0], SPW_ALL_CHUNKS, g0, sizeof(g0), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o[k], NULL));
		ASSERT_OK(spw_optimizer_sync(o[k]));
		slots[k] = session_figure(d.status, names[k], "slots_used");
		ASSERT_TRUE(slots[k] > 0);
	}
	fprintf(stderr, "fp32 store: %.0f slots; bf16 store: %.0f slots\n", slots[0], slots[1]);
	/* Tensor a's store: 4 pages in fp32, 2 in bf16; b's: 1 either way. */
	ASSERT_TRUE(slots[0] - slots[1] == 2.0);
	for (int k = 0; k < 2; k++) {
		spw_optimizer_free(o[k]);
		spw_client_free(c[k]);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_layout(void)
{
	struct spw_attach_opts pa = { .size = sizeof(pa), .session = "g16/persistent", .region_bytes = 16u << 20,
				      .page_size = PAGE, .persistent = 1, .lease_s = 60 };
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = SPW_OPT_EXACT, .tier = SPW_TENSOR_RESIDENT, .groups = &group,
		.ngroups = 1, .threads = 2, .window = WINDOW, .device = "host",
	};
	static float init[N0], g[N0], dev[N0];
	struct spw_test_daemon d;
	spw_optimizer *o = NULL;
	spw_client *p;
	uint32_t id;
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	fill(init, N0, 3);
	fill(g, N0, 4);
	ASSERT_OK(spw_client_new(NULL, &p));
	ASSERT_OK(spw_client_connect(p, d.control));
	ASSERT_OK(spw_client_attach(p, &pa));
	ASSERT_OK(spw_optimizer_new(p, &oo, &o));
	ASSERT_OK(spw_optimizer_add(o, "a", 0, N0, init, dev, SPW_TYPE_F32, &id));
	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_OK(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_end(o, NULL));
	ASSERT_OK(spw_optimizer_sync(o));
	spw_optimizer_free(o);
	/* The trainer dies: the session waits for its next one. */
	spw_client_free(p);

	ASSERT_OK(spw_client_new(NULL, &p));
	ASSERT_OK(spw_client_connect(p, d.control));
	ASSERT_OK(spw_client_attach(p, &pa));
	oo.grad_store = SPW_GRAD_STORE_BF16;
	ASSERT_OK(spw_optimizer_new(p, &oo, &o));
	r = spw_optimizer_add(o, "a", 0, N0, init, dev, SPW_TYPE_F32, &id);
	if (r == 0)
		r = spw_optimizer_begin(o, 2, NULL, 0.0f);
	fprintf(stderr, "refused: %s\n", spw_optimizer_last_error(o));
	ASSERT_TRUE(r < 0);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "spw.opt.a.grad");
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "another grad_store");
	spw_optimizer_free(o);
	spw_client_free(p);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		TEST_FAIL("usage: test-grad-bf16 same|evict|accum|region|layout");
	if (!strcmp(argv[1], "same"))
		case_same();
	else if (!strcmp(argv[1], "accum"))
		case_accum();
	else if (!strcmp(argv[1], "evict"))
		case_evict();
	else if (!strcmp(argv[1], "region"))
		case_region();
	else if (!strcmp(argv[1], "layout"))
		case_layout();
	else
		TEST_FAIL("unknown case %s", argv[1]);
	return 0;
}
