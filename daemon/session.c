/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "control.h"
#include "daemon.h"
#include "checkpoint.h"
#include "dataplane.h"
#include "log.h"
#include "pager.h"
#include "region.h"
#include "safemem.h"
#include "session.h"
#include "status.h"
#include "swap.h"

struct session *session_find(struct daemon *d, const char *name)
{
	struct list *p, *t;

	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);
		if (!strcmp(s->name, name))
			return s;
	}
	return NULL;
}

static void holds_uid_use(uid_t uid, uint64_t *region_bytes, uint64_t *swap_bytes);

void session_uid_use(struct daemon *d, uid_t uid, unsigned *sessions, uint64_t *region_bytes, uint64_t *swap_bytes)
{
	struct list *p, *t;

	*sessions = 0;
	*region_bytes = *swap_bytes = 0;
	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if (s->uid != uid)
			continue;
		(*sessions)++;
		*region_bytes += s->bytes;
		*swap_bytes += s->swap_bytes;
	}
	/* Ended sessions still draining hold their region and swap files. */
	holds_uid_use(uid, region_bytes, swap_bytes);
}

static int rings_create(struct session *s, uint32_t entries, char *err, size_t errlen)
{
	uint32_t cq = entries * 2 > SPW_RING_ENTRIES_MAX ? SPW_RING_ENTRIES_MAX : entries * 2;
	char name[64];
	void *p;
	int r;

	r = spw_ring_layout(entries, cq, &s->layout);
	if (r < 0) {
		snprintf(err, errlen, "attach %s: invalid ring size %u (session.ring_entries)", s->name, entries);
		return r;
	}
	snprintf(name, sizeof(name), "spillway-rings:%s", s->name);
	s->rings_fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->rings_fd < 0)
		goto fail;
	if (ftruncate(s->rings_fd, (off_t)s->layout.bytes) < 0)
		goto fail;
	if (fcntl(s->rings_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
		goto fail;
	p = mmap(NULL, s->layout.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->rings_fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	s->rings = p;
	s->sqh = (struct spw_ring_hdr *)(s->rings + s->layout.sq_hdr_off);
	s->cqh = (struct spw_ring_hdr *)(s->rings + s->layout.cq_hdr_off);
	s->sqes = (struct spw_sqe *)(s->rings + s->layout.sqes_off);
	s->cqes = (struct spw_cqe *)(s->rings + s->layout.cqes_off);
	s->sqh->ring_entries = s->layout.sq_entries;
	s->cqh->ring_entries = s->layout.cq_entries;
	/* The daemon starts asleep: the client's first submission rings. */
	s->sqh->flags = SPW_RING_NEED_WAKEUP;
	return 0;
fail:
	r = -errno;
	snprintf(err, errlen, "attach %s: cannot create the rings memfd: %s", s->name, strerror(errno));
	return r;
}

static void rings_drop(struct session *s)
{
	if (s->rings)
		munmap(s->rings, s->layout.bytes);
	if (s->rings_fd >= 0) {
		/* A client may keep the rings memfd after detach: free its
		 * pages, or they stay alive outside every cap. */
		safemem_punch(s->rings_fd, 0, 0);
		close(s->rings_fd);
	}
	if (s->rings_ro_fd >= 0)
		close(s->rings_ro_fd);
	if (s->sq_evt >= 0)
		close(s->sq_evt);
	if (s->cq_evt >= 0)
		close(s->cq_evt);
	s->rings = NULL;
	s->rings_fd = s->rings_ro_fd = s->sq_evt = s->cq_evt = -1;
}

/* The eventfds of a session's doorbells. */
static int doorbells_create(struct session *s, char *err, size_t errlen)
{
	int r;

	s->sq_evt = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cq_evt = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->sq_evt >= 0 && s->cq_evt >= 0)
		return 0;
	r = -errno;
	snprintf(err, errlen, "attach %s: cannot create eventfds: %s", s->name, strerror(errno));
	return r;
}

static void session_gauges(void *ctx, uint64_t slots_used, uint64_t pages_pinned);

int session_takeover(struct session *s, struct client *owner, char *err, size_t errlen)
{
	int r;

	/* The dead client may still map the old rings (a zombie, a copy of
	 * the fd): they are punched and forgotten, never shared again. */
	rings_drop(s);
	s->sq_head = s->cq_tail = s->cq_head_seen = 0;
	s->io_tail = 0;
	s->garbage = 0;
	s->backlog = s->throttled = false;
	r = rings_create(s, s->d->cfg->session_ring_entries, err, errlen);
	if (r == 0)
		r = doorbells_create(s, err, errlen);
	if (r < 0)
		return r;
	s->owner = owner;
	s->poll = (control_client_features(owner) & SPW_FEAT_RING_POLL) != 0;
	r = dataplane_start(s);
	if (r < 0) {
		s->owner = NULL;
		snprintf(err, errlen, "attach %s: cannot watch the ring doorbell: %s", s->name, uv_strerror(r));
		return -ENOMEM;
	}
	if (s->tclaimed)
		memset(s->tclaimed, 0, s->ntnames_cap);
	if (s->pager) { /* the new rings' gauges start where the pager is */
		struct pager_stats st;

		pager_stats(s->pager, &st);
		session_gauges(s, st.nslots - st.slots_free, st.pages_pinned);
	}
	return 0;
}

/* The pager's checksums run on the libuv threadpool: a 4 MiB page costs
 * the better part of a millisecond of CPU that the loop owes every other
 * session. */
static void job_work(uv_work_t *w)
{
	struct pager_job *j = w->data;

	j->fn(j);
}

static void job_after(uv_work_t *w, int status)
{
	struct pager_job *j = w->data;

	(void)status; /* never cancelled */
	j->done(j);
}

static void session_offload(void *ctx, struct pager_job *j)
{
	struct session *s = ctx;
	uv_work_t *w = (uv_work_t *)(void *)j->space;

	_Static_assert(sizeof(uv_work_t) <= sizeof(j->space), "pager_job.space holds a uv_work_t");
	w->data = j;
	if (uv_queue_work(&s->d->loop, w, job_work, job_after) < 0) {
		j->fn(j);
		j->done(j);
	}
}

/* The pager's unused tails of resident pages, punched out of the region's
 * memfd. Not on hugetlb (a hole there is a whole hugepage). */
static int session_discard(void *ctx, uint64_t off, uint64_t len)
{
	struct session *s = ctx;

	if (s->region->hugepages || off + len > s->region->bytes)
		return -EINVAL;
	return safemem_punch(s->region->fd, off, len);
}

/* The pager's I/O into the session's I/O log (spw-ring.h), which the
 * client reads for its timeline. The rings are the daemon's mapping; a
 * client scribbling over the log only garbles its own timeline. */
_Static_assert((int)PAGER_IO_READ == (int)SPW_IO_READ && (int)PAGER_IO_WRITE == (int)SPW_IO_WRITE,
	       "one numbering of I/O ops");

static void session_io_event(void *ctx, uint32_t tensor, uint32_t page, int op, uint64_t t0, uint64_t t1,
			     int32_t res)
{
	struct session *s = ctx;
	struct spw_io_event *ev;

	if (!s->rings)
		return;
	ev = (struct spw_io_event *)(s->rings + s->layout.io_events_off) + s->io_tail % SPW_IO_LOG_ENTRIES;
	*ev = (struct spw_io_event){ .start_ns = t0, .end_ns = t1, .tensor = tensor, .page = page,
				     .op = (uint8_t)op, .res = res };
	s->io_tail++;
	__atomic_store_n(&((struct spw_io_log_hdr *)(s->rings + s->layout.io_hdr_off))->tail, s->io_tail,
			 __ATOMIC_RELEASE);
}

/* A page of a stopping daemon's save, read where the save left it, failed
 * its CRC: lost, as a page that fails at a flush's restore. The session
 * is marked damaged from now on, as such a restore marks it: that page's
 * PINs fail at once, no optimizer adopts the session, and it is never
 * saved again as if whole. */
static void session_backing_bad(void *ctx, uint32_t tensor, uint32_t page)
{
	struct session *s = ctx;
	struct bad_page *b;

	if (session_page_bad(s, tensor, page) || !(b = realloc(s->bad, (s->nbad + 1) * sizeof(*b))))
		return;
	s->bad = b;
	s->bad[s->nbad++] = (struct bad_page){ .tensor = tensor, .page = page };
	log_warn("session %s: tensor %s page %u changed on disk since spillwayd's last stop saved it: it is never "
		 "handed out, and the session is marked damaged; load the last checkpoint (spillwayctl drop %s, then "
		 "spillwayctl restore %s DIR)", s->name, session_tensor_name(s, tensor), page, s->name, s->name);
}

static void session_gauges(void *ctx, uint64_t slots_used, uint64_t pages_pinned)
{
	struct session *s = ctx;
	struct spw_io_log_hdr *h;

	if (!s->rings)
		return;
	h = (struct spw_io_log_hdr *)(s->rings + s->layout.io_hdr_off);
	__atomic_store_n(&h->slots_used, slots_used, __ATOMIC_RELAXED);
	__atomic_store_n(&h->pages_pinned, pages_pinned, __ATOMIC_RELAXED);
}

/* The page table over the mapped region, and the swap files when the
 * session has swap. At most one completion per CQ entry can be pending, so
 * the pager never owes more completions than the CQ can take. */
static int pager_create(struct session *s, char *err, size_t errlen)
{
	struct daemon *d = s->d;
	struct pager_config c = {
		.session = s->name,
		.region = s->region->base,
		.page_size = s->page_size,
		.nslots = s->nslots,
		.uring = d->uring,
		.dirs = d->swap_dirs,
		.ndirs = d->nswap_dirs,
		.swap_bytes = s->swap_bytes,
		.prefetch_window = d->cfg->swap_prefetch_window,
		.queue_depth = d->uring_depth,
		.max_pending = s->layout.cq_entries,
		.complete = dataplane_complete,
		.tensor_removed = session_tensor_removed,
		.io_event = session_io_event,
		.backing_bad = session_backing_bad,
		.gauges = session_gauges,
		.offload = session_offload,
		.discard = session_discard,
		.ctx = s,
	};
	char perr[640];
	int r;

	r = pager_new(&c, perr, sizeof(perr), &s->pager);
	if (r < 0) {
		snprintf(err, errlen, "attach %s: %s", s->name, perr);
		return r;
	}
	return 0;
}

static int session_finish(struct session *s)
{
	struct daemon *d = s->d;
	char *err = s->work_err;
	size_t errlen = sizeof(s->work_err);
	int r;

	r = rings_create(s, d->cfg->session_ring_entries, err, errlen);
	if (r < 0)
		return r;
	r = pager_create(s, err, errlen);
	if (r < 0)
		return r;
	s->attached_ns = uv_hrtime();
	r = doorbells_create(s, err, errlen);
	if (r < 0)
		return r;
	r = dataplane_start(s);
	if (r < 0) {
		snprintf(err, errlen, "attach %s: cannot watch the ring doorbell: %s", s->name, uv_strerror(r));
		return r;
	}
	if (s->region->locked) {
		d->locked_bytes += s->bytes;
		s->locked_counted = true;
	}
	status_refresh_soon(d);
	return 0;
}

/* On a threadpool thread: touches only s->ropts, s->region and s->work_*. */
static void attach_work(uv_work_t *w)
{
	struct session *s = w->data;

	s->work_result = region_create(&s->ropts, &s->region, s->work_err, sizeof(s->work_err));
}

int session_admit(struct daemon *d, const char *name, uint64_t bytes, char *err, size_t errlen)
{
	const struct config *cfg = d->cfg;
	char a[32], b[32], m[32], u[32];

	if (bytes > cfg->pool_session_max_bytes) {
		snprintf(err, errlen,
			 "attach %s: region %s would exceed pool.session_max_bytes (%s; pool.max_bytes is %s, %s in "
			 "use); raise pool.session_max_bytes in %s or ask for less",
			 name, format_bytes(bytes, a, sizeof(a)), format_bytes(cfg->pool_session_max_bytes, b, sizeof(b)),
			 format_bytes(cfg->pool_max_bytes, m, sizeof(m)), format_bytes(d->used_bytes, u, sizeof(u)),
			 cfg->origin);
		return -EDQUOT;
	}
	if (d->used_bytes > cfg->pool_max_bytes || bytes > cfg->pool_max_bytes - d->used_bytes) {
		snprintf(err, errlen,
			 "attach %s: region %s would exceed pool.max_bytes (%s, %s in use); raise pool.max_bytes in "
			 "%s or ask for less",
			 name, format_bytes(bytes, a, sizeof(a)), format_bytes(cfg->pool_max_bytes, m, sizeof(m)),
			 format_bytes(d->used_bytes, u, sizeof(u)), cfg->origin);
		return -ENOSPC;
	}
	return 0;
}

static void attach_after(uv_work_t *w, int status)
{
	struct session *s = w->data;
	int r = status < 0 ? status : s->work_result;

	s->attaching = false;
	/* A restore at start has no owner, but goes on. */
	if (r == 0 && (s->owner || s->restore))
		r = session_finish(s);
	control_attach_done(s, r);
}

int session_attach(struct daemon *d, struct client *owner, const char *name, uint64_t region_bytes,
		   uint32_t page_size, uint64_t swap_bytes, char *err, size_t errlen)
{
	struct session *s;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s || !(s->name = strdup(name))) {
		free(s);
		snprintf(err, errlen, "attach %s: out of memory", name);
		return -ENOMEM;
	}
	s->d = d;
	s->owner = owner;
	s->rings_fd = s->rings_ro_fd = s->sq_evt = s->cq_evt = -1;
	s->clip_coef = -1.0f;
	list_init(&s->poll_link);
	s->bytes = region_bytes;
	s->page_size = page_size;
	s->nslots = (uint32_t)(region_bytes / page_size);
	s->swap_bytes = swap_bytes;
	s->max_tensors = d->cfg->session_max_tensors;
	s->unregistering = UINT32_MAX;
	s->max_garbage = d->cfg->session_max_garbage;
	s->poll = owner && (control_client_features(owner) & SPW_FEAT_RING_POLL) != 0;
	s->ropts = (struct region_opts){
		.name = s->name,
		.bytes = region_bytes,
		.page_size = page_size,
		.hugepages = d->cfg->pool_hugepages,
		.numa_node = d->numa_node,
		.require_locked = d->cfg->pool_require_locked,
	};
	s->work.data = s;
	s->attaching = true;
	list_add_tail(&d->sessions, &s->link);
	d->used_bytes += region_bytes;
	if (owner)
		control_client_set_session(owner, s);
	r = uv_queue_work(&d->loop, &s->work, attach_work, attach_after);
	if (r < 0) {
		s->attaching = false;
		if (owner)
			control_client_set_session(owner, NULL);
		session_free(s);
		snprintf(err, errlen, "attach %s: cannot queue the region work: %s", name, uv_strerror(r));
		return -ENOMEM;
	}
	return 0;
}

/* What outlives a session whose pager is an orphan (I/O in flight when it
 * ended): the region, which the kernel may still read from or write into,
 * and its place in the pool figures, until the last request completes. */
struct region_hold {
	struct daemon *d;
	struct region *region;
	uint64_t bytes;
	bool locked_counted;
	char name[SPW_PROTO_MAX_SESSION_NAME + 1];
	uv_work_t work;
	/* While draining: on the holds list, counted against its uid. */
	struct list link;
	uid_t uid;
	uint64_t swap_bytes;
	uint64_t ended_ns; /* when the session ended with I/O in flight */
};

/* A session's last requests taking longer than this after it ended says
 * the drive is slow or stalled: worth a warning. Write-behind still in
 * flight at a DETACH is normal and drains in milliseconds. */
#define DRAIN_SLOW_NS 1000000000ull

static unsigned draining; /* sessions ended with I/O in flight, not yet released */
static struct list holds = { &holds, &holds };

static void holds_uid_use(uid_t uid, uint64_t *region_bytes, uint64_t *swap_bytes)
{
	struct list *p, *t;

	list_for_each_safe(p, t, &holds) {
		const struct region_hold *h = list_entry(p, struct region_hold, link);

		if (h->uid == uid) {
			*region_bytes += h->bytes;
			*swap_bytes += h->swap_bytes;
		}
	}
}

unsigned session_draining(void)
{
	return draining;
}

/* On a threadpool thread: unmapping (and unlocking) gigabytes takes time
 * the loop must not spend. Touches only the region. */
static void unmap_work(uv_work_t *w)
{
	struct region_hold *h = w->data;

	h->region = region_free(h->region);
}

static void unmap_done(uv_work_t *w, int status)
{
	struct region_hold *h = w->data;

	/* Cancelled (it never is once queued on a running loop): do it here. */
	if (h->region)
		region_free(h->region);
	free(h);
	(void)status;
}

/* The pool figures drop now; the region goes on the threadpool (inline at
 * shutdown, when the loop may no longer run to finish the work). */
static void hold_release(struct region_hold *h)
{
	h->d->used_bytes -= h->bytes;
	if (h->locked_counted)
		h->d->locked_bytes -= h->bytes;
	h->locked_counted = false;
	h->bytes = 0;
	h->work.data = h;
	if (!h->region || h->d->stopping || uv_queue_work(&h->d->loop, &h->work, unmap_work, unmap_done) < 0) {
		region_free(h->region);
		free(h);
	}
}

/* The pager's release callback of an orphan: its last request is done. */
static void orphan_released(void *arg)
{
	struct region_hold *h = arg;
	struct daemon *d = h->d;
	uint64_t took = uv_hrtime() - h->ended_ns;
	char a[32];

	draining--;
	list_del(&h->link);
	if (took >= DRAIN_SLOW_NS)
		log_warn("session %s (ended earlier): its last disk request completed %.1f s after it ended (a slow "
			 "or stalled drive: see io_uring in spillwayctl status); released %s and its swap files",
			 h->name, (double)took / 1e9, format_bytes(h->bytes, a, sizeof(a)));
	else
		log_info("session %s (ended earlier): its last disk request completed; released %s and its swap files",
			 h->name, format_bytes(h->bytes, a, sizeof(a)));
	hold_release(h);
	daemon_update_status(d);
	status_refresh_soon(d);
}

static void lease_freed(uv_handle_t *h)
{
	free(h);
}

struct session *session_free(struct session *s)
{
	struct region_hold *h;

	if (!s)
		return NULL;
	checkpoint_session_gone(s);
	dataplane_stop(s);
	if (s->lease) {
		uv_close((uv_handle_t *)s->lease, lease_freed);
		s->lease = NULL;
	}
	h = calloc(1, sizeof(*h));
	if (h) {
		*h = (struct region_hold){ .d = s->d, .region = s->region, .bytes = s->bytes,
					   .locked_counted = s->locked_counted, .uid = s->uid, .swap_bytes = s->swap_bytes };
		snprintf(h->name, sizeof(h->name), "%s", s->name);
	}
	if (s->pager && pager_busy(s->pager)) {
		/* Never wait for the disk inside the loop: the pager becomes an
		 * orphan that keeps its files, buffers and this region until
		 * its requests complete. No completion is delivered. */
		if (h) {
			draining++;
			h->ended_ns = uv_hrtime();
			list_add_tail(&holds, &h->link);
			log_info("session %s ended with disk I/O in flight; its region and swap files are released when "
				 "that I/O completes", s->name);
			s->pager = pager_close(s->pager, orphan_released, h);
			h = NULL;
		} else {
			/* No memory to track it: leak the mapping rather than
			 * let a late completion touch an unmapped page. */
			log_error("session %s: out of memory while ending with I/O in flight; leaking its region", s->name);
			s->pager = pager_close(s->pager, NULL, NULL);
		}
		s->region = NULL;
	} else {
		s->pager = pager_close(s->pager, NULL, NULL);
		if (h)
			hold_release(h);
		else {
			s->d->used_bytes -= s->bytes;
			if (s->locked_counted)
				s->d->locked_bytes -= s->bytes;
			region_free(s->region);
		}
		s->region = NULL;
	}
	if (s->swap_bytes)
		status_refresh_soon(s->d);
	list_del(&s->link);
	for (uint32_t i = 0; s->tnames && i < s->ntnames_cap; i++)
		free(s->tnames[i]);
	free(s->tnames);
	free(s->tname_next);
	free(s->name_heads);
	rings_drop(s);
	free(s->tclaimed);
	free(s->tscratch);
	free(s->bad);
	free(s->name);
	free(s);
	return NULL;
}

bool session_page_bad(const struct session *s, uint32_t tensor, uint32_t page)
{
	for (uint32_t i = 0; i < s->nbad; i++)
		if (s->bad[i].tensor == tensor && s->bad[i].page == page)
			return true;
	return false;
}

int64_t session_region_held(const struct session *s)
{
	struct stat st;

	if (!s->region || fstat(s->region->fd, &st) < 0)
		return -1;
	return (int64_t)st.st_blocks * 512;
}
