/* SPDX-License-Identifier: MIT */
/*
 * client/trace.h: the optimizer's timeline, a Chrome trace-event recorder
 * (SPILLWAY_TRACE=path.json). Off, it costs one pointer test per hook
 * (TRACE_ON); on, each span is a short append under a mutex into a fixed
 * ring of events, the oldest overwritten when it is full, written out as
 * JSON by spw_trace_flush() and at spw_optimizer_free().
 */
#ifndef SPW_CLIENT_TRACE_H
#define SPW_CLIENT_TRACE_H

#include <stdint.h>

struct spw__trace;

/* Tracks: each kind of span has its own set of lanes (tids), so spans that
 * overlap in time (jobs in flight at once) never share a lane. */
enum spw__trace_track {
	SPW_TRACK_TRAINER,      /* steps */
	SPW_TRACK_D2H,          /* gradient copies, queued .. arrived */
	SPW_TRACK_PIN,          /* the engine's pin waits, PIN submit .. all back */
	SPW_TRACK_KERNELS,      /* a job's kernels on the pool, first .. last tile */
	SPW_TRACK_H2D,          /* parameter copies, queued .. arrived */
	SPW_TRACK_DISK,         /* the daemon's reads and writes of this session (trace-daemon.c) */
	SPW_TRACK_WORKER,       /* each pool worker's tiles, a lane per worker (not by overlap) */
	SPW_TRACK__N,
};

/* A trace recorder writing to path (the client's trace_path), or when that
 * is NULL or empty to SPILLWAY_TRACE; NULL when neither names a file (also
 * when memory is short: tracing is a diagnostic, never a reason to fail). */
struct spw__trace *spw__trace_new(const char *path);

/* Records one complete span [t0, t1] (now_ns() clock) named name (a
 * string literal) on track; tensor and chunk go to its args (UINT32_MAX:
 * none); step is the optimizer's step number (UINT64_MAX: none). */
void spw__trace_span(struct spw__trace *t, enum spw__trace_track track, const char *name, uint64_t t0,
		     uint64_t t1, uint32_t tensor, uint32_t chunk, uint64_t step);

/* Records a span on a lane of track chosen by the caller (a worker's own:
 * its spans never overlap), lane < 32; otherwise as spw__trace_span. */
void spw__trace_span_on(struct spw__trace *t, enum spw__trace_track track, unsigned lane, const char *name,
			uint64_t t0, uint64_t t1, uint32_t tensor, uint32_t chunk);

/* Records a counter's value (a Chrome "C" event) at ts (now_ns() clock):
 * name a string literal. */
void spw__trace_counter(struct spw__trace *t, const char *name, uint64_t ts, uint64_t value);

/* Writes the events held to the file (path.tmp, then renamed): 0 or -errno. */
int spw__trace_write(struct spw__trace *t);

/* Writes and frees; the write's result. NULL: 0. */
int spw__trace_free(struct spw__trace *t);

/* A span only when tracing is on: the one test a hook costs when off. */
#define TRACE_SPAN(o, ...)                                              \
	do {                                                            \
		if ((o)->trace)                                         \
			spw__trace_span((o)->trace, __VA_ARGS__);       \
	} while (0)

/* A job's span [t0, now] with its tensor (the optimizer's index) and chunk. */
#define TRACE_JOB(o, track, name, t0, j)                                                        \
	TRACE_SPAN(o, track, name, t0, now_ns(), (uint32_t)((j)->ch->t - (o)->tensors), (j)->ch->index, \
		   UINT64_MAX)

/* A timestamp only when tracing is on. */
#define TRACE_NOW(o) ((o)->trace ? now_ns() : 0)

#endif
