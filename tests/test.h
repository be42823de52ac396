/* SPDX-License-Identifier: MIT */
/*
 * tests/test.h: assertions that print both sides (libuv's ASSERT_EQ) and
 * the skip convention (exit 77, which meson counts as skipped).
 *
 *   ASSERT_EQ(r, 0);            ASSERT_OK(spw_client_connect(...));
 *   ASSERT_TRUE(p != NULL);     ASSERT_STREQ(name, "job/0");
 *   SKIP("no GPU: %s", why);
 */
#ifndef SPW_TEST_H
#define SPW_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEST_FAIL(...)                                                          \
	do {                                                                    \
		fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, __func__);   \
		fprintf(stderr, __VA_ARGS__);                                   \
		fputc('\n', stderr);                                            \
		abort();                                                        \
	} while (0)

#define ASSERT_CMP_INT(a, op, b)                                                           \
	do {                                                                               \
		intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                           \
		if (!(a_ op b_))                                                           \
			TEST_FAIL("assertion %s %s %s failed: %jd vs %jd", #a, #op, #b, a_, b_); \
	} while (0)

#define ASSERT_CMP_UINT(a, op, b)                                                          \
	do {                                                                               \
		uintmax_t a_ = (uintmax_t)(a), b_ = (uintmax_t)(b);                        \
		if (!(a_ op b_))                                                           \
			TEST_FAIL("assertion %s %s %s failed: %ju vs %ju", #a, #op, #b, a_, b_); \
	} while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_INT(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_CMP_INT(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_CMP_INT(a, <, b)
#define ASSERT_LE(a, b) ASSERT_CMP_INT(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_CMP_INT(a, >, b)
#define ASSERT_GE(a, b) ASSERT_CMP_INT(a, >=, b)
#define ASSERT_UEQ(a, b) ASSERT_CMP_UINT(a, ==, b)

/* A call returning 0 or a negative errno. */
#define ASSERT_OK(expr)                                                                   \
	do {                                                                              \
		intmax_t r_ = (intmax_t)(expr);                                           \
		if (r_ < 0)                                                               \
			TEST_FAIL("%s failed: %jd (%s)", #expr, r_, strerror((int)-r_));  \
	} while (0)

#define ASSERT_TRUE(x)                                                   \
	do {                                                             \
		if (!(x))                                                \
			TEST_FAIL("assertion %s failed", #x);            \
	} while (0)

#define ASSERT_STREQ(a, b)                                                                   \
	do {                                                                                 \
		const char *a_ = (a), *b_ = (b);                                             \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                                       \
			TEST_FAIL("%s == %s failed: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)", \
				  b_ ? b_ : "(null)");                                       \
	} while (0)

/* Substring check, for error messages that must name a thing. */
#define ASSERT_CONTAINS(hay, needle)                                                         \
	do {                                                                                 \
		const char *h_ = (hay), *n_ = (needle);                                      \
		if (!h_ || !strstr(h_, n_))                                                  \
			TEST_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
	} while (0)

/* Milliseconds on CLOCK_MONOTONIC. For a check that holds only while a
 * window is open (an injected stall holds a request for its milliseconds
 * from submission on): read before the window opens and again after the
 * check, it tells whether the check fell inside the window; when it did
 * not, the machine was too slow to tell anything and the test runs again
 * with a longer window. Never for an upper bound on how long something
 * took: any such bound fails on a slow enough machine. */
static inline double test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The rerun itself: once(hold_ms) until it says its checks fell inside
 * the window, the hold times factor each time; past max_ms the test
 * fails, saying what never fit (what: a sentence's subject). */
static inline void test_with_longer_holds(bool (*once)(unsigned hold_ms), unsigned hold_ms, unsigned factor,
					  unsigned max_ms, const char *what)
{
	while (!once(hold_ms)) {
		fprintf(stderr, "%s: not inside the %u ms hold; again with %u ms\n", what, hold_ms, hold_ms * factor);
		hold_ms *= factor;
		if (hold_ms > max_ms)
			TEST_FAIL("%s: never inside a hold of up to %u ms: the disk under the swap dir is not usable",
				  what, hold_ms / factor);
	}
}

#define TEST_SKIP_CODE 77
#define SKIP(...)                                        \
	do {                                             \
		fprintf(stderr, "SKIP: ");               \
		fprintf(stderr, __VA_ARGS__);            \
		fputc('\n', stderr);                     \
		exit(TEST_SKIP_CODE);                    \
	} while (0)

#endif
