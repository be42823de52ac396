/* SPDX-License-Identifier: MIT */
/*
 * tests/pipeline/pipeline-fixture.h: what every pipeline test starts with, a
 * client attached to a test daemon with small pages so that a small model
 * spans many chunks.
 */
#ifndef SPW_TEST_PIPELINE_FIXTURE_H
#define SPW_TEST_PIPELINE_FIXTURE_H

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
