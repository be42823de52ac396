/* SPDX-License-Identifier: MIT */
/*
 * test-checkpoint-reflink: a checkpoint on a filesystem that shares
 * extents (XFS here, made on a loop device for the test) takes the swap
 * pages by reflink (FICLONERANGE), the path a development machine on ext4
 * never runs. A persistent session's swappable tensor, mostly on disk,
 * written and committed at step 1, is checkpointed: some of its bytes are
 * reflinked (copied_bytes), every one is accounted for, and the files
 * hold step 1's bytes. Then step 2 rewrites every page, whose write-backs
 * land in the very swap extents the checkpoint shares: the checkpoint's
 * files must still hold step 1's bytes (the filesystem copies on write,
 * the daemon must not write through a shared extent in place), and a
 * restore of it accepts every page's CRC and pins step 1's bytes back,
 * while a second checkpoint holds step 2's. Then test-checkpoint-cow runs
 * on that filesystem too (side buffers none and 2 MiB): its copies, taken
 * while steps rewrite every page, reflink runs of swap pages the loop
 * keeps claiming, saving and moving under them.
 *
 * Needs root, mkfs.xfs (xfsprogs: scripts/test installs it) and a loop
 * device; without them it says which and skips. The mount lives in the
 * parent; the test runs in a child, so that a failing assertion (abort)
 * still leaves the parent to unmount and remove the image.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "client-private.h"
#include "harness.h"
#include "child-io.h"
#include "test.h"
#include "test-client.h"

#define MiB (1024u * 1024u)
#define PAGE MiB
#define REGION (16ull * MiB)
#define S_PAGES 48u /* three times the region: most pages on disk */

static struct spw_test_daemon d;

static uint8_t pattern(uint32_t page, uint32_t i, uint8_t version)
{
	return (uint8_t)(page * 31u + i * 7u + (i >> 12) + version * 101u);
}

/* Every page of version v, as step `step`. */
static void write_step(spw_client *c, uint32_t id, uint64_t step, uint8_t v)
{
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_OPEN, step));
	for (uint32_t k = 0; k < S_PAGES; k++) {
		uint8_t *p;

		ASSERT_OK(spw_pin(c, id, k, (void **)&p));
		for (uint32_t i = 0; i < PAGE; i++)
			p[i] = pattern(k, i, v);
		ASSERT_OK(spw_unpin(c, id, k, SPW_DIRTY));
	}
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_COMMIT, step));
}

static void check_file(const char *dir, uint8_t v)
{
	char path[512];
	uint8_t *b;
	size_t n;

	snprintf(path, sizeof(path), "%s/t00000.bin", dir);
	b = file_load(path, &n);
	ASSERT_UEQ(n, (uint64_t)S_PAGES * PAGE);
	for (size_t k = 0; k < n; k++)
		if (b[k] != pattern((uint32_t)(k / PAGE), (uint32_t)(k % PAGE), v))
			TEST_FAIL("%s byte %zu (page %zu): %u, expected version %u's %u", path, k, k / PAGE, b[k], v,
				  pattern((uint32_t)(k / PAGE), (uint32_t)(k % PAGE), v));
	free(b);
}

static void body(void)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "rl/a", .region_bytes = REGION,
				     .page_size = PAGE, .persistent = true, .lease_s = 60 };
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char ck1[512], ck2[512];
	spw_client *c, *b;
	uint32_t id;

	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"256MiB\"}], \"session_bytes\": \"128MiB\"},"
		" \"log\": {\"level\": \"info\"}}"));
	ASSERT_TRUE(spw_test_dir_reflinks(d.dir));
	snprintf(ck1, sizeof(ck1), "%s/ck1", d.dir);
	snprintf(ck2, sizeof(ck2), "%s/ck2", d.dir);
	c = test_client(d.control);
	b = test_client(d.control);
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "s", (uint64_t)S_PAGES * PAGE, SPW_TENSOR_SWAPPABLE, &id, NULL));
	write_step(c, id, 1, 1);

	ASSERT_OK(spw_client_checkpoint(b, "rl/a", ck1, &res));
	printf("# %llu bytes: %llu reflinked, %llu direct, %llu buffered, in %.3f s\n", (unsigned long long)res.bytes,
	       (unsigned long long)res.copied_bytes, (unsigned long long)res.direct_bytes,
	       (unsigned long long)res.buffered_bytes, res.seconds);
	ASSERT_UEQ(res.bytes, (uint64_t)S_PAGES * PAGE);
	ASSERT_UEQ(res.copied_bytes + res.direct_bytes + res.buffered_bytes, res.bytes);
	/* The pages on disk (at least those the region could not hold). */
	ASSERT_GE(res.copied_bytes, (uint64_t)(S_PAGES - REGION / PAGE) * PAGE);
	check_file(ck1, 1);

	/* Step 2 rewrites every page into the extents ck1 shares. */
	write_step(c, id, 2, 2);
	check_file(ck1, 1);
	ASSERT_OK(spw_client_checkpoint(b, "rl/a", ck2, &res));
	ASSERT_UEQ(res.committed_step, 2);
	check_file(ck2, 2);
	check_file(ck1, 1);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);

	/* ck1 restored: every CRC checks, step 1's bytes come back. */
	ASSERT_OK(spw_client_restore(b, "rl/b", ck1, 60, &res));
	ASSERT_UEQ(res.committed_step, 1);
	c = test_client(d.control);
	a.session = "rl/b";
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_adopt(c, "s", (uint64_t)S_PAGES * PAGE, SPW_TENSOR_SWAPPABLE, &id, NULL));
	for (uint32_t k = 0; k < S_PAGES; k++) {
		uint8_t *p;

		ASSERT_GE(spw_pin(c, id, k, (void **)&p), 0);
		for (uint32_t i = 0; i < PAGE; i++)
			if (p[i] != pattern(k, i, 1))
				TEST_FAIL("restored page %u byte %u: %u, expected %u", k, i, p[i], pattern(k, i, 1));
		ASSERT_OK(spw_unpin(c, id, k, SPW_CLEAN));
	}
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	spw_client_free(b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_OK(dir_remove(ck1));
	ASSERT_OK(dir_remove(ck2));
}

/* Runs cmd (a shell line, its output to /dev/null): true when it exits 0. */
static bool sh(const char *cmd)
{
	char line[1200];

	snprintf(line, sizeof(line), "%s >/dev/null 2>&1", cmd);
	return system(line) == 0;
}

/* test-checkpoint-cow, beside this program, with budget b and the
 * daemon's directory on the XFS: its exit status. */
static int cow_test(const char *self, const char *mnt, const char *b)
{
	char path[600];
	const char *slash = strrchr(self, '/');
	pid_t pid;
	int st;

	snprintf(path, sizeof(path), "%.*s/test-checkpoint-cow", slash ? (int)(slash - self) : 1,
		 slash ? self : ".");
	fflush(stdout);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		setenv("TMPDIR", mnt, 1);
		execl(path, path, b, (char *)NULL);
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		_exit(127);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	printf("# test-checkpoint-cow %s on XFS: status 0x%x\n", b, st);
	/* It skips where it cannot slow its copies (no fault injection). */
	return WIFEXITED(st) && WEXITSTATUS(st) == TEST_SKIP_CODE ? 0 : st;
}

int main(int argc, char **argv)
{
	char img[128], mnt[128], cmd[600];
	pid_t pid;
	int st, cow0 = 0, cow2 = 0;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	if (geteuid() != 0)
		SKIP("making an XFS on a loop device needs root");
	if (!sh("command -v mkfs.xfs"))
		SKIP("mkfs.xfs not found (apt-get install xfsprogs)");
	snprintf(img, sizeof(img), "/var/tmp/spw-xfs-%d.img", (int)getpid());
	snprintf(mnt, sizeof(mnt), "/var/tmp/spw-xfs-%d", (int)getpid());
	ASSERT_OK(mkdir(mnt, 0700));
	snprintf(cmd, sizeof(cmd), "truncate -s 512M %s && mkfs.xfs -q -f -m reflink=1 %s", img, img);
	ASSERT_TRUE(sh(cmd));
	snprintf(cmd, sizeof(cmd), "mount -o loop %s %s", img, mnt);
	if (!sh(cmd)) {
		unlink(img);
		rmdir(mnt);
		SKIP("cannot mount an XFS image on a loop device here (no loop devices, or no CAP_SYS_ADMIN)");
	}
	fflush(stdout);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		/* The daemon's directory (swap and checkpoints) on the XFS. */
		setenv("TMPDIR", mnt, 1);
		body();
		exit(0);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	if (st == 0 && argc > 0) {
		cow0 = cow_test(argv[0], mnt, "0");
		cow2 = cow_test(argv[0], mnt, "2MiB");
	}
	snprintf(cmd, sizeof(cmd), "umount %s", mnt);
	for (int i = 0; i < 50 && !sh(cmd); i++)
		usleep(100 * 1000); /* the daemon's files closing */
	snprintf(cmd, sizeof(cmd), "mountpoint -q %s && umount -l %s", mnt, mnt);
	sh(cmd); /* a daemon a failure left behind: detached, gone with it */
	unlink(img);
	rmdir(mnt);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		TEST_FAIL("the test on XFS failed (status 0x%x); its output is above", st);
	if (cow0 || cow2)
		TEST_FAIL("test-checkpoint-cow on XFS failed (status 0x%x, 0x%x); its output is above", cow0, cow2);
	printf("ok\n");
	return 0;
}
