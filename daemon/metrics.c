/* SPDX-License-Identifier: MIT */
/*
 * The daemon's figures as Prometheus families. Each family's samples must
 * be contiguous, so the sessions' pager figures are gathered once (the
 * walk over a session's pages is the expensive part) and every family then
 * loops over that snapshot.
 *
 * Per-session series carry the session's name; the series ends with the
 * session, so counters never go backwards within one series.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include "config.h"
#include "daemon.h"
#include "metrics.h"
#include "metrics-text.h"
#include "pager.h"
#include "session.h"
#include "swap.h"
#include "uring.h"

struct snap {
	const struct session *s;
	struct pager_stats st;     /* zero while attaching */
	bool has_pager;
};

/* One counter or gauge per session, taken from the snapshot by offset. */
static void per_session_u64(struct mtext *t, const struct snap *sn, size_t n, const char *name, const char *type,
			    const char *help, size_t off)
{
	mtext_family(t, name, type, help);
	for (size_t i = 0; i < n; i++)
		if (sn[i].has_pager)
			mtext_sample(t, name, (double)*(const uint64_t *)((const char *)&sn[i].st + off), "session",
				     sn[i].s->name, NULL);
}

#define PS(t, sn, n, name, type, help, field) \
	per_session_u64(t, sn, n, name, type, help, offsetof(struct pager_stats, field))

static void pool_families(struct mtext *t, struct daemon *d, const struct snap *sn, size_t n)
{
	const struct config *cfg = d->cfg;
	struct rusage ru = { 0 };
	unsigned attaching = 0, orphaned = 0;

	mtext_family(t, "spillway_build_info", "gauge", "spillwayd's version; always 1.");
	mtext_sample(t, "spillway_build_info", 1, "version", SPW_VERSION, NULL);
	mtext_family(t, "spillway_uptime_seconds", "gauge", "Seconds since spillwayd started.");
	mtext_sample(t, "spillway_uptime_seconds", (double)(uv_hrtime() - d->start_ns) / 1e9, NULL);
	getrusage(RUSAGE_SELF, &ru);
	mtext_family(t, "spillway_cpu_seconds_total", "counter", "CPU time spillwayd has used, user and system.");
	mtext_sample(t, "spillway_cpu_seconds_total",
		     (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
			     (double)ru.ru_stime.tv_usec / 1e6, NULL);

	mtext_family(t, "spillway_pool_bytes", "gauge",
		     "Pinned-memory pool: used (regions of every session), locked (of used, mlocked) and free "
		     "(pool.max_bytes minus used).");
	mtext_sample(t, "spillway_pool_bytes", (double)d->used_bytes, "state", "used", NULL);
	mtext_sample(t, "spillway_pool_bytes", (double)d->locked_bytes, "state", "locked", NULL);
	mtext_sample(t, "spillway_pool_bytes",
		     (double)(cfg->pool_max_bytes > d->used_bytes ? cfg->pool_max_bytes - d->used_bytes : 0), "state",
		     "free", NULL);
	mtext_family(t, "spillway_pool_max_bytes", "gauge", "pool.max_bytes: the node-wide cap on pinned regions.");
	mtext_sample(t, "spillway_pool_max_bytes", (double)cfg->pool_max_bytes, NULL);
	mtext_family(t, "spillway_pool_session_max_bytes", "gauge", "pool.session_max_bytes: the cap on one region.");
	mtext_sample(t, "spillway_pool_session_max_bytes", (double)cfg->pool_session_max_bytes, NULL);

	for (size_t i = 0; i < n; i++) {
		attaching += sn[i].s->attaching;
		orphaned += sn[i].s->orphaned_ns != 0;
	}
	mtext_family(t, "spillway_sessions", "gauge",
		     "Sessions by state: attaching (region being built), attached, or orphaned (a persistent "
		     "session whose trainer died, kept for its lease).");
	mtext_sample(t, "spillway_sessions", attaching, "state", "attaching", NULL);
	mtext_sample(t, "spillway_sessions", (double)(n - attaching - orphaned), "state", "attached", NULL);
	mtext_sample(t, "spillway_sessions", orphaned, "state", "orphaned", NULL);
}

static void swap_families(struct mtext *t, struct daemon *d)
{
	struct uring_stats us = { 0 };

	mtext_family(t, "spillway_swap_dir_used_bytes", "gauge",
		     "Bytes taken by every spillway swap file in the swap directory.");
	for (unsigned i = 0; i < d->nswap_dirs; i++) {
		int64_t used = swap_dir_used(d->swap_dirs[i].path);

		if (used >= 0)
			mtext_sample(t, "spillway_swap_dir_used_bytes", (double)used, "dir", d->swap_dirs[i].path, NULL);
	}
	mtext_family(t, "spillway_swap_dir_free_bytes", "gauge",
		     "Free bytes of the swap directory's filesystem (for unprivileged users).");
	for (unsigned i = 0; i < d->nswap_dirs; i++) {
		struct statvfs v;

		if (statvfs(d->swap_dirs[i].path, &v) == 0)
			mtext_sample(t, "spillway_swap_dir_free_bytes", (double)v.f_bavail * (double)v.f_frsize, "dir",
				     d->swap_dirs[i].path, NULL);
	}
	mtext_family(t, "spillway_swap_dir_max_bytes", "gauge", "swap.dirs[].max_bytes of the swap directory.");
	for (unsigned i = 0; i < d->nswap_dirs; i++)
		mtext_sample(t, "spillway_swap_dir_max_bytes", (double)d->swap_dirs[i].max_bytes, "dir",
			     d->swap_dirs[i].path, NULL);

	if (!d->uring)
		return;
	uring_get_stats(d->uring, &us);
	mtext_family(t, "spillway_swap_read_bytes_total", "counter",
		     "Bytes read from swap files by the daemon's io_uring, every directory together.");
	mtext_sample(t, "spillway_swap_read_bytes_total", (double)us.read_bytes, NULL);
	mtext_family(t, "spillway_swap_write_bytes_total", "counter",
		     "Bytes written to swap files by the daemon's io_uring, every directory together.");
	mtext_sample(t, "spillway_swap_write_bytes_total", (double)us.write_bytes, NULL);
	mtext_family(t, "spillway_swap_requests_total", "counter", "Completed io_uring requests by operation.");
	mtext_sample(t, "spillway_swap_requests_total", (double)us.reads, "op", "read", NULL);
	mtext_sample(t, "spillway_swap_requests_total", (double)us.writes, "op", "write", NULL);
	mtext_sample(t, "spillway_swap_requests_total", (double)us.fsyncs, "op", "fsync", NULL);
	mtext_family(t, "spillway_swap_errors_total", "counter", "io_uring requests that completed with an error.");
	mtext_sample(t, "spillway_swap_errors_total", (double)us.errors, NULL);
	mtext_family(t, "spillway_swap_resubmits_total", "counter", "Short transfers continued with another request.");
	mtext_sample(t, "spillway_swap_resubmits_total", (double)us.resubmits, NULL);
	mtext_family(t, "spillway_swap_inflight", "gauge",
		     "io_uring requests now: in the kernel (state=kernel) or waiting for ring room (state=queued).");
	mtext_sample(t, "spillway_swap_inflight", us.inflight, "state", "kernel", NULL);
	mtext_sample(t, "spillway_swap_inflight", us.queued, "state", "queued", NULL);
	mtext_family(t, "spillway_swap_queue_depth", "gauge", "swap.queue_depth: entries of the daemon's io_uring.");
	mtext_sample(t, "spillway_swap_queue_depth", us.queue_depth, NULL);
}

/* What the optimizer's COMMIT marks tell: the steps whose updates are in,
 * how long a step takes, the steps skipped for inf/nan. */
static void step_families(struct mtext *t, const struct snap *sn, size_t n)
{
	mtext_family(t, "spillway_session_committed_step", "gauge",
		     "The last step whose updates are all in the session's state (its optimizer's COMMIT mark).");
	for (size_t i = 0; i < n; i++)
		mtext_sample(t, "spillway_session_committed_step", (double)sn[i].s->committed_step, "session",
			     sn[i].s->name, NULL);
	mtext_family(t, "spillway_session_step_seconds", "gauge",
		     "Recent time between the session's step commits (a moving average); 0 before two commits.");
	for (size_t i = 0; i < n; i++)
		mtext_sample(t, "spillway_session_step_seconds", (double)sn[i].s->step_ns / 1e9, "session",
			     sn[i].s->name, NULL);
	mtext_family(t, "spillway_session_skipped_steps_total", "counter",
		     "Steps the session's optimizer skipped (inf/nan gradients under a dynamic loss scale).");
	for (size_t i = 0; i < n; i++)
		mtext_sample(t, "spillway_session_skipped_steps_total", (double)sn[i].s->skipped_steps, "session",
			     sn[i].s->name, NULL);
	mtext_family(t, "spillway_session_adam_seconds", "gauge",
		     "CPU time of the optimizer's kernels (summed over its threads) for the session's last committed "
		     "step, as its client reported it.");
	for (size_t i = 0; i < n; i++)
		mtext_sample(t, "spillway_session_adam_seconds", (double)sn[i].s->adam_us / 1e6, "session",
			     sn[i].s->name, NULL);
	mtext_family(t, "spillway_session_clip_coefficient", "gauge",
		     "The gradient clipping coefficient of the session's last committed step (1: not clipped), as its "
		     "client reported it; absent before the first.");
	for (size_t i = 0; i < n; i++)
		if (sn[i].s->clip_coef >= 0.0f)
			mtext_sample(t, "spillway_session_clip_coefficient", sn[i].s->clip_coef, "session",
				     sn[i].s->name, NULL);
}

/* One operation's latency histogram: cumulative buckets up to +Inf (all
 * the requests counted), then the sum and count. */
static void io_histogram(struct mtext *t, const char *session, const char *op, const uint64_t *per_bucket,
			 uint64_t sum_ns, uint64_t count)
{
	uint64_t below = 0;

	for (unsigned b = 0; b < PAGER_LAT_BUCKETS; b++) {
		char le[32];

		below += per_bucket[b];
		if (pager_lat_bounds_us[b] == UINT64_MAX)
			snprintf(le, sizeof(le), "+Inf");
		else
			snprintf(le, sizeof(le), "%g", (double)pager_lat_bounds_us[b] / 1e6);
		mtext_sample(t, "spillway_swap_io_seconds_bucket", (double)below, "session", session, "op", op, "le", le,
			     NULL);
	}
	mtext_sample(t, "spillway_swap_io_seconds_sum", (double)sum_ns / 1e9, "session", session, "op", op, NULL);
	mtext_sample(t, "spillway_swap_io_seconds_count", (double)count, "session", session, "op", op, NULL);
}

static void session_families(struct mtext *t, const struct snap *sn, size_t n)
{
	char uid[16];

	mtext_family(t, "spillway_session_region_bytes", "gauge", "Bytes of the session's pinned region.");
	for (size_t i = 0; i < n; i++) {
		snprintf(uid, sizeof(uid), "%u", (unsigned)sn[i].s->uid);
		mtext_sample(t, "spillway_session_region_bytes", (double)sn[i].s->bytes, "session", sn[i].s->name, "uid",
			     uid, NULL);
	}
	mtext_family(t, "spillway_session_region_resident_bytes", "gauge",
		     "Bytes of the session's region that hold memory: the region less the unused tails of resident "
		     "tensors' last pages, which the daemon gives back.");
	for (size_t i = 0; i < n; i++) {
		int64_t held = session_region_held(sn[i].s);

		if (held >= 0)
			mtext_sample(t, "spillway_session_region_resident_bytes", (double)held, "session", sn[i].s->name,
				     NULL);
	}
	mtext_family(t, "spillway_session_tensors", "gauge", "Tensors registered by the session.");
	for (size_t i = 0; i < n; i++)
		mtext_sample(t, "spillway_session_tensors", sn[i].s->ntensors, "session", sn[i].s->name, NULL);
	mtext_family(t, "spillway_tier_pages", "gauge",
		     "The session's pages by state (docs/nvme-tier.md): resident, clean, dirty, disk, reading, ...");
	for (size_t i = 0; i < n; i++)
		for (unsigned k = 0; sn[i].has_pager && k < PAGER__STATES; k++)
			mtext_sample(t, "spillway_tier_pages", (double)sn[i].st.pages_by_state[k], "session", sn[i].s->name,
				     "state", pager_state_name(k), NULL);
	PS(t, sn, n, "spillway_tier_pages_pinned", "gauge", "The session's pages pinned by its client now.",
	   pages_pinned);
	PS(t, sn, n, "spillway_session_swap_bytes", "gauge", "Swap reserved for the session (its files' size).",
	   swap_bytes);
	PS(t, sn, n, "spillway_session_disk_bytes", "gauge", "Bytes of the session's pages with a valid copy on disk.",
	   bytes_on_disk);
	PS(t, sn, n, "spillway_session_read_bytes_total", "counter", "Bytes the session's pages read from swap.",
	   read_bytes);
	PS(t, sn, n, "spillway_session_write_bytes_total", "counter", "Bytes the session's pages wrote to swap.",
	   write_bytes);

	mtext_family(t, "spillway_swap_io_seconds", "histogram",
		     "Swap request latency, submit to completion, per session and operation.");
	for (size_t i = 0; i < n; i++) {
		if (!sn[i].has_pager)
			continue;
		io_histogram(t, sn[i].s->name, "read", sn[i].st.read_lat, sn[i].st.read_ns, sn[i].st.reads);
		io_histogram(t, sn[i].s->name, "write", sn[i].st.write_lat, sn[i].st.write_ns, sn[i].st.writes);
	}

	PS(t, sn, n, "spillway_pins_total", "counter", "PIN operations the session's pager took.", pins);
	PS(t, sn, n, "spillway_pin_hits_total", "counter", "PINs that found the page in its slot, not by a prefetch.",
	   pin_hits);
	PS(t, sn, n, "spillway_prefetch_hits_total", "counter",
	   "PINs that found the page in a slot, or being read, because of a prefetch.", prefetch_hits);
	PS(t, sn, n, "spillway_prefetch_misses_total", "counter",
	   "PINs that had to start a read (or wait for a slot to read into).", misses);
	PS(t, sn, n, "spillway_prefetches_total", "counter", "Reads started ahead of a PIN.", prefetches);
	PS(t, sn, n, "spillway_prefetch_dropped_total", "counter", "PREFETCH hints that found no slot.",
	   prefetch_dropped);
	PS(t, sn, n, "spillway_evictions_total", "counter", "Pages evicted from their slot.", evictions);
	PS(t, sn, n, "spillway_writebacks_total", "counter", "Writes started because a slot was needed.", writebacks);
	PS(t, sn, n, "spillway_write_behinds_total", "counter", "Writes started while the ring was not busy.",
	   write_behinds);
	PS(t, sn, n, "spillway_steps_total", "counter", "STEP marks the session's client sent.", steps);
	step_families(t, sn, n);

	mtext_family(t, "spillway_ring_ops_total", "counter", "Ring entries the session submitted, by operation.");
	for (size_t i = 0; i < n; i++)
		for (unsigned k = 0; k < SPW_OP__COUNT; k++)
			mtext_sample(t, "spillway_ring_ops_total", (double)sn[i].s->stats.by_op[k], "session",
				     sn[i].s->name, "op", spw_op_name(k), NULL);
	mtext_family(t, "spillway_errors_total", "counter",
		     "Errors by kind: ring (entries refused or failed), io (failed swap reads, writes, fsyncs).");
	for (size_t i = 0; i < n; i++) {
		mtext_sample(t, "spillway_errors_total", (double)sn[i].s->stats.errors, "session", sn[i].s->name, "kind",
			     "ring", NULL);
		if (sn[i].has_pager)
			mtext_sample(t, "spillway_errors_total", (double)sn[i].st.errors, "session", sn[i].s->name, "kind",
				     "io", NULL);
	}
	PS(t, sn, n, "spillway_checksum_errors_total", "counter",
	   "Pages read back from swap whose checksum did not match.", checksum_errors);
}

char *metrics_render(struct daemon *d, size_t *len)
{
	struct mtext t = { 0 };
	struct snap *sn;
	size_t n = 0, i = 0;
	struct list *p, *q;
	char *out;

	list_for_each_safe(p, q, &d->sessions)
		n++;
	sn = calloc(n ? n : 1, sizeof(*sn));
	if (!sn)
		return NULL;
	list_for_each_safe(p, q, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		sn[i].s = s;
		if (s->pager && !s->attaching) {
			pager_stats(s->pager, &sn[i].st);
			sn[i].has_pager = true;
		}
		i++;
	}
	pool_families(&t, d, sn, n);
	swap_families(&t, d);
	session_families(&t, sn, n);
	free(sn);
	out = mtext_take(&t, len);
	return out;
}
