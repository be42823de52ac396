/* SPDX-License-Identifier: MIT */
/*
 * A session's tensors by name: the name table (a hash over the pager's
 * tensor ids), REGISTER and UNREGISTER. session.c has the session itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "daemon.h"
#include "log.h"
#include "pager.h"
#include "region.h"
#include "session.h"
#include "util/bytes.h"

const char *session_tensor_name(const struct session *s, uint32_t id)
{
	return id < s->ntnames_cap ? s->tnames[id] : NULL;
}

/* Tensor names are looked up through a hash (FNV-1a, chained by id), so
 * registering the 65,536th tensor costs what the first did. */
#define NO_ID UINT32_MAX

static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return h;
}

static uint32_t name_find(const struct session *s, const char *name)
{
	if (!s->name_buckets)
		return NO_ID;
	for (uint32_t id = s->name_heads[name_hash(name) & (s->name_buckets - 1)]; id != NO_ID; id = s->tname_next[id])
		if (!strcmp(s->tnames[id], name))
			return id;
	return NO_ID;
}

static void name_link(struct session *s, uint32_t id)
{
	uint32_t *head = &s->name_heads[name_hash(s->tnames[id]) & (s->name_buckets - 1)];

	s->tname_next[id] = *head;
	*head = id;
}

static void name_unlink(struct session *s, uint32_t id)
{
	uint32_t *at = &s->name_heads[name_hash(s->tnames[id]) & (s->name_buckets - 1)];

	while (*at != id)
		at = &s->tname_next[*at];
	*at = s->tname_next[id];
}

/* Keeps the chains short: at most one name per bucket on average. */
static int names_rehash(struct session *s, uint32_t want)
{
	uint32_t n = s->name_buckets ? s->name_buckets : 64;
	uint32_t *heads;

	if (want <= s->name_buckets)
		return 0;
	while (n < want)
		n *= 2;
	heads = malloc((size_t)n * sizeof(*heads));
	if (!heads)
		return -ENOMEM;
	memset(heads, 0xff, (size_t)n * sizeof(*heads));
	free(s->name_heads);
	s->name_heads = heads;
	s->name_buckets = n;
	for (uint32_t id = 0; id < s->ntnames_cap; id++)
		if (s->tnames[id])
			name_link(s, id);
	return 0;
}

/* *a, a byte per tensor id, grown from the session's capacity to cap
 * with the new bytes 0. */
static int bytes_grow(uint8_t **a, uint32_t old, uint32_t cap)
{
	uint8_t *n = realloc(*a, cap);

	if (!n)
		return -ENOMEM;
	memset(n + old, 0, cap - old);
	*a = n;
	return 0;
}

/* Makes room for the name of tensor id (the pager hands out ids from 0). */
static int names_reserve(struct session *s, uint32_t id)
{
	uint32_t cap = s->ntnames_cap ? s->ntnames_cap : 16;
	uint32_t *nx;
	char **n;

	if (id < s->ntnames_cap)
		return names_rehash(s, s->ntensors + 1);
	while (cap <= id)
		cap *= 2;
	n = realloc(s->tnames, (size_t)cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	memset(n + s->ntnames_cap, 0, (size_t)(cap - s->ntnames_cap) * sizeof(*n));
	s->tnames = n;
	nx = realloc(s->tname_next, (size_t)cap * sizeof(*nx));
	if (!nx)
		return -ENOMEM;
	s->tname_next = nx;
	if (bytes_grow(&s->tclaimed, s->ntnames_cap, cap) < 0 || bytes_grow(&s->tscratch, s->ntnames_cap, cap) < 0)
		return -ENOMEM;
	s->ntnames_cap = cap;
	return names_rehash(s, s->ntensors + 1);
}

int session_register(struct session *s, const char *name, uint64_t bytes, bool swappable, bool scratch,
		     uint32_t *id, uint32_t *npages, char *err, size_t errlen)
{
	char perr[512], *copy;
	uint32_t tid, n, other = name_find(s, name);
	int r;

	if (other != NO_ID) {
		snprintf(err, errlen, "register %s in %s: a tensor of that name is already registered (id %u)%s; "
			 "unregister it first or pick another name", name, s->name, other,
			 other == s->unregistering ? ", being unregistered" : "");
		return -EEXIST;
	}
	if (s->ntensors >= s->max_tensors) {
		snprintf(err, errlen, "register %s in %s: the session already has %u tensors (session.max_tensors); "
			 "unregister some or raise session.max_tensors", name, s->name, s->ntensors);
		return -EMFILE;
	}
	if (!swappable) {
		uint64_t need = (bytes + s->page_size - 1) / s->page_size;
		uint32_t left = pager_slots_unclaimed(s->pager);
		char a[32], b[32], c[32];

		if (need > left) {
			snprintf(err, errlen, "register %s in %s: %s needs %llu slots of %s, %u of %u are free (not "
				 "held by resident or pinned pages); attach with a larger region_bytes (now %s), unregister "
				 "something or register it \"swappable\"",
				 name, s->name, format_bytes(bytes, a, sizeof(a)), (unsigned long long)need,
				 format_bytes(s->page_size, b, sizeof(b)), left, s->nslots,
				 format_bytes(s->region->bytes, c, sizeof(c)));
			return -ENOSPC;
		}
	}
	copy = strdup(name);
	if (!copy)
		goto oom;
	r = pager_tensor_add(s->pager, name, bytes, swappable, &tid, &n, perr, sizeof(perr));
	if (r < 0) {
		free(copy);
		if (r == -ENOMEM && !swappable) {
			/* The client's remedy for a resident tensor that does not
			 * fit is the same as before the NVMe tier: ENOSPC. */
			r = -ENOSPC;
		}
		snprintf(err, errlen, "register %s in %s: %s", name, s->name, perr);
		return r;
	}
	if (names_reserve(s, tid) < 0) {
		/* Nothing of it is in flight yet: it goes at once. */
		pager_tensor_remove(s->pager, tid);
		free(copy);
		goto oom;
	}
	s->tnames[tid] = copy;
	s->tclaimed[tid] = 1;
	s->tscratch[tid] = scratch;
	name_link(s, tid);
	s->ntensors++;
	*id = tid;
	*npages = n;
	return 0;
oom:
	snprintf(err, errlen, "register %s in %s: out of memory", name, s->name);
	return -ENOMEM;
}

uint32_t session_tensor_find(const struct session *s, const char *name)
{
	return name_find(s, name);
}

static void name_drop(struct session *s, uint32_t id)
{
	name_unlink(s, id);
	free(s->tnames[id]);
	s->tnames[id] = NULL;
	s->ntensors--;
}

int session_unregister(struct session *s, uint32_t id, char *err, size_t errlen)
{
	const char *name = session_tensor_name(s, id);
	int r;

	if (!name || id == s->unregistering) {
		snprintf(err, errlen, "unregister in %s: no tensor with id %u", s->name, id);
		return -ENOENT;
	}
	r = pager_tensor_remove(s->pager, id);
	if (r == -EBUSY) {
		snprintf(err, errlen, "unregister %s in %s: some of its pages are pinned or being pinned; unpin them "
			 "first", name, s->name);
		return r;
	}
	if (r == PAGER_PENDING) {
		/* Its reads ahead or writes behind are still in flight: the
		 * reply comes from session_tensor_removed(). */
		s->unregistering = id;
		return 1;
	}
	if (r < 0) {
		/* -EAGAIN: a checkpoint copies it (the pager says so). */
		snprintf(err, errlen, "unregister %s in %s: %s", name, s->name,
			 r == -EAGAIN ? pager_last_error(s->pager) : strerror(-r));
		return r;
	}
	name_drop(s, id);
	return 0;
}

/* The pager's tensor_removed callback: a dying tensor's last I/O is done. */
void session_tensor_removed(void *ctx, uint32_t id)
{
	struct session *s = ctx;

	if (id < s->ntnames_cap && s->tnames[id])
		name_drop(s, id);
	if (id == s->unregistering) {
		s->unregistering = NO_ID;
		control_unregister_done(s, id);
	}
}
