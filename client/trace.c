/* SPDX-License-Identifier: MIT */
/*
 * client/trace.c: the optimizer's timeline as Chrome trace-event JSON
 * (https://ui.perfetto.dev or chrome://tracing open it). Spans are "X"
 * (complete) events in microseconds of CLOCK_MONOTONIC (now_ns), the clock
 * the daemon uses too, so its spans can join these later. Memory is fixed:
 * a ring of SPILLWAY_TRACE_EVENTS events (default 200000), the oldest
 * overwritten, and the file holds what happened from the start of the
 * last SPILLWAY_TRACE_STEPS steps (default 20) on, so a long run keeps its
 * last steps.
 *
 * Lanes: spans of one kind overlap (a window of jobs is in flight at once)
 * and a viewer draws only nested spans on one track, so each kind has
 * lanes, and a span takes the first lane whose last span ended before it
 * began. Spans are recorded when they end, so within a lane they follow
 * each other and never overlap.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optimizer-private.h"
#include "trace.h"

#define DEFAULT_EVENTS 200000u
#define MAX_EVENTS (64u << 20)
#define DEFAULT_STEPS 20u
#define MAX_STEPS (1u << 20)
#define LANES 32u
#define COUNTER_TID UINT32_MAX /* an event with this tid is a counter: its value in step */

struct event {
	const char *name;
	uint64_t t0, t1, step;
	uint32_t tensor, chunk;
	uint32_t tid;
};

struct spw__trace {
	pthread_mutex_t lock;
	char *path;
	struct event *ev;
	size_t cap, head, count;        /* head: the next slot written */
	/* When the last nsteps steps began (a ring): what ended before the
	 * oldest of them is not written. */
	uint64_t *step_t0, steps_seen;
	size_t nsteps;
	uint64_t lane_end[SPW_TRACK__N][LANES];
	uint32_t lanes_used[SPW_TRACK__N];
};

static const char *const track_name[SPW_TRACK__N] = {
	[SPW_TRACK_TRAINER] = "trainer: steps",
	[SPW_TRACK_D2H] = "d2h: gradient copies",
	[SPW_TRACK_PIN] = "engine: pin waits",
	[SPW_TRACK_KERNELS] = "pool: job kernels",
	[SPW_TRACK_H2D] = "h2d: parameter copies",
	[SPW_TRACK_DISK] = "spillwayd: disk reads and writes",
	[SPW_TRACK_WORKER] = "pool worker",
};

static uint32_t tid_of(unsigned track, unsigned lane)
{
	return (uint32_t)(track + 1) * 100u + lane;
}

/* A positive count from the environment, or def when unset or unusable
 * (no logging here: a bad value keeps the default). */
static size_t env_count(const char *name, size_t def, size_t max)
{
	const char *n = getenv(name);
	char *end;
	unsigned long v;

	if (!n || !*n)
		return def;
	v = strtoul(n, &end, 10);
	return !*end && v > 0 && v <= max ? v : def;
}

struct spw__trace *spw__trace_new(const char *path)
{
	size_t cap = env_count("SPILLWAY_TRACE_EVENTS", DEFAULT_EVENTS, MAX_EVENTS);
	size_t steps = env_count("SPILLWAY_TRACE_STEPS", DEFAULT_STEPS, MAX_STEPS);
	struct spw__trace *t;

	if (!path || !*path)
		path = getenv("SPILLWAY_TRACE");
	if (!path || !*path)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->path = strdup(path);
	t->ev = calloc(cap, sizeof(*t->ev));
	t->step_t0 = calloc(steps, sizeof(*t->step_t0));
	if (!t->path || !t->ev || !t->step_t0) {
		free(t->path);
		free(t->ev);
		free(t->step_t0);
		free(t);
		return NULL;
	}
	t->cap = cap;
	t->nsteps = steps;
	pthread_mutex_init(&t->lock, NULL);
	return t;
}

/* Appends e to the ring, the oldest overwritten when it is full. Lock held. */
static void append_locked(struct spw__trace *t, struct event e)
{
	t->ev[t->head] = e;
	t->head = (t->head + 1) % t->cap;
	if (t->count < t->cap)
		t->count++;
}

void spw__trace_span(struct spw__trace *t, enum spw__trace_track track, const char *name, uint64_t t0,
		     uint64_t t1, uint32_t tensor, uint32_t chunk, uint64_t step)
{
	unsigned lane;

	if (t1 < t0)
		t1 = t0;
	pthread_mutex_lock(&t->lock);
	if (track == SPW_TRACK_TRAINER)
		t->step_t0[t->steps_seen++ % t->nsteps] = t0;
	for (lane = 0; lane < LANES - 1; lane++)
		if (t->lane_end[track][lane] <= t0)
			break;
	t->lane_end[track][lane] = t1;
	if (lane + 1 > t->lanes_used[track])
		t->lanes_used[track] = lane + 1;
	append_locked(t, (struct event){ .name = name, .t0 = t0, .t1 = t1, .step = step, .tensor = tensor,
					 .chunk = chunk, .tid = tid_of(track, lane) });
	pthread_mutex_unlock(&t->lock);
}

void spw__trace_span_on(struct spw__trace *t, enum spw__trace_track track, unsigned lane, const char *name,
			uint64_t t0, uint64_t t1, uint32_t tensor, uint32_t chunk)
{
	if (lane >= LANES)
		lane = LANES - 1;
	if (t1 < t0)
		t1 = t0;
	pthread_mutex_lock(&t->lock);
	if (lane + 1 > t->lanes_used[track])
		t->lanes_used[track] = lane + 1;
	append_locked(t, (struct event){ .name = name, .t0 = t0, .t1 = t1, .step = UINT64_MAX, .tensor = tensor,
					 .chunk = chunk, .tid = tid_of(track, lane) });
	pthread_mutex_unlock(&t->lock);
}

void spw__trace_counter(struct spw__trace *t, const char *name, uint64_t ts, uint64_t value)
{
	pthread_mutex_lock(&t->lock);
	append_locked(t, (struct event){ .name = name, .t0 = ts, .t1 = ts, .step = value, .tid = COUNTER_TID });
	pthread_mutex_unlock(&t->lock);
}

static void put_event(FILE *f, const struct event *e, int pid, bool first)
{
	if (e->tid == COUNTER_TID) {
		fprintf(f, "%s\n{\"ph\":\"C\",\"name\":\"%s\",\"cat\":\"spillway\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
			"\"args\":{\"value\":%ju}}", first ? "" : ",", e->name, pid, (double)e->t0 / 1e3, (uintmax_t)e->step);
		return;
	}
	fprintf(f, "%s\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"spillway\",\"pid\":%d,\"tid\":%u,"
		"\"ts\":%.3f,\"dur\":%.3f,\"args\":{",
		first ? "" : ",", e->name, pid, e->tid, (double)e->t0 / 1e3, (double)(e->t1 - e->t0) / 1e3);
	if (e->step != UINT64_MAX)
		fprintf(f, "\"step\":%ju", (uintmax_t)e->step);
	else
		fprintf(f, "\"tensor\":%u,\"chunk\":%u", e->tensor, e->chunk);
	fputs("}}", f);
}

/* Writes the snapshot; 0 or -errno. */
static int write_file(const char *tmp, const struct event *ev, size_t count, const uint32_t *lanes)
{
	int pid = (int)getpid();
	bool first = true;
	FILE *f = fopen(tmp, "w");
	int r = 0;

	if (!f)
		return -errno;
	fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
	fprintf(f, "\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
		"\"args\":{\"name\":\"spillway client\"}}", pid);
	first = false;
	for (unsigned k = 0; k < SPW_TRACK__N; k++)
		for (unsigned l = 0; l < lanes[k]; l++) {
			fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%u,"
				"\"args\":{\"name\":\"%s %u\"}}", pid, tid_of(k, l), track_name[k], l);
			fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%u,"
				"\"args\":{\"sort_index\":%u}}", pid, tid_of(k, l), tid_of(k, l));
		}
	for (size_t i = 0; i < count; i++)
		put_event(f, &ev[i], pid, first);
	fputs("\n]}\n", f);
	if (ferror(f))
		r = -EIO;
	if (fflush(f) != 0 && r == 0)
		r = -errno;
	if (fsync(fileno(f)) != 0 && r == 0)
		r = -errno;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	return r;
}

int spw__trace_write(struct spw__trace *t)
{
	uint32_t lanes[SPW_TRACK__N];
	struct event *snap;
	size_t count, start;
	char *tmp;
	int r;

	if (asprintf(&tmp, "%s.tmp", t->path) < 0)
		return -ENOMEM;
	/* A copy, so hooks wait only for a memcpy, never for the disk. */
	pthread_mutex_lock(&t->lock);
	snap = malloc((t->count ? t->count : 1) * sizeof(*snap));
	if (snap) {
		/* The last nsteps steps, and what runs after them. */
		uint64_t cutoff = t->steps_seen >= t->nsteps ? t->step_t0[t->steps_seen % t->nsteps] : 0;

		start = (t->head + t->cap - t->count) % t->cap;
		count = 0;
		for (size_t i = 0; i < t->count; i++)
			if (t->ev[(start + i) % t->cap].t1 >= cutoff)
				snap[count++] = t->ev[(start + i) % t->cap];
		memcpy(lanes, t->lanes_used, sizeof(lanes));
	}
	pthread_mutex_unlock(&t->lock);
	if (!snap) {
		free(tmp);
		return -ENOMEM;
	}
	r = write_file(tmp, snap, count, lanes);
	if (r == 0 && rename(tmp, t->path) != 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	free(snap);
	free(tmp);
	return r;
}

int spw__trace_free(struct spw__trace *t)
{
	int r;

	if (!t)
		return 0;
	r = spw__trace_write(t);
	pthread_mutex_destroy(&t->lock);
	free(t->ev);
	free(t->step_t0);
	free(t->path);
	free(t);
	return r;
}

SPW_EXPORT int spw_trace_flush(spw_optimizer *o)
{
	if (!o)
		return -EINVAL;
	if (!o->trace)
		return -ENODATA;
	spw__opt_trace_disk(o);
	return spw__trace_write(o->trace);
}
