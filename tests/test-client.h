/* SPDX-License-Identifier: MIT */
/*
 * tests/test-client.h: a client connected to a test daemon's control
 * socket, or the test fails. Header-only, for the tests that link
 * libspillway.
 */
#ifndef SPW_TESTS_TEST_CLIENT_H
#define SPW_TESTS_TEST_CLIENT_H

#include <spillway/spillway.h>

#include "test.h"

static inline spw_client *test_client(const char *control)
{
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, control));
	return c;
}

#endif
