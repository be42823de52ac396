/* SPDX-License-Identifier: MIT */
/*
 * tier-fixture.h: what the pager tests share. Swap directories under
 * /var/tmp (the real disk: O_DIRECT works there), a memfd region as the
 * daemon maps one, the daemon's io_uring, and a completion recorder that
 * stands in for the session's CQ.
 *
 * The helpers drive the pager the way the daemon will: submit an op, and
 * when it is pending, wait on the ring (uring_wait, which reaps and runs
 * the completions) until its user_data comes back.
 */
#ifndef SPW_TIER_FIXTURE_H
#define SPW_TIER_FIXTURE_H

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <unistd.h>
#include <sys/mman.h>

#include "../../daemon/pager.h"
#include "../../daemon/uring.h"
#include "test.h"

#define FX_MAX_UD 4096

struct fx {
	char dir[2][64];
	struct swap_dir sd[2];
	unsigned ndirs;
	uint8_t *region;
	size_t region_bytes;
	uint32_t page_size, nslots;
	struct uring *u;
	bool own_uring;
	struct pager *p;
	/* The daemon's threadpool for fx_pager()'s pagers (NULL: checksums
	 * on the caller's thread). */
	void (*offload)(void *ctx, struct pager_job *j);
	uint64_t next_ud;
	int32_t res[FX_MAX_UD];
	bool done[FX_MAX_UD];
	unsigned completions;
};

static inline void fx_complete(void *ctx, uint64_t ud, int32_t res)
{
	struct fx *f = ctx;

	ASSERT_TRUE(ud < FX_MAX_UD);
	ASSERT_TRUE(!f->done[ud]); /* exactly once */
	f->res[ud] = res;
	f->done[ud] = true;
	f->completions++;
}

static inline void fx_dirs(struct fx *f, unsigned ndirs)
{
	f->ndirs = ndirs;
	for (unsigned i = 0; i < ndirs; i++) {
		snprintf(f->dir[i], sizeof(f->dir[i]), "/var/tmp/spw-tier-XXXXXX");
		ASSERT_TRUE(mkdtemp(f->dir[i]) != NULL);
		f->sd[i] = (struct swap_dir){ .path = f->dir[i], .max_bytes = 0 };
	}
}

static inline unsigned fx_files_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static inline void fx_rmdirs(struct fx *f)
{
	for (unsigned i = 0; i < f->ndirs; i++) {
		ASSERT_UEQ(fx_files_in(f->dir[i]), 0); /* nothing left behind */
		ASSERT_EQ(rmdir(f->dir[i]), 0);
	}
}

static inline void fx_region(struct fx *f, uint32_t page_size, uint32_t nslots)
{
	int fd = memfd_create("tier-region", MFD_CLOEXEC);

	ASSERT_GE(fd, 0);
	f->page_size = page_size;
	f->nslots = nslots;
	f->region_bytes = (size_t)page_size * nslots;
	ASSERT_EQ(ftruncate(fd, (off_t)f->region_bytes), 0);
	f->region = mmap(NULL, f->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_TRUE(f->region != MAP_FAILED);
	close(fd);
}

/* faults: SPILLWAY_FAULTS for this fixture's ring (NULL: none). */
static inline struct pager *fx_pager(struct fx *f, const char *session, uint64_t swap_bytes, unsigned window,
				     unsigned depth)
{
	struct pager_config c = {
		.session = session, .region = f->region, .page_size = f->page_size, .nslots = f->nslots,
		.uring = f->u, .dirs = f->sd, .ndirs = f->ndirs, .swap_bytes = swap_bytes,
		.prefetch_window = window, .queue_depth = depth, .max_pending = 64,
		.complete = fx_complete, .ctx = f, .offload = f->offload,
	};
	char err[512] = "";
	struct pager *p = NULL;
	int r = pager_new(&c, err, sizeof(err), &p);

	if (r < 0)
		TEST_FAIL("pager_new: %s (%s)", strerror(-r), err);
	return p;
}

static inline void fx_setup(struct fx *f, const char *faults, unsigned ndirs, uint32_t page_size, uint32_t nslots,
			    unsigned depth)
{
	memset(f, 0, sizeof(*f));
	if (faults)
		setenv("SPILLWAY_FAULTS", faults, 1);
	else
		unsetenv("SPILLWAY_FAULTS");
	fx_dirs(f, ndirs);
	fx_region(f, page_size, nslots);
	ASSERT_OK(uring_new(depth, false, 16, 8, &f->u));
	unsetenv("SPILLWAY_FAULTS");
}

static inline void fx_teardown(struct fx *f)
{
	f->p = pager_free(f->p);
	f->u = uring_free(f->u);
	munmap(f->region, f->region_bytes);
	fx_rmdirs(f);
}

static inline uint64_t fx_ud(struct fx *f)
{
	uint64_t ud = f->next_ud++ % FX_MAX_UD;

	f->done[ud] = false;
	return ud;
}

/* Waits (bounded) for ud's completion, reaping the ring. */
static inline int32_t fx_wait(struct fx *f, uint64_t ud)
{
	for (int i = 0; i < 2000 && !f->done[ud]; i++) {
		ASSERT_GE(uring_wait(f->u, 10), 0);
		pager_room_kick(); /* as the daemon does after every reap */
	}
	if (!f->done[ud])
		TEST_FAIL("completion %llu never came (ring busy %u)", (unsigned long long)ud, uring_busy(f->u));
	return f->res[ud];
}

/* PIN and wait: the slot index or -errno. *pending tells which way it came. */
static inline int fx_pin_p(struct fx *f, struct pager *p, uint32_t t, uint32_t pg, bool *pending)
{
	uint64_t ud = fx_ud(f);
	int r = pager_pin(p, t, pg, ud);

	if (pending)
		*pending = r == PAGER_PENDING;
	/* The scheduler's incremental indexes agree with a full scan. */
	ASSERT_OK(pager_check(p));
	if (r != PAGER_PENDING) {
		ASSERT_TRUE(!f->done[ud]); /* an immediate answer never also completes */
		return r;
	}
	r = fx_wait(f, ud);
	ASSERT_OK(pager_check(p));
	return r;
}

static inline int fx_pin(struct fx *f, uint32_t t, uint32_t pg)
{
	return fx_pin_p(f, f->p, t, pg, NULL);
}

static inline int fx_flush(struct fx *f, struct pager *p)
{
	uint64_t ud = fx_ud(f);
	int r = pager_flush(p, ud);

	return r == PAGER_PENDING ? fx_wait(f, ud) : r;
}

/* Lets the ring go quiet: every write-behind and read-ahead done. */
static inline void fx_drain(struct fx *f)
{
	for (int i = 0; i < 2000 && uring_busy(f->u); i++) {
		ASSERT_GE(uring_wait(f->u, 10), 0);
		pager_room_kick();
	}
	ASSERT_UEQ(uring_busy(f->u), 0);
	if (f->p)
		ASSERT_OK(pager_check(f->p));
}

static inline uint8_t *fx_slot(struct fx *f, int slot)
{
	ASSERT_GE(slot, 0);
	ASSERT_LT(slot, (int)f->nslots);
	return f->region + (size_t)slot * f->page_size;
}

/* Page contents that differ per (tag, tensor page, version). */
static inline void fx_fill(uint8_t *dst, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(dst + i, &x, 8);
	}
}

static inline bool fx_check(const uint8_t *src, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (memcmp(src + i, &x, 8))
			return false;
	}
	return true;
}

static inline bool fx_zero(const uint8_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (src[i])
			return false;
	return true;
}

#define SEED(tag, page, version) (((uint64_t)(tag) << 40) ^ ((uint64_t)(page) << 16) ^ (uint64_t)(version))

/* One step the way the daemon and client will run it: PIN (waiting for the
 * completion when pending), check what the last step wrote, write this
 * step's data, UNPIN dirty. */
static inline void fx_step(struct fx *f, uint32_t t, const uint32_t *order, uint32_t n, unsigned tag, unsigned version)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t pg = order[i];
		struct pager_stats s0, s1;
		int slot;
		uint8_t *d;

		pager_stats(f->p, &s0);
		slot = fx_pin(f, t, pg);
		pager_stats(f->p, &s1);
		if (getenv("TIER_DEBUG") && s1.misses != s0.misses)
		{
			fprintf(stderr, "miss: step %u i %u page %u free %u wb %u rd %u ring %u:", version, i, pg,
				s0.slots_free, s0.writes_inflight, s0.reads_inflight, s0.queue_depth);
			for (int k = 0; k < PAGER__STATES; k++)
				fprintf(stderr, " %s=%llu", pager_state_name(k), (unsigned long long)s0.pages_by_state[k]);
			fprintf(stderr, "\n");
		}

		if (slot < 0)
			TEST_FAIL("pin of page %u: %s (%s)", pg, strerror(-slot), pager_last_error(f->p));
		d = fx_slot(f, slot);
		if (version == 0)
			ASSERT_TRUE(fx_zero(d, f->page_size)); /* a page never written reads as zeros */
		else if (!fx_check(d, f->page_size, SEED(tag, pg, version - 1)))
			TEST_FAIL("page %u (step %u): data differs from what was written", pg, version);
		fx_fill(d, f->page_size, SEED(tag, pg, version));
		ASSERT_OK(pager_unpin(f->p, t, pg, true));
	}
}

#endif
