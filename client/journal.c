/* SPDX-License-Identifier: MIT */
/*
 * client/journal.c: what makes a kill inside a step's updates resumable on
 * a persistent session (docs/persistent.md, "The tile journal").
 *
 * Updates run in place, tile by tile (job-kernels.c), AdamW in units of
 * SPW_JOURNAL_UNIT elements inside a tile. Before a unit's AdamW runs,
 * the pool thread copies the unit's old bytes of p, m and v into a
 * journal slot and marks the slot valid; after it, it sets the unit's bit
 * in the step's done bitmap and lets the slot go. Both live in resident
 * tensors of the session (the region is the daemon's memfd), so a SIGKILL
 * leaves every store that retired. A takeover puts back the unit a valid
 * slot names and clears its bit: then every unit is wholly of step n-1 or
 * wholly of step n, and the bitmap says which. (In this file a "tile" of
 * the journal is such a unit.)
 *
 * Exact mode then finishes step n from the gradient store (every
 * gradient of the step is there before its first update) with the
 * constants end() recorded, and commits it: the new trainer goes on at
 * n + 1. Overlapped mode cannot (the gradients not yet computed need a
 * redo of step n's forward and backward with step n-1's weights): it
 * keeps an undo copy of the master weights of each unit it updates (R_U),
 * spw_optimizer_read hands those out for the units done, and the redone
 * step skips their updates.
 *
 * The journal tensor "spw.opt.journal": a head, two step records (by step
 * parity: a record is rewritten only once the step two before committed),
 * then one slot per pool thread. "spw.opt.done": two bitmaps of a bit per
 * unit, by step parity. Both stay pinned for the optimizer's life.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optimizer-private.h"

#define JOURNAL_NAME "spw.opt.journal"
#define DONE_NAME "spw.opt.done"
#define JMAGIC 0x4e4a5053u /* "SPJN" */
#define JVERSION 1u
#define JRANGES 6u
#define SLOT_HEAD 128u
#define REC_HEAD 32u

struct jhead {
	uint32_t magic, version, nslots, ngroups;
	uint64_t slot_bytes;
	uint32_t mode, unit_elems;
};

struct jrec {
	_Atomic uint64_t step;
	uint32_t planned, scale_bits, good, pad[3];
};
_Static_assert(sizeof(struct jrec) == REC_HEAD, "record head");

/* Where a tile's old bytes came from: a page of a daemon tensor. */
struct jrange {
	uint32_t tensor, page, off, len;
};

struct jslot {
	_Atomic uint64_t step;  /* 0: free; else the step the tile is updated in */
	uint64_t tile;          /* global tile index: the done bit */
	uint32_t nr, pad;
	struct jrange r[JRANGES];
};
_Static_assert(sizeof(struct jslot) <= SLOT_HEAD, "slot head");

static size_t round_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

/* The journal's byte off (an object that does not cross a page). */
static unsigned char *jat(const spw_optimizer *o, size_t off)
{
	return (unsigned char *)o->jn.pages[off / o->page_size] + off % o->page_size;
}

static void jcopy(const spw_optimizer *o, size_t off, void *buf, size_t len, bool in)
{
	unsigned char *b = buf;

	while (len) {
		size_t n = o->page_size - off % o->page_size;

		if (n > len)
			n = len;
		if (in)
			memcpy(jat(o, off), b, n);
		else
			memcpy(b, jat(o, off), n);
		off += n;
		b += n;
		len -= n;
	}
}

static struct jrec *rec(const spw_optimizer *o, uint64_t step)
{
	return (struct jrec *)jat(o, 64 + (step & 1) * o->jn.rec_bytes);
}

static struct jslot *slot_head(const spw_optimizer *o, unsigned s)
{
	return (struct jslot *)jat(o, o->jn.slots_at + s * o->jn.slot_bytes);
}

static _Atomic uint64_t *done_word(const spw_optimizer *o, uint64_t step, uint64_t tile)
{
	size_t off = ((step & 1) * o->jn.words + tile / 64) * 8;

	return (_Atomic uint64_t *)((unsigned char *)o->jn.done_pages[off / o->page_size] + off % o->page_size);
}

static bool unit_is_done(const spw_optimizer *o, uint64_t step, uint64_t tile)
{
	return atomic_load_explicit(done_word(o, step, tile), memory_order_acquire) & (1ull << (tile % 64));
}

static uint64_t global_unit(const spw_optimizer *o, const struct chunk *ch, size_t tile)
{
	return (uint64_t)ch->global * o->jn.units_per_chunk + tile;
}

/* Pins every page of a journal tensor for the optimizer's life. */
static int pin_all(spw_optimizer *o, uint32_t id, uint32_t npages, void ***pages)
{
	*pages = calloc(npages, sizeof(**pages));
	if (!*pages)
		return spw__error(o->c, -ENOMEM, "spw_optimizer_new: out of memory");
	for (uint32_t i = 0; i < npages; i++) {
		int r = spw_pin(o->c, id, i, &(*pages)[i]);

		if (r < 0)
			return r;
	}
	return 0;
}

/* Registers a journal tensor of that kind, or adopts it on a taken-over
 * session. 1: adopted, 0: registered, or -errno (-ENOENT: a session from
 * before the journal, on a takeover that needs it). */
static int journal_tensor(spw_optimizer *o, const char *name, uint64_t bytes, enum spw_tensor_kind kind, uint32_t *id,
			  bool need)
{
	int r;

	if (o->persist.adopting) {
		r = spw_tensor_adopt(o->c, name, bytes, kind, id, NULL);
		if (r == 0) {
			o->persist.adopted++;
			return 1;
		}
		if (r != -ENOENT || need)
			return r;
	}
	return spw_tensor_register(o->c, name, bytes, kind, id, NULL);
}

/* A takeover with step `torn` open: whether this journal can resume it,
 * and at which step. */
static int takeover_plan(spw_optimizer *o)
{
	const struct jhead *h = (const struct jhead *)jat(o, 0);
	struct spw_session_info *p = &o->c->persist;
	struct jrec *rc = rec(o, o->persist.torn);
	uint64_t torn = o->persist.torn;
	float scale;

	if (h->magic != JMAGIC || h->version != JVERSION || h->mode != (uint32_t)o->mode ||
	    atomic_load(&rc->step) != torn || (o->mode == SPW_OPT_EXACT && !rc->planned))
		return spw__error(o->c, -ESTALE, "spw_optimizer_new: session %s was left inside step %llu's updates "
				  "and its journal does not describe that step (another mode, or a record never "
				  "completed), so it cannot be resumed exactly; drop it (spillwayctl drop %s) and "
				  "restart from a checkpoint", o->c->session, (unsigned long long)torn, o->c->session);
	if (o->mode == SPW_OPT_OVERLAPPED) {
		/* The step is redone from step torn - 1's weights. */
		o->persist.resumed_step = torn - 1;
		return 0;
	}
	/* Exact mode finishes the step at settle: the trainer sees it
	 * committed, with the loss scale its COMMIT carries. */
	o->persist.resumed = true;
	o->persist.resumed_step = torn;
	memcpy(&scale, &rc->scale_bits, sizeof(scale));
	p->committed_step = torn;
	p->step_open = 0;
	p->skipped = 0;
	p->loss_scale = scale;
	p->good_steps = rc->good & 0x7fffffffu;
	if (o->dynamic && scale > 0.0f)
		o->dyn_scale = (struct spw__loss_scale){ .scale = scale, .good_steps = rc->good & 0x7fffffffu };
	return 0;
}

/* The journal a taken-over session holds, adopted at whatever size it
 * has and pinned. 1: it is there and its records are this optimizer's
 * kind (its slots may be fewer or more); 0: none, or one to replace
 * (unregistered); or -errno. */
static int adopt_journal(spw_optimizer *o)
{
	const struct jhead *h;
	uint32_t npages;
	int r = spw_tensor_adopt(o->c, JOURNAL_NAME, 0, SPW_TENSOR_RESIDENT, &o->jn.id, &npages);

	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	o->persist.adopted++;
	o->jn.npages = npages;
	if ((r = pin_all(o, o->jn.id, npages, &o->jn.pages)) < 0)
		return r;
	h = (const struct jhead *)jat(o, 0);
	if (h->magic == JMAGIC && h->version == JVERSION && h->ngroups == o->ngroups &&
	    h->slot_bytes == o->jn.slot_bytes && h->nslots >= 1 && h->nslots <= 64 &&
	    o->jn.slots_at + (size_t)h->nslots * h->slot_bytes <= (size_t)npages * o->page_size) {
		/* A takeover with a step open needs its slots as they are;
		 * otherwise one of this optimizer's size replaces it. */
		/* (A skipped committed step's record may hold its repeat,
		 * spw__journal_open.) */
		if (o->persist.torn || h->nslots == o->jn.nslots || (o->persist.resumed && o->c->persist.skipped)) {
			o->jn.nslots = h->nslots;
			return 1;
		}
	}
	for (uint32_t i = 0; i < npages; i++)
		spw_unpin(o->c, o->jn.id, i, SPW_CLEAN);
	free(o->jn.pages);
	o->jn.pages = NULL;
	r = spw_tensor_unregister(o->c, o->jn.id);
	return r < 0 ? r : 0;
}

int spw__journal_open(spw_optimizer *o)
{
	size_t bytes;
	uint32_t threads = spw__pool_threads(o->pool);
	const char *kill_at = getenv("SPILLWAY_TEST_KILL_AT_TILE");
	int r = 0;

	if (!o->persist.on)
		return 0;
	if (threads > 64)
		threads = 64;
	if (threads == 0)
		threads = 1;
	o->jn.unit_elems = o->chunk_elems < SPW_JOURNAL_UNIT ? o->chunk_elems : SPW_JOURNAL_UNIT;
	o->jn.units_per_chunk = (o->chunk_elems + SPW_JOURNAL_UNIT - 1) / SPW_JOURNAL_UNIT;
	o->jn.nslots = threads;
	/* p, m and v of a tile: fp32 moments are the largest. */
	o->jn.slot_bytes = round_up(SLOT_HEAD + (size_t)12 * o->jn.unit_elems, 128);
	o->jn.rec_bytes = round_up(REC_HEAD + (size_t)o->ngroups * sizeof(struct spw_adamw_consts), 64);
	o->jn.slots_at = round_up(64 + 2 * o->jn.rec_bytes, 128);
	if (o->persist.adopting)
		r = adopt_journal(o);
	if (r == 0 && o->persist.torn)
		return spw__error(o->c, -ESTALE, "spw_optimizer_new: session %s was left by a trainer that died while "
				  "updating step %llu and it keeps no update journal of this optimizer's kind (made "
				  "by an older spillway, or with other param groups), so its state mixes two steps and "
				  "cannot be resumed exactly; drop it (spillwayctl drop %s) and restart from a "
				  "checkpoint", o->c->session, (unsigned long long)o->persist.torn, o->c->session);
	if (r == 0) {
		bytes = o->jn.slots_at + o->jn.nslots * o->jn.slot_bytes;
		o->jn.npages = (uint32_t)((bytes + o->page_size - 1) / o->page_size);
		r = spw_tensor_register(o->c, JOURNAL_NAME, bytes, SPW_TENSOR_RESIDENT, &o->jn.id, NULL);
		if (r == 0)
			r = pin_all(o, o->jn.id, o->jn.npages, &o->jn.pages);
		if (r == 0) {
			struct jhead h = { .magic = JMAGIC, .version = JVERSION, .nslots = o->jn.nslots,
					   .ngroups = o->ngroups, .slot_bytes = o->jn.slot_bytes, .mode = o->mode,
					   .unit_elems = o->jn.unit_elems };

			memcpy(jat(o, 0), &h, sizeof(h));
			/* No step record yet: a takeover before the first
			 * begin finds none. */
			atomic_store(&rec(o, 0)->step, 0);
			atomic_store(&rec(o, 1)->step, 0);
		}
	}
	if (r < 0)
		return spw__error(o->c, r, "spw_optimizer_new: the update journal: %s", spw_client_last_error(o->c));
	atomic_store(&o->jn.free_slots, o->jn.nslots == 64 ? ~0ull : (1ull << o->jn.nslots) - 1);
	o->jn.kill_at = kill_at ? atol(kill_at) : 0;
	o->jn.delay_us = getenv("SPILLWAY_TEST_TILE_DELAY_US") ? atol(getenv("SPILLWAY_TEST_TILE_DELAY_US")) : 0;
	if (!o->persist.torn && o->persist.resumed && o->c->persist.skipped && o->mode == SPW_OPT_EXACT) {
		/* The committed step was skipped (inf/nan) and its number came
		 * again: the daemon saw no OPEN for the repeat, so only the
		 * record tells whether its updates began. If they did, it is
		 * finished and committed again like any torn step. */
		uint64_t c = o->persist.resumed_step;
		const struct jrec *rc = rec(o, c);

		if (atomic_load(&rc->step) == c && rc->planned) {
			o->persist.torn = c;
			o->persist.committed = c - 1;
		}
	}
	if (o->persist.torn)
		return takeover_plan(o);
	/* No step open: whatever a slot holds is older than the committed
	 * step. */
	for (unsigned s = 0; s < o->jn.nslots; s++)
		atomic_store(&slot_head(o, s)->step, 0);
	return 0;
}

int spw__journal_done_tensor(spw_optimizer *o)
{
	uint64_t bytes;
	int r;

	if (!o->jn.pages)
		return 0;
	o->jn.words = ((uint64_t)o->nchunks * o->jn.units_per_chunk + 63) / 64;
	if (o->jn.words == 0)
		o->jn.words = 1;
	bytes = 2 * o->jn.words * 8;
	o->jn.ndone_pages = (uint32_t)((bytes + o->page_size - 1) / o->page_size);
	/* On the state's tier: sized at the first begin, when a region
	 * smaller than the state has no free slot left to register a
	 * resident tensor in; pinned for the optimizer's life all the same
	 * (the pin takes a clean page's slot). */
	r = journal_tensor(o, DONE_NAME, bytes, o->tier, &o->jn.done_id, o->persist.torn != 0);
	if (r < 0)
		return r;
	/* A fresh bitmap is cleared by each begin before its step's updates. */
	return pin_all(o, o->jn.done_id, o->jn.ndone_pages, &o->jn.done_pages);
}

/* Puts back the tiles the dead trainer was updating. Ring held. */
static int repair(spw_optimizer *o)
{
	uint64_t torn = o->persist.torn;

	for (unsigned s = 0; s < o->jn.nslots; s++) {
		struct jslot h;
		size_t at = o->jn.slots_at + s * o->jn.slot_bytes + SLOT_HEAD;

		memcpy(&h, slot_head(o, s), sizeof(h));
		if (h.step != torn)
			continue;
		if (h.nr > JRANGES || h.tile >= o->jn.words * 64)
			return spw__opt_error(o, -EBADMSG, "settle: journal slot %u of session %s is damaged", s,
					      o->c->session);
		for (uint32_t i = 0; i < h.nr; i++) {
			unsigned char *p;
			int r;

			if (h.r[i].off > o->page_size || h.r[i].len > o->page_size - h.r[i].off)
				return spw__opt_error(o, -EBADMSG, "settle: journal slot %u of session %s is damaged", s,
						      o->c->session);
			r = spw_pin(o->c, h.r[i].tensor, h.r[i].page, (void **)&p);
			if (r < 0)
				return spw__opt_error(o, r, "settle: putting back a torn tile: %s",
						      spw_client_last_error(o->c));
			jcopy(o, at, p + h.r[i].off, h.r[i].len, false);
			at += h.r[i].len;
			r = spw_unpin(o->c, h.r[i].tensor, h.r[i].page, SPW_DIRTY);
			if (r < 0)
				return spw__opt_error(o, r, "settle: putting back a torn tile: %s",
						      spw_client_last_error(o->c));
		}
		/* The tile is step torn - 1's again, whatever its bit said. */
		atomic_fetch_and(done_word(o, torn, h.tile), ~(1ull << (h.tile % 64)));
		atomic_store(&slot_head(o, s)->step, 0);
	}
	return 0;
}

/* Exact mode: the rest of step torn's updates, from the gradient store
 * with the constants its end() recorded; then its COMMIT. */
static int finish(spw_optimizer *o)
{
	uint64_t torn = o->persist.torn;
	const struct jrec *rc = rec(o, torn);
	int r;

	jcopy(o, 64 + (torn & 1) * o->jn.rec_bytes + REC_HEAD, o->gconsts,
	      o->ngroups * sizeof(struct spw_adamw_consts), false);
	pthread_mutex_lock(&o->lock);
	for (uint32_t i = 0; i < o->nchunks; i++) {
		struct chunk *ch = o->chunks[i];
		struct job *j = &ch->job;
		size_t ntiles = (ch->n + SPW_JOURNAL_UNIT - 1) / SPW_JOURNAL_UNIT, left = 0;

		for (size_t t = 0; t < ntiles; t++)
			left += !unit_is_done(o, torn, global_unit(o, ch, t));
		if (!left)
			continue;
		*j = (struct job){ .o = o, .ch = ch, .kind = JOB_ADAM_STORE, .step = torn, .gbuf = -1, .cbuf = -1,
				   .roles = 1u << R_P | roles_moments(o) | 1u << R_G,
				   .consts = o->gconsts[ch->t->group] };
		o->persist.mod_left[torn & 1]++;
		ch->busy = true;
		ch->t->pending++;
		o->jobs_open++;
		spw__opt_queue_locked(o, j);
	}
	o->persist.ended = torn;
	o->persist.scale_bits[torn & 1] = rc->scale_bits;
	o->persist.good[torn & 1] = rc->good;
	/* The record keeps no clip coefficient: the STATS before this
	 * COMMIT says none (the daemon shows none for -1). */
	{
		float none = -1.0f;

		memcpy(&o->persist.coef_bits[torn & 1], &none, sizeof(none));
	}
	pthread_mutex_unlock(&o->lock);
	spw__opt_wake(o);
	pthread_mutex_lock(&o->lock);
	WAIT_UNTIL(o, o->jobs_open == 0 && o->persist.acked >= torn, "settle: finishing step %llu",
		   (unsigned long long)torn);
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	return r;
}

int spw__journal_settle(spw_optimizer *o)
{
	int r;

	if (o->persist.settled)
		return 0;
	spw__opt_ring_acquire(o);
	r = spw__persist_layout(o);
	spw__opt_trace_disk_map(o);
	if (r == 0 && o->persist.torn)
		r = repair(o);
	spw__opt_ring_release(o);
	if (r == 0 && o->persist.torn && o->mode == SPW_OPT_EXACT)
		r = finish(o);
	if (r == 0)
		o->persist.settled = true;
	return r;
}

int spw__journal_begin(spw_optimizer *o, uint64_t step)
{
	struct jrec *rc;
	int r;

	if (!o->jn.pages)
		return 0;
	if (o->persist.torn && step == o->persist.torn && o->mode == SPW_OPT_OVERLAPPED && !o->persist.redo) {
		/* The redo of the torn step: its record and bitmap say which
		 * tiles are done already. */
		o->persist.redo = true;
		return 0;
	}
	o->persist.redo = false;
	/* The record and bitmap of this parity were step - 2's: a takeover
	 * needs them until that step's COMMIT is in. */
	pthread_mutex_lock(&o->lock);
	WAIT_UNTIL(o, step < 2 || o->persist.acked >= step - 2,
		   "begin %llu: the commit of step %llu", (unsigned long long)step, (unsigned long long)step - 2);
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	if (r < 0)
		return r;
	rc = rec(o, step);
	atomic_store(&rc->step, 0);
	rc->planned = 0;
	for (uint64_t w = 0; w < o->jn.words; w++)
		atomic_store_explicit(done_word(o, step, w * 64), 0, memory_order_relaxed);
	atomic_store_explicit(&rc->step, step, memory_order_release);
	return 0;
}

void spw__journal_plan(spw_optimizer *o, uint32_t scale_bits, uint32_t good)
{
	struct jrec *rc;

	if (!o->jn.pages)
		return;
	rc = rec(o, o->step);
	jcopy(o, 64 + (o->step & 1) * o->jn.rec_bytes + REC_HEAD, o->gconsts,
	      o->ngroups * sizeof(struct spw_adamw_consts), true);
	rc->scale_bits = scale_bits;
	rc->good = good;
	/* A tensor without a gradient this step is not updated: a takeover
	 * that finishes the step must leave it too. */
	for (uint32_t i = 0; i < o->nchunks; i++) {
		const struct chunk *ch = o->chunks[i];

		if (!ch->t->none)
			continue;
		for (size_t t = 0; t < (ch->n + SPW_JOURNAL_UNIT - 1) / SPW_JOURNAL_UNIT; t++) {
			uint64_t g = global_unit(o, ch, t);

			atomic_fetch_or(done_word(o, o->step, g), 1ull << (g % 64));
		}
	}
	atomic_thread_fence(memory_order_seq_cst);
	rc->planned = 1;
	atomic_thread_fence(memory_order_seq_cst);
}

bool spw__journal_unit_done(spw_optimizer *o, const struct job *j, size_t u)
{
	return unit_is_done(o, j->step, global_unit(o, j->ch, u));
}

/* The byte ranges tile [b, e) of job j covers in p, m, v and, with int8
 * moments, their block scales in the optimizer's scale pages (all pinned
 * at j->ptr), as pages of daemon tensors, and where they are here. */
static unsigned unit_ranges(const spw_optimizer *o, const struct job *j, size_t b, size_t e, struct jrange *r,
			    unsigned char **at)
{
	const struct chunk *ch = j->ch;
	unsigned roles = 1u << R_P | roles_moments(o), nr = 0;

	for (unsigned ro = 0; ro < R__N; ro++) {
		struct role_span sp = role_tile(o, ro, b, e);

		if (!(roles & 1u << ro))
			continue;
		r[nr] = (struct jrange){ .tensor = role_id(o, ro, ch->t, ch->index),
					 .page = role_page(o, ro, ch->t, ch->index),
					 .off = (uint32_t)(role_offset(o, ro, ch->t, ch->index) + sp.at),
					 .len = (uint32_t)sp.len };
		at[nr++] = (unsigned char *)j->run->ptr[ro] + sp.at;
	}
	return nr;
}

int spw__journal_enter(spw_optimizer *o, const struct job *j, size_t tile, size_t b, size_t e)
{
	struct jrange r[JRANGES];
	unsigned char *at[JRANGES];
	struct jslot *h;
	uint64_t free_bits;
	size_t off;
	unsigned s, nr;

	if (!o->jn.done_pages)
		return -1;
	/* A slot per pool thread: one is free, unless the journal was taken
	 * over, torn, from a trainer with fewer threads (its slots are kept
	 * for this optimizer's life): then a tile waits a tile's time. */
	for (unsigned spins = 0;; spins++) {
		free_bits = atomic_load(&o->jn.free_slots);
		if (!free_bits) {
			/* The holder may have lost its core: let it run. */
			if (spins % 64 == 63)
				sched_yield();
			else
				cpu_relax();
			continue;
		}
		s = (unsigned)__builtin_ctzll(free_bits);
		if (atomic_compare_exchange_weak(&o->jn.free_slots, &free_bits, free_bits & ~(1ull << s)))
			break;
	}
	nr = unit_ranges(o, j, b, e, r, at);
	off = o->jn.slots_at + s * o->jn.slot_bytes + SLOT_HEAD;
	for (unsigned i = 0; i < nr; i++) {
		jcopy(o, off, at[i], r[i].len, true);
		off += r[i].len;
	}
	h = slot_head(o, s);
	h->tile = global_unit(o, j->ch, tile);
	h->nr = nr;
	memcpy(h->r, r, nr * sizeof(r[0]));
	/* The old bytes before the slot says it holds them, and both before
	 * the first store of the update. Release fences order stores before
	 * them ahead of stores after them (x86 keeps store order anyway: a
	 * compiler barrier; a store barrier elsewhere); the kernels make no
	 * non-temporal stores. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&h->step, j->step, memory_order_release);
	if (j->run->ptr[R_U] && (j->roles & 1u << R_U)) {
		size_t es = role_elem_bytes(o, R_P);

		memcpy((unsigned char *)j->run->ptr[R_U] + b * es, (const unsigned char *)j->run->ptr[R_P] + b * es,
		       (e - b) * es);
	}
	atomic_thread_fence(memory_order_release);
	return (int)s;
}

void spw__journal_leave(spw_optimizer *o, const struct job *j, size_t tile, int slot)
{
	uint64_t g;

	if (slot < 0)
		return;
	g = global_unit(o, j->ch, tile);
	/* The update's stores before its bit, the bit before the slot is
	 * let go: a kill between the two puts the tile back and clears the
	 * bit (repair), which is as good. */
	atomic_thread_fence(memory_order_release);
	atomic_fetch_or_explicit(done_word(o, j->step, g), 1ull << (g % 64), memory_order_release);
	atomic_store_explicit(&slot_head(o, (unsigned)slot)->step, 0, memory_order_release);
	atomic_fetch_or(&o->jn.free_slots, 1ull << slot);
}

int spw__journal_undo_fix(spw_optimizer *o, const struct chunk *ch, float *out)
{
	size_t ntiles = (ch->n + SPW_JOURNAL_UNIT - 1) / SPW_JOURNAL_UNIT;
	bool any = false;
	unsigned char *u;
	size_t es = role_elem_bytes(o, R_U);
	int r;

	/* Until the redo's begin: from then on p is the truth again. */
	if (!o->jn.done_pages || !o->persist.torn || o->mode != SPW_OPT_OVERLAPPED || o->started || !ch->t->has_u)
		return 0;
	for (size_t t = 0; t < ntiles && !any; t++)
		any = unit_is_done(o, o->persist.torn, global_unit(o, ch, t));
	if (!any)
		return 0;
	r = spw_pin(o->c, ch->t->id[R_U], role_page(o, R_U, ch->t, ch->index), (void **)&u);
	if (r < 0)
		return r;
	u += role_offset(o, R_U, ch->t, ch->index);
	for (size_t t = 0; t < ntiles; t++) {
		size_t b = t * SPW_JOURNAL_UNIT, e = b + SPW_JOURNAL_UNIT < ch->n ? b + SPW_JOURNAL_UNIT : ch->n;

		if (unit_is_done(o, o->persist.torn, global_unit(o, ch, t)))
			o->k->cast[SPW_DTYPE_F32][master_dtype(o)](out + ch->off + b, u + b * es, e - b);
	}
	return spw_unpin(o->c, ch->t->id[R_U], role_page(o, R_U, ch->t, ch->index), SPW_CLEAN);
}

void spw__journal_test_delay(const spw_optimizer *o)
{
	if (o->jn.delay_us > 0)
		usleep((useconds_t)o->jn.delay_us);
}

bool spw__journal_kill_now(spw_optimizer *o)
{
	return o->jn.kill_at && atomic_fetch_add(&o->jn.tiles, 1) + 1 == o->jn.kill_at;
}

void spw__journal_close(spw_optimizer *o)
{
	if (!o->c->dead && !o->err) {
		for (uint32_t i = 0; o->jn.pages && i < o->jn.npages && o->jn.pages[i]; i++)
			spw_unpin(o->c, o->jn.id, i, SPW_DIRTY);
		for (uint32_t i = 0; o->jn.done_pages && i < o->jn.ndone_pages && o->jn.done_pages[i]; i++)
			spw_unpin(o->c, o->jn.done_id, i, SPW_DIRTY);
	}
	free(o->jn.pages);
	free(o->jn.done_pages);
	o->jn.pages = o->jn.done_pages = NULL;
}
