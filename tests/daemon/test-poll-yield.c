/* SPDX-License-Identifier: MIT */
/*
 * Polite polling (daemon/dataplane.c): a daemon polling a session's ring
 * (within ring.poll_us of its last entry) that finds nothing there yields
 * its core, so a trainer thread on the same core keeps it.
 *
 * The daemon and a spinning process (a trainer's compute thread) share one
 * CPU; a client on another CPU keeps the session inside a long poll window
 * with a NOP every millisecond for 2 s. The daemon's CPU time over those
 * seconds must stay under a quarter of the spinner's: it does a few
 * microseconds of work a millisecond. A daemon that spins through its window
 * takes about half the core (the scheduler's fair share), which fails.
 * Needs two CPUs (skipped on one).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

static const char config[] =
	"{\"socket\": {\"dir\": \"@DIR@\"}, \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false},"
	" \"ring\": {\"poll_us\": 1000000}, \"log\": {\"level\": \"error\"}}";

static void pin(pid_t pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	ASSERT_EQ(sched_setaffinity(pid, sizeof(set), &set), 0);
}

int main(void)
{
	struct spw_test_daemon d;
	struct raw_session s;
	cpu_set_t mine;
	int cpus[2], n = 0, id;
	double d0, d1, p0, p1;
	pid_t spinner;
	double t0;

	ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &mine))
			cpus[n++] = c;
	if (n < 2)
		SKIP("one CPU: the daemon and the client would share it");
	ASSERT_OK(spw_test_daemon_start(&d, config));
	ASSERT_OK(raw_attach(d.control, "yield/0", 4 * MiB, 64 * KiB, &s));
	id = raw_register(&s, "w", 64 * KiB, NULL);
	ASSERT_GE(id, 0);
	pin(0, cpus[1]);
	pin(d.pid, cpus[0]);
	spinner = fork();
	ASSERT_GE(spinner, 0);
	if (spinner == 0) {
		pin(0, cpus[0]);
		for (;;)
			__asm__ volatile("" ::: "memory");
	}
	/* The session enters its window with the first NOP and never leaves it. */
	ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
	usleep(200000);
	d0 = raw_cpu_seconds(d.pid);
	p0 = raw_cpu_seconds(spinner);
	t0 = test_now_ms();
	while (test_now_ms() - t0 < 2000) {
		ASSERT_EQ(raw_op(&s, SPW_OP_NOP, 0, 0, 0), 0);
		usleep(1000);
	}
	d1 = raw_cpu_seconds(d.pid);
	p1 = raw_cpu_seconds(spinner);
	kill(spinner, SIGKILL);
	waitpid(spinner, NULL, 0);
	fprintf(stderr, "over 2 s on one CPU: daemon %.2f s of CPU, spinner %.2f s\n", d1 - d0, p1 - p0);
	ASSERT_TRUE(p1 - p0 > 0.5); /* the spinner ran */
	ASSERT_TRUE(4 * (d1 - d0) < p1 - p0);
	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
