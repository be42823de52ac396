/* SPDX-License-Identifier: MIT */
/*
 * client/trace-daemon.c: the daemon's side of the timeline. spillwayd logs
 * every disk read and write of the session in the rings memfd (the I/O
 * log, spw-ring.h); while tracing, the engine copies new records out on
 * each pass and puts them on the "spillwayd: disk" track, named by the
 * optimizer's tensor and the page (= chunk), with the daemon's gauges of
 * the region (slots in use, pins in flight) as counters. One clock: both
 * sides stamp with CLOCK_MONOTONIC. The log is the daemon's to write and
 * ours only to read; nothing in it is trusted beyond showing it.
 */
#include <stdlib.h>
#include <string.h>

#include "optimizer-private.h"

void spw__opt_trace_disk_map(spw_optimizer *o)
{
	uint32_t n = 0;

	if (!o->trace || o->io_map)
		return;
	for (uint32_t i = 0; i < o->ntensors; i++)
		for (unsigned r = 0; r < R__T; r++)
			if (role_used(&o->tensors[i], r) && o->tensors[i].id[r] + 1 > n)
				n = o->tensors[i].id[r] + 1;
	o->io_buf = malloc(SPW_IO_LOG_ENTRIES * sizeof(*o->io_buf));
	if (!o->io_buf || !(o->io_map = calloc(n ? n : 1, sizeof(*o->io_map))))
		return;
	for (uint32_t i = 0; i < o->ntensors; i++)
		for (unsigned r = 0; r < R__T; r++)
			if (role_used(&o->tensors[i], r))
				o->io_map[o->tensors[i].id[r]] = i + 1;
	o->io_map_n = n;
	/* From here on: the set-up's I/O is not the steps'. */
	if (o->c->ring.io_hdr)
		o->io_seen = __atomic_load_n(&o->c->ring.io_hdr->tail, __ATOMIC_ACQUIRE);
}

/* The optimizer's tensor index of a daemon tensor id, or UINT32_MAX. */
static uint32_t tensor_of(const spw_optimizer *o, uint32_t id)
{
	return id < o->io_map_n && o->io_map[id] ? o->io_map[id] - 1 : UINT32_MAX;
}

/* The daemon's gauges of the region (spw-ring.h), as counters when they
 * moved since the last look, and once in every step (the file keeps the
 * last steps only: a gauge that stays put must still show there):
 * sampled, so a swing between two engine passes may not show. */
static void trace_gauges(spw_optimizer *o, const struct spw_io_log_hdr *h)
{
	static const char *const name[2] = { "region slots in use", "pins in flight" };
	uint64_t v[2] = { __atomic_load_n(&h->slots_used, __ATOMIC_RELAXED),
			  __atomic_load_n(&h->pages_pinned, __ATOMIC_RELAXED) };
	uint64_t step = __atomic_load_n(&o->step, __ATOMIC_RELAXED); /* the trainer's: only a hint here */
	bool again = o->traced_gauge_step != step;

	o->traced_gauge_step = step;
	for (unsigned i = 0; i < 2; i++)
		if (again || o->traced_gauge[i] != v[i] + 1) {
			o->traced_gauge[i] = v[i] + 1;
			spw__trace_counter(o->trace, name[i], now_ns(), v[i]);
		}
}

void spw__opt_trace_disk(spw_optimizer *o)
{
	const struct spw__ring *r = &o->c->ring;
	uint64_t tail, first, again, n;

	/* Only once the tensors are known (the first begin made the map):
	 * what came before is the set-up's. */
	if (!o->trace || !r->io_hdr || !o->io_map)
		return;
	trace_gauges(o, r->io_hdr);
	tail = __atomic_load_n(&r->io_hdr->tail, __ATOMIC_ACQUIRE);
	if (tail == o->io_seen)
		return;
	if (tail < o->io_seen || !o->io_buf) {
		o->io_seen = tail; /* a log that went backwards is not ours to explain */
		return;
	}
	first = tail - o->io_seen > SPW_IO_LOG_ENTRIES ? tail - SPW_IO_LOG_ENTRIES : o->io_seen;
	n = tail - first;
	for (uint64_t k = 0; k < n; k++)
		o->io_buf[k] = r->io_events[(first + k) % SPW_IO_LOG_ENTRIES];
	/* Records the daemon overwrote while we copied are dropped. */
	again = __atomic_load_n(&r->io_hdr->tail, __ATOMIC_ACQUIRE);
	for (uint64_t k = 0; k < n; k++) {
		const struct spw_io_event *e = &o->io_buf[k];

		if (first + k + SPW_IO_LOG_ENTRIES < again || e->end_ns < e->start_ns)
			continue;
		spw__trace_span(o->trace, SPW_TRACK_DISK, e->op == SPW_IO_READ ? "disk read" : "disk write", e->start_ns,
				e->end_ns, tensor_of(o, e->tensor), e->page, UINT64_MAX);
	}
	o->io_seen = tail;
}
