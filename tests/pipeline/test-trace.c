/* SPDX-License-Identifier: MIT */
/*
 * test-trace: the optimizer's timeline (SPILLWAY_TRACE, client/trace.c).
 *   off    without SPILLWAY_TRACE no file is written and spw_trace_flush()
 *          says -ENODATA (-EINVAL for NULL)
 *   on     a few overlapped steps over two tensors of several chunks: the
 *          file is JSON with a traceEvents array; every X event is well
 *          formed; the step spans follow each other; for every chunk
 *          the i-th D2H copy ends before the i-th kernel span starts, which
 *          ends before the i-th H2D copy starts (causal order); each pool
 *          worker's track holds its tiles, never two at once
 *   disk   the NVMe tier: the daemon's reads and writes are on the
 *          timeline, and its gauges as counters: region slots in use
 *          (never more than the region's slots, at some point all but
 *          none) and pins in flight
 *   ring   SPILLWAY_TRACE_EVENTS=10: exactly the last 10 spans are kept
 *   steps  SPILLWAY_TRACE_STEPS=2: the last two steps' spans, nothing that
 *          ended before the first of them began
 *   path   spw_client_opts.trace_path without SPILLWAY_TRACE: the file is
 *          written there
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <stdbool.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "pipeline-fixture.h"
#include "test.h"

#define N (5 * (PAGE / 4))
#define STEPS 3
#define MAXCH 8

static float init[2][N], dev[2][N], g[2][N];

/* Runs STEPS overlapped steps over two tensors on tier, flushing after
 * the first when flush_rc says what flush should return; frees the
 * optimizer. */
static void run_on(spw_client *c, int flush_rc, enum spw_tensor_kind tier)
{
	static const struct spw_param_group group = {
		.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
	};
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = SPW_OPT_OVERLAPPED, .tier = tier, .groups = &group,
		.ngroups = 1, .threads = 2, .window = 2, .device = "host",
	};
	spw_optimizer *o;
	uint32_t id[2];

	for (size_t i = 0; i < N; i++) {
		init[0][i] = init[1][i] = (float)i * 1e-4f;
		g[0][i] = g[1][i] = 0.01f;
	}
	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	ASSERT_OK(spw_optimizer_add(o, "a", 0, N, init[0], dev[0], SPW_TYPE_F32, &id[0]));
	ASSERT_OK(spw_optimizer_add(o, "b", 0, N, init[1], dev[1], SPW_TYPE_F32, &id[1]));
	for (uint64_t s = 1; s <= STEPS; s++) {
		ASSERT_OK(spw_optimizer_begin(o, s, NULL, 0.0f));
		for (int t = 1; t >= 0; t--)
			ASSERT_OK(spw_optimizer_grad_ready(o, id[t], SPW_ALL_CHUNKS, g[t], sizeof(g[t]), SPW_TYPE_F32,
							   NULL));
		ASSERT_OK(spw_optimizer_end(o, NULL));
		ASSERT_OK(spw_optimizer_sync(o));
		if (s == 1)
			ASSERT_EQ(spw_trace_flush(o), flush_rc);
	}
	spw_optimizer_free(o);
}

static void run(spw_client *c, int flush_rc)
{
	run_on(c, flush_rc, SPW_TENSOR_RESIDENT);
}

static cJSON *load(const char *path)
{
	FILE *f = fopen(path, "r");
	static char buf[8u << 20];
	size_t n;
	cJSON *root;

	ASSERT_TRUE(f != NULL);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	ASSERT_TRUE(n < sizeof(buf) - 1);
	buf[n] = 0;
	root = cJSON_Parse(buf);
	ASSERT_TRUE(root != NULL);
	ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(root, "traceEvents")));
	return root;
}

static double num(const cJSON *e, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(e, k);

	ASSERT_TRUE(cJSON_IsNumber(v));
	return v->valuedouble;
}

/* Span lists per (tensor, chunk) and kind, in start order. */
struct spans {
	double ts[STEPS], end[STEPS];
	int n;
};

static void add(struct spans *s, double ts, double end)
{
	int i;

	ASSERT_LT(s->n, STEPS);
	for (i = s->n++; i > 0 && s->ts[i - 1] > ts; i--) {
		s->ts[i] = s->ts[i - 1];
		s->end[i] = s->end[i - 1];
	}
	s->ts[i] = ts;
	s->end[i] = end;
}

/* One worker's tile spans, to see they never overlap. */
#define MAXW 8
#define MAXTILES 256
struct lane {
	double ts[MAXTILES], end[MAXTILES];
	int n;
};

static void add_tile(struct lane *l, double ts, double end)
{
	ASSERT_LT(l->n, MAXTILES);
	l->ts[l->n] = ts;
	l->end[l->n++] = end;
}

static void lane_check(const struct lane *l)
{
	for (int i = 0; i < l->n; i++)
		for (int k = 0; k < l->n; k++)
			ASSERT_TRUE(i == k || l->end[i] <= l->ts[k] || l->end[k] <= l->ts[i]);
}

static void check_on(const char *path)
{
	static struct spans d2h[2][MAXCH], kern[2][MAXCH], h2d[2][MAXCH];
	cJSON *root = load(path), *e;
	static struct lane tiles[MAXW];
	double last_end = -1.0, slots_max = 0;
	int steps = 0, names = 0, pins = 0, chunks = 0, counters = 0, ntiles = 0;

	memset(tiles, 0, sizeof(tiles));
	memset(d2h, 0, sizeof(d2h));
	memset(kern, 0, sizeof(kern));
	memset(h2d, 0, sizeof(h2d));

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
		const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *name = cJSON_GetObjectItem(e, "name");
		const cJSON *args = cJSON_GetObjectItem(e, "args");
		double ts, dur;

		ASSERT_TRUE(cJSON_IsString(ph) && cJSON_IsString(name));
		num(e, "pid");
		num(e, "tid");
		if (!strcmp(ph->valuestring, "M")) {
			names += !strcmp(name->valuestring, "thread_name");
			continue;
		}
		if (!strcmp(ph->valuestring, "C")) {
			double v = num(args, "value");

			ASSERT_TRUE(v >= 0 && num(e, "ts") > 0);
			/* The window's use: 0 up to the window (2 here). */
			if (!strcmp(name->valuestring, "jobs in flight"))
				ASSERT_TRUE(v <= 2);
			/* The daemon's gauges: a resident session's pages
			 * hold slots (two tensors of 5 pages of p, m, v, and
			 * the staging) once the first step has touched them. */
			else if (!strcmp(name->valuestring, "region slots in use"))
				slots_max = v > slots_max ? v : slots_max;
			else
				ASSERT_STREQ(name->valuestring, "pins in flight");
			counters++;
			continue;
		}
		ASSERT_STREQ(ph->valuestring, "X");
		ts = num(e, "ts");
		dur = num(e, "dur");
		ASSERT_TRUE(dur >= 0.0 && ts > 0.0);
		ASSERT_TRUE(cJSON_IsObject(args));
		if (!strcmp(name->valuestring, "step")) {
			/* Recorded at each step's end, so in file order. */
			ASSERT_TRUE(ts >= last_end);
			ASSERT_EQ((int)num(args, "step"), steps + 1);
			last_end = ts + dur;
			steps++;
			continue;
		}
		int t = (int)num(args, "tensor"), k = (int)num(args, "chunk");

		ASSERT_TRUE(t >= 0 && t < 2 && k >= 0 && k < MAXCH);
		if (!strcmp(name->valuestring, "d2h grad"))
			add(&d2h[t][k], ts, ts + dur);
		else if (!strcmp(name->valuestring, "adam"))
			add(&kern[t][k], ts, ts + dur);
		else if (!strcmp(name->valuestring, "h2d params"))
			add(&h2d[t][k], ts, ts + dur);
		else if (!strcmp(name->valuestring, "pin wait"))
			pins++;
		else if (!strcmp(name->valuestring, "tile: adam")) {
			/* A worker's own track: its tiles one after another. */
			int w = (int)num(e, "tid") % 100;

			ASSERT_TRUE(w >= 0 && w < MAXW);
			add_tile(&tiles[w], ts, ts + dur);
			ntiles++;
		} else
			ASSERT_STREQ(name->valuestring, "a span this test knows");
	}
	ASSERT_EQ(steps, STEPS);
	ASSERT_GT(counters, 0);
	ASSERT_TRUE(slots_max >= 2 * 3 * 5);
	ASSERT_GE(names, 5);    /* one lane at least per track */
	ASSERT_EQ(pins, 2 * 5 * STEPS);
	for (int t = 0; t < 2; t++)
		for (int k = 0; k < MAXCH; k++) {
			ASSERT_EQ(d2h[t][k].n, k < 5 ? STEPS : 0);
			ASSERT_EQ(kern[t][k].n, d2h[t][k].n);
			ASSERT_EQ(h2d[t][k].n, d2h[t][k].n);
			for (int i = 0; i < d2h[t][k].n; i++) {
				ASSERT_TRUE(d2h[t][k].end[i] <= kern[t][k].ts[i]);
				ASSERT_TRUE(kern[t][k].end[i] <= h2d[t][k].ts[i]);
				chunks++;
			}
		}
	ASSERT_EQ(chunks, 2 * 5 * STEPS);
	/* Every update ran as tiles on the workers' tracks, which never
	 * overlap on one worker. */
	ASSERT_GE(ntiles, 2 * 5 * STEPS);
	for (int w = 0; w < MAXW; w++)
		lane_check(&tiles[w]);
	cJSON_Delete(root);
}

/* The NVMe tier in a region of a third of the state: the daemon's reads
 * and writes of the session are on the timeline, each naming the tensor
 * and page, none before the first step began. */
static void check_disk(const char *path, double nslots)
{
	cJSON *root = load(path), *e;
	double first_step = -1.0, slots_max = 0, pins_max = 0;
	int reads = 0, writes = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
		if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "step") && first_step < 0)
			first_step = num(e, "ts");
	ASSERT_TRUE(first_step > 0);
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		const cJSON *args = cJSON_GetObjectItem(e, "args");
		bool rd = !strcmp(name, "disk read"), wr = !strcmp(name, "disk write");

		if (!strcmp(name, "region slots in use")) {
			ASSERT_TRUE(num(args, "value") <= nslots);
			if (num(args, "value") > slots_max)
				slots_max = num(args, "value");
		}
		if (!strcmp(name, "pins in flight") && num(args, "value") > pins_max)
			pins_max = num(args, "value");
		if (!rd && !wr)
			continue;
		/* One clock on both sides: the daemon's spans fall in the run
		 * (an I/O the daemon logged a moment after the first begin may
		 * have ended just before it). */
		ASSERT_TRUE(num(e, "dur") >= 0.0 && num(e, "ts") + num(e, "dur") >= first_step - 50e3);
		ASSERT_TRUE((int)num(args, "tensor") >= 0 && (int)num(args, "tensor") < 2);
		ASSERT_TRUE((int)num(args, "chunk") >= 0 && (int)num(args, "chunk") < 5);
		reads += rd;
		writes += wr;
	}
	fprintf(stderr, "disk spans: %d reads, %d writes; at most %g slots in use, %g pins in flight\n", reads, writes,
		slots_max, pins_max);
	ASSERT_TRUE(reads > 0 && writes > 0);
	/* The region is a third of the state: the pager fills it. */
	ASSERT_TRUE(slots_max >= nslots - 1 && pins_max > 0);
	cJSON_Delete(root);
}

static void check_ring(const char *path)
{
	cJSON *root = load(path), *e;
	int x = 0, last_step = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
		const cJSON *name = cJSON_GetObjectItem(e, "name");

		/* Spans and counters share the ring of the newest events. */
		if (!strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "M"))
			continue;
		x++;
		if (!strcmp(name->valuestring, "step"))
			last_step = (int)num(cJSON_GetObjectItem(e, "args"), "step");
	}
	ASSERT_EQ(x, 10);
	/* The last step ended after its gradients' copies and before the last
	 * kernels: it is among the newest spans, the first steps are not. */
	ASSERT_EQ(last_step, STEPS);
	cJSON_Delete(root);
}

/* SPILLWAY_TRACE_STEPS=keep: step spans of the last keep steps only, and
 * no event that ended before the first of them began. */
static void check_steps(const char *path, int keep)
{
	cJSON *root = load(path), *e;
	double first = -1.0;
	int steps = 0, events = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
		if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "step")) {
			int k = (int)num(cJSON_GetObjectItem(e, "args"), "step");

			ASSERT_EQ(k, STEPS - keep + 1 + steps);
			if (steps++ == 0)
				first = num(e, "ts");
		}
	ASSERT_EQ(steps, keep);
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
		if (!strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "M"))
			continue;
		events++;
		ASSERT_TRUE(num(e, "ts") + (cJSON_GetObjectItem(e, "dur") ? num(e, "dur") : 0.0) >= first);
	}
	ASSERT_GT(events, keep);
	cJSON_Delete(root);
}

int main(void)
{
	char dir[] = "/tmp/spw-trace-XXXXXX", path[64], tmp[80];
	struct spw_test_daemon d;
	spw_client *c;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/t.json", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	ASSERT_EQ(spw_trace_flush(NULL), -EINVAL);
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"256MiB\"}], \"session_bytes\": \"16MiB\"},"
		" \"log\": {\"level\": \"warn\"}}"));

	unsetenv("SPILLWAY_TRACE");
	c = connect_client(&d, "trace/0", 8u << 20);
	run(c, -ENODATA);
	spw_client_free(c);
	ASSERT_TRUE(access(path, F_OK) != 0);

	setenv("SPILLWAY_TRACE", path, 1);
	c = connect_client(&d, "trace/1", 8u << 20);
	run(c, 0);
	spw_client_free(c);
	ASSERT_TRUE(access(tmp, F_OK) != 0);
	check_on(path);

	c = connect_client(&d, "trace/disk", 12 * PAGE);
	run_on(c, 0, SPW_TENSOR_SWAPPABLE);
	spw_client_free(c);
	check_disk(path, 12);

	setenv("SPILLWAY_TRACE_STEPS", "2", 1);
	c = connect_client(&d, "trace/steps", 8u << 20);
	run(c, 0);
	spw_client_free(c);
	check_steps(path, 2);
	unsetenv("SPILLWAY_TRACE_STEPS");

	setenv("SPILLWAY_TRACE_EVENTS", "10", 1);
	c = connect_client(&d, "trace/2", 8u << 20);
	run(c, 0);
	spw_client_free(c);
	check_ring(path);
	unsetenv("SPILLWAY_TRACE_EVENTS");
	unsetenv("SPILLWAY_TRACE");

	{
		char opt_path[80];
		struct spw_client_opts co = { .size = sizeof(co), .trace_path = opt_path };
		struct spw_attach_opts a = { .size = sizeof(a), .session = "trace/path", .region_bytes = 8u << 20,
					     .page_size = PAGE };

		snprintf(opt_path, sizeof(opt_path), "%s/opt.json", dir);
		ASSERT_OK(spw_client_new(&co, &c));
		/* The path is copied at spw_client_new(). */
		snprintf(opt_path, sizeof(opt_path), "%s/other.json", dir);
		ASSERT_OK(spw_client_connect(c, d.control));
		ASSERT_OK(spw_client_attach(c, &a));
		run(c, 0);
		spw_client_free(c);
		ASSERT_TRUE(access(opt_path, F_OK) != 0);
		snprintf(opt_path, sizeof(opt_path), "%s/opt.json", dir);
		check_on(opt_path);
		unlink(opt_path);
	}

	unlink(path);
	rmdir(dir);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
