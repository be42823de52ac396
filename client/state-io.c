/* SPDX-License-Identifier: MIT */
/*
 * client/state-io.c: an optimizer's state read and written between steps
 * (spw_optimizer_read / spw_optimizer_write).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optimizer-private.h"

/* What read and write check before touching a tensor's state, then the
 * sync after which no job holds a pin on it or reads its chunks' flags. */
static int state_access(spw_optimizer *o, const char *verb, uint32_t tensor, enum spw_optimizer_state which,
			const void *buf, struct tensor **ret)
{
	struct tensor *t;
	int r;

	if (tensor >= o->ntensors || (unsigned)which > SPW_STATE_EXP_AVG_SQ || !buf)
		return spw__opt_error(o, -EINVAL, "%s: no tensor %u or state %d, or the buffer is NULL", verb, tensor,
				      (int)which);
	if (o->in_step)
		return spw__opt_error(o, -EBUSY, "%s: a step is open", verb);
	t = &o->tensors[tensor];
	if (t->frozen && which != SPW_STATE_PARAM)
		return spw__opt_error(o, -EINVAL, "%s %s: a frozen tensor has no optimizer state", verb, t->name);
	if ((r = spw_optimizer_sync(o)) < 0)
		return r;
	*ret = t;
	return 0;
}

/* int8 moments: n values from codes and their blocks' scales (q8.h). */
static void q8_decode(unsigned role, const unsigned char *codes, const float *scales, float *out, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		float s = scales[i / SPW_Q8_BLOCK];

		out[i] = role == R_M ? spw_q8_dec_m((int8_t)codes[i], s) : spw_q8_dec_v(codes[i], s);
	}
}

/* n values coded as an update stores them: per block the largest
 * |value| by its bits as the scale, then the codes. */
static void q8_encode(unsigned role, const float *in, unsigned char *codes, float *scales, uint64_t n)
{
	for (uint64_t b = 0; b < n; b += SPW_Q8_BLOCK) {
		uint64_t e = n - b < SPW_Q8_BLOCK ? n : b + SPW_Q8_BLOCK;
		uint32_t mx = 0;
		float s, k;

		for (uint64_t i = b; i < e; i++)
			if (spw_q8_absbits(in[i]) > mx)
				mx = spw_q8_absbits(in[i]);
		s = scales[b / SPW_Q8_BLOCK] = spw_q8_of_bits(mx);
		k = role == R_M ? spw_q8_km(s) : spw_q8_kv(s);
		for (uint64_t i = b; i < e; i++)
			codes[i] = role == R_M ? (unsigned char)spw_q8_enc_m(in[i], k) : spw_q8_enc_v(in[i], k);
	}
}

/* Pins the page holding chunk k's data of role r; *p: the data. The ring
 * is the caller's. */
static int pin_role(spw_optimizer *o, const struct tensor *t, unsigned r, uint32_t k, unsigned char **p)
{
	int ret = spw_pin(o->c, role_id(o, r, t, k), role_page(o, r, t, k), (void **)p);

	if (ret >= 0)
		*p += role_offset(o, r, t, k);
	return ret;
}

static int unpin_role(spw_optimizer *o, const struct tensor *t, unsigned r, uint32_t k, unsigned flags)
{
	return spw_unpin(o->c, role_id(o, r, t, k), role_page(o, r, t, k), flags);
}

/* The scale role of an int8 moment role, or R__N. */
static unsigned scale_role(const spw_optimizer *o, unsigned r)
{
	return !role_q8(o, r) ? R__N : r == R_M ? R_MS : R_VS;
}

SPW_EXPORT int spw_optimizer_read(spw_optimizer *o, uint32_t tensor, enum spw_optimizer_state which,
				  float *out)
{
	struct tensor *t;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = state_access(o, "read", tensor, which, out, &t)) < 0)
		return r;
	/* A session taken over inside a step's updates is put right first. */
	if (o->persist.torn && (r = spw__journal_settle(o)) < 0)
		return r;
	spw__opt_ring_acquire(o);
	for (uint32_t k = 0; k < t->nchunks && r >= 0; k++) {
		const struct chunk *ch = &t->chunks[k];
		unsigned sr = scale_role(o, which);
		unsigned char *p, *sp = NULL;

		r = pin_role(o, t, which, k, &p);
		if (r < 0)
			break;
		if (sr < R__N && (r = pin_role(o, t, sr, k, &sp)) < 0) {
			unpin_role(o, t, which, k, SPW_CLEAN);
			break;
		}
		/* Moments never updated are torch's zeros, whatever the page holds. */
		if (which != SPW_STATE_PARAM && !ch->zeroed)
			memset(out + ch->off, 0, ch->n * sizeof(float));
		else if (role_16(o, which)) /* widening bf16 is exact */
			o->k->cast[SPW_DTYPE_F32][SPW_DTYPE_BF16](out + ch->off, p, ch->n);
		else if (sp)
			q8_decode(which, p, (const float *)sp, out + ch->off, ch->n);
		else
			memcpy(out + ch->off, p, ch->n * sizeof(float));
		r = unpin_role(o, t, which, k, SPW_CLEAN);
		if (sp) {
			int r2 = unpin_role(o, t, sr, k, SPW_CLEAN);

			r = r < 0 ? r : r2;
		}
		/* Left inside an overlapped step: the weights it is redone from. */
		if (r >= 0 && which == SPW_STATE_PARAM)
			r = spw__journal_undo_fix(o, ch, out);
	}
	spw__opt_ring_release(o);
	if (r < 0)
		return spw__opt_error(o, r, "read %s: %s", t->name, spw_client_last_error(o->c));
	return 0;
}

/* Copies chunk k's n values of role ro into its page, which the caller's
 * ring holds (in NULL: zeros; bf16 moments rounded to nearest even, as
 * the kernels store them, and bf16 master weights too), and hands it back
 * dirty so the daemon keeps them. */
static int put_page(spw_optimizer *o, const struct tensor *t, unsigned ro, uint32_t k, const float *in, uint64_t n)
{
	unsigned sr = scale_role(o, ro);
	unsigned char *p, *sp = NULL;
	int r = pin_role(o, t, ro, k, &p), r2 = 0;

	if (r < 0)
		return r;
	if (sr < R__N && (r = pin_role(o, t, sr, k, &sp)) < 0) {
		unpin_role(o, t, ro, k, SPW_CLEAN);
		return r;
	}
	if (!in) {
		memset(p, 0, role_chunk_bytes(o, ro, n));
		if (sp)
			memset(sp, 0, role_chunk_bytes(o, sr, n));
	} else if (sp) {
		q8_encode(ro, in, p, (float *)sp, n);
	} else if (role_16(o, ro)) {
		o->k->cast[SPW_DTYPE_BF16][SPW_DTYPE_F32](p, in, n);
	} else {
		memcpy(p, in, n * sizeof(float));
	}
	r = unpin_role(o, t, ro, k, SPW_DIRTY);
	if (sp)
		r2 = unpin_role(o, t, sr, k, SPW_DIRTY);
	return r < 0 ? r : r2;
}

/* Tests only: SPILLWAY_TEST_KILL_AT_WRITE_PAGE=K kills the process after
 * the K-th page this process wrote through spw_optimizer_write (counted
 * across calls), as a SIGKILL in the middle of load_state_dict would. */
static void test_kill_at_write_page(void)
{
	static _Atomic long pages;
	const char *k = getenv("SPILLWAY_TEST_KILL_AT_WRITE_PAGE");

	if (k && atomic_fetch_add(&pages, 1) + 1 == atol(k))
		kill(getpid(), SIGKILL);
}

SPW_EXPORT int spw_optimizer_write(spw_optimizer *o, uint32_t tensor, enum spw_optimizer_state which,
				   const float *in)
{
	struct tensor *t;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = state_access(o, "write", tensor, which, in, &t)) < 0)
		return r;
	/* A session taken over inside a step's updates is put right first. */
	if (o->persist.torn && (r = spw__journal_settle(o)) < 0)
		return r;
	/* Parking the engine orders our writes of ch->zeroed before the next
	 * job's reads. A persistent session learns first that the state is
	 * changing (OPEN of the next step); a read changes nothing and opens
	 * none, so a checkpoint or a kill after it finds the step committed. */
	spw__opt_ring_acquire(o);
	r = spw__persist_open_write(o);
	for (uint32_t k = 0; k < t->nchunks && r >= 0; k++) {
		struct chunk *ch = &t->chunks[k];

		if (which == SPW_STATE_PARAM || ch->zeroed) {
			r = put_page(o, t, which, k, in + ch->off, ch->n);
			test_kill_at_write_page();
			continue;
		}
		/* A chunk never updated would have both moments zeroed by its
		 * first update, wiping what is written now: zero the other
		 * moment's page here instead (it may hold a slot's earlier
		 * tenant) and mark the chunk initialised. */
		r = put_page(o, t, which == SPW_STATE_EXP_AVG ? R_V : R_M, k, NULL, ch->n);
		if (r >= 0)
			r = put_page(o, t, which, k, in + ch->off, ch->n);
		if (r >= 0)
			ch->zeroed = true;
		test_kill_at_write_page();
	}
	spw__opt_ring_release(o);
	if (r < 0)
		return spw__opt_error(o, r, "write %s: %s", t->name, spw_client_last_error(o->c));
	return 0;
}
