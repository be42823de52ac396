/* SPDX-License-Identifier: MIT */
/*
 * util/clock.h: the monotonic clock and the spin-wait hint, inline because
 * both sit in loops that poll (a ring, a pool's queue, a pager's timer).
 */
#ifndef SPW_UTIL_CLOCK_H
#define SPW_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds: for intervals and deadlines, never for
 * wall time. A vDSO read, no system call. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Tells the CPU this is a spin-wait, so a sibling hyperthread (or the
 * thread being waited on) gets the core's resources; a no-op elsewhere. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif
