/* SPDX-License-Identifier: MIT */
/*
 * test-param-view: spw_optimizer_param_view, a CPU trainer's parameters in
 * the region itself, against a real spillwayd with the host device.
 *
 *   view    both modes: the view starts as the initial weights; after every
 *           step it equals the master (spw_optimizer_read) and a twin
 *           tensor's copied-out parameters bit for bit; the viewed tensor's
 *           own buffer is never written again (no copy-out, bytes_h2d counts
 *           the twin only); a write into the view is a write of the master;
 *           a DLPack export outlives spw_optimizer_free with the last
 *           values (writable), and its deleter unmaps it
 *   refuse  -EOPNOTSUPP with a reason for the swappable tier, a frozen, an
 *           offloaded and a bf16 tensor (which keep their copy-out), -EBUSY
 *           inside a step, -EINVAL for an unknown tensor
 *
 *   test-param-view view|refuse
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "pipeline-fixture.h"
#include "test.h"

#define CHUNK (PAGE / 4)
#define N (3 * CHUNK + 123)

static const struct spw_param_group group = {
	.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

/* DLPack's DLManagedTensor, as a consumer reads it (dlpack.h). */
struct dl_managed {
	struct {
		void *data;
		int32_t device_type, device_id, ndim;
		uint8_t code, bits;
		uint16_t lanes;
		int64_t *shape, *strides;
		uint64_t byte_offset;
	} t;
	void *manager_ctx;
	void (*deleter)(struct dl_managed *self);
};

static spw_optimizer *make_opt(spw_client *c, enum spw_optimizer_mode mode, enum spw_tensor_kind tier)
{
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = mode, .tier = tier, .groups = &group, .ngroups = 1,
		.threads = 2, .window = 2, .device = "host",
	};
	spw_optimizer *o = NULL;

	if (spw_optimizer_new(c, &oo, &o) < 0)
		TEST_FAIL("spw_optimizer_new: %s", spw_client_last_error(c));
	return o;
}

static void case_view(void)
{
	static float init[N], g[N], dev_v[N], dev_t[N], master[N], sentinel[N];
	struct spw_test_daemon d;
	spw_client *c;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "view/0", 16u << 20);
	for (int mode = 0; mode < 2; mode++) {
		spw_optimizer *o = make_opt(c, mode ? SPW_OPT_EXACT : SPW_OPT_OVERLAPPED, SPW_TENSOR_RESIDENT);
		struct spw_optimizer_stats st = { .size = sizeof(st) };
		uint32_t v, t;
		float *view, *again;
		struct dl_managed *dl;
		size_t bytes = 0;

		fill(init, N, 1);
		memcpy(dev_v, init, sizeof(init));
		memcpy(dev_t, init, sizeof(init));
		ASSERT_OK(spw_optimizer_add(o, "viewed", 0, N, init, dev_v, SPW_TYPE_F32, &v));
		ASSERT_OK(spw_optimizer_add(o, "twin", 0, N, init, dev_t, SPW_TYPE_F32, &t));
		ASSERT_OK(spw_optimizer_param_view(o, v, (void **)&view, &bytes));
		ASSERT_UEQ(bytes, 4u * PAGE); /* N elements round up to 4 pages */
		ASSERT_EQ(memcmp(view, init, sizeof(init)), 0);
		ASSERT_OK(spw_optimizer_param_view(o, v, (void **)&again, NULL));
		ASSERT_TRUE(again == view);
		/* The trainer let go of its own buffer: nothing may write it. */
		fill(sentinel, N, 7);
		memcpy(dev_v, sentinel, sizeof(sentinel));

		for (uint64_t s = 1; s <= 4; s++) {
			struct spw_step_result res = { .size = sizeof(res) };

			fill(g, N, 100 + (unsigned)s);
			ASSERT_OK(spw_optimizer_begin(o, s, NULL, 0.0f));
			ASSERT_OK(spw_optimizer_grad_ready(o, t, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
			ASSERT_OK(spw_optimizer_grad_ready(o, v, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
			ASSERT_OK(spw_optimizer_end(o, &res));
			ASSERT_OK(spw_optimizer_wait_params(o, v, NULL));
			ASSERT_OK(spw_optimizer_wait_params(o, t, NULL));
			ASSERT_OK(spw_optimizer_read(o, v, SPW_STATE_PARAM, master));
			if (memcmp(view, master, sizeof(master)))
				TEST_FAIL("mode %d step %ju: the view differs from the master", mode, (uintmax_t)s);
			if (memcmp(view, dev_t, sizeof(dev_t)))
				TEST_FAIL("mode %d step %ju: the view differs from the copied-out twin", mode,
					  (uintmax_t)s);
			if (memcmp(dev_v, sentinel, sizeof(sentinel)))
				TEST_FAIL("mode %d step %ju: the viewed tensor's old buffer was written", mode,
					  (uintmax_t)s);
			ASSERT_TRUE(memcmp(view, init, sizeof(init)) != 0);
		}
		ASSERT_OK(spw_optimizer_stats(o, &st));
		ASSERT_UEQ(st.bytes_h2d, 4u * N * 4u); /* the twin's four copy-outs, none of the view's */

		/* A write into the view is the master's new value. */
		view[5] = 1.5f;
		view[N - 1] = -2.25f;
		ASSERT_OK(spw_optimizer_read(o, v, SPW_STATE_PARAM, master));
		ASSERT_TRUE(master[5] == 1.5f && master[N - 1] == -2.25f);

		/* A DLPack export outlives free with the last values, in private
		 * memory; its deleter unmaps it. Without one, free unmaps. */
		ASSERT_OK(spw_optimizer_param_view_dlpack(o, v, (void **)&dl));
		ASSERT_TRUE(dl->t.data == view && dl->t.ndim == 1 && dl->t.shape[0] == N && dl->t.code == 2 &&
			    dl->t.bits == 32 && dl->t.device_type == 1);
		memcpy(master, view, sizeof(master));
		spw_optimizer_free(o);
		ASSERT_EQ(memcmp(view, master, sizeof(master)), 0);
		view[0] = 42.0f;
		ASSERT_TRUE(view[0] == 42.0f);
		ASSERT_OK(msync(view, bytes, MS_ASYNC)); /* mapped */
		dl->deleter(dl);
		ASSERT_EQ(msync(view, bytes, MS_ASYNC), -1); /* unmapped: ENOMEM */
		ASSERT_EQ(errno, ENOMEM);
	}
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

/* A refused view changes nothing: the tensor's copy-out goes on. */
static void expect_refused(spw_optimizer *o, uint32_t id, const char *why)
{
	void *p = NULL;

	ASSERT_EQ(spw_optimizer_param_view(o, id, &p, NULL), -EOPNOTSUPP);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), why);
	ASSERT_TRUE(p == NULL);
}

static void case_refuse(void)
{
	static float init[N], g[N], dev[N], master[N];
	static uint16_t dev16[N];
	struct spw_test_daemon d;
	struct spw_step_result res = { .size = sizeof(res) };
	spw_client *c;
	spw_optimizer *o;
	uint32_t w, f, off, h;
	void *p;
	int r;

	fill(init, N, 3);
	fill(g, N, 4);
	ASSERT_OK(spw_test_daemon_start(&d, swap_config));
	c = connect_client(&d, "view/1", 16u << 20);

	o = make_opt(c, SPW_OPT_OVERLAPPED, SPW_TENSOR_RESIDENT);
	memcpy(dev, init, sizeof(init));
	ASSERT_OK(spw_optimizer_add(o, "w", 0, N, init, dev, SPW_TYPE_F32, &w));
	ASSERT_OK(spw_optimizer_add_frozen(o, "frozen", N, init, SPW_TYPE_F32, &f));
	ASSERT_OK(spw_optimizer_add_offloaded(o, "offloaded", 0, N, init, &off));
	ASSERT_OK(spw_optimizer_add(o, "half", 0, N, init, dev16, SPW_TYPE_BF16, &h));
	expect_refused(o, f, "frozen");
	expect_refused(o, off, "fp32");
	expect_refused(o, h, "fp32");
	ASSERT_EQ(spw_optimizer_param_view(o, 99, &p, NULL), -EINVAL);
	ASSERT_EQ(spw_optimizer_param_view(o, w, NULL, NULL), -EINVAL);
	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_EQ(spw_optimizer_param_view(o, w, &p, NULL), -EBUSY);
	ASSERT_CONTAINS(spw_optimizer_last_error(o), "step is open");
	for (uint32_t id = 0; id < 4; id++)
		if (id != f)
			ASSERT_OK(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_end(o, &res));
	ASSERT_OK(spw_optimizer_wait_params(o, w, NULL));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_PARAM, master));
	ASSERT_EQ(memcmp(dev, master, sizeof(master)), 0); /* copied out as before */
	spw_optimizer_free(o);

	/* The swappable tier: pages move between slots and disk. */
	o = make_opt(c, SPW_OPT_OVERLAPPED, SPW_TENSOR_SWAPPABLE);
	memcpy(dev, init, sizeof(init));
	r = spw_optimizer_add(o, "w", 0, N, init, dev, SPW_TYPE_F32, &w);
	if (r == -EOPNOTSUPP) {
		spw_optimizer_free(o);
		spw_client_free(c);
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		SKIP("the daemon refuses swappable tensors (no NVMe tier); the other refusals passed");
	}
	ASSERT_OK(r);
	expect_refused(o, w, "swappable");
	ASSERT_OK(spw_optimizer_begin(o, 1, NULL, 0.0f));
	ASSERT_OK(spw_optimizer_grad_ready(o, w, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
	ASSERT_OK(spw_optimizer_end(o, &res));
	ASSERT_OK(spw_optimizer_wait_params(o, w, NULL));
	ASSERT_OK(spw_optimizer_read(o, w, SPW_STATE_PARAM, master));
	ASSERT_EQ(memcmp(dev, master, sizeof(master)), 0);
	spw_optimizer_free(o);
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	if (argc > 1 && !strcmp(argv[1], "view"))
		case_view();
	else if (argc > 1 && !strcmp(argv[1], "refuse"))
		case_refuse();
	else {
		fprintf(stderr, "usage: test-param-view view|refuse\n");
		return 2;
	}
	return 0;
}
