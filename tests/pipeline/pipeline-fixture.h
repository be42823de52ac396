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
