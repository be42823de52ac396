/* SPDX-License-Identifier: MIT */
/*
 * client-private.h: what libspillway's files share and nothing outside
 * client/ may include. Exported non-static internals are spw__*.
 */
#ifndef SPW_CLIENT_PRIVATE_H
#define SPW_CLIENT_PRIVATE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include <spillway/spillway.h>

#include "opts.h"
#include "spw-proto.h"
#include "spw-ring.h"

#define SPW__ERRMSG_MAX 512
#define SPW__DEFAULT_SPIN_US 50u
#define SPW__DEFAULT_REPLY_TIMEOUT_MS 30000u

/* One operation in flight. The sqe's user_data is (gen << 32 | index into
 * the tag table), so a completion names its operation unambiguously even
 * when the caller reuses user_data values, and a completion the daemon
 * invents or repeats is caught (index out of range, slot free, or an old
 * generation). */
struct spw__tag {
	uint64_t user_data; /* the caller's */
	uint32_t gen;
	bool in_use;
	bool sync;          /* issued by spw_nop/pin/unpin, never reported to spw_reap */
};

struct spw__ring {
	/* Shared with the daemon. Everything behind these pointers is
	 * read with atomics and never trusted beyond the checks in ring.c. */
	struct spw_ring_hdr *sq_hdr, *cq_hdr;
	struct spw_sqe *sqes;
	struct spw_cqe *cqes;
	uint32_t sq_entries, cq_entries;
	/* Private copies of the indices this side owns: the SQ tail and the
	 * CQ head are only ever stored by us, so their shared copies need
	 * no reload. */
	uint32_t sq_tail, cq_head;

	struct spw__tag *tags;   /* cq_entries of them */
	uint32_t *free_tags;     /* stack of free indices */
	uint32_t nfree;
	/* Completions of async operations taken off the CQ by a sync call,
	 * waiting for spw_reap(). Never more than cq_entries, because no more
	 * than that many operations are in flight. */
	struct spw_completion *backlog;
	uint32_t bl_head, bl_count;

	/* The daemon's I/O log (spw-ring.h), read for the timeline only. */
	const struct spw_io_log_hdr *io_hdr;
	const struct spw_io_event *io_events;

	int sq_evt, cq_evt;      /* doorbells: we write sq_evt, sleep on cq_evt */
	int wake_fd;             /* a second fd to poll while sleeping (the control socket), or -1 */
	uint32_t spin_us;
};

struct spw_client {
	uint32_t spin_us;
	uint32_t reply_timeout_ms;
	char *trace_path;         /* spw_client_opts.trace_path, or NULL */

	int ctl;                 /* control socket, -1 when not connected */
	bool dead;               /* the daemon went away or the stream is out of step */
	int dead_err;            /* what every call returns once dead */
	uint32_t features;       /* granted in HELLO */
	char socket_path[108];

	bool attached;
	char session[SPW_PROTO_MAX_SESSION_NAME + 1];
	uint64_t region_bytes;
	uint32_t page_size, slots;
	int32_t numa_node;
	bool locked, hugepages;
	uint64_t swap_bytes;     /* what the daemon reserved (attach reply) */
	struct spw_session_info persist; /* the attach reply's persistence fields */
	char damaged_tensor[SPW_PROTO_MAX_TENSOR_NAME + 1]; /* persist.damaged_pages: the first bad page's */
	uint32_t damaged_page;
	/* A persistent session's attach, kept for spw_client_reconnect()
	 * (session points at c->session); again.size 0 when there is none. */
	struct spw_attach_opts again;
	uint32_t optimizers;     /* spw_optimizer_new()s not yet freed: they hold the mappings */
	void *region;            /* region_bytes mapped shared */
	void *rings;
	size_t rings_bytes;
	int region_fd, rings_fd;
	struct spw__ring ring;

	char *rxbuf;             /* SPW_PROTO_MAX_FRAME + 1, for control replies */
	char errmsg[SPW__ERRMSG_MAX];
};

/* Stores a formatted last-error message in c and returns err (negative). */
int spw__error(spw_client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Sends the control request req (consumed) and waits up to timeout_ms
 * (at least the client's reply_timeout_ms) for its reply of that type,
 * stored in *reply for the caller to free. 0 or the error, described. */
struct cJSON;
int spw__request(spw_client *c, struct cJSON *req, const char *type, struct cJSON **reply, uint32_t timeout_ms);

/* Unmaps and closes what an attach set up (conn.c); c stays connected. */
void spw__release_session(spw_client *c);

/* Marks c's connection unusable: every later call returns err with the
 * current message. Returns err. */
int spw__dead(spw_client *c, int err);

/* Ring setup over an already mapped rings area; allocates the tag table.
 * The initial indices are taken from the shared headers (the daemon may
 * start them anywhere). Returns 0, -ENOMEM, or -EPROTO when the headers
 * already disagree with the layout. */
int spw__ring_init(struct spw__ring *r, void *rings, const struct spw_ring_layout *l,
		   int sq_evt, int cq_evt, int wake_fd, uint32_t spin_us);
void spw__ring_fini(struct spw__ring *r);

/* Queues any ring op (PREFETCH, STEP, FLUSH have no public call yet);
 * fails like spw_submit_nop(). */
int spw__submit_op(spw_client *c, uint8_t opcode, uint8_t flags, uint32_t tensor, uint32_t page,
		   uint64_t user_data);
/* Submits SPW_OP_MARK (spw-ring.h): OPEN, COMMIT or STATS of step; a
 * COMMIT carries the loss scale's bits and the good-step word, a STATS the
 * clip coefficient's bits and the kernels' CPU microseconds. */
int spw__submit_mark(spw_client *c, uint8_t flags, uint64_t step, uint32_t scale_bits, uint32_t good,
		     uint64_t user_data);
/* The same for an OPEN, waiting for the daemon's answer (the caller owns
 * the ring). 0 or the error, described. */
int spw__mark_sync(spw_client *c, uint8_t flags, uint64_t step);
/* An OPEN of step by spw_optimizer_write (SPW_MARK_BY_WRITE), answered. */
int spw__mark_open_write(spw_client *c, uint64_t step);

/* Sleeps until a completion is ready, extra_fd (>= 0) is readable, or
 * timeout_ms passes (< 0: no limit), watching for the daemon's hangup as
 * spw_reap() does. Does not spin when extra_fd >= 0. Returns 0 (woken:
 * reap with timeout 0 to see what came), -ETIMEDOUT, -EINTR, or the error
 * that made the client dead. */
int spw__wait_ring(spw_client *c, int timeout_ms, int extra_fd);

/* optimizer.c, for in-tree tests: the optimizer's device backend. */
struct spw__device;
struct spw__device *spw__optimizer_device(spw_optimizer *o);

#endif
