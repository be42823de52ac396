/* SPDX-License-Identifier: MIT */
/*
 * A session's swap files: created preallocated in every dir, named safely,
 * striped, refused with a message a person can act on (which dir, free
 * bytes, bytes needed, what to change), removed at the end.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "../../daemon/swap.h"
#include "tier-fixture.h"

#define PAGE (1u << 20)

static void test_create_stripe_remove(void)
{
	struct fx f;
	struct swap *s = NULL;
	char err[512] = "";
	struct stat st;
	uint64_t off;

	fx_setup(&f, NULL, 2, PAGE, 1, 8);
	/* 5 pages over 2 dirs: 3 per file, so every page has a place. */
	ASSERT_OK(swap_new(f.sd, 2, "../job/0 x", PAGE, 5ull * PAGE, f.u, err, sizeof(err), &s));
	ASSERT_UEQ(swap_nfiles(s), 2);
	ASSERT_UEQ(swap_npages(s), 6);
	for (unsigned i = 0; i < 2; i++) {
		const char *path = swap_file_path(s, i);
		const char *base = strrchr(path, '/') + 1;

		/* In its dir, never outside, with the odd characters made safe. */
		ASSERT_TRUE(!strncmp(path, f.dir[i], strlen(f.dir[i])) && path[strlen(f.dir[i])] == '/');
		ASSERT_TRUE(!strncmp(base, "spillway-_._job_0_x-", 20));
		ASSERT_EQ(strlen(base), strlen("spillway-_._job_0_x-") + 8 + strlen(".swap"));
		ASSERT_EQ(stat(path, &st), 0);
		ASSERT_EQ(st.st_size, 3 * PAGE);
		ASSERT_GE(st.st_blocks * 512, 3 * PAGE); /* preallocated, not sparse */
		ASSERT_EQ(swap_dir_used(f.dir[i]), st.st_blocks * 512);
		ASSERT_GE(swap_file_index(s, i), 0);
	}
	/* Consecutive pages alternate between drives. */
	for (uint64_t d = 0; d < 6; d++) {
		ASSERT_EQ(swap_locate(s, d, &off), swap_file_index(s, (unsigned)(d % 2)));
		ASSERT_UEQ(off, (d / 2) * PAGE);
		ASSERT_STREQ(swap_page_path(s, d), swap_file_path(s, (unsigned)(d % 2)));
	}
	s = swap_free(s);
	ASSERT_TRUE(s == NULL);
	fx_teardown(&f); /* asserts the dirs are empty */
}

static void test_refusals(void)
{
	struct fx f;
	struct swap *s = NULL;
	struct swap_dir d[2];
	char err[512] = "";
	struct statfs sfs;

	fx_setup(&f, NULL, 2, PAGE, 1, 8);

	/* max_bytes: the message names the dir, the cap, and what to change. */
	d[0] = (struct swap_dir){ .path = f.dir[0], .max_bytes = 0 };
	d[1] = (struct swap_dir){ .path = f.dir[1], .max_bytes = 4ull * PAGE };
	ASSERT_EQ(swap_new(d, 2, "job/1", PAGE, 16ull * PAGE, f.u, err, sizeof(err), &s), -ENOSPC);
	ASSERT_TRUE(s == NULL);
	ASSERT_CONTAINS(err, f.dir[1]);
	ASSERT_CONTAINS(err, "max_bytes is 4.0 MiB");
	ASSERT_CONTAINS(err, "needs 8.0 MiB");
	ASSERT_CONTAINS(err, "raise max_bytes");
	ASSERT_UEQ(fx_files_in(f.dir[0]), 0); /* checked before anything was created */

	/* Other sessions' files count against max_bytes. */
	d[1].max_bytes = 12ull * PAGE;
	ASSERT_OK(swap_new(d, 2, "job/a", PAGE, 16ull * PAGE, f.u, err, sizeof(err), &s));
	{
		struct swap *s2 = NULL;

		ASSERT_EQ(swap_new(d, 2, "job/b", PAGE, 16ull * PAGE, f.u, err, sizeof(err), &s2), -ENOSPC);
		ASSERT_CONTAINS(err, "already take 8.0 MiB");
	}
	s = swap_free(s);

	/* More than the drive has: free bytes and bytes needed, named. */
	ASSERT_EQ(swap_new(f.sd, 2, "job/2", PAGE, 1ull << 62, f.u, err, sizeof(err), &s), -ENOSPC);
	ASSERT_CONTAINS(err, f.dir[0]);
	ASSERT_CONTAINS(err, " free, session 'job/2' needs ");
	ASSERT_CONTAINS(err, "bytes)");

	/* A dir that does not exist. */
	d[0] = (struct swap_dir){ .path = "/var/tmp/spw-no-such-dir/x", .max_bytes = 0 };
	ASSERT_EQ(swap_new(d, 1, "job/3", PAGE, PAGE, f.u, err, sizeof(err), &s), -ENOENT);
	ASSERT_CONTAINS(err, "/var/tmp/spw-no-such-dir/x");

	/* A filesystem without O_DIRECT (tmpfs before Linux 6.6): a clear
	 * refusal naming the dir. Newer tmpfs accepts O_DIRECT; then the
	 * files are made and removed like anywhere else. */
	if (statfs("/dev/shm", &sfs) == 0 && access("/dev/shm", W_OK) == 0) {
		char shm[64] = "/dev/shm/spw-tier-XXXXXX";
		int r;

		ASSERT_TRUE(mkdtemp(shm) != NULL);
		d[0] = (struct swap_dir){ .path = shm, .max_bytes = 0 };
		r = swap_new(d, 1, "job/4", PAGE, PAGE, f.u, err, sizeof(err), &s);
		if (r == -EINVAL) {
			ASSERT_CONTAINS(err, shm);
			ASSERT_CONTAINS(err, "O_DIRECT");
		} else {
			ASSERT_OK(r);
			s = swap_free(s);
			fprintf(stderr, "note: %s accepts O_DIRECT on this kernel\n", shm);
		}
		ASSERT_EQ(rmdir(shm), 0);
	}
	fx_teardown(&f);
}

int main(void)
{
	test_create_stripe_remove();
	test_refusals();
	return 0;
}
