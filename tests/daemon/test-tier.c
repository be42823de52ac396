/* SPDX-License-Identifier: MIT */
/*
 * The NVMe tier through a real spillwayd, spoken on the wire by hand: swap
 * directories under /var/tmp (the real disk, where O_DIRECT works), a
 * swappable tensor eight times the region written and read back bit-exact
 * across two directories, order learning seen in the status counters,
 * every injected disk fault reaching the right page of the right session
 * (and the daemon log) while another session goes on, swap files removed
 * whenever a session ends (detach, SIGKILL of the client, SIGTERM of the
 * daemon) and stale ones at start, two sessions' pages never mixing, and
 * refusals that name the config key or the figures.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)
#define PAGE MiB

static struct spw_test_daemon d;
static char dirs[2][64];
static char logpath[320];

/* ---- fixtures ---- */

static void make_dirs(void)
{
	for (int i = 0; i < 2; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "/var/tmp/spw-dtier-XXXXXX");
		ASSERT_TRUE(mkdtemp(dirs[i]) != NULL);
	}
}

static unsigned all_swap_files(void)
{
	return (unsigned)raw_swap_files(dirs[0]) + (unsigned)raw_swap_files(dirs[1]);
}

static void remove_dirs(void)
{
	for (int i = 0; i < 2; i++) {
		ASSERT_UEQ((unsigned)raw_swap_files(dirs[i]), 0); /* nothing left behind */
		ASSERT_EQ(rmdir(dirs[i]), 0);
	}
}

/* Starts the daemon with both swap dirs; faults arms SPILLWAY_FAULTS in
 * its environment only (the fork inherits it; the test unsets it at once).
 * Its stderr goes to a log file the test can search. */
static void start(const char *faults, const char *swap_extra)
{
	char cfg[2048];

	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 64},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}, {\"path\": \"%s\", \"max_bytes\": \"1GiB\"}],"
		 "   \"queue_depth\": 16, \"session_bytes\": \"128MiB\"%s%s},"
		 " \"log\": {\"level\": \"info\"}}",
		 dirs[0], dirs[1], swap_extra ? ", " : "", swap_extra ? swap_extra : "");
	snprintf(logpath, sizeof(logpath), "%s/spillwayd.log", dirs[0]);
	raw_start_logged(&d, cfg, logpath, faults);
}

static char *read_log(void)
{
	return raw_read_file(logpath);
}

static void stop(void)
{
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(logpath);
}

/* Registers a tensor of a kind; returns its id or -errno. */
static int reg(struct raw_session *s, const char *name, uint64_t bytes, const char *kind, uint32_t *pages)
{
	char req[256];
	cJSON *r;
	int e;

	snprintf(req, sizeof(req), "{\"type\":\"register\",\"name\":\"%s\",\"bytes\":%llu,\"kind\":\"%s\"}", name,
		 (unsigned long long)bytes, kind);
	r = raw_request(s->ctl, req);
	e = raw_reply_errno(r);
	if (e == 0) {
		if (pages)
			*pages = (uint32_t)raw_num(r, "pages");
		e = (int)raw_num(r, "tensor");
	}
	cJSON_Delete(r);
	return e;
}

static double tier(const char *session, const char *key)
{
	char path[128];
	cJSON *st = raw_status(d.status);
	const cJSON *ss = raw_status_session(st, session);
	double v;

	ASSERT_TRUE(ss != NULL);
	snprintf(path, sizeof(path), "tier.%s", key);
	v = raw_num(ss, path);
	cJSON_Delete(st);
	ASSERT_TRUE(!isnan(v));
	return v;
}

/* Waits until the daemon's ring has nothing in flight or queued, and no
 * session has a read or write under way (a checksum on the threadpool, a
 * retry about to go out). */
static void ring_idle(void)
{
	for (int i = 0; i < 1000; i++) {
		cJSON *st = raw_status(d.status);
		double busy = raw_num(st, "swap.uring.inflight") + raw_num(st, "swap.uring.queued");
		const cJSON *ss;

		cJSON_ArrayForEach(ss, cJSON_GetObjectItem(st, "sessions"))
			busy += raw_num(ss, "tier.reads_inflight") + raw_num(ss, "tier.writes_inflight");
		cJSON_Delete(st);
		if (busy == 0)
			return;
		usleep(2000);
	}
	TEST_FAIL("the daemon's io_uring never went idle");
}

static void fill(uint8_t *dst, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(dst + i, &x, 8);
	}
}

static bool check(const uint8_t *src, size_t n, uint64_t seed)
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

#define SEED(tag, page, version) (((uint64_t)(tag) << 40) ^ ((uint64_t)(page) << 16) ^ (uint64_t)(version))

static uint8_t *slot_ptr(struct raw_session *s, int32_t slot)
{
	ASSERT_GE(slot, 0);
	ASSERT_LT(slot, (int32_t)s->slots);
	return s->region + (size_t)slot * s->page_size;
}

/* PIN, fill with seed, UNPIN dirty. */
static void write_page(struct raw_session *s, int t, uint32_t pg, uint64_t seed)
{
	int32_t slot = raw_op(s, SPW_OP_PIN, 0, (uint32_t)t, pg);

	if (slot < 0)
		TEST_FAIL("pin of page %u for writing: %s", pg, strerror(-slot));
	fill(slot_ptr(s, slot), s->page_size, seed);
	ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, (uint32_t)t, pg), 0);
}

static void read_page(struct raw_session *s, int t, uint32_t pg, uint64_t seed)
{
	int32_t slot = raw_op(s, SPW_OP_PIN, 0, (uint32_t)t, pg);

	if (slot < 0)
		TEST_FAIL("pin of page %u for reading: %s", pg, strerror(-slot));
	if (!check(slot_ptr(s, slot), s->page_size, seed))
		TEST_FAIL("page %u: data differs from what was written", pg);
	ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, 0, (uint32_t)t, pg), 0);
}

/* ---- tests ---- */

/* 64 pages through 8 slots, striped over two directories, bit-exact in
 * order and shuffled; FLUSH reaches the disk; the counters add up. */
static void test_bit_exact(void)
{
	struct raw_session s;
	uint32_t pages, order[64];
	cJSON *st;
	int t;

	start(NULL, NULL);
	ASSERT_OK(raw_attach(d.control, "tier/exact", 8 * MiB, PAGE, &s));
	ASSERT_UEQ(s.slots, 8);
	ASSERT_UEQ(all_swap_files(), 2);
	ASSERT_UEQ((unsigned)raw_swap_files(dirs[0]), 1);
	t = reg(&s, "big", 64ull * MiB, "swappable", &pages);
	ASSERT_GE(t, 0);
	ASSERT_UEQ(pages, 64);
	for (uint32_t i = 0; i < 64; i++)
		write_page(&s, t, i, SEED(1, i, 0));
	ASSERT_EQ(raw_op(&s, SPW_OP_FLUSH, 0, 0, 0), 0);
	for (uint32_t i = 0; i < 64; i++)
		read_page(&s, t, i, SEED(1, i, 0));
	for (uint32_t i = 0; i < 64; i++)
		order[i] = (i * 29 + 5) % 64;
	for (uint32_t i = 0; i < 64; i++)
		read_page(&s, t, order[i], SEED(1, order[i], 0));

	ASSERT_TRUE(tier("tier/exact", "evictions") >= 56);
	ASSERT_TRUE(tier("tier/exact", "write_bytes") >= 64.0 * MiB);
	ASSERT_TRUE(tier("tier/exact", "read_bytes") >= 56.0 * MiB);
	ASSERT_EQ(tier("tier/exact", "errors"), 0);
	ASSERT_EQ(tier("tier/exact", "swap_bytes"), 128.0 * MiB); /* swap.session_bytes */
	ASSERT_EQ(tier("tier/exact", "bytes_on_disk"), 64.0 * MiB);
	st = raw_status(d.status);
	ASSERT_EQ(raw_num(raw_status_session(st, "tier/exact"), "pages_pinned"), 0);
	ASSERT_EQ(raw_num(raw_status_session(st, "tier/exact"), "tier.pages.disk") +
			  raw_num(raw_status_session(st, "tier/exact"), "tier.pages.clean"),
		  64);
	ASSERT_EQ(raw_num(st, "swap.uring.queue_depth"), 16);
	{
		const cJSON *sd = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "swap"), "dirs");

		ASSERT_EQ(cJSON_GetArraySize(sd), 2);
		ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(sd, 1), "path")->valuestring, dirs[1]);
		ASSERT_EQ(raw_num(cJSON_GetArrayItem(sd, 1), "max_bytes"), 1024.0 * MiB);
		/* Half of the session's 128 MiB, preallocated. */
		ASSERT_TRUE(raw_num(cJSON_GetArrayItem(sd, 1), "used_bytes") >= 64.0 * MiB);
		ASSERT_TRUE(raw_num(cJSON_GetArrayItem(sd, 1), "free_bytes") > 0);
	}
	cJSON_Delete(st);
	/* Unpinned, the tensor goes; pinned, it may not. */
	ASSERT_GE(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t, 3), 0);
	{
		cJSON *r = raw_request(s.ctl, "{\"type\":\"unregister\",\"tensor\":0}");
		ASSERT_EQ(raw_reply_errno(r), -EBUSY);
		cJSON_Delete(r);
	}
	ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, 0, (uint32_t)t, 3), 0);
	{
		cJSON *r = raw_request(s.ctl, "{\"type\":\"unregister\",\"tensor\":0}");
		ASSERT_EQ(raw_reply_errno(r), 0);
		cJSON_Delete(r);
	}
	raw_session_close(&s);
	stop();
	ASSERT_UEQ(all_swap_files(), 0);
	fprintf(stderr, "bit-exact: 64 pages through 8 slots in 2 dirs\n");
}

/* One recorded step, then steps in the same order: PINs do not start their
 * own reads (tier.misses stays unchanged), read-ahead serves them
 * (prefetch_hits).
 *
 * How far read-ahead gets ahead of the PINs depends on the slots it may
 * take: a clean page needed later than the one it reads. In a step that
 * dirties every page those are the pages whose write-back has landed, so
 * on a slow disk, or a loaded machine, read-ahead falls behind a trainer
 * that pins back to back, and PINs miss: how many is the disk's business,
 * not the policy's. So the step that writes waits, after each page, until
 * the daemon's ring is idle (as a trainer's compute on the page gives the
 * disk time); then no PIN misses on any disk. The step after it only
 * reads: every page it unpins is clean at once, read-ahead never waits
 * for a write, and no PIN misses though they come back to back. In both,
 * every PIN is a hit, and only the pages that were in the slots when the
 * step began may be hits that read-ahead did not bring. */
static void one_step(struct raw_session *s, int t, const uint32_t *order, uint32_t n, unsigned version, bool settle)
{
	for (uint32_t i = 0; i < n; i++) {
		int32_t slot = raw_op(s, SPW_OP_PIN, 0, (uint32_t)t, order[i]);
		uint8_t *p = slot_ptr(s, slot);

		if (version && !check(p, s->page_size, SEED(2, order[i], version - 1)))
			TEST_FAIL("page %u (step %u): data differs from what was written", order[i], version);
		fill(p, s->page_size, SEED(2, order[i], version));
		ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, (uint32_t)t, order[i]), 0);
		if (settle)
			ring_idle();
	}
	ASSERT_EQ(raw_op(s, SPW_OP_STEP, 0, 0, 0), 0);
	ring_idle();
}

/* The same order, reading only (what the last step wrote, version). */
static void read_step(struct raw_session *s, int t, const uint32_t *order, uint32_t n, unsigned version)
{
	for (uint32_t i = 0; i < n; i++)
		read_page(s, t, order[i], SEED(2, order[i], version));
	ASSERT_EQ(raw_op(s, SPW_OP_STEP, 0, 0, 0), 0);
	ring_idle();
}

struct hits {
	double misses, prefetch_hits, pin_hits, pins;
};

static struct hits hits_now(void)
{
	return (struct hits){ tier("tier/learn", "misses"), tier("tier/learn", "prefetch_hits"),
			      tier("tier/learn", "pin_hits"), tier("tier/learn", "pins") };
}

/* A step of n PINs after a: none missed, all hits, at most slots of them
 * on pages read-ahead did not bring. */
static void all_hits(const struct hits *a, const struct hits *b, uint32_t n, uint32_t slots, const char *what)
{
	fprintf(stderr, "order learning, %s: %g misses, %g prefetch hits, %g other hits\n", what, b->misses - a->misses,
		b->prefetch_hits - a->prefetch_hits, b->pin_hits - a->pin_hits);
	ASSERT_EQ(b->pins - a->pins, n);
	ASSERT_EQ(b->misses - a->misses, 0);
	ASSERT_EQ(b->prefetch_hits - a->prefetch_hits + b->pin_hits - a->pin_hits, n);
	ASSERT_GE(b->prefetch_hits - a->prefetch_hits, n - slots);
}

static void test_order_learning(void)
{
	struct raw_session s;
	uint32_t order[32];
	struct hits h0, h1, h2;
	int t;

	start(NULL, "\"prefetch_window\": 4");
	ASSERT_OK(raw_attach(d.control, "tier/learn", 8 * MiB, PAGE, &s));
	t = reg(&s, "p32", 32ull * MiB, "swappable", NULL);
	ASSERT_GE(t, 0);
	for (uint32_t i = 0; i < 32; i++)
		order[i] = (i * 13) % 32; /* not 0..n: the order must be learned */
	one_step(&s, t, order, 32, 0, false); /* recorded */
	ASSERT_EQ(tier("tier/learn", "plan_length"), 32);
	h0 = hits_now();
	one_step(&s, t, order, 32, 1, true);
	h1 = hits_now();
	all_hits(&h0, &h1, 32, s.slots, "a step that writes every page");
	read_step(&s, t, order, 32, 1);
	h2 = hits_now();
	all_hits(&h1, &h2, 32, s.slots, "a step that reads every page, back to back");
	ASSERT_EQ(tier("tier/learn", "errors"), 0);
	raw_session_close(&s);
	stop();
}

/* A session of 8 pages in 4 slots; each UNPIN dirty starts that page's
 * write at once (nothing else is running), so with the ring idle after
 * each, write request k is page k-1. */
static int fault_session(struct raw_session *s, const char *name, unsigned tag)
{
	int t;

	ASSERT_OK(raw_attach(d.control, name, 4 * MiB, PAGE, s));
	t = reg(s, "params", 8ull * MiB, "swappable", NULL);
	ASSERT_GE(t, 0);
	for (uint32_t i = 0; i < 8; i++) {
		write_page(s, t, i, SEED(tag, i, 0));
		ring_idle();
	}
	return t;
}

/* The other session, after the fault fired: it is served as ever. */
static void other_session_works(void)
{
	struct raw_session o;
	int t;

	ASSERT_OK(raw_attach(d.control, "fault/other", 4 * MiB, PAGE, &o));
	t = reg(&o, "other", 8ull * MiB, "swappable", NULL);
	ASSERT_GE(t, 0);
	for (uint32_t i = 0; i < 8; i++)
		write_page(&o, t, i, SEED(9, i, 0));
	for (uint32_t i = 0; i < 8; i++)
		read_page(&o, t, i, SEED(9, i, 0));
	raw_session_close(&o);
}

static void expect_logged(const char *page, const char *what)
{
	const char *log = read_log();

	ASSERT_CONTAINS(log, page);
	ASSERT_CONTAINS(log, dirs[0][0] ? "/var/tmp/spw-dtier-" : "");
	ASSERT_CONTAINS(log, ".swap");
	ASSERT_CONTAINS(log, what);
}

/* One failed write (write 3 is page 2's): the page keeps its data, the
 * write is retried and lands; the run ends bit-identical, the log says
 * what happened. */
static void test_write_fault_once(const char *faults, int err)
{
	struct raw_session s;
	int t;

	start(faults, NULL);
	ASSERT_CONTAINS(read_log(), "SPILLWAY_FAULTS");
	t = fault_session(&s, "fault/w1", 3);
	ASSERT_EQ(tier("fault/w1", "pages.failed"), 0);
	ASSERT_EQ(tier("fault/w1", "errors"), 1);
	expect_logged("'params' page 2", strerror(-err));
	ASSERT_CONTAINS(read_log(), "retried");
	ASSERT_EQ(raw_op(&s, SPW_OP_FLUSH, 0, 0, 0), 0);
	/* Pages 0-3 come back from disk, 4-7 from their slots. */
	for (uint32_t i = 0; i < 8; i++)
		read_page(&s, t, i, SEED(3, i, 0));
	other_session_works();
	raw_session_close(&s);
	stop();
	fprintf(stderr, "fault %s: page 2's write retried, run bit-identical\n", faults);
}

/* Every write from the eighth on fails (page 7's and its retries): once
 * the retries are spent the page is lost, and every PIN of it says so,
 * naming the page, the file and what to do. */
static void test_write_fault_persistent(const char *faults, int err)
{
	struct raw_session s;
	int t;

	start(faults, NULL);
	t = fault_session(&s, "fault/w", 3);
	ASSERT_EQ(tier("fault/w", "pages.failed"), 1);
	ASSERT_EQ(tier("fault/w", "errors"), 4);
	ASSERT_EQ(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t, 7), err);
	ASSERT_EQ(raw_op(&s, SPW_OP_PREFETCH, 0, (uint32_t)t, 7), err);
	ASSERT_EQ(raw_op(&s, SPW_OP_FLUSH, 0, 0, 0), err);
	expect_logged("'params' page 7", strerror(-err));
	ASSERT_CONTAINS(read_log(), "check the drive");
	/* (Every later write fails too, so no other session here.) */
	for (uint32_t i = 0; i < 7; i++)
		read_page(&s, t, i, SEED(3, i, 0));
	raw_session_close(&s);
	stop();
	fprintf(stderr, "fault %s: page 7 answers %s after its retries\n", faults, strerror(-err));
}

static void test_read_fault(const char *faults, int err)
{
	struct raw_session s;
	int t;

	start(faults, NULL);
	t = fault_session(&s, "fault/r", 4);
	/* Pages 4-7 are still in the slots; 0-3 come from disk, in order, one
	 * read each (no STEP yet, so no read-ahead): read 2 is page 1's. */
	read_page(&s, t, 0, SEED(4, 0, 0));
	ASSERT_EQ(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t, 1), err);
	expect_logged("'params' page 1", err == -EBADMSG ? "checksum mismatch" : strerror(-err));
	if (err == -EBADMSG)
		ASSERT_EQ(tier("fault/r", "checksum_errors"), 1);
	ASSERT_EQ(tier("fault/r", "errors"), 1);
	/* The page stays on disk, intact: the next PIN reads it again. */
	read_page(&s, t, 1, SEED(4, 1, 0));
	for (uint32_t i = 2; i < 8; i++)
		read_page(&s, t, i, SEED(4, i, 0));
	other_session_works();
	raw_session_close(&s);
	stop();
	fprintf(stderr, "fault %s: page 1 answers %s, then reads back intact\n", faults, strerror(-err));
}

/* Short transfers are continued by the ring: no error, same data. */
static void test_short(void)
{
	struct raw_session s;
	cJSON *st;
	int t;

	start("write:short@2,read:short@1", NULL);
	t = fault_session(&s, "fault/short", 5);
	for (uint32_t i = 0; i < 8; i++)
		read_page(&s, t, i, SEED(5, i, 0));
	ASSERT_EQ(tier("fault/short", "errors"), 0);
	st = raw_status(d.status);
	ASSERT_TRUE(raw_num(st, "swap.uring.resubmits") >= 2);
	cJSON_Delete(st);
	raw_session_close(&s);
	stop();
}

/* Two sessions on the same directories, interleaved: each reads back its
 * own data only. */
static void test_two_sessions(void)
{
	struct raw_session a, b;
	int ta, tb;

	start(NULL, NULL);
	ASSERT_OK(raw_attach(d.control, "mix/a", 4 * MiB, PAGE, &a));
	ASSERT_OK(raw_attach(d.control, "mix/b", 4 * MiB, PAGE, &b));
	ASSERT_UEQ(all_swap_files(), 4);
	ta = reg(&a, "w", 16ull * MiB, "swappable", NULL);
	tb = reg(&b, "w", 16ull * MiB, "swappable", NULL);
	ASSERT_GE(ta, 0);
	ASSERT_GE(tb, 0);
	for (uint32_t i = 0; i < 16; i++) {
		write_page(&a, ta, i, SEED(10, i, 0));
		write_page(&b, tb, i, SEED(11, i, 0));
	}
	for (uint32_t i = 0; i < 16; i++) {
		read_page(&b, tb, 15 - i, SEED(11, 15 - i, 0));
		read_page(&a, ta, i, SEED(10, i, 0));
	}
	raw_session_close(&a);
	raw_session_close(&b);
	stop();
}

static bool wait_files(unsigned n)
{
	for (int i = 0; i < 500; i++) {
		if (all_swap_files() == n)
			return true;
		usleep(10000);
	}
	return false;
}

/* Swap files go with the session: detach, a client SIGKILLed, the daemon
 * stopped with SIGTERM; stale ones from a killed daemon go at start. */
static void test_files_removed(void)
{
	struct raw_session s;
	int ready[2], t;
	pid_t child;
	char stale[128], c;
	cJSON *r;

	/* A file of the daemon's pattern, as a SIGKILLed daemon leaves it. */
	snprintf(stale, sizeof(stale), "%s/spillway-job_0-deadbeef.swap", dirs[1]);
	ASSERT_OK(t = open(stale, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	close(t);
	start(NULL, NULL);
	ASSERT_UEQ(all_swap_files(), 0);
	ASSERT_CONTAINS(read_log(), "removed stale swap file spillway-job_0-deadbeef.swap");

	/* Detach. */
	ASSERT_OK(raw_attach(d.control, "files/detach", 4 * MiB, PAGE, &s));
	t = reg(&s, "x", 8ull * MiB, "swappable", NULL);
	write_page(&s, t, 0, 1);
	ASSERT_UEQ(all_swap_files(), 2);
	r = raw_request(s.ctl, "{\"type\":\"detach\"}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	/* The detach does not wait for the page's write-behind: the files go
	 * when it lands (tests/daemon/test-drain.c). */
	ASSERT_TRUE(wait_files(0));
	raw_session_close(&s);

	/* SIGKILL of the client, with writes in flight. */
	ASSERT_EQ(pipe(ready), 0);
	child = fork();
	ASSERT_GE(child, 0);
	if (child == 0) {
		struct raw_session k;
		int kt;

		close(ready[0]);
		if (raw_attach(d.control, "files/killed", 4 * MiB, PAGE, &k) < 0)
			_exit(1);
		kt = reg(&k, "x", 16ull * MiB, "swappable", NULL);
		for (uint32_t i = 0; i < 16; i++)
			write_page(&k, kt, i, i);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	close(ready[0]);
	ASSERT_UEQ(all_swap_files(), 2);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	ASSERT_TRUE(wait_files(0));

	/* SIGTERM of the daemon with a session attached. */
	ASSERT_OK(raw_attach(d.control, "files/term", 4 * MiB, PAGE, &s));
	t = reg(&s, "x", 8ull * MiB, "swappable", NULL);
	write_page(&s, t, 0, 1);
	ASSERT_UEQ(all_swap_files(), 2);
	stop();
	ASSERT_UEQ(all_swap_files(), 0);
	raw_session_close(&s);
}

/* Refusals name what to change. */
static void test_refusals(void)
{
	struct raw_session s;
	int fd;
	cJSON *r;

	start(NULL, NULL);
	fd = raw_connect_hello(d.control);
	r = raw_request(fd, "{\"type\":\"attach\",\"session\":\"big/0\",\"region_bytes\":1048576,"
			    "\"swap_bytes\":1125899906842624}");
	ASSERT_EQ(raw_reply_errno(r), -ENOSPC);
	ASSERT_CONTAINS(raw_reply_message(r), "swap dir /var/tmp/spw-dtier-");
	ASSERT_CONTAINS(raw_reply_message(r), "needs");
	ASSERT_CONTAINS(raw_reply_message(r), "smaller swap size");
	cJSON_Delete(r);
	ASSERT_UEQ(all_swap_files(), 0);
	close(fd);
	/* No swap asked for: swappable tensors are refused, resident work. */
	fd = raw_connect_hello(d.control);
	r = raw_request(fd, "{\"type\":\"attach\",\"session\":\"none/0\",\"region_bytes\":4194304,"
			    "\"page_size\":1048576,\"swap_bytes\":0}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	ASSERT_EQ(raw_num(r, "swap_bytes"), 0);
	cJSON_Delete(r);
	ASSERT_UEQ(all_swap_files(), 0);
	r = raw_request(fd, "{\"type\":\"register\",\"name\":\"v\",\"bytes\":100,\"kind\":\"swappable\"}");
	ASSERT_EQ(raw_reply_errno(r), -ENOSPC);
	ASSERT_CONTAINS(raw_reply_message(r), "swap");
	cJSON_Delete(r);
	close(fd);
	/* A PIN beyond the slots fails instead of hanging. */
	ASSERT_OK(raw_attach(d.control, "slots/0", 2 * MiB, PAGE, &s));
	{
		int t = reg(&s, "x", 8ull * MiB, "swappable", NULL);

		ASSERT_GE(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t, 0), 0);
		ASSERT_GE(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t, 1), 0);
		ASSERT_EQ(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)t, 2), -ENOMEM);
	}
	raw_session_close(&s);
	stop();
}

int main(void)
{
	if (access("/var/tmp", W_OK) < 0)
		SKIP("/var/tmp is not writable");
	make_dirs();
	test_bit_exact();
	test_order_learning();
	test_write_fault_once("write:eio@3", -EIO);
	test_write_fault_once("write:enospc@3", -ENOSPC);
	test_write_fault_persistent("write:eio@8+", -EIO);
	test_write_fault_persistent("write:enospc@8+", -ENOSPC);
	test_read_fault("read:eio@2", -EIO);
	test_read_fault("read:flip@2", -EBADMSG);
	test_short();
	test_two_sessions();
	test_files_removed();
	test_refusals();
	remove_dirs();
	return 0;
}
