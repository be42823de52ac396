/* SPDX-License-Identifier: MIT */
/*
 * Backing files (pager_backing_add, pager_page_backed), over real swap
 * files: the way a session restored from a stopping daemon's save reads
 * the pages left in the save's linked swap files. A backed page is read
 * from its backing file, checked against its CRC-32C, through evictions;
 * its first write-back goes to its home and the backing file is never
 * written; once no page is read from it the pager lets it go; an undo copy
 * taking over a backed page's disk copy takes the backing along; a backed
 * page whose bytes changed on disk is refused (-EBADMSG), never handed
 * out.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tier-fixture.h"
#include "util/crc32c.h"

#define PAGE (64u * 1024u)
#define SLOTS 4u
#define NP 8u
#define DEPTH 8u

/* A backing file of NP pages, page i holding SEED(7, i, 0), at offsets in
 * reverse order (page i at NP - 1 - i), as a swap file's homes would
 * lie. Returns its path (static) and the pages' CRCs. */
static const char *make_backing(const struct fx *f, uint32_t *crc)
{
	static char path[128];
	uint8_t *buf = aligned_alloc(4096, PAGE);
	int fd;

	snprintf(path, sizeof(path), "%s/backing", f->dir[0]);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ASSERT_GE(fd, 0);
	for (uint32_t i = 0; i < NP; i++) {
		fx_fill(buf, PAGE, SEED(7, i, 0));
		crc[i] = crc32c(0, buf, PAGE);
		ASSERT_EQ(pwrite(fd, buf, PAGE, (off_t)(NP - 1 - i) * PAGE), (ssize_t)PAGE);
	}
	ASSERT_OK(fsync(fd));
	close(fd);
	free(buf);
	return path;
}

static uint64_t backed(struct fx *f)
{
	struct pager_stats st;

	pager_stats(f->p, &st);
	return st.backed_bytes;
}

static int pin_overwrite(struct fx *f, uint32_t t, uint32_t page)
{
	uint64_t ud = fx_ud(f);
	int r = pager_pin_overwrite(f->p, t, page, ud);

	return r == PAGER_PENDING ? fx_wait(f, ud) : r;
}

/* A pager with tensors a and b (NP pages each), every page of a backed. */
static const char *setup(struct fx *f, uint32_t *a, uint32_t *b, uint32_t *crc, int *back)
{
	const char *path;
	uint32_t n;
	char err[256];

	fx_setup(f, NULL, 1, PAGE, SLOTS, DEPTH);
	f->p = fx_pager(f, "backing", (uint64_t)2 * NP * PAGE, 0, DEPTH);
	ASSERT_OK(pager_tensor_add(f->p, "a", (uint64_t)NP * PAGE, true, a, &n, err, sizeof(err)));
	ASSERT_OK(pager_tensor_add(f->p, "b", (uint64_t)NP * PAGE, true, b, &n, err, sizeof(err)));
	path = make_backing(f, crc);
	*back = pager_backing_add(f->p, open(path, O_RDONLY | O_CLOEXEC | O_DIRECT), path);
	ASSERT_GE(*back, 0);
	for (uint32_t i = 0; i < NP; i++)
		ASSERT_OK(pager_page_backed(f->p, *a, i, (unsigned)*back, (uint64_t)(NP - 1 - i) * PAGE, crc[i]));
	ASSERT_OK(pager_check(f->p));
	return path;
}

static void teardown(struct fx *f, const char *path)
{
	fx_drain(f);
	f->p = pager_free(f->p);
	ASSERT_OK(unlink(path));
	fx_teardown(f);
}

/* Reads come from the backing file; write-backs go home and leave it as
 * it was; once every page is home the file is let go. */
static void test_read_then_home(void)
{
	struct fx f;
	uint32_t a, b, crc[NP];
	int back;
	const char *path = setup(&f, &a, &b, crc, &back);
	struct stat st0, st1;

	ASSERT_OK(stat(path, &st0));
	ASSERT_UEQ(backed(&f), (uint64_t)NP * PAGE);
	/* Bad calls: a written page, a bad backing, an unaligned offset. */
	ASSERT_EQ(pager_page_backed(f.p, a, 0, (unsigned)back, 0, crc[0]), -EINVAL);
	ASSERT_EQ(pager_page_backed(f.p, b, 0, (unsigned)back + 1, 0, crc[0]), -EINVAL);
	ASSERT_EQ(pager_page_backed(f.p, b, 0, (unsigned)back, 100, crc[0]), -EINVAL);
	/* Twice over, through evictions (4 slots, 8 pages). */
	for (int round = 0; round < 2; round++) {
		for (uint32_t i = 0; i < NP; i++) {
			int slot = fx_pin(&f, a, i);

			ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(7, i, 0)));
			ASSERT_OK(pager_unpin(f.p, a, i, false));
		}
	}
	ASSERT_UEQ(backed(&f), (uint64_t)NP * PAGE);
	/* Rewritten: each goes home; the backing file keeps the old bytes. */
	for (uint32_t i = 0; i < NP; i++) {
		int slot = fx_pin(&f, a, i);

		fx_fill(fx_slot(&f, slot), PAGE, SEED(7, i, 1));
		ASSERT_OK(pager_unpin(f.p, a, i, true));
	}
	ASSERT_OK(fx_flush(&f, f.p));
	fx_drain(&f);
	ASSERT_OK(pager_check(f.p));
	ASSERT_UEQ(backed(&f), 0);
	for (uint32_t i = 0; i < NP; i++) {
		int slot = fx_pin(&f, a, i);

		ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(7, i, 1)));
		ASSERT_OK(pager_unpin(f.p, a, i, false));
	}
	{
		uint8_t *buf = malloc(PAGE);
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		ASSERT_GE(fd, 0);
		for (uint32_t i = 0; i < NP; i++) {
			ASSERT_EQ(pread(fd, buf, PAGE, (off_t)(NP - 1 - i) * PAGE), (ssize_t)PAGE);
			ASSERT_TRUE(fx_check(buf, PAGE, SEED(7, i, 0)));
		}
		close(fd);
		free(buf);
	}
	ASSERT_OK(stat(path, &st1));
	ASSERT_EQ(st1.st_mtim.tv_sec, st0.st_mtim.tv_sec);
	ASSERT_EQ(st1.st_mtim.tv_nsec, st0.st_mtim.tv_nsec);
	/* Let go: a page can no longer be backed by it. */
	ASSERT_EQ(pager_page_backed(f.p, b, 0, (unsigned)back, 0, crc[0]), -EINVAL);
	teardown(&f, path);
}

/* An undo copy that takes over a backed page's disk copy reads it from
 * the backing file; the source, rewritten, goes home. */
static void test_copy_takes_backing(void)
{
	struct fx f;
	uint32_t a, b, crc[NP];
	int back;
	const char *path = setup(&f, &a, &b, crc, &back);

	for (uint32_t i = 0; i < NP; i++) {
		int sa = fx_pin(&f, a, i), sb = pin_overwrite(&f, b, i);

		ASSERT_TRUE(fx_check(fx_slot(&f, sa), PAGE, SEED(7, i, 0)));
		memcpy(fx_slot(&f, sb), fx_slot(&f, sa), PAGE);
		fx_fill(fx_slot(&f, sa), PAGE, SEED(7, i, 1));
		ASSERT_EQ(pager_unpin_copy(f.p, b, i, a, i), 1);
		ASSERT_OK(pager_check(f.p));
		ASSERT_OK(pager_unpin(f.p, a, i, true));
	}
	ASSERT_OK(fx_flush(&f, f.p));
	fx_drain(&f);
	/* b's pages are the backing's now; a's are home. */
	ASSERT_UEQ(backed(&f), (uint64_t)NP * PAGE);
	for (uint32_t i = 0; i < NP; i++) {
		int sb = fx_pin(&f, b, i);

		ASSERT_TRUE(fx_check(fx_slot(&f, sb), PAGE, SEED(7, i, 0)));
		ASSERT_OK(pager_unpin(f.p, b, i, false));
		sb = fx_pin(&f, a, i);
		ASSERT_TRUE(fx_check(fx_slot(&f, sb), PAGE, SEED(7, i, 1)));
		ASSERT_OK(pager_unpin(f.p, a, i, false));
	}
	teardown(&f, path);
}

/* A backed page whose bytes changed on disk: its PIN fails -EBADMSG and
 * the message names the backing file; its neighbours read fine. */
static void test_changed_refused(void)
{
	struct fx f;
	uint32_t a, b, crc[NP];
	int back, fd;
	const char *path = setup(&f, &a, &b, crc, &back);

	fd = open(path, O_WRONLY | O_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pwrite(fd, "\x5a", 1, (off_t)(NP - 1 - 3) * PAGE + 77), 1);
	ASSERT_OK(fsync(fd));
	close(fd);
	ASSERT_EQ(fx_pin(&f, a, 3), -EBADMSG);
	ASSERT_CONTAINS(pager_last_error(f.p), path);
	ASSERT_CONTAINS(pager_last_error(f.p), "load the last checkpoint");
	for (uint32_t i = 0; i < NP; i++) {
		int slot;

		if (i == 3)
			continue;
		slot = fx_pin(&f, a, i);
		ASSERT_TRUE(fx_check(fx_slot(&f, slot), PAGE, SEED(7, i, 0)));
		ASSERT_OK(pager_unpin(f.p, a, i, false));
	}
	teardown(&f, path);
}

int main(void)
{
	test_read_then_home();
	test_copy_takes_backing();
	test_changed_refused();
	printf("ok\n");
	return 0;
}
