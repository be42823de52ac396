/* SPDX-License-Identifier: MIT */
/*
 * spillwayctl trace SESSION [--seconds N] [-o FILE]: the daemon's disk reads
 * and writes of one session, captured from outside the trainer, as Chrome
 * trace-event JSON (Perfetto, chrome://tracing). The daemon hands a
 * read-only descriptor of the session's rings memfd (control message
 * io_log; the session's uid or root), whose I/O log (spw-ring.h) is read
 * every 20 ms for N seconds, with the daemon's gauges of the region
 * (slots in use, pins in flight) as counters. The trainer's own spans are in its own
 * timeline (SPILLWAY_TRACE); both use CLOCK_MONOTONIC, so the files line
 * up when merged.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "ctl-trace.h"
#include "spw-proto.h"
#include "spw-ring.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/unixsock.h"

struct gauge_sample {
	uint64_t ts, v[2]; /* slots in use, pins in flight */
};

struct capture {
	struct spw_io_event *ev;
	size_t n, cap;
	uint64_t seen, lost;
	struct gauge_sample *gs; /* the daemon's gauges, when they changed */
	size_t ngs, gcap;
};

static const char *const gauge_name[2] = { "region slots in use", "pins in flight" };

/* Samples the daemon's gauges of the region; kept when they moved. */
static int sample(struct capture *cp, const struct spw_io_log_hdr *hdr)
{
	struct gauge_sample g = { .ts = now_ns(), .v = { __atomic_load_n(&hdr->slots_used, __ATOMIC_RELAXED),
							 __atomic_load_n(&hdr->pages_pinned, __ATOMIC_RELAXED) } };

	if (cp->ngs && !memcmp(cp->gs[cp->ngs - 1].v, g.v, sizeof(g.v)))
		return 0;
	if (cp->ngs == cp->gcap) {
		size_t cap = cp->gcap ? cp->gcap * 2 : 256;
		void *p = realloc(cp->gs, cap * sizeof(*cp->gs));

		if (!p)
			return -ENOMEM;
		cp->gs = p;
		cp->gcap = cap;
	}
	cp->gs[cp->ngs++] = g;
	return 0;
}

/* One request, one reply (with at most one descriptor); the reply parsed,
 * or NULL with the reason printed. */
static cJSON *ask(int fd, const char *json, int *rfd, const char *what)
{
	static char buf[SPW_PROTO_MAX_FRAME + 1];
	int fds[SPW_PROTO_MAX_FDS];
	unsigned nfds = SPW_PROTO_MAX_FDS;
	const cJSON *err;
	cJSON *r;
	int n;

	if (spw_proto_send(fd, json, (uint32_t)strlen(json), NULL, 0) < 0 ||
	    (n = spw_proto_recv(fd, buf, sizeof(buf) - 1, fds, &nfds)) <= 0) {
		fprintf(stderr, "spillwayctl trace: %s: spillwayd did not answer\n", what);
		return NULL;
	}
	buf[n] = '\0';
	r = cJSON_Parse(buf);
	err = cJSON_GetObjectItemCaseSensitive(r, "message");
	if (!r || cJSON_IsString(err)) {
		fprintf(stderr, "spillwayctl trace: %s: %s\n", what, cJSON_IsString(err) ? err->valuestring : "bad reply");
		cJSON_Delete(r);
		r = NULL;
	}
	for (unsigned i = 0; i < nfds; i++) {
		if (r && rfd && *rfd < 0)
			*rfd = fds[i];
		else
			close(fds[i]);
	}
	return r;
}

static uint64_t num(const cJSON *o, const char *k)
{
	uint64_t v = 0;

	return json_uint(cJSON_GetObjectItemCaseSensitive(o, k), UINT64_MAX, &v) < 0 ? 0 : v;
}

/* The records logged since the last call (those overwritten meanwhile are
 * counted as lost). */
static int drain(struct capture *cp, const struct spw_io_log_hdr *hdr, const struct spw_io_event *log)
{
	uint64_t tail = __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE), first, again;

	if (tail < cp->seen) /* the session was taken over: a new log */
		cp->seen = 0;
	first = tail - cp->seen > SPW_IO_LOG_ENTRIES ? tail - SPW_IO_LOG_ENTRIES : cp->seen;
	cp->lost += first - cp->seen;
	if (cp->n + (tail - first) > cp->cap) {
		size_t cap = cp->cap ? cp->cap * 2 : 4096;
		void *p;

		while (cap < cp->n + (tail - first))
			cap *= 2;
		if (!(p = realloc(cp->ev, cap * sizeof(*cp->ev))))
			return -ENOMEM;
		cp->ev = p;
		cp->cap = cap;
	}
	for (uint64_t k = first; k < tail; k++)
		cp->ev[cp->n++] = log[k % SPW_IO_LOG_ENTRIES];
	again = __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE);
	/* Copied while the daemon wrapped over them: not to be trusted. */
	for (uint64_t k = first; k < tail && k + SPW_IO_LOG_ENTRIES < again; k++) {
		cp->ev[cp->n - (tail - k)].end_ns = 0;
		cp->lost++;
	}
	cp->seen = tail;
	return 0;
}

static int write_trace(const struct capture *cp, const char *session, const char *out, unsigned *reads,
		       unsigned *writes)
{
	FILE *f = strcmp(out, "-") ? fopen(out, "w") : stdout;

	if (!f)
		return -errno;
	fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
		   "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"spillwayd: %s\"}},\n"
		   "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"disk reads\"}},\n"
		   "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"disk writes\"}}",
		session);
	for (size_t i = 0; i < cp->n; i++) {
		const struct spw_io_event *e = &cp->ev[i];
		bool rd = e->op == SPW_IO_READ;

		if (e->end_ns < e->start_ns || e->start_ns == 0 || (e->op != SPW_IO_READ && e->op != SPW_IO_WRITE))
			continue;
		*reads += rd;
		*writes += !rd;
		fprintf(f, ",\n{\"ph\":\"X\",\"name\":\"%s\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
			   "\"args\":{\"tensor\":%u,\"page\":%u,\"res\":%d}}",
			rd ? "disk read" : "disk write", rd ? 1 : 2, (double)e->start_ns / 1e3,
			(double)(e->end_ns - e->start_ns) / 1e3, e->tensor, e->page, e->res);
	}
	for (size_t i = 0; i < cp->ngs; i++)
		for (unsigned k = 0; k < 2; k++)
			fprintf(f, ",\n{\"ph\":\"C\",\"name\":\"%s\",\"pid\":1,\"tid\":0,\"ts\":%.3f,"
				   "\"args\":{\"value\":%ju}}",
				gauge_name[k], (double)cp->gs[i].ts / 1e3, (uintmax_t)cp->gs[i].v[k]);
	fprintf(f, "\n]}\n");
	if (f != stdout && fclose(f) != 0)
		return -errno;
	return 0;
}

int ctl_trace_main(const char *dir, const char *session, const char *seconds, const char *out)
{
	char path[4096], req[512];
	struct capture cp = { 0 };
	const struct spw_io_log_hdr *hdr;
	const struct spw_io_event *log;
	uint64_t bytes, hoff, eoff, end_ns;
	unsigned reads = 0, writes = 0;
	double secs = seconds ? strtod(seconds, NULL) : 10.0;
	int fd, rfd = -1, r = 1;
	cJSON *rep;
	void *map;

	if (!(secs > 0 && secs <= 86400) || !spw_proto_session_name_valid(session)) {
		fprintf(stderr, "spillwayctl trace: give a session name and --seconds in (0, 86400]\n");
		return 2;
	}
	if (dir)
		snprintf(path, sizeof(path), "%s/control.sock", dir);
	else if (spw_socket_path(SPW_SOCKET_CONTROL, path, sizeof(path)) < 0)
		return 1;
	if ((fd = unix_connect(path)) < 0) {
		fprintf(stderr, "spillwayctl trace: no spillwayd answering at %s: %s\n", path, strerror(-fd));
		return 1;
	}
	snprintf(req, sizeof(req), "{\"type\":\"hello\",\"magic\":%u,\"major\":%d,\"minor\":%d}", SPW_PROTO_MAGIC,
		 SPW_PROTO_MAJOR, SPW_PROTO_MINOR);
	rep = ask(fd, req, NULL, "hello");
	cJSON_Delete(rep);
	snprintf(req, sizeof(req), "{\"type\":\"io_log\",\"session\":\"%s\"}", session);
	if (!rep || !(rep = ask(fd, req, &rfd, session)) || rfd < 0)
		goto out;
	bytes = num(rep, "rings_bytes");
	hoff = num(rep, "io_hdr_off");
	eoff = num(rep, "io_events_off");
	cJSON_Delete(rep);
	if (hoff + sizeof(*hdr) > bytes ||
	    eoff + (uint64_t)SPW_IO_LOG_ENTRIES * sizeof(*log) > bytes) {
		fprintf(stderr, "spillwayctl trace: the I/O log spillwayd described does not fit its rings\n");
		goto out;
	}
	map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, rfd, 0);
	if (map == MAP_FAILED) {
		fprintf(stderr, "spillwayctl trace: mapping %s's rings: %s\n", session, strerror(errno));
		goto out;
	}
	hdr = (const struct spw_io_log_hdr *)((const char *)map + hoff);
	log = (const struct spw_io_event *)((const char *)map + eoff);
	/* From now on: what was logged before is not this capture's. */
	cp.seen = __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE);
	fprintf(stderr, "spillwayctl trace: %s's disk I/O for %g s ...\n", session, secs);
	end_ns = now_ns() + (uint64_t)(secs * 1e9);
	while (now_ns() < end_ns && drain(&cp, hdr, log) == 0 && sample(&cp, hdr) == 0)
		usleep(20 * 1000);
	drain(&cp, hdr, log);
	munmap(map, bytes);
	if (write_trace(&cp, session, out ? out : "-", &reads, &writes) < 0) {
		fprintf(stderr, "spillwayctl trace: writing %s: %s\n", out, strerror(errno));
		goto out;
	}
	fprintf(stderr, "spillwayctl trace: %u reads, %u writes%s%s%s\n", reads, writes,
		cp.lost ? " (some overwritten before they were read)" : "", out ? "; wrote " : "", out ? out : "");
	r = 0;
out:
	free(cp.ev);
	free(cp.gs);
	if (rfd >= 0)
		close(rfd);
	close(fd);
	return r;
}
