/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "spw-ring.h"

static int entries_valid(uint32_t n)
{
	return n >= SPW_RING_ENTRIES_MIN && n <= SPW_RING_ENTRIES_MAX && (n & (n - 1)) == 0;
}

int spw_ring_layout(uint32_t sq_entries, uint32_t cq_entries, struct spw_ring_layout *l)
{
	const size_t pg = 4096;
	size_t off;

	if (!entries_valid(sq_entries) || !entries_valid(cq_entries) || cq_entries < sq_entries)
		return -EINVAL;

	l->sq_entries = sq_entries;
	l->cq_entries = cq_entries;
	l->sq_hdr_off = 0;
	l->cq_hdr_off = sizeof(struct spw_ring_hdr);
	off = 2 * sizeof(struct spw_ring_hdr);
	l->sqes_off = off;
	off += (size_t)sq_entries * sizeof(struct spw_sqe);
	l->cqes_off = off;
	off += (size_t)cq_entries * sizeof(struct spw_cqe);
	off = (off + 63) & ~(size_t)63;
	l->io_hdr_off = off;
	off += sizeof(struct spw_io_log_hdr);
	l->io_events_off = off;
	off += (size_t)SPW_IO_LOG_ENTRIES * sizeof(struct spw_io_event);
	l->bytes = (off + pg - 1) & ~(pg - 1);
	return 0;
}

int spw_sqe_check(const struct spw_sqe *sqe)
{
	if (sqe->opcode >= SPW_OP__COUNT)
		return -EINVAL;
	if (sqe->reserved0 || sqe->reserved1 ||
	    (sqe->arg && sqe->opcode != SPW_OP_MARK && !(sqe->opcode == SPW_OP_UNPIN && (sqe->flags & SPW_UNPIN_COPY_OF))))
		return -EINVAL;
	switch (sqe->opcode) {
	case SPW_OP_PIN:
		if (sqe->flags & ~SPW_PIN_OVERWRITE)
			return -EINVAL;
		break;
	case SPW_OP_UNPIN:
		/* A copy is new data: it is never unpinned clean. */
		if ((sqe->flags & ~(SPW_UNPIN_DIRTY | SPW_UNPIN_COPY_OF)) ||
		    ((sqe->flags & SPW_UNPIN_COPY_OF) && !(sqe->flags & SPW_UNPIN_DIRTY)))
			return -EINVAL;
		break;
	case SPW_OP_MARK:
		/* One of OPEN, COMMIT and STATS, for a step from 1; an OPEN
		 * carries no scale, only who opened the step (page). */
		if ((sqe->flags != SPW_MARK_OPEN && sqe->flags != SPW_MARK_COMMIT && sqe->flags != SPW_MARK_STATS) ||
		    sqe->arg == 0 ||
		    (sqe->flags == SPW_MARK_OPEN && (sqe->tensor || sqe->page > SPW_MARK_BY_WRITE)))
			return -EINVAL;
		break;
	default:
		if (sqe->flags)
			return -EINVAL;
		break;
	}
	return 0;
}

const char *spw_op_name(unsigned opcode)
{
	static const char *const names[SPW_OP__COUNT] = {
		[SPW_OP_NOP] = "nop",           [SPW_OP_PIN] = "pin",   [SPW_OP_UNPIN] = "unpin",
		[SPW_OP_PREFETCH] = "prefetch", [SPW_OP_STEP] = "step", [SPW_OP_FLUSH] = "flush",
		[SPW_OP_MARK] = "mark",
	};
	return opcode < SPW_OP__COUNT ? names[opcode] : "unknown";
}
