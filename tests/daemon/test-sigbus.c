/* SPDX-License-Identifier: MIT */
/*
 * SIGBUS from client-shared memory (issue 9, item 1), through a real
 * spillwayd on hugetlb regions. A hostile client punches out its whole
 * region memfd; the freed hugepages go to another process; then it
 * registers a resident tensor, which makes the daemon zero-fill slots of
 * that region with the CPU. A plain store there is SIGBUS and, today,
 * takes the daemon and every session with it. The daemon must end the
 * hostile session alone and go on serving the bystander.
 *
 * Until daemon/pager.c's CPU accesses go through safemem (see the report
 * for the call sites), this test is expected to fail (should_fail in
 * meson.build). Skipped where hugepages cannot be reserved. nr_hugepages
 * is restored afterwards, on failure too.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)
#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static long hp_saved = -1;
static void (*prev_abort)(int);

static long read_long(const char *path, const char *key)
{
	char line[128];
	long v = -1;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!key) {
			sscanf(line, "%ld", &v);
			break;
		}
		if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':')
			sscanf(line + strlen(key) + 1, "%ld", &v);
	}
	fclose(f);
	return v;
}

static int set_hugepages(long n)
{
	FILE *f = fopen(NR_HUGEPAGES, "we");

	if (!f)
		return -errno;
	fprintf(f, "%ld\n", n);
	return fclose(f) == 0 ? 0 : -errno;
}

static void restore(void)
{
	if (hp_saved >= 0)
		set_hugepages(hp_saved);
	hp_saved = -1;
}

static void on_abort(int sig)
{
	restore();
	if (prev_abort && prev_abort != SIG_DFL && prev_abort != SIG_IGN)
		prev_abort(sig);
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(void)
{
	static const char cfg[] =
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		" \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false, \"hugepages\": \"always\"},"
		" \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 16}, \"log\": {\"level\": \"info\"}}";
	long hp = read_long("/proc/meminfo", "Hugepagesize") * 1024;
	struct spw_test_daemon d;
	struct raw_session by, bad;
	uint8_t *steal = NULL;
	long free_pages;
	int fd = -1, t;
	cJSON *r, *st;
	char req[160];

	if (hp <= 0 || 4 * MiB % (unsigned long)hp || read_long("/proc/meminfo", "HugePages_Free") != 0)
		SKIP("needs 2 MiB hugetlb pages and none free beforehand");
	hp_saved = read_long(NR_HUGEPAGES, NULL);
	if (hp_saved < 0 || set_hugepages(hp_saved + 2 * (4 * MiB / hp)) < 0 ||
	    read_long("/proc/meminfo", "HugePages_Free") != 2 * (4 * MiB / hp)) {
		restore();
		SKIP("cannot reserve hugepages through %s", NR_HUGEPAGES);
	}
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	raw_guard(&d);
	prev_abort = signal(SIGABRT, on_abort);

	/* Another process on the host may take the reserved pages first. */
	if (raw_attach(d.control, "bystander/0", 4 * MiB, 1 * MiB, &by) == -ENOMEM ||
	    raw_attach(d.control, "hostile/0", 4 * MiB, 1 * MiB, &bad) == -ENOMEM) {
		spw_test_daemon_kill(&d);
		spw_test_daemon_cleanup(&d);
		restore();
		SKIP("another process took the reserved hugepages");
	}
	st = raw_status(d.status);
	ASSERT_EQ(cJSON_IsTrue(cJSON_GetObjectItem(raw_status_session(st, "hostile/0"), "hugepages")), 1);
	cJSON_Delete(st);

	/* The hostile client frees its region's pages; someone else takes them. */
	ASSERT_EQ(fallocate(bad.fds[SPW_ATTACH_FD_REGION], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			    (off_t)bad.region_bytes), 0);
	/* The punched pages stay allocated while the daemon's io_uring has
	 * them pinned as fixed buffers; whatever did go back to the pool, a
	 * bystander process takes, so no hugepage is left to refault. */
	free_pages = read_long("/proc/meminfo", "HugePages_Free");
	ASSERT_GE(free_pages, 0);
	if (free_pages) {
		fd = memfd_create("sigbus-thief", MFD_CLOEXEC | MFD_HUGETLB);
		ASSERT_GE(fd, 0);
		ASSERT_EQ(ftruncate(fd, free_pages * hp), 0);
		steal = mmap(NULL, (size_t)(free_pages * hp), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (steal == MAP_FAILED)
			steal = NULL; /* someone else was quicker: just as good */
		else
			memset(steal, 1, (size_t)(free_pages * hp));
	}
	ASSERT_EQ(read_long("/proc/meminfo", "HugePages_Free"), 0);

	/* Registering a resident tensor zero-fills its slots in the daemon. */
	snprintf(req, sizeof(req), "{\"type\":\"register\",\"name\":\"w\",\"bytes\":%u,\"kind\":\"resident\"}", 2 * MiB);
	r = raw_request(bad.ctl, req);
	if (r) {
		/* Refused with a message, or the session was ended. */
		ASSERT_NE(raw_reply_errno(r), 0);
		fprintf(stderr, "hostile register: %s\n", raw_reply_message(r));
		cJSON_Delete(r);
	}
	/* The daemon is alive and the bystander unharmed. */
	st = raw_status(d.status);
	ASSERT_TRUE(st != NULL);
	ASSERT_EQ(raw_num(st, "pid"), d.pid);
	cJSON_Delete(st);
	t = raw_register(&by, "w", 2 * MiB, NULL);
	ASSERT_GE(t, 0);
	ASSERT_GE(raw_op(&by, SPW_OP_PIN, 0, (uint32_t)t, 1), 0);
	ASSERT_EQ(raw_op(&by, SPW_OP_UNPIN, 0, (uint32_t)t, 1), 0);

	raw_session_close(&bad);
	raw_session_close(&by);
	if (steal)
		munmap(steal, (size_t)(free_pages * hp));
	if (fd >= 0)
		close(fd);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	restore();
	return 0;
}
