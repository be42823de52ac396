/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include "daemon.h"
#include "log.h"
#include "region.h"

int slots_init(struct slots *s, uint32_t n)
{
	s->free = malloc((size_t)n * sizeof(*s->free));
	if (!s->free)
		return -ENOMEM;
	s->n = n;
	s->nfree = n;
	/* Lowest slot on top of the stack: a fresh session fills from 0 up. */
	for (uint32_t i = 0; i < n; i++)
		s->free[i] = n - 1 - i;
	return 0;
}

void slots_fini(struct slots *s)
{
	free(s->free);
	s->free = NULL;
	s->n = s->nfree = 0;
}

uint32_t slots_alloc(struct slots *s)
{
	if (s->nfree == 0)
		return SLOT_NONE;
	return s->free[--s->nfree];
}

void slots_free(struct slots *s, uint32_t slot)
{
	if (slot < s->n && s->nfree < s->n)
		s->free[s->nfree++] = slot;
}

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

static int session_finish(struct session *s)
{
	struct daemon *d = s->d;
	char *err = s->work_err;
	size_t errlen = sizeof(s->work_err);
	int r;

	r = slots_init(&s->slots, s->nslots);
	if (r < 0) {
		snprintf(err, errlen, "attach %s: out of memory", s->name);
		return r;
	}
	r = rings_create(s, d->cfg->session_ring_entries, err, errlen);
	if (r < 0)
		return r;
	s->sq_evt = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cq_evt = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->sq_evt < 0 || s->cq_evt < 0) {
		r = -errno;
		snprintf(err, errlen, "attach %s: cannot create eventfds: %s", s->name, strerror(errno));
		return r;
	}
	r = dataplane_start(s);
	if (r < 0) {
		snprintf(err, errlen, "attach %s: cannot watch the ring doorbell: %s", s->name, uv_strerror(r));
		return r;
	}
	if (s->region->locked) {
		d->locked_bytes += s->bytes;
		s->locked_counted = true;
	}
	return 0;
}

/* On a threadpool thread: touches only s->ropts, s->region and s->work_*. */
static void attach_work(uv_work_t *w)
{
	struct session *s = w->data;

	s->work_result = region_create(&s->ropts, &s->region, s->work_err, sizeof(s->work_err));
}

static void attach_after(uv_work_t *w, int status)
{
	struct session *s = w->data;
	int r = status < 0 ? status : s->work_result;

	s->attaching = false;
	if (r == 0 && s->owner)
		r = session_finish(s);
	control_attach_done(s, r);
}

int session_attach(struct daemon *d, struct client *owner, const char *name, uint64_t region_bytes,
		   uint32_t page_size, char *err, size_t errlen)
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
	s->rings_fd = s->sq_evt = s->cq_evt = -1;
	list_init(&s->poll_link);
	s->bytes = region_bytes;
	s->page_size = page_size;
	s->nslots = (uint32_t)(region_bytes / page_size);
	s->max_tensors = d->cfg->session_max_tensors;
	s->max_garbage = d->cfg->session_max_garbage;
	s->poll = (owner->features & SPW_FEAT_RING_POLL) != 0;
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
	owner->session = s;
	r = uv_queue_work(&d->loop, &s->work, attach_work, attach_after);
	if (r < 0) {
		s->attaching = false;
		owner->session = NULL;
		session_free(s);
		snprintf(err, errlen, "attach %s: cannot queue the region work: %s", name, uv_strerror(r));
		return -ENOMEM;
	}
	return 0;
}

static void tensor_clear(struct session *s, struct tensor *t)
{
	for (uint32_t i = 0; t->pages && i < t->npages; i++) {
		struct page *p = &t->pages[i];

		if (p->slot != SLOT_NONE)
			slots_free(&s->slots, p->slot);
		s->pages_pinned -= p->pins ? 1 : 0;
	}
	free(t->pages);
	free(t->name);
	memset(t, 0, sizeof(*t));
}

struct session *session_free(struct session *s)
{
	if (!s)
		return NULL;
	dataplane_stop(s);
	s->d->used_bytes -= s->bytes;
	if (s->locked_counted)
		s->d->locked_bytes -= s->bytes;
	list_del(&s->link);
	for (uint32_t i = 0; s->tensors && i < s->ntensors_cap; i++)
		if (s->tensors[i].name)
			tensor_clear(s, &s->tensors[i]);
	free(s->tensors);
	slots_fini(&s->slots);
	if (s->rings)
		munmap(s->rings, s->layout.bytes);
	if (s->rings_fd >= 0)
		close(s->rings_fd);
	if (s->sq_evt >= 0)
		close(s->sq_evt);
	if (s->cq_evt >= 0)
		close(s->cq_evt);
	region_free(s->region);
	free(s->name);
	free(s);
	return NULL;
}

struct tensor *session_tensor(struct session *s, uint32_t id)
{
	if (id >= s->ntensors_cap || !s->tensors[id].name)
		return NULL;
	return &s->tensors[id];
}

static int tensor_slot(struct session *s, uint32_t *ret)
{
	uint32_t cap;
	struct tensor *t;

	for (uint32_t i = 0; i < s->ntensors_cap; i++) {
		if (!s->tensors[i].name) {
			*ret = i;
			return 0;
		}
	}
	if (s->ntensors_cap >= s->max_tensors)
		return -EMFILE;
	cap = s->ntensors_cap ? s->ntensors_cap * 2 : 16;
	if (cap > s->max_tensors)
		cap = s->max_tensors;
	t = realloc(s->tensors, (size_t)cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	memset(t + s->ntensors_cap, 0, (size_t)(cap - s->ntensors_cap) * sizeof(*t));
	s->tensors = t;
	*ret = s->ntensors_cap;
	s->ntensors_cap = cap;
	return 0;
}

int session_register(struct session *s, const char *name, uint64_t bytes, uint32_t *id, char *err, size_t errlen)
{
	char a[32], b[32], c[32];
	uint64_t npages = (bytes + s->page_size - 1) / s->page_size;
	struct tensor *t;
	uint32_t tid;
	int r;

	for (uint32_t i = 0; i < s->ntensors_cap; i++) {
		if (s->tensors[i].name && !strcmp(s->tensors[i].name, name)) {
			snprintf(err, errlen, "register %s in %s: a tensor of that name is already registered (id %u); "
				 "unregister it first or pick another name", name, s->name, i);
			return -EEXIST;
		}
	}
	if (npages > s->slots.nfree) {
		snprintf(err, errlen, "register %s in %s: %s needs %llu slots of %s, %u of %u are free; attach with a "
			 "larger region_bytes (now %s) or unregister something",
			 name, s->name, format_bytes(bytes, a, sizeof(a)), (unsigned long long)npages,
			 format_bytes(s->page_size, b, sizeof(b)), s->slots.nfree, s->nslots,
			 format_bytes(s->region->bytes, c, sizeof(c)));
		return -ENOSPC;
	}
	r = tensor_slot(s, &tid);
	if (r == -EMFILE) {
		snprintf(err, errlen, "register %s in %s: the session already has %u tensors (session.max_tensors); "
			 "unregister some or raise session.max_tensors", name, s->name, s->ntensors);
		return r;
	}
	if (r < 0)
		goto oom;
	t = &s->tensors[tid];
	t->pages = calloc(npages, sizeof(*t->pages));
	t->name = strdup(name);
	if (!t->pages || !t->name) {
		free(t->pages);
		free(t->name);
		memset(t, 0, sizeof(*t));
		r = -ENOMEM;
		goto oom;
	}
	t->bytes = bytes;
	t->npages = (uint32_t)npages;
	t->kind = TENSOR_RESIDENT;
	for (uint32_t i = 0; i < t->npages; i++) {
		t->pages[i].slot = slots_alloc(&s->slots);
		t->pages[i].state = PAGE_RESIDENT;
	}
	s->ntensors++;
	*id = tid;
	return 0;
oom:
	snprintf(err, errlen, "register %s in %s: out of memory", name, s->name);
	return r;
}

int session_unregister(struct session *s, uint32_t id, char *err, size_t errlen)
{
	struct tensor *t = session_tensor(s, id);
	uint32_t pinned = 0;

	if (!t) {
		snprintf(err, errlen, "unregister in %s: no tensor with id %u", s->name, id);
		return -ENOENT;
	}
	for (uint32_t i = 0; i < t->npages; i++)
		pinned += t->pages[i].pins ? 1 : 0;
	if (pinned) {
		snprintf(err, errlen, "unregister %s in %s: %u of its pages are pinned; unpin them first", t->name,
			 s->name, pinned);
		return -EBUSY;
	}
	tensor_clear(s, t);
	s->ntensors--;
	return 0;
}
