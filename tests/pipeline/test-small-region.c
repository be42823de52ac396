/* SPDX-License-Identifier: MIT */
/*
 * test-small-region: an optimizer on the NVMe tier whose region cannot
 * hold what one chunk in flight pins (its pages of p, m, v, the gradient
 * store or the undo copy, two staging pages; on a persistent session the
 * update journal and its done bitmaps too) is refused by
 * spw_optimizer_new, naming the region, the figure it needs and the fix,
 * not with ENOMEM at a pin inside a step. The figure is exact: a region
 * one page smaller is refused, one of that size trains.
 *
 * For each kind (persistent overlapped: journal and undo copy; persistent
 * exact: journal and gradient store; plain overlapped; persistent exact
 * with int8 moments: a scale page): a region of 4 pages is refused and
 * its refusal gives the figure; one page under the figure is refused
 * with the same figure; the figure itself trains three steps. Then, in
 * that region, an add whose chunks need a second page of the journal's
 * done bitmaps is refused at the add, saying so.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "pipeline-fixture.h"
#include "test.h"

#define N (8 * (PAGE / 4))

struct kind {
	const char *name;
	enum spw_optimizer_mode mode;
	int persistent;
	enum spw_state_dtype dtype;
	const char *part; /* what the refusal must name among the state's pages */
};

static const struct spw_param_group group = {
	.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};
static struct spw_test_daemon d;
static float init[N], dev[N], g[N];

static spw_client *attach(const struct kind *k, unsigned pages)
{
	struct spw_attach_opts a = { .size = sizeof(a), .region_bytes = (uint64_t)pages * PAGE, .page_size = PAGE,
				     .persistent = k->persistent, .lease_s = 60 };
	char name[64];
	spw_client *c;

	snprintf(name, sizeof(name), "sr/%s-%u", k->name, pages);
	a.session = name;
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	return c;
}

static void done_with(spw_client *c, spw_optimizer *o)
{
	spw_optimizer_free(o);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
}

static void opts_for(const struct kind *k, struct spw_optimizer_opts *oo)
{
	*oo = (struct spw_optimizer_opts){ .size = sizeof(*oo), .mode = k->mode, .tier = SPW_TENSOR_SWAPPABLE,
					   .groups = &group, .ngroups = 1, .threads = 2, .device = "host",
					   .state_dtype = k->dtype };
}

/* A region of pages is refused at spw_optimizer_new: the bytes it says
 * are needed. */
static unsigned long long refused(const struct kind *k, unsigned pages)
{
	struct spw_optimizer_opts oo;
	spw_optimizer *o = NULL;
	spw_client *c = attach(k, pages);
	const char *msg, *at;
	char region[64];

	opts_for(k, &oo);
	ASSERT_EQ(spw_optimizer_new(c, &oo, &o), -ENOSPC);
	msg = spw_client_last_error(c);
	printf("# %s, %u pages: %s\n", k->name, pages, msg);
	snprintf(region, sizeof(region), "region of %.2f MiB (%u pages of 64 KiB)", (double)pages * PAGE / (1 << 20),
		 pages);
	ASSERT_CONTAINS(msg, "spw_optimizer_new: session sr/");
	ASSERT_CONTAINS(msg, region);
	ASSERT_CONTAINS(msg, "is too small");
	ASSERT_CONTAINS(msg, k->part);
	ASSERT_CONTAINS(msg, "OffloadAdamW(region_bytes=)");
	at = strstr(msg, "region_bytes of at least ");
	ASSERT_TRUE(at != NULL);
	done_with(c, o);
	return strtoull(at + strlen("region_bytes of at least "), NULL, 10);
}

/* The region trains three steps; then an add needing a second page of
 * done bitmaps (more than 65536 chunks of 4 journal units: 2 bits each)
 * is refused at the add on a persistent session. */
static void trains(const struct kind *k, unsigned pages)
{
	struct spw_step_result res = { .size = sizeof(res) };
	struct spw_optimizer_opts oo;
	spw_client *c = attach(k, pages);
	spw_optimizer *o;
	uint32_t id, big;
	int r;

	opts_for(k, &oo);
	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	ASSERT_OK(spw_optimizer_add(o, "w", 0, N, init, dev, SPW_TYPE_F32, &id));
	if (k->persistent) {
		r = spw_optimizer_add(o, "big", 0, (uint64_t)65536 * (PAGE / 4) + 1, init, dev, SPW_TYPE_F32, &big);
		printf("# %s, a big add: %s\n", k->name, spw_optimizer_last_error(o));
		ASSERT_EQ(r, -ENOSPC);
		ASSERT_CONTAINS(spw_optimizer_last_error(o), "add big: session sr/");
		ASSERT_CONTAINS(spw_optimizer_last_error(o), "(2 of them its done bitmaps)");
	}
	for (uint64_t s = 1; s <= 3; s++) {
		ASSERT_OK(spw_optimizer_begin(o, s, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o, &res));
		ASSERT_OK(spw_optimizer_sync(o));
	}
	done_with(c, o);
}

int main(void)
{
	static const struct kind kinds[] = {
		{ "persistent-overlapped", SPW_OPT_OVERLAPPED, 1, SPW_STATE_F32, "p, m, v, undo copy)" },
		{ "persistent-exact", SPW_OPT_EXACT, 1, SPW_STATE_F32, "p, m, v, grads)" },
		{ "plain-overlapped", SPW_OPT_OVERLAPPED, 0, SPW_STATE_F32, "p, m, v)" },
		{ "persistent-exact-int8", SPW_OPT_EXACT, 1, SPW_STATE_INT8, "grads, int8 scales)" },
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		" \"log\": {\"level\": \"warn\"}}"));
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		const struct kind *k = &kinds[i];
		unsigned long long need = refused(k, 4);
		unsigned pages = (unsigned)(need / PAGE);

		ASSERT_EQ(need % PAGE, 0ull);
		ASSERT_TRUE(pages > 4);
		/* One page less: refused, the same figure. */
		ASSERT_EQ(refused(k, pages - 1), need);
		/* The figure: it trains. */
		trains(k, pages);
		printf("# %s: %u pages of 64 KiB are the least\n", k->name, pages);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
