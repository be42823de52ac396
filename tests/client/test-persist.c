/* SPDX-License-Identifier: MIT */
/*
 * test-persist: a persistent session's life (issue 10). A trainer that
 * dies (SIGKILL) leaves its session orphaned: kept with its tensors and
 * their bytes, shown as "orphaned" with its lease, counted against the
 * pool. The next attach of the name by the same uid takes it over with
 * the same region contents; another uid cannot; a non-persistent attach,
 * or one of another geometry, is refused and leaves the orphan untouched.
 * `drop` ends an orphan at once; the lease's end releases it with its
 * locked bytes and swap files. Without persist.state_dir a flush is
 * refused naming it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "session-figure.h"
#include "test.h"
#include "util/command.h"

#define MiB (1024ull * 1024ull)
#define PAGE (1024u * 1024u)

static struct spw_test_daemon d;

static spw_client *connect_client(void)
{
	struct spw_client_opts o = { .size = sizeof(o) };
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(&o, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	return c;
}

static int attach(spw_client *c, const char *name, uint64_t bytes, bool persistent, uint32_t lease_s)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = bytes, .page_size = PAGE,
				     .persistent = persistent, .lease_s = lease_s };

	return spw_client_attach(c, &a);
}

/* Fills page 0 of tensor t with a pattern of seed. */
static void fill(spw_client *c, uint32_t t, uint8_t seed)
{
	uint8_t *p;

	ASSERT_OK(spw_pin(c, t, 0, (void **)&p));
	for (uint32_t i = 0; i < PAGE; i++)
		p[i] = (uint8_t)(seed + i * 7);
	ASSERT_OK(spw_unpin(c, t, 0, SPW_DIRTY));
}

static void expect_pattern(spw_client *c, uint32_t t, uint8_t seed)
{
	uint8_t *p;

	ASSERT_OK(spw_pin(c, t, 0, (void **)&p));
	for (uint32_t i = 0; i < PAGE; i++)
		if (p[i] != (uint8_t)(seed + i * 7))
			TEST_FAIL("byte %u of the adopted page is %u, the dead trainer wrote %u", i, p[i],
			     (uint8_t)(seed + i * 7));
	ASSERT_OK(spw_unpin(c, t, 0, SPW_CLEAN));
}

/* Runs body(arg) in a child that, once body returns 0, waits to be
 * killed with SIGKILL, and kills it: no detach, no chance to clean up. */
static void killed_after(int (*body)(void *arg), void *arg)
{
	int pfd[2];
	pid_t pid;
	char ok;

	ASSERT_OK(pipe(pfd));
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		if (body(arg) < 0 || write(pfd[1], "k", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	ASSERT_EQ(read(pfd[0], &ok, 1), 1);
	close(pfd[0]);
	ASSERT_OK(kill(pid, SIGKILL));
	ASSERT_EQ(waitpid(pid, NULL, 0), pid);
}

struct trainer {
	const char *name;
	uint64_t bytes;
	uint32_t lease_s;
	uint8_t seed;
};

static int trainer_body(void *arg)
{
	const struct trainer *tr = arg;
	spw_client *c = connect_client();
	uint32_t t;

	if (attach(c, tr->name, tr->bytes, true, tr->lease_s) < 0 ||
	    spw_tensor_register(c, "t", PAGE, SPW_TENSOR_RESIDENT, &t, NULL) < 0) {
		fprintf(stderr, "trainer %s: %s\n", tr->name, spw_client_last_error(c));
		return -1;
	}
	fill(c, t, tr->seed);
	return 0;
}

/* A trainer that attaches name persistently, writes its tensor "t" and
 * is killed. */
static void trainer_dies(const char *name, uint64_t bytes, uint32_t lease_s, uint8_t seed)
{
	struct trainer tr = { .name = name, .bytes = bytes, .lease_s = lease_s, .seed = seed };

	killed_after(trainer_body, &tr);
}

/* trainer_dies(), then waits until the daemon shows the session orphaned:
 * it ends the connection when its loop reads the hang-up, in its own time. */
static void trainer_died(const char *name, uint64_t bytes, uint32_t lease_s, uint8_t seed)
{
	double committed;
	bool open;

	trainer_dies(name, bytes, lease_s, seed);
	session_wait_orphaned(d.status, name, &committed, &open);
}

/* The session's "state" in the status document, or "" when it is gone. */
static void session_state(const char *name, char *out, size_t len)
{
	char *json = NULL;
	cJSON *doc, *s;

	out[0] = '\0';
	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name"), *st = cJSON_GetObjectItem(s, "state");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && cJSON_IsString(st))
			snprintf(out, len, "%s", st->valuestring);
	}
	cJSON_Delete(doc);
	free(json);
}

static int swap_files(const char *tag)
{
	DIR *dd = opendir(d.dir);
	struct dirent *e;
	int n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd)))
		n += strstr(e->d_name, tag) != NULL && strstr(e->d_name, ".swap") != NULL;
	closedir(dd);
	return n;
}

static void test_take_over(void)
{
	struct spw_session_info info = { .size = sizeof(info) };
	spw_client *c;
	char state[32];
	uint32_t t;

	trainer_died("job/rank0", 8 * MiB, 600, 11);
	session_state("job/rank0", state, sizeof(state));
	ASSERT_STREQ(state, "orphaned");
	ASSERT_TRUE(session_figure(d.status, "job/rank0", "lease_left_s") > 590);
	ASSERT_EQ(session_figure(d.status, "job/rank0", "tensors"), 1.0);
	/* It is counted in the pool while orphaned. */
	ASSERT_TRUE(status_figure(d.status, "pool.used_bytes") >= 8.0 * MiB);

	/* A plain attach of its name is told what waits there. */
	c = connect_client();
	ASSERT_EQ(attach(c, "job/rank0", 8 * MiB, false, 0), -EBUSY);
	ASSERT_CONTAINS(spw_client_last_error(c), "orphaned");
	ASSERT_CONTAINS(spw_client_last_error(c), "spillwayctl drop job/rank0");
	/* Another geometry is refused, and the orphan stays as it was. */
	ASSERT_EQ(attach(c, "job/rank0", 16 * MiB, true, 0), -EINVAL);
	ASSERT_CONTAINS(spw_client_last_error(c), "same region_bytes");
	session_state("job/rank0", state, sizeof(state));
	ASSERT_STREQ(state, "orphaned");

	/* The same uid and geometry take it over: the same bytes. */
	ASSERT_OK(attach(c, "job/rank0", 8 * MiB, true, 0));
	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_EQ(info.reattached, 1);
	ASSERT_EQ(info.persistent, 1);
	ASSERT_UEQ(info.lease_s, 900); /* the default */
	ASSERT_UEQ(info.tensors, 1);
	ASSERT_UEQ(info.committed_step, 0); /* no optimizer marked a step */
	session_state("job/rank0", state, sizeof(state));
	ASSERT_STREQ(state, "attached");
	ASSERT_EQ(spw_tensor_register(c, "t", PAGE, SPW_TENSOR_RESIDENT, &t, NULL), -EEXIST);
	ASSERT_EQ(spw_tensor_adopt(c, "t", 2 * PAGE, SPW_TENSOR_RESIDENT, &t, NULL), -EEXIST);
	ASSERT_CONTAINS(spw_client_last_error(c), "layout differs");
	ASSERT_EQ(spw_tensor_adopt(c, "u", PAGE, SPW_TENSOR_RESIDENT, &t, NULL), -ENOENT);
	/* 0 bytes: at whatever size it has (the optimizer's journal); a
	 * register of 0 bytes is still refused. */
	{
		uint32_t pages = 0;

		ASSERT_EQ(spw_tensor_register(c, "z", 0, SPW_TENSOR_RESIDENT, &t, NULL), -EINVAL);
		ASSERT_OK(spw_tensor_adopt(c, "t", 0, SPW_TENSOR_RESIDENT, &t, &pages));
		ASSERT_EQ(pages, 1u);
	}
	ASSERT_EQ(spw_tensor_adopt(c, "t", PAGE, SPW_TENSOR_RESIDENT, &t, NULL), -EEXIST);
	expect_pattern(c, t, 11);
	/* A live session cannot be dropped; a detach ends it. */
	{
		spw_client *o = connect_client();

		ASSERT_EQ(spw_client_drop(o, "job/rank0"), -EBUSY);
		ASSERT_CONTAINS(spw_client_last_error(o), "attached by pid");
		spw_client_free(o);
	}
	ASSERT_OK(spw_client_detach(c));
	session_state("job/rank0", state, sizeof(state));
	ASSERT_STREQ(state, "");
	spw_client_free(c);
}

static void test_other_uid(void)
{
	pid_t pid;
	int status;

	if (geteuid() != 0) {
		printf("# not root: the other-uid refusals are not exercised\n");
		return;
	}
	trainer_died("job/rank1", 8 * MiB, 600, 22);
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		spw_client *c;

		if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(2);
		c = connect_client();
		if (attach(c, "job/rank1", 8 * MiB, true, 0) != -EPERM)
			_exit(3);
		if (spw_client_drop(c, "job/rank1") != -EPERM)
			_exit(4);
		spw_client_free(c);
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);
	{
		char state[32];

		session_state("job/rank1", state, sizeof(state));
		ASSERT_STREQ(state, "orphaned");
	}
	/* Root may drop anyone's; here it is the owner anyway. */
	{
		spw_client *c = connect_client();

		ASSERT_OK(spw_client_drop(c, "job/rank1"));
		spw_client_free(c);
	}
}

static void test_drop_and_caps(void)
{
	spw_client *c = connect_client(), *o;
	char state[32];

	/* Orphans count against the pool: a new attach that needs their
	 * memory is refused naming them, never given it silently. */
	trainer_died("job/big", 48 * MiB, 600, 33);
	o = connect_client();
	ASSERT_EQ(attach(o, "job/new", 56 * MiB, false, 0), -ENOSPC);
	ASSERT_CONTAINS(spw_client_last_error(o), "job/big");
	ASSERT_CONTAINS(spw_client_last_error(o), "spillwayctl drop");
	ASSERT_OK(spw_client_drop(c, "job/big"));
	session_state("job/big", state, sizeof(state));
	ASSERT_STREQ(state, "");
	ASSERT_EQ(spw_client_drop(c, "job/big"), -ENOENT);
	/* No persist.state_dir: a flush has nowhere to go, and says so. */
	ASSERT_EQ(spw_client_flush(c, "job/rank0", NULL), -EOPNOTSUPP);
	ASSERT_CONTAINS(spw_client_last_error(c), "persist.state_dir");
	ASSERT_OK(attach(o, "job/new", 56 * MiB, false, 0));
	spw_client_free(o);
	spw_client_free(c);
}

/* The operator's view: spillwayctl shows the orphan and its lease, and
 * drops it. */
static void test_ctl(void)
{
	static char out[65536];
	const char *ctl = getenv("SPILLWAYCTL");
	char cmd[1024];
	int st;

	ASSERT_TRUE(ctl != NULL);
	trainer_died("job/ctl", 8 * MiB, 600, 55);
	snprintf(cmd, sizeof(cmd), "%s --socket-dir %s status 2>&1", ctl, d.dir);
	st = command_output(cmd, out, sizeof(out));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_CONTAINS(out, "job/ctl");
	ASSERT_CONTAINS(out, "orphaned ");
	ASSERT_CONTAINS(out, "s left");
	snprintf(cmd, sizeof(cmd), "%s --socket-dir %s drop job/ctl 2>&1", ctl, d.dir);
	st = command_output(cmd, out, sizeof(out));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_CONTAINS(out, "dropped job/ctl");
	st = command_output(cmd, out, sizeof(out));
	ASSERT_EQ(WEXITSTATUS(st), 1);
	ASSERT_CONTAINS(out, "no such session");
}

/* spillwayctl trace: the daemon's disk reads and writes of a session,
 * from outside the trainer, as Chrome trace JSON naming tensor and page,
 * with the region's slots in use as a counter; another uid is refused. */
static void test_ctl_trace(void)
{
	static char out[65536];
	const char *ctl = getenv("SPILLWAYCTL");
	char cmd[1024], file[512];
	struct spw_attach_opts a = { .size = sizeof(a), .session = "job/traced", .region_bytes = PAGE,
				     .page_size = PAGE };
	spw_client *c = connect_client();
	cJSON *doc, *e;
	int reads = 0, writes = 0, st, slots_seen = 0;
	uint32_t t;
	FILE *p;

	snprintf(file, sizeof(file), "%s/io.json", d.dir);
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "w", 4 * PAGE, SPW_TENSOR_SWAPPABLE, &t, NULL));
	snprintf(cmd, sizeof(cmd), "%s --socket-dir %s trace job/traced --seconds 3 -o %s 2>&1", ctl, d.dir, file);
	p = popen(cmd, "r");
	ASSERT_TRUE(p != NULL);
	/* The capture starts from the log's tail when spillwayctl says so (a
	 * fixed wait for that is too short on a loaded machine); the PINs
	 * below take milliseconds of its 3 s. */
	ASSERT_TRUE(fgets(out, sizeof(out), p) != NULL);
	ASSERT_CONTAINS(out, "job/traced's disk I/O for 3 s");
	/* One slot for four pages: every PIN after the first evicts. */
	for (int round = 0; round < 3; round++)
		for (uint32_t k = 0; k < 4; k++) {
			void *q;

			ASSERT_OK(spw_pin(c, t, k, &q));
			memset(q, round + (int)k, 64);
			ASSERT_OK(spw_unpin(c, t, k, SPW_DIRTY));
		}
	out[fread(out, 1, sizeof(out) - 1, p)] = '\0';
	st = pclose(p);
	ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_CONTAINS(out, "reads");
	{
		FILE *f = fopen(file, "r");
		static char json[1 << 20];

		ASSERT_TRUE(f != NULL);
		json[fread(json, 1, sizeof(json) - 1, f)] = '\0';
		fclose(f);
		doc = cJSON_Parse(json);
	}
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents")) {
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		const cJSON *args = cJSON_GetObjectItem(e, "args");

		/* The daemon's gauge: the region's one slot, once taken, stays
		 * in use (a clean page cached there). */
		if (!strcmp(name, "region slots in use")) {
			int v = cJSON_GetObjectItem(args, "value")->valueint;

			ASSERT_TRUE(v >= 0 && v <= 1);
			slots_seen |= 1 << v;
		}
		if (strcmp(name, "disk read") && strcmp(name, "disk write"))
			continue;
		ASSERT_EQ(cJSON_GetObjectItem(args, "tensor")->valueint, (int)t);
		ASSERT_TRUE(cJSON_GetObjectItem(args, "page")->valueint < 4);
		ASSERT_TRUE(cJSON_GetObjectItem(e, "dur")->valuedouble >= 0);
		reads += name[5] == 'r';
		writes += name[5] == 'w';
	}
	cJSON_Delete(doc);
	ASSERT_TRUE(reads > 0 && writes > 0);
	ASSERT_TRUE(slots_seen & 2);
	/* Another uid gets nothing of it. */
	if (geteuid() == 0) {
		snprintf(cmd, sizeof(cmd), "setpriv --reuid 65534 --regid 65534 --clear-groups %s --socket-dir %s trace "
			 "job/traced --seconds 0.1 -o /dev/null 2>&1", ctl, d.dir);
		st = command_output(cmd, out, sizeof(out));
		ASSERT_EQ(WEXITSTATUS(st), 1);
		ASSERT_CONTAINS(out, "another user");
	}
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
}

static void test_lease_ends(void)
{
	char state[32];
	int i;

	trainer_dies("job/brief", 8 * MiB, 1, 44);
	ASSERT_EQ(swap_files("brief"), 1);
	for (i = 0; i < 100; i++) {
		session_state("job/brief", state, sizeof(state));
		if (!state[0])
			break;
		usleep(100 * 1000);
	}
	ASSERT_STREQ(state, "");
	ASSERT_EQ(status_figure(d.status, "pool.used_bytes"), 0.0);
	ASSERT_EQ(status_figure(d.status, "pool.locked_bytes"), 0.0);
	ASSERT_EQ(swap_files("brief"), 0);
}

static const char *stalled_control, *stalled_status;

/* A trainer whose last PIN needs a read from disk: one slot for two pages,
 * so page 0 goes to disk when page 1 comes in. It dies once the daemon
 * reads: killed before the daemon took the PIN off the ring, it would
 * leave no read in flight. */
static int stalled_body(void *arg)
{
	struct spw_client_opts o = { .size = sizeof(o) };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "job/stall", .region_bytes = PAGE,
				     .page_size = PAGE, .persistent = 1 };
	spw_client *c;
	uint32_t t;
	uint8_t *p;

	(void)arg;
	if (spw_client_new(&o, &c) < 0 || spw_client_connect(c, stalled_control) < 0 || spw_client_attach(c, &a) < 0 ||
	    spw_tensor_register(c, "t", 2 * PAGE, SPW_TENSOR_SWAPPABLE, &t, NULL) < 0)
		return -1;
	fill(c, t, 66);
	if (spw_pin(c, t, 1, (void **)&p) < 0 || spw_unpin(c, t, 1, SPW_DIRTY) < 0 || spw_submit_pin(c, t, 0, 7) < 0)
		return -1;
	/* The read stalls 1.5 s: ample time to see it here. */
	for (int i = 0; i < 1000; i++) {
		if (session_figure(stalled_status, "job/stall", "tier.reads_inflight") >= 1)
			return 0;
		usleep(1000);
	}
	return -1;
}

/* A trainer killed while a page it asked for is still being read from a
 * stalled drive: the orphan settles (its pins released) once that read
 * completes; an attach before then is told to come back (EAGAIN), one
 * after takes it over with the page's bytes intact. */
static void test_settling(void)
{
	struct spw_test_daemon sd;
	struct spw_session_info info = { .size = sizeof(info) };
	spw_client *c;
	int r, tries = 0;
	uint32_t t;

	/* The daemon's first disk read stalls 1.5 s. */
	setenv("SPILLWAY_FAULTS", "read:stall=1500@1", 1);
	ASSERT_OK(spw_test_daemon_start(&sd,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"64MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"64MiB\"}], \"session_bytes\": \"16MiB\"},"
		" \"log\": {\"level\": \"info\"}}"));
	unsetenv("SPILLWAY_FAULTS");
	stalled_control = sd.control;
	stalled_status = sd.status;
	killed_after(stalled_body, NULL);

	c = NULL;
	{
		struct spw_client_opts o = { .size = sizeof(o) };

		ASSERT_OK(spw_client_new(&o, &c));
		ASSERT_OK(spw_client_connect(c, sd.control));
	}
	{
		struct spw_attach_opts a = { .size = sizeof(a), .session = "job/stall", .region_bytes = PAGE,
					     .page_size = PAGE, .persistent = 1 };

		r = spw_client_attach(c, &a);
		ASSERT_EQ(r, -EAGAIN);
		ASSERT_CONTAINS(spw_client_last_error(c), "in flight");
		while ((r = spw_client_attach(c, &a)) == -EAGAIN && tries++ < 100)
			usleep(50 * 1000);
		ASSERT_OK(r);
	}
	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_EQ(info.reattached, 1);
	/* The dead client's pin (delivered after it died) was released. */
	ASSERT_EQ(session_figure(sd.status, "job/stall", "pages_pinned"), 0.0);
	ASSERT_OK(spw_tensor_adopt(c, "t", 2 * PAGE, SPW_TENSOR_SWAPPABLE, &t, NULL));
	expect_pattern(c, t, 66);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&sd), 0);
}

/* limits.lease_max_s: a longer lease is refused naming the key; the
 * default lease is cut to it. */
static void test_lease_max(void)
{
	struct spw_test_daemon ld;
	struct spw_session_info info = { .size = sizeof(info) };
	struct spw_client_opts o = { .size = sizeof(o) };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "job/lease", .region_bytes = PAGE,
				     .page_size = PAGE, .persistent = 1, .lease_s = 120 };
	spw_client *c;

	ASSERT_OK(spw_test_daemon_start(&ld,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"64MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"limits\": {\"lease_max_s\": 60}, \"log\": {\"level\": \"warn\"}}"));
	ASSERT_OK(spw_client_new(&o, &c));
	ASSERT_OK(spw_client_connect(c, ld.control));
	ASSERT_EQ(spw_client_attach(c, &a), -EDQUOT);
	ASSERT_CONTAINS(spw_client_last_error(c), "limits.lease_max_s (60 s)");
	a.lease_s = 0;
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_UEQ(info.lease_s, 60);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&ld), 0);
}

int main(void)
{
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		" \"pool\": {\"max_bytes\": \"96MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"16MiB\"},"
		" \"log\": {\"level\": \"info\"}}"));
	test_take_over();
	test_other_uid();
	test_drop_and_caps();
	test_ctl();
	test_ctl_trace();
	test_lease_ends();
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	test_settling();
	test_lease_max();
	printf("ok\n");
	return 0;
}
