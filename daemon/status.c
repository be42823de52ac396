/* SPDX-License-Identifier: MIT */
/*
 * The status plane: connect, read one frame of JSON, done. The daemon
 * writes the whole document at once into the fresh socket's empty send
 * buffer and never waits for a reader, so a status client cannot stall the
 * loop. A peer sees the sessions of its own uid (root sees all); other
 * uids' sessions only as the aggregate "others".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "config.h"
#include "daemon.h"
#include "log.h"
#include "metrics.h"
#include "pager.h"
#include "persist.h"
#include "region.h"
#include "session.h"
#include "spw-proto.h"
#include "status.h"
#include "swap.h"
#include "uring.h"

static double mb_per_s(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / 1e6 / ((double)ns / 1e9) : 0.0;
}

/* The session's page table and disk traffic (docs/nvme-tier.md). The MB/s
 * figures are averages since attach: bytes over wall time. */
static void tier_json(cJSON *o, const struct session *s)
{
	struct pager_stats st;
	cJSON *t = cJSON_AddObjectToObject(o, "tier"), *x;
	uint64_t age = uv_hrtime() - s->attached_ns;

	pager_stats(s->pager, &st);
	cJSON_AddNumberToObject(t, "swap_bytes", (double)st.swap_bytes);
	cJSON_AddNumberToObject(t, "swap_assigned_bytes", (double)st.swap_assigned_bytes);
	cJSON_AddNumberToObject(t, "bytes_on_disk", (double)st.bytes_on_disk);
	/* Restored from a stopping daemon's save: still read from its
	 * linked swap files, not yet written to the session's own. */
	cJSON_AddNumberToObject(t, "backed_bytes", (double)st.backed_bytes);
	x = cJSON_AddObjectToObject(t, "pages");
	for (unsigned i = 0; i < PAGER__STATES; i++)
		cJSON_AddNumberToObject(x, pager_state_name(i), (double)st.pages_by_state[i]);
	cJSON_AddNumberToObject(t, "slots_free", st.slots_free);
	cJSON_AddNumberToObject(t, "slots_claimed", st.slots_claimed);
	cJSON_AddNumberToObject(t, "pending", st.pending);
	cJSON_AddNumberToObject(t, "reads_inflight", st.reads_inflight);
	cJSON_AddNumberToObject(t, "writes_inflight", st.writes_inflight);
	cJSON_AddNumberToObject(t, "queue_depth", st.queue_depth);
	cJSON_AddNumberToObject(t, "reads", (double)st.reads);
	cJSON_AddNumberToObject(t, "read_bytes", (double)st.read_bytes);
	cJSON_AddNumberToObject(t, "read_mb_per_s", mb_per_s(st.read_bytes, age));
	cJSON_AddNumberToObject(t, "read_latency_us", st.reads ? (double)st.read_ns / 1e3 / (double)st.reads : 0.0);
	cJSON_AddNumberToObject(t, "writes", (double)st.writes);
	cJSON_AddNumberToObject(t, "write_bytes", (double)st.write_bytes);
	cJSON_AddNumberToObject(t, "write_mb_per_s", mb_per_s(st.write_bytes, age));
	cJSON_AddNumberToObject(t, "write_latency_us", st.writes ? (double)st.write_ns / 1e3 / (double)st.writes : 0.0);
	cJSON_AddNumberToObject(t, "fsyncs", (double)st.fsyncs);
	cJSON_AddNumberToObject(t, "pins", (double)st.pins);
	cJSON_AddNumberToObject(t, "pin_hits", (double)st.pin_hits);
	cJSON_AddNumberToObject(t, "prefetch_hits", (double)st.prefetch_hits);
	cJSON_AddNumberToObject(t, "misses", (double)st.misses);
	cJSON_AddNumberToObject(t, "zero_fills", (double)st.zero_fills);
	cJSON_AddNumberToObject(t, "overwrites", (double)st.overwrites);
	cJSON_AddNumberToObject(t, "disk_copies_taken", (double)st.disk_copies_taken);
	cJSON_AddNumberToObject(t, "enomem", (double)st.enomem);
	cJSON_AddNumberToObject(t, "prefetches", (double)st.prefetches);
	cJSON_AddNumberToObject(t, "prefetch_dropped", (double)st.prefetch_dropped);
	cJSON_AddNumberToObject(t, "evictions", (double)st.evictions);
	cJSON_AddNumberToObject(t, "writebacks", (double)st.writebacks);
	cJSON_AddNumberToObject(t, "write_behinds", (double)st.write_behinds);
	cJSON_AddNumberToObject(t, "flushes", (double)st.flushes);
	cJSON_AddNumberToObject(t, "steps", (double)st.steps);
	cJSON_AddNumberToObject(t, "plan_length", st.plan_length);
	cJSON_AddBoolToObject(t, "plan_active", st.plan_active);
	cJSON_AddNumberToObject(t, "resyncs", (double)st.resyncs);
	cJSON_AddNumberToObject(t, "divergences", (double)st.divergences);
	cJSON_AddNumberToObject(t, "errors", (double)st.errors);
	cJSON_AddNumberToObject(t, "checksum_errors", (double)st.checksum_errors);
}

/* Per swap directory, from the last refresh. */
#define REFRESH_MS 1000
static struct {
	int64_t used;  /* -errno when unreadable */
	double free;   /* -1 when unreadable */
} dir_cache[CONFIG_MAX_SWAP_DIRS];
static bool cache_valid;
static uv_timer_t *refresh_timer;

static void refresh(struct daemon *d)
{
	for (unsigned i = 0; i < d->nswap_dirs && i < CONFIG_MAX_SWAP_DIRS; i++) {
		struct statvfs v;

		dir_cache[i].used = swap_dir_used(d->swap_dirs[i].path);
		dir_cache[i].free = statvfs(d->swap_dirs[i].path, &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : -1.0;
	}
	cache_valid = true;
}

static void on_refresh(uv_timer_t *t)
{
	refresh(t->data);
}

static void timer_freed(uv_handle_t *h)
{
	free(h);
}

void status_refresh_soon(struct daemon *d)
{
	/* At shutdown the timer is gone and must stay so: the loop ends when
	 * its handles do. */
	if (!d->nswap_dirs || d->stopping)
		return;
	if (!refresh_timer) {
		/* Made on first need, so there is no timer without swap. */
		refresh_timer = malloc(sizeof(*refresh_timer));
		if (!refresh_timer || uv_timer_init(&d->loop, refresh_timer) < 0) {
			free(refresh_timer);
			refresh_timer = NULL;
			cache_valid = false; /* the next request refreshes */
			return;
		}
		refresh_timer->data = d;
	}
	uv_timer_start(refresh_timer, on_refresh, 0, REFRESH_MS);
}

void status_stop(struct daemon *d)
{
	if (refresh_timer)
		uv_close((uv_handle_t *)refresh_timer, timer_freed);
	refresh_timer = NULL;
	(void)d;
}

/* The daemon's swap directories and its one ring. */
static void swap_json(cJSON *o, struct daemon *d)
{
	cJSON *x = cJSON_AddObjectToObject(o, "swap"), *arr, *u;
	struct uring_stats us;

	cJSON_AddNumberToObject(x, "session_bytes", (double)d->cfg->swap_session_bytes);
	cJSON_AddNumberToObject(x, "prefetch_window", d->cfg->swap_prefetch_window);
	arr = cJSON_AddArrayToObject(x, "dirs");
	if (d->nswap_dirs && !cache_valid) {
		/* Only before the first refresh (or without a timer). */
		refresh(d);
		status_refresh_soon(d);
	}
	for (unsigned i = 0; i < d->nswap_dirs && i < CONFIG_MAX_SWAP_DIRS; i++) {
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "path", d->swap_dirs[i].path);
		cJSON_AddNumberToObject(e, "max_bytes", (double)d->swap_dirs[i].max_bytes);
		cJSON_AddNumberToObject(e, "used_bytes", dir_cache[i].used < 0 ? -1.0 : (double)dir_cache[i].used);
		cJSON_AddNumberToObject(e, "free_bytes", dir_cache[i].free);
		cJSON_AddItemToArray(arr, e);
	}
	u = cJSON_AddObjectToObject(x, "uring");
	if (!d->uring)
		return;
	uring_get_stats(d->uring, &us);
	cJSON_AddNumberToObject(u, "queue_depth", us.queue_depth);
	cJSON_AddNumberToObject(u, "inflight", us.inflight);
	cJSON_AddNumberToObject(u, "queued", us.queued);
	cJSON_AddBoolToObject(u, "sqpoll", us.sqpoll);
	cJSON_AddBoolToObject(u, "fixed_buffers", us.fixed_buffers);
	cJSON_AddBoolToObject(u, "fixed_files", us.fixed_files);
	cJSON_AddNumberToObject(u, "max_fixed_files", us.max_files);
	cJSON_AddNumberToObject(u, "max_fixed_buffers", us.max_buffers);
	cJSON_AddNumberToObject(u, "reads", (double)us.reads);
	cJSON_AddNumberToObject(u, "writes", (double)us.writes);
	cJSON_AddNumberToObject(u, "fsyncs", (double)us.fsyncs);
	cJSON_AddNumberToObject(u, "read_bytes", (double)us.read_bytes);
	cJSON_AddNumberToObject(u, "write_bytes", (double)us.write_bytes);
	cJSON_AddNumberToObject(u, "errors", (double)us.errors);
	cJSON_AddNumberToObject(u, "resubmits", (double)us.resubmits);
}

static cJSON *session_json(const struct session *s)
{
	cJSON *o = cJSON_CreateObject(), *ring;
	struct pager_stats st = { 0 };
	int64_t held;

	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddNumberToObject(o, "uid", s->uid);
	cJSON_AddNumberToObject(o, "pid", s->pid);
	cJSON_AddStringToObject(o, "state", s->attaching ? "attaching" : s->restore ? "restoring" :
					    s->orphaned_ns ? "orphaned" : "attached");
	/* "none", "waiting" (for the next commit point) or "copying". */
	cJSON_AddStringToObject(o, "checkpoint", checkpoint_state(s));
	{
		uint64_t done, total;

		/* While "copying": how far (spillwayctl checkpoint's progress line). */
		checkpoint_progress(s, &done, &total);
		cJSON_AddNumberToObject(o, "checkpoint_bytes_done", (double)done);
		cJSON_AddNumberToObject(o, "checkpoint_bytes_total", (double)total);
		/* While "restoring": the pages loaded and checked. */
		restore_progress(s, &done, &total);
		cJSON_AddNumberToObject(o, "restore_bytes_done", (double)done);
		cJSON_AddNumberToObject(o, "restore_bytes_total", (double)total);
	}
	cJSON_AddBoolToObject(o, "persistent", s->persistent);
	if (s->persistent) {
		cJSON_AddNumberToObject(o, "lease_s", s->lease_s);
		cJSON_AddNumberToObject(o, "orphaned_s", (double)persist_orphan_age_s(s));
		cJSON_AddNumberToObject(o, "lease_left_s", (double)persist_lease_left_s(s));
		cJSON_AddNumberToObject(o, "reattaches", s->reattaches);
	}
	cJSON_AddNumberToObject(o, "committed_step", (double)s->committed_step);
	cJSON_AddNumberToObject(o, "step_s", (double)s->step_ns / 1e9);
	cJSON_AddNumberToObject(o, "skipped_steps", (double)s->skipped_steps);
	/* The optimizer's own figures of its last step (MARK STATS). */
	cJSON_AddNumberToObject(o, "adam_s", (double)s->adam_us / 1e6);
	if (s->clip_coef >= 0.0f)
		cJSON_AddNumberToObject(o, "clip_coef", s->clip_coef);
	cJSON_AddBoolToObject(o, "step_open", s->opened_step > s->committed_step);
	/* Back from a crash with pages whose CRC failed (at most 64 listed). */
	cJSON_AddBoolToObject(o, "damaged", s->nbad > 0);
	if (s->nbad) {
		cJSON *bad = cJSON_AddArrayToObject(o, "bad_pages");

		cJSON_AddNumberToObject(o, "bad_pages_total", s->nbad);
		for (uint32_t i = 0; bad && i < s->nbad && i < 64; i++) {
			cJSON *b = cJSON_CreateObject();

			if (!b || !cJSON_AddItemToArray(bad, b))
				break;
			cJSON_AddStringToObject(b, "tensor", session_tensor_name(s, s->bad[i].tensor));
			cJSON_AddNumberToObject(b, "page", s->bad[i].page);
		}
	}
	cJSON_AddNumberToObject(o, "region_bytes", (double)s->bytes);
	/* While attaching: how far locking (or prefaulting) the region is. */
	cJSON_AddNumberToObject(o, "region_ready_bytes", (double)region_ready_bytes(&s->ropts));
	/* What of it holds memory now: the unused tails of resident tensors'
	 * last pages were given back (pager.c, resident_zero()). */
	if ((held = session_region_held(s)) >= 0)
		cJSON_AddNumberToObject(o, "region_resident_bytes", (double)held);
	cJSON_AddNumberToObject(o, "page_size", s->page_size);
	cJSON_AddNumberToObject(o, "slots", s->nslots);
	if (s->pager)
		pager_stats(s->pager, &st);
	/* Slots owned by some page: resident, pinned, or cached for the tier. */
	cJSON_AddNumberToObject(o, "slots_used", s->pager ? st.nslots - st.slots_free : 0);
	cJSON_AddNumberToObject(o, "tensors", s->ntensors);
	cJSON_AddNumberToObject(o, "pages_pinned", (double)st.pages_pinned);
	cJSON_AddBoolToObject(o, "locked", s->region && s->region->locked);
	cJSON_AddBoolToObject(o, "hugepages", s->region && s->region->hugepages);
	cJSON_AddNumberToObject(o, "numa_node", s->region ? s->region->numa_node : -1);
	ring = cJSON_AddObjectToObject(o, "ring");
	cJSON_AddNumberToObject(ring, "ops", (double)s->stats.ops);
	cJSON_AddNumberToObject(ring, "errors", (double)s->stats.errors);
	cJSON_AddNumberToObject(ring, "throttled", (double)s->stats.throttled);
	cJSON_AddNumberToObject(ring, "nop", (double)s->stats.by_op[SPW_OP_NOP]);
	cJSON_AddNumberToObject(ring, "pin", (double)s->stats.by_op[SPW_OP_PIN]);
	cJSON_AddNumberToObject(ring, "unpin", (double)s->stats.by_op[SPW_OP_UNPIN]);
	cJSON_AddNumberToObject(ring, "prefetch", (double)s->stats.by_op[SPW_OP_PREFETCH]);
	cJSON_AddNumberToObject(ring, "step", (double)s->stats.by_op[SPW_OP_STEP]);
	cJSON_AddNumberToObject(ring, "flush", (double)s->stats.by_op[SPW_OP_FLUSH]);
	cJSON_AddNumberToObject(ring, "mark", (double)s->stats.by_op[SPW_OP_MARK]);
	cJSON_AddNumberToObject(ring, "pending", s->pending);
	if (s->pager)
		tier_json(o, s);
	return o;
}

static cJSON *build(struct daemon *d, uid_t uid, unsigned max_listed, unsigned *listed)
{
	const struct config *cfg = d->cfg;
	struct rusage ru = { 0 };
	uint64_t hfree = 0, others_bytes = 0;
	unsigned others = 0;
	cJSON *o = cJSON_CreateObject(), *x, *arr;
	const char *where;
	struct list *p, *t;

	getrusage(RUSAGE_SELF, &ru);
	cJSON_AddStringToObject(o, "version", SPW_VERSION);
	x = cJSON_AddObjectToObject(o, "proto");
	cJSON_AddNumberToObject(x, "major", SPW_PROTO_MAJOR);
	cJSON_AddNumberToObject(x, "minor", SPW_PROTO_MINOR);
	cJSON_AddNumberToObject(o, "pid", getpid());
	cJSON_AddNumberToObject(o, "uptime_s", (double)(uv_hrtime() - d->start_ns) / 1e9);
	cJSON_AddNumberToObject(o, "cpu_s", (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
						  (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);

	x = cJSON_AddObjectToObject(o, "config");
	cJSON_AddStringToObject(x, "socket_dir", cfg->socket_dir);
	cJSON_AddNumberToObject(x, "page_size", cfg->session_page_size);
	cJSON_AddNumberToObject(x, "ring_entries", cfg->session_ring_entries);
	cJSON_AddNumberToObject(x, "poll_us", cfg->ring_poll_us);
	if ((where = metrics_listening()))
		cJSON_AddStringToObject(x, "metrics_listen", where);

	x = cJSON_AddObjectToObject(o, "pool");
	cJSON_AddNumberToObject(x, "max_bytes", (double)cfg->pool_max_bytes);
	cJSON_AddNumberToObject(x, "session_max_bytes", (double)cfg->pool_session_max_bytes);
	cJSON_AddNumberToObject(x, "used_bytes", (double)d->used_bytes);
	cJSON_AddNumberToObject(x, "locked_bytes", (double)d->locked_bytes);
	cJSON_AddNumberToObject(x, "free_bytes",
				(double)(cfg->pool_max_bytes > d->used_bytes ? cfg->pool_max_bytes - d->used_bytes : 0));
	region_hugetlb_size(&hfree);
	cJSON_AddBoolToObject(x, "hugepages", cfg->pool_hugepages != CONFIG_HUGEPAGES_NEVER && hfree > 0);
	cJSON_AddNumberToObject(x, "numa_node", d->numa_node);
	cJSON_AddBoolToObject(x, "locked", d->locked_bytes == d->used_bytes);
	/* Ended sessions whose disk I/O is still in flight: their regions
	 * stay in used_bytes until it completes. */
	cJSON_AddNumberToObject(x, "draining_sessions", session_draining());

	swap_json(o, d);

	arr = cJSON_AddArrayToObject(o, "sessions");
	*listed = 0;
	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if ((uid == 0 || uid == s->uid) && *listed < max_listed) {
			cJSON_AddItemToArray(arr, session_json(s));
			(*listed)++;
		} else {
			others++;
			others_bytes += s->bytes;
		}
	}
	x = cJSON_AddObjectToObject(o, "others");
	cJSON_AddNumberToObject(x, "sessions", others);
	cJSON_AddNumberToObject(x, "region_bytes", (double)others_bytes);
	return o;
}

char *status_render(struct daemon *d, uid_t uid)
{
	unsigned max = UINT32_MAX, listed = 0;

	/* A document that outgrows one frame lists fewer sessions and folds
	 * the rest into "others" (with "truncated": true). */
	for (;;) {
		cJSON *o = build(d, uid, max, &listed);
		char *s;

		if (max != UINT32_MAX)
			cJSON_AddTrueToObject(o, "truncated");
		s = cJSON_PrintUnformatted(o);
		cJSON_Delete(o);
		if (!s || strlen(s) <= SPW_PROTO_MAX_FRAME || listed == 0)
			return s;
		free(s);
		max = listed / 2;
	}
}

static void serve(struct daemon *d, int fd)
{
	struct ucred cred = { .uid = (uid_t)-1 };
	socklen_t len = sizeof(cred);
	struct spw_proto_frame_hdr h = { 0 };
	char *doc = NULL, junk[4096];
	struct iovec iov[2];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	ssize_t r;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		goto out;
	doc = status_render(d, cred.uid);
	if (!doc)
		goto out;
	h.len = (uint32_t)strlen(doc);
	iov[0] = (struct iovec){ .iov_base = &h, .iov_len = sizeof(h) };
	iov[1] = (struct iovec){ .iov_base = doc, .iov_len = h.len };
	r = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (r != (ssize_t)(sizeof(h) + h.len))
		log_debug("status: pid %d: wrote %zd of %zu bytes; dropped", (int)cred.pid, r, sizeof(h) + h.len);
	/* Whatever the peer sent is ignored; reading it first keeps close()
	 * from resetting the connection under the reply. */
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 16 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
		;
out:
	free(doc);
	close(fd);
}

int status_listen(struct daemon *d)
{
	/* Anyone may ask; what they see is filtered by uid. */
	return daemon_listen(d, &d->status, "status.sock", "status", d->cfg->socket_mode, true, serve);
}
