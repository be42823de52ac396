/* SPDX-License-Identifier: MIT */
/*
 * daemon/region.c's progress: a region is locked (or, unlocked, prefaulted)
 * in steps of REGION_READY_STEP, ready_bytes and the progress hook say how
 * far it is after each step and end at the region's size; when mlock fails
 * part way (RLIMIT_MEMLOCK, without CAP_IPC_LOCK, in a child) nothing stays
 * locked and the progress starts over for the prefault, or, with
 * require_locked, the attach fails saying how to raise the limit.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "daemon-config.h"
#include "region.h"
#include "test.h"

#define MiB (1024ull * 1024)
#define BYTES (200 * MiB) /* three whole steps and a partial one */

struct seen {
	uint64_t v[128];
	unsigned n;
};

static void record(void *arg, uint64_t ready, uint64_t total)
{
	struct seen *s = arg;

	ASSERT_UEQ(total, BYTES);
	ASSERT_LT(s->n, 128);
	s->v[s->n++] = ready;
}

/* Kibibytes locked by this process (VmLck in /proc/self/status). */
static long vm_locked_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "re");

	ASSERT_TRUE(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static struct region_opts opts(struct seen *s, bool require_locked)
{
	return (struct region_opts){ .name = "test/region", .bytes = BYTES, .page_size = 4 * MiB,
				     .hugepages = CONFIG_HUGEPAGES_NEVER, .numa_node = -1,
				     .require_locked = require_locked, .progress = record, .progress_arg = s };
}

/* 0, then one step at a time up to the end. */
static unsigned expect_steps(const struct seen *s, unsigned from, uint64_t step)
{
	uint64_t want = 0;
	unsigned i = from;

	ASSERT_UEQ(s->v[i++], 0);
	while (want < BYTES) {
		want = want + step < BYTES ? want + step : BYTES;
		ASSERT_TRUE(i < s->n);
		ASSERT_UEQ(s->v[i++], want);
	}
	return i;
}

static void test_steps(void)
{
	struct seen s = { 0 };
	struct region_opts o = opts(&s, false);
	struct region *r = NULL;
	char err[512] = "";

	ASSERT_OK(region_create(&o, &r, err, sizeof(err)));
	/* 0, 64, 128, 192, 200 MiB: the last step is the partial one. */
	ASSERT_EQ(expect_steps(&s, 0, REGION_READY_STEP), s.n);
	ASSERT_EQ(s.n, 5);
	ASSERT_UEQ(region_ready_bytes(&o), BYTES);
	if (r->locked)
		ASSERT_GE(vm_locked_kib(), (long)(BYTES / 1024));
	region_free(r);
	ASSERT_EQ(vm_locked_kib(), 0);
}

/* Drops CAP_IPC_LOCK from the effective set, so RLIMIT_MEMLOCK applies. */
static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	ASSERT_EQ(syscall(SYS_capget, &h, d), 0);
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	ASSERT_EQ(syscall(SYS_capset, &h, d), 0);
}

/* In a child, 4 MiB steps under a limit of at most 10 MiB: some steps
 * lock (k of them), the next fails. */
#define STEP (4 * MiB)
static void test_lock_fails_part_way(bool require_locked)
{
	struct rlimit rl;
	uint64_t limit;
	unsigned k;
	pid_t pid;
	int st;

	ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	limit = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 10 * MiB ? 10 * MiB : rl.rlim_max;
	k = (unsigned)(limit / STEP);
	if (k == 0) {
		fprintf(stderr, "RLIMIT_MEMLOCK's hard limit is under 4 MiB: part-way failure not tried\n");
		return;
	}
	rl.rlim_cur = rl.rlim_max = limit;
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		struct seen s = { 0 };
		struct region_opts o = opts(&s, require_locked);
		struct region *r = NULL;
		char err[512] = "";
		int e;

		o.step = STEP;
		drop_ipc_lock();
		ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
		e = region_create(&o, &r, err, sizeof(err));
		/* k steps locked, the next failed: back to 0 with nothing
		 * locked. */
		ASSERT_TRUE(s.n >= k + 2);
		for (unsigned i = 0; i <= k; i++)
			ASSERT_UEQ(s.v[i], i * STEP);
		ASSERT_UEQ(s.v[k + 1], 0);
		ASSERT_EQ(vm_locked_kib(), 0);
		if (require_locked) {
			ASSERT_TRUE(e < 0);
			ASSERT_EQ(s.n, k + 2);
			ASSERT_UEQ(region_ready_bytes(&o), 0);
			ASSERT_CONTAINS(err, "LimitMEMLOCK");
		} else {
			ASSERT_OK(e);
			ASSERT_TRUE(!r->locked);
			/* the prefault, step by step, after the failed lock */
			ASSERT_EQ(expect_steps(&s, k + 1, STEP), s.n);
			ASSERT_UEQ(region_ready_bytes(&o), BYTES);
			region_free(r);
		}
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
}

int main(void)
{
	test_steps();
	test_lock_fails_part_way(true);
	test_lock_fails_part_way(false);
	fprintf(stderr, "region progress: ok\n");
	return 0;
}
