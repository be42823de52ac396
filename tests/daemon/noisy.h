/* SPDX-License-Identifier: MIT */
/*
 * tests/daemon/noisy.h: tenants that a shared spillwayd must survive
 * without anyone else noticing, for the soak test (test-soak.c) and the
 * tenants benchmark (bench/bench-tenants.c), which both fork them.
 *
 * They speak the wire by hand (proto/ and util/ only: no libspillway, no
 * test assertions), and every failure is expected: a refused request, a
 * session the daemon ends, a connection it closes are all part of the
 * game, so nothing here aborts and no call waits unbounded.
 *
 *   hostile  one life: idle connections that never say hello, garbage
 *            frames of every kind, a session whose ring entries and SQ/CQ
 *            indices a second thread rewrites while the daemon reads them,
 *            holes punched in its own region and rings memfds; the life
 *            ends with a SIGKILL it sends itself. noisy_hostile_loop()
 *            respawns lives from a parent, a kill -9 storm.
 *   storm    one session registering thousands of small swappable
 *            tensors, unregistering them, again.
 *   hammer   one session submitting NOP/PIN/UNPIN as fast as it reaps.
 */
#ifndef SPW_TEST_NOISY_H
#define SPW_TEST_NOISY_H

#include <stdint.h>

/* Counters the tenants bump, in memory shared across fork() (see
 * noisy_counters_new()), so a parent sees what its children did. */
struct noisy_counters {
	uint64_t lives;          /* hostile lives started */
	uint64_t kills;          /* hostile lives that ended in their own SIGKILL */
	uint64_t attaches;       /* sessions the hostile tenant got */
	uint64_t garbage_frames; /* garbage frames sent */
	uint64_t idle_conns;     /* connections opened and left without a hello */
	uint64_t scribbles;      /* ring entries and indices rewritten */
	uint64_t punches;        /* holes punched in a region or rings memfd */
	uint64_t registers;      /* storm: tensors registered */
	uint64_t ring_ops;       /* hammer: completions reaped */
};

/* A zeroed struct noisy_counters in a MAP_SHARED anonymous mapping
 * (NULL when mmap fails). */
struct noisy_counters *noisy_counters_new(void);

/* One hostile life of life_ms milliseconds against the daemon at
 * control/status, its choices drawn from seed; never returns: it ends with
 * SIGKILL sent to itself. Run it in a child process. */
void noisy_hostile_life(const char *control, const char *status, uint64_t seed, unsigned life_ms,
			struct noisy_counters *nc) __attribute__((noreturn));

/* Forks hostile lives (each 20..400 ms, seeds derived from seed) one after
 * the other until deadline_ns (now_ns() clock; 0: until killed). Returns
 * the number of lives; nc may be NULL. */
uint64_t noisy_hostile_loop(const char *control, const char *status, uint64_t seed, uint64_t deadline_ns,
			    struct noisy_counters *nc);

/* The tensor storm in this process: attaches session (swap for ntensors
 * pages), then registers ntensors swappable tensors of 4 KiB, unregisters
 * them, and again until deadline_ns (0: until killed). Returns the
 * registrations done, or a negative errno when the session never came up. */
int64_t noisy_storm(const char *control, const char *session, unsigned ntensors, uint64_t deadline_ns,
		    struct noisy_counters *nc);

/* The ring hammer in this process: attaches session, registers one
 * resident tensor and submits NOP, PIN and UNPIN in batches, reaping each,
 * until deadline_ns (0: until killed). Returns the completions reaped, or
 * a negative errno. */
int64_t noisy_hammer(const char *control, const char *session, uint64_t deadline_ns, struct noisy_counters *nc);

#endif
