/* SPDX-License-Identifier: MIT */
/*
 * tests/pipeline/pipeline-fixture.h: what every pipeline test starts with, a
 * client attached to a test daemon with small pages so that a small model
 * spans many chunks.
 */
#ifndef SPW_TEST_PIPELINE_FIXTURE_H
#define SPW_TEST_PIPELINE_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"

#define PAGE (64u << 10)

/* n pseudo-random values in [-1.5, 1.5), the same for the same seed:
 * weights and gradients the tests can make again. */
static inline void fill(float *x, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 3.0f;
	}
}

/* A daemon with a swap directory, for the NVMe tier's runs. */
static const char swap_config[] __attribute__((unused)) =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"1GiB\", \"session_max_bytes\": \"256MiB\", \"require_locked\": false },\n"
	"  \"swap\": { \"dirs\": [ { \"path\": \"@DIR@\", \"max_bytes\": \"256MiB\" } ] },\n"
	"  \"log\": { \"level\": \"warn\" }\n"
	"}\n";

/* Two optimizers over the same two tensors (count[t] elements, ids[k][t]
 * in o[k]) hold the same bits of master weights and moments; what names
 * the two in the failure. */
static inline void same_opt_state(spw_optimizer *const o[2], const uint32_t ids[2][2], const uint64_t count[2],
				  const char *what)
{
	float *got[2];

	for (int t = 0; t < 2; t++) {
		for (int k = 0; k < 2; k++)
			ASSERT_TRUE((got[k] = malloc(count[t] * 4)) != NULL);
		for (int w = SPW_STATE_PARAM; w <= SPW_STATE_EXP_AVG_SQ; w++) {
			for (int k = 0; k < 2; k++)
				ASSERT_OK(spw_optimizer_read(o[k], ids[k][t], (enum spw_optimizer_state)w, got[k]));
			if (memcmp(got[0], got[1], count[t] * 4))
				TEST_FAIL("%s: tensor %d state %d differs", what, t, w);
		}
		free(got[0]);
		free(got[1]);
	}
}

/* A client attached to persistent session name (4 MiB region, 60 s lease). */
static inline spw_client *connect_persistent(const struct spw_test_daemon *d, const char *name)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = 4u << 20, .page_size = PAGE,
				     .persistent = 1, .lease_s = 60 };
	spw_client *c;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d->control));
	ASSERT_OK(spw_client_attach(c, &a));
	return c;
}

static inline spw_client *connect_client(const struct spw_test_daemon *d, const char *session, uint64_t region)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = session, .region_bytes = region,
				     .page_size = PAGE };
	spw_client *c;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d->control));
	ASSERT_OK(spw_client_attach(c, &a));
	return c;
}

#endif
