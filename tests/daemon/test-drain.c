/* SPDX-License-Identifier: MIT */
/*
 * Nothing waits for the disk inside the daemon's loop, through a real
 * spillwayd: a session whose client is SIGKILLed while its write is held
 * by a stalled drive (SPILLWAY_FAULTS write:stall) ends at once; its
 * pager becomes an orphan that keeps its swap files, their registered file
 * indexes and its region until the held write completes; meanwhile a new
 * session attaches and does I/O, bit-exact, on files of its own; when the
 * late write lands the orphan goes, and nothing crashed (the daemon runs
 * under ASan in CI: a late completion touching freed memory aborts it, and
 * the exit status shows it). SIGTERM with a stalled write drains and exits
 * 0 with every swap file gone. UNREGISTER of a tensor with a held write
 * answers when the write lands, and the loop serves everyone meanwhile.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)
#define PAGE MiB

static struct spw_test_daemon d;
static char dirs[2][64];
static char logpath[320];

static void make_dirs(void)
{
	for (int i = 0; i < 2; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "/var/tmp/spw-drain-XXXXXX");
		ASSERT_TRUE(mkdtemp(dirs[i]) != NULL);
	}
}

static unsigned all_swap_files(void)
{
	return (unsigned)raw_swap_files(dirs[0]) + (unsigned)raw_swap_files(dirs[1]);
}

static void start(const char *faults)
{
	char cfg[2048];

	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 64},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}, {\"path\": \"%s\", \"max_bytes\": \"1GiB\"}], \"queue_depth\": 16,"
		 "   \"session_bytes\": \"32MiB\"},"
		 " \"limits\": {\"region_bytes_per_uid\": \"8MiB\"},"
		 " \"log\": {\"level\": \"info\"}}",
		 dirs[0], dirs[1]);
	snprintf(logpath, sizeof(logpath), "%s/spillwayd.log", dirs[0]);
	raw_start_logged(&d, cfg, logpath, faults);
}

static char *read_log(void)
{
	return raw_read_file(logpath);
}

static int reg(struct raw_session *s, const char *name, uint64_t bytes)
{
	char req[256];
	cJSON *r;
	int e;

	snprintf(req, sizeof(req), "{\"type\":\"register\",\"name\":\"%s\",\"bytes\":%llu,\"kind\":\"swappable\"}",
		 name, (unsigned long long)bytes);
	r = raw_request(s->ctl, req);
	e = raw_reply_errno(r);
	if (e == 0)
		e = (int)raw_num(r, "tensor");
	cJSON_Delete(r);
	return e;
}

static double status_num(const char *path)
{
	cJSON *st = raw_status(d.status);
	double v = raw_num(st, path);

	cJSON_Delete(st);
	return v;
}

/* Disk work under way: in the ring, or a session's read or write whose
 * checksum is being computed. */
static double ring_busy(void)
{
	cJSON *st = raw_status(d.status);
	double v = raw_num(st, "swap.uring.inflight") + raw_num(st, "swap.uring.queued");
	const cJSON *ss;

	cJSON_ArrayForEach(ss, cJSON_GetObjectItem(st, "sessions"))
		v += raw_num(ss, "tier.reads_inflight") + raw_num(ss, "tier.writes_inflight");
	cJSON_Delete(st);
	return v;
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

static void write_page(struct raw_session *s, int t, uint32_t pg, uint64_t seed)
{
	int32_t slot = raw_op(s, SPW_OP_PIN, 0, (uint32_t)t, pg);

	if (slot < 0)
		TEST_FAIL("pin of page %u for writing: %s", pg, strerror(-slot));
	fill(s->region + (size_t)slot * s->page_size, s->page_size, seed);
	ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, (uint32_t)t, pg), 0);
}

static void read_page(struct raw_session *s, int t, uint32_t pg, uint64_t seed)
{
	int32_t slot = raw_op(s, SPW_OP_PIN, 0, (uint32_t)t, pg);

	if (slot < 0)
		TEST_FAIL("pin of page %u for reading: %s", pg, strerror(-slot));
	if (!check(s->region + (size_t)slot * s->page_size, s->page_size, seed))
		TEST_FAIL("page %u: data differs from what was written", pg);
	ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, 0, (uint32_t)t, pg), 0);
}

/* A child attaches, dirties page 0 (its write-behind is write 1, which the
 * fault holds), tells the parent and waits to be killed. */
static pid_t stalled_client(const char *name)
{
	int ready[2];
	pid_t child;
	char c;

	ASSERT_EQ(pipe(ready), 0);
	child = fork();
	ASSERT_GE(child, 0);
	if (child == 0) {
		struct raw_session k;
		int t;

		close(ready[0]);
		if (raw_attach(d.control, name, 4 * MiB, PAGE, &k) < 0)
			_exit(1);
		t = reg(&k, "x", 8ull * MiB);
		if (t < 0)
			_exit(1);
		write_page(&k, t, 0, 1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	close(ready[0]);
	return child;
}

static bool wait_for(double (*f)(const char *), const char *path, double want, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		if (f(path) == want)
			return true;
		usleep(10000);
	}
	return false;
}

static double sessions_listed(const char *name)
{
	cJSON *st = raw_status(d.status);
	double v = raw_status_session(st, name) != NULL;

	cJSON_Delete(st);
	return v;
}

/* The stalled write's window. A check that holds only while the write is
 * held (the orphan, its files and its share of the pool, the ring busy)
 * is made with HELD(): false where the test fails when the hold surely
 * still lasted (the clock read before the write went out says so); where
 * the hold may have ended (a slow or loaded machine took longer than the
 * hold to get there) the run can tell nothing, HELD() is false, and the
 * test abandons the run and runs it again with a longer hold. */
static double stall_t0;
static unsigned stall_ms;

static bool held(bool ok, const char *what, int line)
{
	if (ok)
		return true;
	if (test_now_ms() - stall_t0 < stall_ms)
		TEST_FAIL("line %d: %s failed while the stalled write was still held", line, what);
	fprintf(stderr, "line %d: %s failed, but only after the %u ms hold may have ended: this run tells nothing\n",
		line, what, stall_ms);
	return false;
}

#define HELD(cond) held((cond), #cond, __LINE__)

/* Starts the daemon with write 1 held for ms; the window opens now. */
static void start_stalled(unsigned ms)
{
	char faults[64];

	snprintf(faults, sizeof(faults), "write:stall=%u@1", ms);
	start(faults);
	stall_ms = ms;
	stall_t0 = test_now_ms();
}

/* Runs one of the tests below with holds from ms on, doubled while a run
 * could tell nothing (at most three runs). */
static void with_hold(bool (*run)(unsigned ms), unsigned ms, const char *name)
{
	for (int tries = 0; !run(ms); tries++, ms *= 2) {
		if (tries == 2)
			TEST_FAIL("%s: three runs (the last with a %u ms hold) were all too slow to tell anything", name,
				  ms);
		fprintf(stderr, "%s: again with a %u ms hold\n", name, ms * 2);
	}
}

static bool kill_while_stalled(unsigned hold_ms)
{
	struct raw_session b, c;
	pid_t child;
	int t, r;

	start_stalled(hold_ms);
	child = stalled_client("drain/a");
	if (!HELD(ring_busy() >= 1)) /* the held write */
		goto late_child;
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	ASSERT_TRUE(wait_for(sessions_listed, "drain/a", 0, 3000));
	/* Ended, not waited for: the write is still out, the orphan holds
	 * its files and its region's place in the pool. */
	if (!HELD(status_num("pool.draining_sessions") == 1) || !HELD(ring_busy() >= 1) ||
	    !HELD(all_swap_files() == 2) || !HELD(status_num("pool.used_bytes") == 4.0 * MiB))
		goto late;
	ASSERT_CONTAINS(read_log(), "ended with disk I/O in flight");

	/* A new session works meanwhile, on files of its own. */
	ASSERT_OK(raw_attach(d.control, "drain/b", 4 * MiB, PAGE, &b));
	if (!HELD(all_swap_files() == 4) || !HELD(status_num("pool.draining_sessions") == 1))
		goto late_b;
	/* The orphan's region still counts against its uid's share. */
	r = raw_attach(d.control, "drain/c", 2 * MiB, PAGE, &c);
	if (r == 0)
		raw_session_close(&c);
	if (!HELD(r == -EDQUOT))
		goto late_b;
	ASSERT_CONTAINS(c.message, "limits.region_bytes_per_uid");
	ASSERT_CONTAINS(c.message, "hold 8.0 MiB");
	t = reg(&b, "w", 8ull * MiB);
	ASSERT_GE(t, 0);
	for (uint32_t i = 0; i < 8; i++)
		write_page(&b, t, i, 100 + i);
	ASSERT_EQ(raw_op(&b, SPW_OP_FLUSH, 0, 0, 0), 0);
	for (uint32_t i = 0; i < 8; i++)
		read_page(&b, t, i, 100 + i);
	/* All of it while the write was held. */
	if (!HELD(status_num("pool.draining_sessions") == 1))
		goto late_b;

	/* The late write lands in the orphan's file; then the orphan goes. */
	ASSERT_TRUE(wait_for(status_num, "pool.draining_sessions", 0, (int)hold_ms + 15000));
	ASSERT_UEQ(all_swap_files(), 2);
	ASSERT_EQ(status_num("pool.used_bytes"), 4.0 * MiB);
	ASSERT_CONTAINS(read_log(), "its last disk request completed");
	/* Seconds after the session ended (the held write): a warning. */
	ASSERT_CONTAINS(read_log(), "after it ended (a slow or stalled drive");
	ASSERT_OK(raw_attach(d.control, "drain/c", 2 * MiB, PAGE, &c));
	raw_session_close(&c);
	/* b's pages 0-3 come from its disk file again: untouched. */
	for (uint32_t i = 0; i < 8; i++)
		read_page(&b, t, i, 100 + i);
	ASSERT_EQ(status_num("swap.uring.errors"), 0);
	raw_session_close(&b);
	ASSERT_TRUE(wait_for(status_num, "pool.used_bytes", 0, 3000));
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(logpath);
	ASSERT_UEQ(all_swap_files(), 0);
	fprintf(stderr, "kill while stalled: orphan drained, new session bit-exact\n");
	return true;

late_child:
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	goto late;
late_b:
	raw_session_close(&b);
late:
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(logpath);
	ASSERT_UEQ(all_swap_files(), 0);
	return false;
}

static void test_kill_while_stalled(void)
{
	with_hold(kill_while_stalled, 5000, "kill while stalled");
}

/* SIGTERM while a session's write is held: the daemon ends the session,
 * keeps the loop going until the write lands, removes the files and exits
 * 0. Its log says it waited; without that line, a daemon that exited
 * before the hold ended left with the write still out (the failure this
 * is for), and one that exited later may only have seen SIGTERM after the
 * write landed (a loaded machine): that run tells nothing. */
static bool stop_while_stalled(unsigned hold_ms)
{
	struct raw_session s;
	double exited;
	int t;

	start_stalled(hold_ms);
	ASSERT_OK(raw_attach(d.control, "drain/term", 4 * MiB, PAGE, &s));
	t = reg(&s, "x", 8ull * MiB);
	ASSERT_GE(t, 0);
	write_page(&s, t, 0, 1);
	if (!HELD(ring_busy() >= 1)) {
		raw_session_close(&s);
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		unlink(logpath);
		return false;
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	exited = test_now_ms() - stall_t0;
	if (!strstr(read_log(), "for disk I/O in flight")) {
		if (exited < hold_ms)
			TEST_FAIL("spillwayd exited %.0f ms into the %u ms hold of a write, without waiting for it",
				  exited, hold_ms);
		fprintf(stderr, "stop while stalled: SIGTERM may have come after the write landed; this run tells "
			"nothing\n");
		raw_session_close(&s);
		unlink(logpath);
		ASSERT_UEQ(all_swap_files(), 0);
		return false;
	}
	ASSERT_CONTAINS(read_log(), "stopped cleanly");
	unlink(logpath);
	ASSERT_UEQ(all_swap_files(), 0);
	raw_session_close(&s);
	return true;
}

static void test_stop_while_stalled(void)
{
	with_hold(stop_while_stalled, 1500, "stop while stalled");
}

static double tensors_of(const char *name)
{
	cJSON *st = raw_status(d.status);
	const cJSON *ss = raw_status_session(st, name);
	double v = ss ? raw_num(ss, "tensors") : -1;

	cJSON_Delete(st);
	return v;
}

/* UNREGISTER of a tensor whose write-behind is held: the tensor is dying,
 * the loop goes on (status answers with the write still out, another
 * session's ring works), and the reply comes when the write lands. */
static bool unregister_while_stalled(unsigned hold_ms)
{
	struct raw_session s, o;
	struct pollfd p;
	char req[128];
	cJSON *r;
	int t, to;

	start_stalled(hold_ms);
	ASSERT_OK(raw_attach(d.control, "drain/unreg", 4 * MiB, PAGE, &s));
	t = reg(&s, "x", 8ull * MiB);
	ASSERT_GE(t, 0);
	write_page(&s, t, 0, 1);
	if (!HELD(ring_busy() >= 1))
		goto late_s;
	snprintf(req, sizeof(req), "{\"type\":\"unregister\",\"tensor\":%d}", t);
	ASSERT_OK(raw_send(s.ctl, req));
	/* Not waited for inside the loop: */
	if (!HELD(ring_busy() >= 1) || !HELD(tensors_of("drain/unreg") == 1))
		goto late_s;
	ASSERT_OK(raw_attach(d.control, "drain/other", 2 * MiB, PAGE, &o));
	to = raw_register(&o, "r", MiB, NULL);
	ASSERT_GE(to, 0);
	ASSERT_GE(raw_op(&o, SPW_OP_PIN, 0, (uint32_t)to, 0), 0);
	ASSERT_EQ(raw_op(&o, SPW_OP_UNPIN, 0, (uint32_t)to, 0), 0);
	if (!HELD(ring_busy() >= 1)) {
		raw_session_close(&o);
		goto late_s;
	}
	/* The reply, once the write landed. */
	p = (struct pollfd){ .fd = s.ctl, .events = POLLIN };
	ASSERT_EQ(poll(&p, 1, (int)hold_ms + 30000), 1);
	r = raw_recv(s.ctl, NULL, NULL, NULL);
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	ASSERT_EQ(ring_busy(), 0);
	ASSERT_EQ(tensors_of("drain/unreg"), 0);
	ASSERT_EQ(tensors_of("drain/other"), 1);
	/* Its name and swap are free again. */
	t = reg(&s, "x", 8ull * MiB);
	ASSERT_GE(t, 0);
	write_page(&s, t, 1, 2);
	read_page(&s, t, 1, 2);
	raw_session_close(&o);
	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(logpath);
	ASSERT_UEQ(all_swap_files(), 0);
	return true;

late_s:
	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(logpath);
	ASSERT_UEQ(all_swap_files(), 0);
	return false;
}

static void test_unregister_while_stalled(void)
{
	with_hold(unregister_while_stalled, 3000, "unregister while stalled");
}

/* The status reads the swap directories' figures from a cache the timer
 * refreshes, not from a scan per request: a swap file that appears is not
 * in used_bytes at once (up to three tries, in case a refresh falls in
 * between), and is there after the refresh. */
static double dir0_used(void)
{
	cJSON *st = raw_status(d.status);
	const cJSON *sd = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "swap"), "dirs");
	double v = raw_num(cJSON_GetArrayItem(sd, 0), "used_bytes");

	cJSON_Delete(st);
	ASSERT_TRUE(!isnan(v));
	return v;
}

static void test_status_cached(void)
{
	char path[3][128];
	double before, after = 0;
	bool stale = false;

	start(NULL);
	before = dir0_used();
	for (int i = 0; i < 3 && !stale; i++) {
		int fd;

		snprintf(path[i], sizeof(path[i]), "%s/spillway-cache_%d-0000000%d.swap", dirs[0], i, i);
		fd = open(path[i], O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
		ASSERT_GE(fd, 0);
		ASSERT_EQ(fallocate(fd, 0, 0, 4 * MiB), 0);
		close(fd);
		stale = dir0_used() < before + (i + 1) * 4.0 * MiB;
		if (!stale)
			fprintf(stderr, "status cache: a refresh fell between file and request (try %d)\n", i + 1);
	}
	ASSERT_TRUE(stale);
	for (int i = 0; i < 300 && after < before + 4.0 * MiB; i++) {
		usleep(10000);
		after = dir0_used();
	}
	ASSERT_TRUE(after >= before + 4.0 * MiB);
	for (int i = 0; i < 3; i++)
		unlink(path[i]);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	unlink(logpath);
}

int main(void)
{
	if (access("/var/tmp", W_OK) < 0)
		SKIP("/var/tmp is not writable");
	make_dirs();
	test_kill_while_stalled();
	test_stop_while_stalled();
	test_unregister_while_stalled();
	test_status_cached();
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(rmdir(dirs[i]), 0);
	return 0;
}
