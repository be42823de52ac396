/* SPDX-License-Identifier: MIT */
/*
 * util/clock.h: now_ns() counts nanoseconds of CLOCK_MONOTONIC (it never
 * goes back, and a sleep of d moves it by at least d); cpu_relax() is a
 * hint with no effect on memory.
 */
#include <time.h>

#include "test.h"
#include "util/clock.h"

int main(void)
{
	struct timespec ts, d = { .tv_sec = 0, .tv_nsec = 2000000 };
	uint64_t a, b, mono, prev;

	/* Same clock as CLOCK_MONOTONIC read around it. */
	a = now_ns();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	b = now_ns();
	mono = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	ASSERT_TRUE(a <= mono && mono <= b);

	/* Never backwards, across many reads with spin hints between. */
	prev = now_ns();
	for (int i = 0; i < 100000; i++) {
		uint64_t t;

		cpu_relax();
		t = now_ns();
		ASSERT_TRUE(t >= prev);
		prev = t;
	}

	/* A sleep is a lower bound on the time that passes (an upper one
	 * would be a timing assert). */
	a = now_ns();
	ASSERT_EQ(nanosleep(&d, NULL), 0);
	ASSERT_TRUE(now_ns() - a >= 2000000u);
	return 0;
}
