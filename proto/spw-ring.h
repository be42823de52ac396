/* SPDX-License-Identifier: MIT */
/*
 * spw-ring.h: the data plane. One memfd per session holds a submission
 * queue (client -> daemon) and a completion queue (daemon -> client), each a
 * single-producer/single-consumer ring of fixed-size entries with
 * free-running uint32_t head and tail, as io_uring's.
 *
 * Layout of the rings memfd (see spw_ring_layout()):
 *
 *   [sq header, 192 B][cq header, 192 B][sq entries][cq entries]
 *
 * Both sides compute the layout from sq_entries and cq_entries (powers of
 * two, sent in the attach reply); nothing in the shared mapping is trusted
 * for offsets. The consumer of a ring owns its head, the producer its tail;
 * each side only ever stores to the index it owns. A daemon that reads a
 * client-owned index treats it as hostile: an SQ tail more than sq_entries
 * ahead of the head, or a CQ head that moves backwards or past the tail, is
 * a protocol violation that ends the session.
 *
 * Doorbells and sleeping (the io_uring SQPOLL protocol, both directions):
 * a consumer that has seen its ring empty for a while sets its *_WAKEUP
 * flag, issues a full fence, and looks at the ring once more before it
 * sleeps on the eventfd. A producer stores the tail (release), issues a full
 * fence, and writes the eventfd only when it then sees the flag set. The two
 * full fences make it impossible for both sides to miss each other.
 */
#ifndef SPW_RING_H
#define SPW_RING_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ring ops. Never renumber. */
enum spw_op {
	SPW_OP_NOP      = 0, /* res = 0 */
	SPW_OP_PIN      = 1, /* (tensor, page) -> res = slot index, page stays in its slot until UNPIN */
	SPW_OP_UNPIN    = 2, /* (tensor, page, flags CLEAN|DIRTY|COPY_OF) -> res = 0 (COPY_OF: 0 or 1) */
	SPW_OP_PREFETCH = 3, /* (tensor, page) -> res = 0 once the read is queued; no pin */
	SPW_OP_STEP     = 4, /* marks a step boundary for the pager's order learning */
	SPW_OP_FLUSH    = 5, /* every dirty page durable on disk, then res = 0 */
	SPW_OP_MARK     = 6, /* a step's updates begin (OPEN) or are all in the state (COMMIT) */
	SPW_OP__COUNT
};

/* sqe.flags for PIN: the caller rewrites the whole page before its
 * UNPIN, so the daemon hands a slot without reading the page (its bytes
 * are stale ones of the session's own region) and the page is dirty from
 * then on, whatever the UNPIN says. Saves the read of a page about to be
 * overwritten (a gradient store's first arrival). */
#define SPW_PIN_OVERWRITE (1u << 0)

/* sqe.flags for MARK, exactly one of them. The entry carries the step in
 * arg; a COMMIT also carries what the step leaves for the next one: the
 * loss scale's float bits in tensor and its good-step count in page. The
 * daemon keeps the last of each for a persistent session's next client. */
#define SPW_MARK_OPEN   (1u << 0)
#define SPW_MARK_COMMIT (1u << 1)
/* An OPEN's page: 0 when a step's updates open it; SPW_MARK_BY_WRITE
 * when spw_optimizer_write does (the state is being overwritten, not
 * updated: a client that dies then leaves a state no journal can put
 * right). An OPEN of the same step with page 0 later says the write
 * was whole (the step's updates began). */
#define SPW_MARK_BY_WRITE 1u
/* Before a COMMIT, the step's figures only the client knows, for status and
 * metrics: the step in arg, the clip coefficient's float bits in tensor,
 * the optimizer kernels' CPU microseconds since the last COMMIT in page.
 * Shown, never trusted: the daemon keeps a coefficient in [0, 1] only. */
#define SPW_MARK_STATS  (1u << 2)

/* sqe.flags for UNPIN */
#define SPW_UNPIN_CLEAN 0u
#define SPW_UNPIN_DIRTY (1u << 0)
/* With SPW_UNPIN_DIRTY (SPW_FEAT_UNPIN_COPY): the page's bytes are a whole
 * copy of another page of the session as that page was when pinned: arg
 * names it, its tensor in the high 32 bits and its page in the low 32.
 * Where that page is pinned, clean and on disk, the daemon lets this page
 * take over the disk copy (no write) and gives the other page this one's
 * disk home; the other page is dirty from then on, whatever its UNPIN
 * says. Otherwise this page is unpinned dirty as any. res = 1 when the
 * disk copy was taken over, 0 when not. A swap of homes, not a copy: an
 * undo copy of a page costs no write when its page came from disk. */
#define SPW_UNPIN_COPY_OF (1u << 1)

struct spw_sqe {
	uint8_t  opcode;     /* enum spw_op */
	uint8_t  flags;      /* op-specific, unknown bits must be zero */
	uint16_t reserved0;  /* must be zero */
	uint32_t tensor;     /* tensor id from REGISTER */
	uint32_t page;       /* page index within the tensor */
	uint32_t reserved1;  /* must be zero */
	uint64_t user_data;  /* copied to the completion untouched */
	uint64_t arg;        /* MARK: the step; UNPIN with COPY_OF: the page copied; else zero */
};
_Static_assert(sizeof(struct spw_sqe) == 32, "sqe is 32 bytes");

struct spw_cqe {
	uint64_t user_data;  /* from the sqe */
	int32_t  res;        /* >= 0 on success (slot index for PIN), -errno on failure */
	uint32_t flags;      /* reserved, zero */
};
_Static_assert(sizeof(struct spw_cqe) == 16, "cqe is 16 bytes");

/* Ring header flags (the consumer sets these on its own ring's header). */
#define SPW_RING_NEED_WAKEUP (1u << 0) /* consumer is (about to be) asleep on the eventfd */

/* Head and tail sit on their own cache lines: the producer writes one, the
 * consumer the other, and sharing a line would bounce it on every entry. */
struct spw_ring_hdr {
	uint32_t head;         /* written by the consumer only */
	uint8_t  pad0[60];
	uint32_t tail;         /* written by the producer only */
	uint8_t  pad1[60];
	uint32_t flags;        /* written by the consumer only: SPW_RING_* */
	uint32_t ring_entries; /* informational copy; never trusted */
	uint32_t overflow;     /* informational: completions the daemon could not post */
	uint8_t  pad2[52];
};
_Static_assert(sizeof(struct spw_ring_hdr) == 192, "ring header is three cache lines");

#define SPW_RING_ENTRIES_MIN 8u
#define SPW_RING_ENTRIES_MAX 4096u
#define SPW_RING_ENTRIES_DEFAULT 256u

/*
 * The I/O log: the daemon's disk reads and writes for the session, for the
 * client's timeline (client/trace-daemon.c). The daemon fills the record
 * at tail % SPW_IO_LOG_ENTRIES, then publishes tail + 1 (release); a
 * reader copies records up to the tail it loaded (acquire) and, loading
 * tail again after the copy, drops those the daemon may have overwritten
 * meanwhile (index < new tail - entries). The daemon never reads it back.
 */
#define SPW_IO_LOG_ENTRIES 2048u

enum spw_io_op { SPW_IO_READ = 1, SPW_IO_WRITE = 2 };

struct spw_io_event {
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC, as util/clock.h's now_ns() */
	uint32_t tensor, page;     /* the session's tensor id and page */
	uint8_t op;                /* enum spw_io_op */
	uint8_t pad[3];
	int32_t res;               /* 0, or -errno of a failed transfer */
};
_Static_assert(sizeof(struct spw_io_event) == 32, "io event is 32 bytes");

/*
 * Beside the log, two gauges of the session's region for the timeline's
 * counters, stored (relaxed) by the daemon whenever they change: a reader
 * samples them and may miss short swings. A daemon older than the gauges
 * leaves them 0.
 */
struct spw_io_log_hdr {
	uint64_t tail;             /* records ever written; written by the daemon only */
	uint64_t slots_used;       /* region slots holding a page (or frozen for a checkpoint) */
	uint64_t pages_pinned;     /* pages pinned by the client and not yet unpinned */
	uint8_t pad[40];
};
_Static_assert(sizeof(struct spw_io_log_hdr) == 64, "io log header is one cache line");

struct spw_ring_layout {
	uint32_t sq_entries, cq_entries;
	size_t sq_hdr_off, cq_hdr_off; /* offsets of struct spw_ring_hdr */
	size_t sqes_off, cqes_off;     /* offsets of the entry arrays */
	size_t io_hdr_off, io_events_off; /* the I/O log */
	size_t bytes;                  /* total size of the memfd, page aligned */
};

/* Fills *l for the given entry counts. Returns 0, or -EINVAL when either is
 * not a power of two within [SPW_RING_ENTRIES_MIN, SPW_RING_ENTRIES_MAX] or
 * cq_entries < sq_entries (every submission must be able to complete). */
int spw_ring_layout(uint32_t sq_entries, uint32_t cq_entries, struct spw_ring_layout *l);

/* Validates a copied sqe: known opcode, zero reserved fields, only the
 * flags the op defines. Returns 0 or -EINVAL. Tensor and page are checked
 * against the session by the daemon, not here. */
int spw_sqe_check(const struct spw_sqe *sqe);

/* Name of an op for logs and status ("pin"), or "unknown". */
const char *spw_op_name(unsigned opcode);

#ifdef __cplusplus
}
#endif

#endif
