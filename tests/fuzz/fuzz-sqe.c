/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: ring-entry validation (proto's spw_sqe_check) and the ring
 * layout, as the daemon meets them: the input is the first two words of a
 * ring setup followed by SQ entries as a hostile client writes them. Each
 * entry is copied out first (as the daemon does) and the check's verdict
 * is compared with the rules of spw-ring.h written out independently; the
 * layout must keep every part inside the memfd and apart.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "spw-ring.h"

static bool valid_by_the_rules(const struct spw_sqe *e)
{
	if (e->opcode >= SPW_OP__COUNT || e->reserved0 || e->reserved1)
		return false;
	if (e->opcode == SPW_OP_MARK)
		return e->arg != 0 && (e->flags == SPW_MARK_COMMIT || e->flags == SPW_MARK_STATS ||
				       (e->flags == SPW_MARK_OPEN && e->tensor == 0 &&
					(e->page == 0 || e->page == SPW_MARK_BY_WRITE)));
	/* UNPIN: DIRTY, or DIRTY and COPY_OF with the page copied in arg
	 * (any: the pager judges the ids). */
	if (e->opcode == SPW_OP_UNPIN)
		return e->flags == 0 || e->flags == SPW_UNPIN_DIRTY ? e->arg == 0 :
		       e->flags == (SPW_UNPIN_DIRTY | SPW_UNPIN_COPY_OF);
	if (e->arg)
		return false;
	if (e->opcode == SPW_OP_PIN)
		return (e->flags & ~SPW_PIN_OVERWRITE) == 0;
	return e->flags == 0;
}

static bool apart(size_t a, size_t alen, size_t b, size_t blen)
{
	return a + alen <= b || b + blen <= a;
}

static void check_layout(uint32_t sq, uint32_t cq)
{
	struct spw_ring_layout l;
	bool pow2 = sq && cq && !(sq & (sq - 1)) && !(cq & (cq - 1));
	bool ok = pow2 && sq >= SPW_RING_ENTRIES_MIN && cq <= SPW_RING_ENTRIES_MAX && sq <= cq;
	int r = spw_ring_layout(sq, cq, &l);
	size_t sqes = (size_t)sq * sizeof(struct spw_sqe), cqes = (size_t)cq * sizeof(struct spw_cqe);
	size_t hdr = sizeof(struct spw_ring_hdr);

	FUZZ_CHECK(r == 0 || r == -EINVAL);
	FUZZ_CHECK((r == 0) == ok);
	if (r < 0)
		return;
	FUZZ_CHECK(l.sq_entries == sq && l.cq_entries == cq);
	FUZZ_CHECK(l.bytes % 4096 == 0);
	FUZZ_CHECK(l.sq_hdr_off + hdr <= l.bytes && l.cq_hdr_off + hdr <= l.bytes);
	FUZZ_CHECK(l.sqes_off + sqes <= l.bytes && l.cqes_off + cqes <= l.bytes);
	FUZZ_CHECK(apart(l.sq_hdr_off, hdr, l.cq_hdr_off, hdr));
	FUZZ_CHECK(apart(l.sq_hdr_off, hdr, l.sqes_off, sqes) && apart(l.sq_hdr_off, hdr, l.cqes_off, cqes));
	FUZZ_CHECK(apart(l.cq_hdr_off, hdr, l.sqes_off, sqes) && apart(l.cq_hdr_off, hdr, l.cqes_off, cqes));
	FUZZ_CHECK(apart(l.sqes_off, sqes, l.cqes_off, cqes));
	FUZZ_CHECK(l.sqes_off % _Alignof(struct spw_sqe) == 0 && l.cqes_off % _Alignof(struct spw_cqe) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t sq, cq;

	if (size < 8)
		return 0;
	memcpy(&sq, data, 4);
	memcpy(&cq, data + 4, 4);
	/* Small counts are the interesting ones; keep the rest reachable. */
	check_layout(sq & 0x80000000u ? sq : sq & 0x1fff, cq & 0x80000000u ? cq : cq & 0x1fff);
	for (size_t o = 8; o + sizeof(struct spw_sqe) <= size; o += sizeof(struct spw_sqe)) {
		struct spw_sqe e;
		int r;

		memcpy(&e, data + o, sizeof(e));
		r = spw_sqe_check(&e);
		FUZZ_CHECK(r == 0 || r == -EINVAL);
		FUZZ_CHECK((r == 0) == valid_by_the_rules(&e));
		FUZZ_CHECK(spw_op_name(e.opcode) != NULL);
		FUZZ_CHECK((strcmp(spw_op_name(e.opcode), "unknown") == 0) == (e.opcode >= SPW_OP__COUNT));
	}
	return 0;
}
