/* SPDX-License-Identifier: MIT */
/*
 * client/persist.c: an optimizer on a persistent session. It marks each
 * step's updates for the daemon (OPEN before the first page of a step is
 * written, COMMIT once every update of an ended step is in the state), and
 * on a session taken over from a trainer that died it adopts the tensors
 * instead of initialising them, after checking the layout is the one that
 * was left (docs/persistent.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimizer-private.h"

/* User data of MARK completions (engine.c's are 1..3; jobs far above). */
#define UD_MARK 4u
#define UD_STATS 5u /* engine.c: a STATS mark's answer only frees its ring room */

#define LAYOUT_MAGIC 0x4c575053u /* "SPWL" */
#define LAYOUT_VERSION 1u
/* int8 moments with four chunks' codes a page and the scales in the
 * optimizer's scale pages (optimizer-private.h); version 1 kept three
 * chunks' codes and scales a page, which this optimizer must not misread. */
#define LAYOUT_VERSION_Q8 2u

static uint32_t layout_version(const spw_optimizer *o)
{
	return o->state_dtype == SPW_STATE_INT8 ? LAYOUT_VERSION_Q8 : LAYOUT_VERSION;
}

int spw__persist_init(spw_optimizer *o)
{
	const struct spw_session_info *p = &o->c->persist;

	o->persist.on = p->persistent;
	/* A fresh optimizer's first writes (tensors, initial weights) are
	 * step 1's: a trainer that dies before step 1 commits leaves a
	 * session the daemon knows is not worth resuming. */
	if (p->persistent && !p->reattached) {
		o->persist.opened = 1;
		return spw__mark_sync(o->c, SPW_MARK_OPEN, 1);
	}
	if (!p->reattached)
		return 0;
	/* Left inside a step's updates: the journal (journal.c) decides at
	 * spw_optimizer_new whether and how it resumes. */
	if (p->step_open)
		o->persist.torn = p->committed_step + 1;
	if (p->damaged_pages)
		return spw__error(o->c, -EBADMSG,
				  "spw_optimizer_new: session %s has %u damaged page%s, saved by spillwayd (a flush "
				  "or its last stop) and changed on disk since (the first: tensor %s page %u), whose "
				  "CRC-32C failed: their bytes are lost and "
				  "never handed out. Load the last checkpoint: spillwayctl drop %s, then spillwayctl "
				  "restore %s DIR", o->c->session, p->damaged_pages, p->damaged_pages == 1 ? "" : "s",
				  o->c->damaged_tensor, o->c->damaged_page, o->c->session, o->c->session);
	o->persist.adopting = true;
	o->persist.session_tensors = p->tensors;
	/* Before any committed step the state is worth nothing: the tensors
	 * are adopted and written anew, as a fresh run would. */
	o->persist.resumed = p->committed_step > 0;
	o->persist.resumed_step = p->committed_step;
	o->persist.committed = p->committed_step;
	o->persist.opened = p->step_open ? p->committed_step + 1 : p->committed_step;
	o->persist.ended = p->committed_step;
	o->persist.acked = p->committed_step;
	if (o->persist.resumed && o->dynamic && p->loss_scale > 0.0f)
		o->dyn_scale = (struct spw__loss_scale){ .scale = p->loss_scale, .good_steps = p->good_steps };
	return 0;
}

int spw__persist_tensor(spw_optimizer *o, const char *name, uint64_t bytes, enum spw_tensor_kind kind, uint32_t *id)
{
	int r;

	if (!o->persist.adopting)
		return spw_tensor_register(o->c, name, bytes, kind, id, NULL);
	r = spw_tensor_adopt(o->c, name, bytes, kind, id, NULL);
	if (r == 0)
		o->persist.adopted++;
	/* A checkpoint leaves scratch tensors out (the undo copies: needed
	 * only inside a step, and it holds none open): one restored from it
	 * gets them anew. A step left open needs what they held. */
	else if (r == -ENOENT && (kind & SPW_TENSOR_SCRATCH) && !o->persist.torn)
		r = spw_tensor_register(o->c, name, bytes, kind, id, NULL);
	return r;
}

struct layout_entry {
	uint64_t count;
	uint32_t group, ptype, frozen, name_len;
};

/* The record of what the optimizer holds: mode, tier, chunking, groups,
 * and every tensor's name, size, group and device type in order. A
 * resumed optimizer must build the same bytes. Returns its size, and
 * fills buf when it is not NULL. */
size_t spw__persist_layout_record(const spw_optimizer *o, unsigned char *buf)
{
	/* The state dtype rides in the mode word's high half, a bf16
	 * gradient store's bit above it and bf16 master weights' above
	 * that: an fp32 optimizer's record is the one earlier versions
	 * wrote. */
	uint32_t head[6] = { LAYOUT_MAGIC, layout_version(o),
			     (uint32_t)o->mode | (uint32_t)o->state_dtype << 16 | (uint32_t)o->grad16 << 24 |
				     (uint32_t)o->master16 << 25,
			     o->tier,
			     o->chunk_elems, o->ngroups };
	size_t at = sizeof(head);

	if (buf)
		memcpy(buf, head, sizeof(head));
	for (uint32_t i = 0; i < o->ntensors; i++) {
		const struct tensor *t = &o->tensors[i];
		struct layout_entry e = { .count = t->count, .group = t->group, .ptype = t->ptype, .frozen = t->frozen,
					  .name_len = (uint32_t)strlen(t->name) };

		if (buf) {
			memcpy(buf + at, &e, sizeof(e));
			memcpy(buf + at + sizeof(e), t->name, e.name_len);
		}
		at += sizeof(e) + e.name_len;
	}
	return at;
}

/* The first tensor where two records differ, as a sentence. */
void spw__persist_layout_diff(const spw_optimizer *o, const unsigned char *want, const unsigned char *have, char *out,
			size_t len)
{
	size_t at = 6 * sizeof(uint32_t);
	uint32_t hv[3];

	memcpy(hv, have, sizeof(hv));
	if (hv[1] == LAYOUT_VERSION && hv[2] == ((uint32_t)o->mode | (uint32_t)SPW_STATE_INT8 << 16) &&
	    o->state_dtype == SPW_STATE_INT8) {
		snprintf(out, len, "its int8 moments are in the layout of an older spillway (three chunks' codes "
			 "and scales a page), which this one does not read (four chunks' codes a page, the scales in "
			 "pages of their own)");
		return;
	}
	if (memcmp(want, have, at)) {
		snprintf(out, len, "the mode, state dtype, gradient store, master dtype, tier, chunk size or number of param "
			 "groups differ");
		return;
	}
	for (uint32_t i = 0; i < o->ntensors; i++) {
		struct layout_entry e;
		size_t n = sizeof(e) + strlen(o->tensors[i].name);

		memcpy(&e, have + at, sizeof(e));
		if (memcmp(want + at, have + at, n)) {
			snprintf(out, len, "tensor %u (%s here: %llu elements, group %u) is %.*s there with %llu "
				 "elements, group %u, device type %u", i, o->tensors[i].name,
				 (unsigned long long)o->tensors[i].count, o->tensors[i].group,
				 (int)(e.name_len < 200 ? e.name_len : 200), (const char *)have + at + sizeof(e),
				 (unsigned long long)e.count, e.group, e.ptype);
			return;
		}
		at += n;
	}
	snprintf(out, len, "the records differ");
}

/* Copies the record into (write) or out of (read) the layout tensor's
 * pages. The ring is ours. */
static int layout_io(spw_optimizer *o, unsigned char *rec, size_t bytes, bool write)
{
	for (size_t off = 0; off < bytes; off += o->page_size) {
		size_t n = bytes - off < o->page_size ? bytes - off : o->page_size;
		uint32_t page = (uint32_t)(off / o->page_size);
		void *p;
		int r = spw_pin(o->c, o->persist.layout_id, page, &p);

		if (r < 0)
			return r;
		if (write)
			memcpy(p, rec + off, n);
		else
			memcpy(rec + off, p, n);
		r = spw_unpin(o->c, o->persist.layout_id, page, write ? SPW_DIRTY : SPW_CLEAN);
		if (r < 0)
			return r;
	}
	return 0;
}

int spw__persist_layout(spw_optimizer *o)
{
	size_t bytes = spw__persist_layout_record(o, NULL);
	unsigned char *want, *have = NULL;
	char why[512];
	int r;

	if (!o->persist.on && !o->persist.adopting)
		return 0;
	want = malloc(bytes);
	if (!want || (o->persist.adopting && !(have = malloc(bytes)))) {
		free(want);
		return spw__opt_error(o, -ENOMEM, "begin: out of memory");
	}
	spw__persist_layout_record(o, want);
	/* On the tier of the state: a region smaller than the state has no
	 * free slot to give a resident tensor by now. */
	r = spw__persist_tensor(o, SPW__LAYOUT_NAME, bytes, o->tier, &o->persist.layout_id);
	if (r == 0)
		r = spw__journal_done_tensor(o);
	if (r < 0) {
		r = spw__opt_error(o, r, "begin: %s%s", spw_client_last_error(o->c),
				   r == -EEXIST ? " (the number or names of tensors differ)" : "");
		goto out;
	}
	if (o->persist.adopting && o->persist.adopted != o->persist.session_tensors) {
		r = spw__opt_error(o, -ESTALE, "begin: session %s holds %u tensors and this optimizer took %u of them; "
				   "the model differs from the run that left it: drop the session (spillwayctl drop "
				   "%s) to start over", o->c->session, o->persist.session_tensors, o->persist.adopted,
				   o->c->session);
		goto out;
	}
	if (o->persist.resumed) {
		r = layout_io(o, have, bytes, false);
		if (r == 0 && memcmp(want, have, bytes)) {
			spw__persist_layout_diff(o, want, have, why, sizeof(why));
			r = spw__opt_error(o, -ESTALE, "begin: session %s was left by an optimizer of another layout: %s; "
					   "drop the session (spillwayctl drop %s) to start over", o->c->session, why,
					   o->c->session);
			goto out;
		}
	} else {
		r = layout_io(o, want, bytes, true);
	}
	if (r < 0)
		r = spw__opt_error(o, r, "begin: the layout record: %s", spw_client_last_error(o->c));
out:
	free(want);
	free(have);
	return r;
}

void spw__persist_first_step(spw_optimizer *o, uint64_t step)
{
	/* Nothing is in flight before the first begin (a write's OPEN is
	 * answered); the daemon's marks follow at this step's OPEN and
	 * COMMIT (it takes a client's count as it comes). */
	pthread_mutex_lock(&o->lock);
	o->persist.committed = o->persist.ended = o->persist.acked = step - 1;
	pthread_mutex_unlock(&o->lock);
}

int spw__persist_open_write(spw_optimizer *o)
{
	uint64_t step;
	int r;

	if (!o->persist.on)
		return 0;
	pthread_mutex_lock(&o->lock);
	step = o->persist.ended + 1;
	pthread_mutex_unlock(&o->lock);
	if (step <= o->persist.opened)
		return 0;
	/* The engine is parked: the ring is ours until release. Marked as a
	 * write's: a kill before the step's first update leaves a state
	 * partly overwritten, which the daemon then releases at the next
	 * attach instead of handing it over (docs/persistent.md). */
	r = spw__mark_open_write(o->c, step);
	if (r == 0) {
		o->persist.opened = step;
		o->persist.write_opened = step;
	}
	return r;
}

/* Room to remember one more MARK in flight (engine). */
static bool mark_room(const spw_optimizer *o)
{
	return o->persist.mq_n < 32u;
}

static void mark_sent(spw_optimizer *o, uint64_t commit_step)
{
	o->persist.mq[(o->persist.mq_head + o->persist.mq_n) % 32u] = commit_step;
	o->persist.mq_n++;
	o->hints_inflight++;
}

bool spw__persist_open(spw_optimizer *o, const struct job *j)
{
	if (!o->persist.on || !job_updates(j->kind))
		return true;
	if (j->step <= o->persist.opened && j->step != o->persist.write_opened)
		return true;
	if (j->step == o->persist.write_opened) {
		/* The first update of the step a write opened: the write
		 * returned whole, and from here the journal covers the step
		 * (begin wrote its record; exact mode planned it at end). */
		if (o->hints_inflight + o->ring_reserved + 1 > o->ring_cap || !mark_room(o))
			return false;
		if (spw__submit_mark(o->c, SPW_MARK_OPEN, j->step, 0, 0, UD_MARK) < 0)
			return false;
		mark_sent(o, 0);
		o->persist.write_opened = 0;
		return true;
	}
	/* One step open at a time: a takeover then knows that every step
	 * before the open one is whole, and journal.c's records by step
	 * parity hold the open step's. */
	if (j->step > o->persist.committed + 1)
		return false;
	if (o->hints_inflight + o->ring_reserved + 1 > o->ring_cap || !mark_room(o))
		return false;
	if (spw__submit_mark(o->c, SPW_MARK_OPEN, j->step, 0, 0, UD_MARK) < 0)
		return false;
	mark_sent(o, 0);
	o->persist.opened = j->step;
	return true;
}

void spw__persist_commit(spw_optimizer *o)
{
	/* Every session commits its steps: status, metrics and top show
	 * them; only a persistent one also opens them (persist_open). In
	 * order, each with its own loss scale: a COMMIT the ring had no room
	 * for goes out before a later step's. */
	for (;;) {
		uint64_t step, adam_ns, adam_us;
		uint32_t bits, good, coef;
		bool ready;

		pthread_mutex_lock(&o->lock);
		step = o->persist.committed + 1;
		ready = step <= o->persist.ended && o->persist.mod_left[step & 1] == 0;
		bits = o->persist.scale_bits[step & 1];
		good = o->persist.good[step & 1];
		coef = o->persist.coef_bits[step & 1];
		pthread_mutex_unlock(&o->lock);
		if (!ready || o->hints_inflight + o->ring_reserved + 2 > o->ring_cap || !mark_room(o))
			return;
		/* The step's figures for status and metrics, before its COMMIT,
		 * so whoever saw the COMMIT answered sees them too. Best effort:
		 * a failed submit only loses a sample. Its answer frees its ring
		 * room (engine.c, UD_STATS) and is not in the queue of marks
		 * (mq), which counts the OPENs and COMMITs that are awaited. */
		adam_ns = atomic_load_explicit(&o->st_adam_ns, memory_order_relaxed);
		adam_us = (adam_ns - o->persist.adam_ns_seen) / 1000;
		if (spw__submit_mark(o->c, SPW_MARK_STATS, step, coef,
				     adam_us > UINT32_MAX ? UINT32_MAX : (uint32_t)adam_us, UD_STATS) == 0) {
			o->hints_inflight++;
			o->persist.adam_ns_seen = adam_ns;
		}
		if (spw__submit_mark(o->c, SPW_MARK_COMMIT, step, bits, good, UD_MARK) < 0)
			return;
		mark_sent(o, step);
		o->persist.committed = step;
	}
}

void spw__persist_marked(spw_optimizer *o, int32_t res)
{
	uint64_t step = 0;

	o->hints_inflight--;
	if (o->persist.mq_n) {
		step = o->persist.mq[o->persist.mq_head];
		o->persist.mq_head = (o->persist.mq_head + 1) % 32u;
		o->persist.mq_n--;
	}
	pthread_mutex_lock(&o->lock);
	if (res < 0)
		spw__opt_fatal_locked(o, res, "marking step %llu for the persistent session: %s",
				      (unsigned long long)o->persist.committed, spw_strerror(res));
	/* Marks complete in order: the oldest in flight answered. */
	if (step > o->persist.acked)
		o->persist.acked = step;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

SPW_EXPORT uint64_t spw_optimizer_resumed_step(const spw_optimizer *o)
{
	return o && o->persist.resumed ? o->persist.resumed_step : 0;
}
