/* SPDX-License-Identifier: MIT */
/*
 * safemem: the daemon's CPU access to client-shared memory returns -EFAULT
 * where a plain load or store would die of SIGBUS (issue 9, item 1).
 *
 * Ordinary pages, always: a memfd mapping past the file's end (the SIGBUS
 * a shrink would cause; the daemon's memfds are sealed against it, so this
 * stands in for any unfaultable page), and a punched hole, which shmem
 * refills with zeros. Hugetlb pages where the test can reserve some: a
 * hole punched in a hugetlb memfd whose freed page someone else took is
 * exactly what a hostile client does, and the CPU touch is SIGBUS.
 * nr_hugepages is restored afterwards, on failure too.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "util/crc32c.h"
#include "safemem.h"
#include "test.h"

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static long hp_saved = -1;

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "we");
	int r;

	if (!f)
		return -errno;
	r = fprintf(f, "%ld\n", v) > 0 ? 0 : -EIO;
	if (fclose(f) != 0)
		r = -errno;
	return r;
}

static void restore_hugepages(void)
{
	if (hp_saved >= 0)
		write_long(NR_HUGEPAGES, hp_saved);
	hp_saved = -1;
}

static void on_abort(int sig)
{
	restore_hugepages();
	signal(sig, SIG_DFL);
	raise(sig);
}

static uint64_t meminfo(const char *key)
{
	char line[128];
	unsigned long long v = 0;
	size_t n = strlen(key);
	FILE *f = fopen("/proc/meminfo", "re");

	ASSERT_TRUE(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			sscanf(line + n + 1, "%llu", &v);
	fclose(f);
	return v;
}

/* Page 0 readable, page 1 past the end of the file: SIGBUS on touch. */
static void test_past_eof(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	int fd = memfd_create("safemem-eof", MFD_CLOEXEC);
	uint8_t *m, out[64];
	uint32_t crc = 0;

	ASSERT_GE(fd, 0);
	ASSERT_EQ(ftruncate(fd, 2 * pg), 0);
	m = mmap(NULL, (size_t)(2 * pg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_TRUE(m != MAP_FAILED);
	memset(m, 0x5a, (size_t)(2 * pg));
	ASSERT_EQ(ftruncate(fd, pg), 0);

	/* The good page works through every accessor. */
	ASSERT_EQ(safemem_copy(out, m, sizeof(out)), 0);
	ASSERT_EQ(out[63], 0x5a);
	ASSERT_EQ(safemem_crc32c(&crc, m, (size_t)pg), 0);
	ASSERT_UEQ(crc, crc32c(0, m, (size_t)pg));
	ASSERT_EQ(safemem_probe(m, (size_t)pg), 0);

	/* The bad one fails each time, the process goes on. */
	for (int i = 0; i < 3; i++) {
		crc = 7;
		ASSERT_EQ(safemem_copy(out, m + pg, sizeof(out)), -EFAULT);
		ASSERT_EQ(safemem_copy(m + pg, out, sizeof(out)), -EFAULT);
		ASSERT_EQ(safemem_copy(out, m + pg - 8, 16), -EFAULT); /* straddling */
		ASSERT_EQ(safemem_zero(m + pg, (size_t)pg), -EFAULT);
		ASSERT_EQ(safemem_crc32c(&crc, m, (size_t)(2 * pg)), -EFAULT);
		ASSERT_UEQ(crc, 7); /* untouched on failure */
		ASSERT_EQ(safemem_probe(m, (size_t)(2 * pg)), -EFAULT);
	}
	ASSERT_EQ(safemem_copy(out, m, sizeof(out)), 0);

	/* A SIGBUS outside any guarded access is not swallowed: the process
	 * dies as it would without safemem (under ASan, ASan's report). */
	{
		pid_t pid = fork();
		int st;

		ASSERT_GE(pid, 0);
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

			signal(SIGABRT, SIG_DFL);
			ASSERT_EQ(safemem_copy(out, m, 1), 0); /* handler installed */
			dup2(null, 2); /* the expected death's report is noise */
			out[0] = ((volatile uint8_t *)m)[pg];
			_exit(0);
		}
		ASSERT_EQ(waitpid(pid, &st, 0), pid);
		if (!WIFSIGNALED(st) && !(WIFEXITED(st) && WEXITSTATUS(st) != 0))
			TEST_FAIL("an unguarded SIGBUS did not end the process (status 0x%x)", st);
	}
	munmap(m, (size_t)(2 * pg));
	close(fd);
}

/* Ordinary shmem refills a hole with zeros: no fault, and punching is the
 * zero-fill that needs no store. */
static void test_punch_shmem(void)
{
	size_t bytes = 1 << 20;
	int fd = memfd_create("safemem-punch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *m, out[4096], zero[4096] = { 0 };
	struct stat st;

	ASSERT_GE(fd, 0);
	ASSERT_EQ(ftruncate(fd, (off_t)bytes), 0);
	ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), 0);
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_TRUE(m != MAP_FAILED);
	memset(m, 0xa5, bytes);
	ASSERT_EQ(safemem_punch(fd, 65536, 65536), 0);
	ASSERT_EQ(safemem_copy(out, m + 65536, sizeof(out)), 0);
	ASSERT_EQ(memcmp(out, zero, sizeof(out)), 0);
	ASSERT_EQ(m[65535], 0xa5);
	ASSERT_EQ(m[131072], 0xa5);
	/* len 0: to the end. The pages are gone, not just zeroed. */
	ASSERT_EQ(safemem_punch(fd, 0, 0), 0);
	ASSERT_EQ(fstat(fd, &st), 0);
	ASSERT_EQ(st.st_blocks, 0);
	ASSERT_EQ(st.st_size, (off_t)bytes);
	ASSERT_EQ(safemem_punch(-1, 0, 4096), -EBADF);
	munmap(m, bytes);
	close(fd);
}

/* A hugetlb hole whose page went to someone else: SIGBUS on touch. */
static int test_hugetlb(void)
{
	uint64_t hp = meminfo("Hugepagesize") * 1024;
	int a, b;
	uint8_t *ma, *mb, out[64];
	uint32_t crc = 0;
	long want;

	/* Free hugepages of others would refill the hole: no SIGBUS to see. */
	if (!hp || meminfo("HugePages_Free") != 0)
		return 0;
	hp_saved = read_long(NR_HUGEPAGES);
	if (hp_saved < 0)
		return 0;
	want = hp_saved + 2;
	if (write_long(NR_HUGEPAGES, want) < 0 || meminfo("HugePages_Free") < 2) {
		restore_hugepages();
		return 0;
	}
	a = memfd_create("safemem-huge-a", MFD_CLOEXEC | MFD_HUGETLB);
	ASSERT_GE(a, 0);
	ASSERT_EQ(ftruncate(a, (off_t)(2 * hp)), 0);
	ma = mmap(NULL, 2 * hp, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
	ASSERT_TRUE(ma != MAP_FAILED);
	memset(ma, 0x33, 2 * hp);
	/* The client punches page 1; a bystander takes the freed page. */
	ASSERT_EQ(safemem_punch(a, hp, hp), 0);
	b = memfd_create("safemem-huge-b", MFD_CLOEXEC | MFD_HUGETLB);
	ASSERT_GE(b, 0);
	ASSERT_EQ(ftruncate(b, (off_t)hp), 0);
	mb = mmap(NULL, hp, PROT_READ | PROT_WRITE, MAP_SHARED, b, 0);
	if (mb != MAP_FAILED)
		memset(mb, 0x44, hp);
	/* Another process on the host may have taken it (just as good) or
	 * reserved more meanwhile (then the hole refaults: nothing to see). */
	if (meminfo("HugePages_Free") != 0) {
		if (mb != MAP_FAILED)
			munmap(mb, hp);
		close(b);
		munmap(ma, 2 * hp);
		close(a);
		restore_hugepages();
		return 0;
	}

	ASSERT_EQ(safemem_copy(out, ma + hp, sizeof(out)), -EFAULT);
	ASSERT_EQ(safemem_zero(ma + hp, 4096), -EFAULT);
	ASSERT_EQ(safemem_crc32c(&crc, ma + hp, hp), -EFAULT);
	ASSERT_EQ(safemem_probe(ma, 2 * hp), -EFAULT);
	ASSERT_EQ(safemem_copy(out, ma, sizeof(out)), 0);
	ASSERT_EQ(out[0], 0x33);

	if (mb != MAP_FAILED)
		munmap(mb, hp);
	close(b);
	munmap(ma, 2 * hp);
	close(a);
	restore_hugepages();
	return 1;
}

int main(void)
{
	int huge;

	signal(SIGABRT, on_abort);
	ASSERT_OK(safemem_init());
	test_past_eof();
	test_punch_shmem();
	huge = test_hugetlb();
	fprintf(stderr, "hugetlb: %s\n", huge ? "tested (a punched page under SIGBUS came back as -EFAULT)"
					   : "not tested (cannot reserve hugepages here)");
	return 0;
}
