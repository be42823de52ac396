/* SPDX-License-Identifier: MIT */
/*
 * test-params: frozen tensors, parameter offload (spw_params_fetch /
 * release) and the stream semantics of grad_ready / wait_params / fetch,
 * against a real spillwayd with the host device backend.
 *
 * Links the library's internal objects (spillway_core_dep) for one hook,
 * spw__optimizer_device(): streams of the optimizer's host backend stand
 * for a trainer's CUDA streams, so the ordering the cuda backend gets from
 * cudaEventRecord / cudaStreamWaitEvent is checked here without a GPU.
 *
 *   test-params fetch|swap|streams|misuse
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "client-private.h"
#include "device.h"
#include "harness.h"
#include "pipeline-fixture.h"
#include "kernels.h"
#include "test.h"

#define CHUNK (PAGE / 4)

static const struct spw_param_group group = {
	.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

static spw_optimizer *make_opt(spw_client *c, enum spw_optimizer_mode mode, enum spw_tensor_kind tier,
			       int *err)
{
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = mode, .tier = tier, .groups = &group, .ngroups = 1,
		.threads = 2, .window = 2, .device = "host",
	};
	spw_optimizer *o = NULL;

	*err = spw_optimizer_new(c, &oo, &o);
	if (*err < 0)
		fprintf(stderr, "spw_optimizer_new: %s\n", spw_client_last_error(c));
	return o;
}

/* One step of a constant gradient g on every tensor in ids. */
static void step(spw_optimizer *o, uint64_t n, const uint32_t *ids, int nids, uint64_t count, const float *g)
{
	struct spw_step_result res = { .size = sizeof(res) };

	ASSERT_OK(spw_optimizer_begin(o, n, NULL, 0.0f));
	for (int i = 0; i < nids; i++)
		ASSERT_OK(spw_optimizer_grad_ready(o, ids[i], SPW_ALL_CHUNKS, g, count * 4, SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_end(o, &res));
}

static void fetch_f32(spw_optimizer *o, uint32_t id, float *dst, uint64_t count)
{
	ASSERT_OK(spw_params_fetch(o, id, dst, count * 4, SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_wait_params(o, id, NULL));
	ASSERT_OK(spw_params_release(o, id));
}

/*
 * fetch: a frozen tensor fetched as fp32, bf16 and fp16 is exactly its
 * values and casts (kernels' spw_f32_to_bf16 / _f16); a trainable tensor
 * fetched after steps is exactly the master the optimizer updated; the
 * frozen one is untouched by the steps.
 */
static void case_fetch(void)
{
	enum { N = 3 * CHUNK + 123 };
	static float init[N], fz[N], g[N], got[N], master[N];
	static uint16_t h[N], h16[N];
	struct spw_test_daemon d;
	struct spw_optimizer_stats st = { .size = sizeof(st) };
	spw_client *c;
	spw_optimizer *o;
	uint32_t w, f, fb;
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "params/0", 16u << 20);
	for (int mode = 0; mode < 2; mode++) {
		o = make_opt(c, mode ? SPW_OPT_EXACT : SPW_OPT_OVERLAPPED, SPW_TENSOR_RESIDENT, &r);
		ASSERT_OK(r);
		fill(init, N, 1);
		fill(fz, N, 2);
		fill(g, N, 3);
		ASSERT_OK(spw_optimizer_add_offloaded(o, "w", 0, N, init, &w));
		ASSERT_OK(spw_optimizer_add_frozen(o, "frozen", N, fz, SPW_TYPE_F32, &f));
		for (size_t i = 0; i < N; i++)
			h[i] = spw_f32_to_bf16(fz[i]);
		ASSERT_OK(spw_optimizer_add_frozen(o, "frozen.bf16", N, h, SPW_TYPE_BF16, &fb));

		/* Before any step: the values given. */
		fetch_f32(o, w, got, N);
		ASSERT_EQ(memcmp(got, init, sizeof(got)), 0);
		fetch_f32(o, f, got, N);
		ASSERT_EQ(memcmp(got, fz, sizeof(got)), 0);
		ASSERT_OK(spw_params_fetch(o, f, h16, sizeof(h16), SPW_TYPE_BF16, NULL));
		ASSERT_OK(spw_optimizer_wait_params(o, f, NULL));
		ASSERT_OK(spw_params_release(o, f));
		ASSERT_EQ(memcmp(h16, h, sizeof(h)), 0);
		/* bf16 in, bf16 out: bit for bit. */
		memset(h16, 0, sizeof(h16));
		ASSERT_OK(spw_params_fetch(o, fb, h16, sizeof(h16), SPW_TYPE_BF16, NULL));
		ASSERT_OK(spw_params_release(o, fb)); /* release waits for the copy */
		ASSERT_EQ(memcmp(h16, h, sizeof(h)), 0);
		ASSERT_OK(spw_params_fetch(o, f, h16, sizeof(h16), SPW_TYPE_F16, NULL));
		ASSERT_OK(spw_params_release(o, f));
		for (size_t i = 0; i < N; i++)
			ASSERT_EQ(h16[i], spw_f32_to_f16(fz[i]));

		for (uint64_t s = 1; s <= 3; s++) {
			step(o, s, &w, 1, N, g);
			/* Fetched right after end: exact mode's updates are
			 * still running, and the fetch waits for them. */
			ASSERT_OK(spw_params_fetch(o, w, got, sizeof(got), SPW_TYPE_F32, NULL));
			ASSERT_OK(spw_optimizer_wait_params(o, w, NULL));
			ASSERT_OK(spw_params_release(o, w));
			ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_PARAM, master));
			ASSERT_EQ(memcmp(got, master, sizeof(got)), 0);
			ASSERT_NE(memcmp(got, init, sizeof(got)), 0);
			ASSERT_OK(spw_params_fetch(o, w, h16, sizeof(h16), SPW_TYPE_BF16, NULL));
			ASSERT_OK(spw_params_release(o, w));
			for (size_t i = 0; i < N; i++)
				ASSERT_EQ(h16[i], spw_f32_to_bf16(master[i]));
		}
		/* Frozen: untouched by three steps, no optimizer state. */
		ASSERT_OK(spw_optimizer_read(o, f, SPW_STATE_PARAM, got));
		ASSERT_EQ(memcmp(got, fz, sizeof(got)), 0);
		fetch_f32(o, f, got, N);
		ASSERT_EQ(memcmp(got, fz, sizeof(got)), 0);
		ASSERT_EQ(spw_optimizer_read(o, f, SPW_STATE_EXP_AVG, got), -EINVAL);

		ASSERT_OK(spw_optimizer_stats(o, &st));
		ASSERT_UEQ(st.fetches, 12);
		ASSERT_GT(st.bytes_fetched, 0);
		spw_optimizer_free(o);
	}
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/*
 * swap: on the swappable tier, eight frozen tensors and two offloaded
 * trainable ones, together eight times the region, fetched and released
 * layer by layer (forward, then backward in reverse) for four steps: every
 * fetch is exact, and from the second step on the recorded fetch order
 * turns into PREFETCH hints the daemon accepts.
 */
static void case_swap(void)
{
	enum { L = 8, N = 2 * CHUNK, NT = 2 };
	static float fz[L][N], init[NT][N], g[N], got[N], master[N];
	struct spw_test_daemon d;
	struct spw_optimizer_stats st = { .size = sizeof(st) };
	struct spw_step_result res = { .size = sizeof(res) };
	spw_client *c;
	spw_optimizer *o;
	uint32_t f[L], w[NT];
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	/* 12 slots: the staging pages (4) and the window's pins fit, the
	 * tensors (8 * 2 + 2 * 2 * 3 pages) do not. */
	c = connect_client(&d, "params/0", 12 * PAGE);
	o = make_opt(c, SPW_OPT_OVERLAPPED, SPW_TENSOR_SWAPPABLE, &r);
	ASSERT_OK(r);
	fill(g, N, 99);
	for (int t = 0; t < NT; t++) {
		char name[32];

		fill(init[t], N, 50 + (unsigned)t);
		snprintf(name, sizeof(name), "train%d", t);
		r = spw_optimizer_add_offloaded(o, name, 0, N, init[t], &w[t]);
		if (r == -EOPNOTSUPP) {
			spw_optimizer_free(o);
			spw_client_free(c);
			ASSERT_EQ(spw_test_daemon_stop(&d), 0);
			SKIP("the daemon refuses swappable tensors (no NVMe tier)");
		}
		ASSERT_OK(r);
	}
	for (int l = 0; l < L; l++) {
		char name[32];

		fill(fz[l], N, 10 + (unsigned)l);
		snprintf(name, sizeof(name), "layer%d", l);
		ASSERT_OK(spw_optimizer_add_frozen(o, name, N, fz[l], SPW_TYPE_F32, &f[l]));
	}
	for (uint64_t s = 1; s <= 4; s++) {
		ASSERT_OK(spw_optimizer_begin(o, s, NULL, 0.0f));
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < L; i++) {
				int l = pass ? L - 1 - i : i;

				fetch_f32(o, f[l], got, N);
				if (memcmp(got, fz[l], sizeof(got)))
					TEST_FAIL("step %ju: frozen layer%d differs after a fetch", (uintmax_t)s, l);
			}
		for (int t = 0; t < NT; t++)
			ASSERT_OK(spw_optimizer_grad_ready(o, w[t], SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o, &res));
		for (int t = 0; t < NT; t++) {
			fetch_f32(o, w[t], got, N);
			ASSERT_OK(spw_optimizer_read(o, w[t], SPW_STATE_PARAM, master));
			ASSERT_EQ(memcmp(got, master, sizeof(got)), 0);
		}
	}
	ASSERT_OK(spw_optimizer_stats(o, &st));
	fprintf(stderr, "swap: %ju fetches, %ju prefetches from the fetch order (%ju in all), hints %d\n",
		(uintmax_t)st.fetches, (uintmax_t)st.fetch_prefetches, (uintmax_t)st.prefetches, st.hints);
	if (st.hints)
		ASSERT_GT(st.fetch_prefetches, 0);
	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* ---- streams ---- */

struct later {
	float *dst;
	const float *src;
	float value;
	size_t n;
	useconds_t delay;
};

/* Runs on a trainer stream: late work the pipeline must be ordered with. */
static void late_write(void *arg)
{
	struct later *l = arg;

	usleep(l->delay);
	for (size_t i = 0; i < l->n; i++)
		l->dst[i] = l->src ? l->src[i] : l->value;
}

/*
 * streams: (1) grad_ready with a producer stream whose work writes the
 * gradient 100 ms later: the update used the written gradient (exp_avg is
 * 0.1 * g, not 0). (2) wait_params with a stream: work queued on it after
 * the call reads the updated parameters. (3) fetch with a stream whose
 * earlier work writes dst 100 ms later: the fetch's copy lands after it.
 */
static void case_streams(void)
{
	enum { N = 2 * CHUNK + 7 };
	static float init[N], g[N], m[N], dev[N], snap[N], master[N], buf[N];
	struct spw_test_daemon d;
	struct spw_step_result res = { .size = sizeof(res) };
	struct spw__device *dv;
	struct spw__stream *prod, *cons;
	spw_client *c;
	spw_optimizer *o;
	uint32_t w;
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "params/0", 16u << 20);
	o = make_opt(c, SPW_OPT_EXACT, SPW_TENSOR_RESIDENT, &r);
	ASSERT_OK(r);
	fill(init, N, 5);
	memcpy(dev, init, sizeof(dev));
	ASSERT_OK(spw_optimizer_add(o, "w", 0, N, init, dev, SPW_TYPE_F32, &w));
	dv = spw__optimizer_device(o);
	ASSERT_TRUE(dv != NULL);
	ASSERT_OK(spw__stream_create(dv, &prod));
	ASSERT_OK(spw__stream_create(dv, &cons));

	/* (1) */
	memset(g, 0, sizeof(g));
	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	struct later lg = { .dst = g, .value = 1.0f, .n = N, .delay = 100000 };
	ASSERT_OK(spw__launch_host_fn(dv, prod, late_write, &lg));
	ASSERT_OK(spw_optimizer_grad_ready(o, w, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, prod));
	ASSERT_OK(spw_optimizer_end(o, &res));
	ASSERT_OK(spw_optimizer_sync(o));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_EXP_AVG, m));
	for (size_t i = 0; i < N; i++)
		if (!(fabsf(m[i] - 0.1f) < 1e-6f))
			TEST_FAIL("exp_avg[%zu] = %g: the copy read the gradient before its producer wrote it",
				  i, (double)m[i]);

	/* (2) */
	ASSERT_OK(spw_optimizer_begin(o, 2, NULL, 0.0f));
	ASSERT_OK(spw_optimizer_grad_ready(o, w, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_end(o, &res));
	ASSERT_OK(spw_optimizer_wait_params(o, w, cons));
	struct later ls = { .dst = snap, .src = dev, .n = N };
	ASSERT_OK(spw__launch_host_fn(dv, cons, late_write, &ls));
	ASSERT_OK(spw__stream_sync(dv, cons));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_PARAM, master));
	ASSERT_EQ(memcmp(snap, master, sizeof(snap)), 0);

	/* (3) */
	struct later lf = { .dst = buf, .value = -7.0f, .n = N, .delay = 100000 };
	ASSERT_OK(spw__launch_host_fn(dv, cons, late_write, &lf));
	ASSERT_OK(spw_params_fetch(o, w, buf, sizeof(buf), SPW_TYPE_F32, cons));
	ASSERT_OK(spw_optimizer_wait_params(o, w, cons));
	ASSERT_OK(spw__stream_sync(dv, cons));
	ASSERT_EQ(memcmp(buf, master, sizeof(buf)), 0);
	ASSERT_OK(spw_params_release(o, w));

	/* A pointer that is no stream of the host backend is ignored. */
	ASSERT_OK(spw_optimizer_wait_params(o, w, (void *)&r));

	spw__stream_destroy(dv, prod);
	spw__stream_destroy(dv, cons);
	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

static void case_misuse(void)
{
	static float init[100], buf[100];
	struct spw_test_daemon d;
	spw_client *c;
	spw_optimizer *o;
	uint32_t w, f, x;
	int r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "params/0", 4u << 20);
	o = make_opt(c, SPW_OPT_OVERLAPPED, SPW_TENSOR_RESIDENT, &r);
	ASSERT_OK(r);
	ASSERT_OK(spw_optimizer_add_offloaded(o, "w", 0, 100, init, &w));
	ASSERT_OK(spw_optimizer_add_frozen(o, "f", 100, init, SPW_TYPE_F32, &f));
	ASSERT_EQ(spw_optimizer_add_frozen(o, "f", 100, init, SPW_TYPE_F32, &x), -EEXIST);
	ASSERT_EQ(spw_optimizer_add_frozen(o, "g", 100, init, (enum spw_type)9, &x), -EINVAL);
	ASSERT_EQ(spw_optimizer_add_frozen(o, "g", 0, init, SPW_TYPE_F32, &x), -EINVAL);
	ASSERT_EQ(spw_optimizer_add_frozen(o, "g", 100, NULL, SPW_TYPE_F32, &x), -EINVAL);
	ASSERT_EQ(spw_optimizer_add_offloaded(o, "g", 5, 100, init, &x), -EINVAL);

	ASSERT_EQ(spw_params_fetch(o, 7, buf, sizeof(buf), SPW_TYPE_F32, NULL), -EINVAL);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "no tensor 7");
	ASSERT_EQ(spw_params_fetch(o, f, NULL, sizeof(buf), SPW_TYPE_F32, NULL), -EINVAL);
	ASSERT_EQ(spw_params_fetch(o, f, buf, sizeof(buf), (enum spw_type)3, NULL), -EINVAL);
	ASSERT_EQ(spw_params_fetch(o, f, buf, sizeof(buf) - 4, SPW_TYPE_F32, NULL), -EMSGSIZE);
	ASSERT_EQ(spw_params_fetch(o, f, buf, sizeof(buf), SPW_TYPE_BF16, NULL), -EMSGSIZE);
	ASSERT_EQ(spw_params_release(o, f), -EPROTO);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "not fetched");
	ASSERT_EQ(spw_params_release(o, 9), -EINVAL);
	ASSERT_OK(spw_params_fetch(o, f, buf, sizeof(buf), SPW_TYPE_F32, NULL));
	ASSERT_EQ(spw_params_fetch(o, f, buf, sizeof(buf), SPW_TYPE_F32, NULL), -EALREADY);
	ASSERT_OK(spw_params_release(o, f));
	ASSERT_EQ(spw_params_release(o, f), -EPROTO);

	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_EQ(spw_optimizer_add_frozen(o, "late", 100, init, SPW_TYPE_F32, &x), -EBUSY);
	ASSERT_EQ(spw_optimizer_grad_ready(o, f, SPW_ALL_CHUNKS, buf, sizeof(buf), SPW_TYPE_F32, NULL), -EINVAL);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "frozen");
	ASSERT_OK(spw_optimizer_grad_ready(o, w, SPW_ALL_CHUNKS, buf, sizeof(buf), SPW_TYPE_F32, NULL));
	/* A frozen tensor needs no gradient for the step to end. */
	ASSERT_OK(spw_optimizer_end(o, NULL));
	ASSERT_OK(spw_optimizer_wait_params(o, w, NULL));
	ASSERT_OK(spw_optimizer_wait_params(o, f, NULL));
	/* Fetched but never released: free copes. */
	ASSERT_OK(spw_params_fetch(o, w, buf, sizeof(buf), SPW_TYPE_F32, NULL));
	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "fetch", case_fetch }, { "swap", case_swap }, { "streams", case_streams }, { "misuse", case_misuse },
	};

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			return 0;
		}
	fprintf(stderr, "usage: test-params fetch|swap|streams|misuse\n");
	return 2;
}
