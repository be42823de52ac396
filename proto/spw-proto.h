/* SPDX-License-Identifier: MIT */
/*
 * spw-proto.h: the one definition of everything that crosses the process
 * boundary between spillwayd and libspillway.
 *
 * Control plane: a unix stream socket carrying frames of
 *     struct spw_proto_frame_hdr { uint32_t len; uint32_t flags; } + len bytes of JSON
 * Every request gets exactly one reply, in order. File descriptors travel
 * with SCM_RIGHTS attached to the reply frame's header bytes.
 *
 * Data plane: see spw-ring.h.
 *
 * Compatibility: HELLO carries {magic, major, minor, features}. A different
 * major is refused. Additive change = a new feature bit, a new op or a new
 * JSON key. Never renumber anything in this file.
 */
#ifndef SPW_PROTO_H
#define SPW_PROTO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPW_PROTO_MAGIC 0x59575053u /* "SPWY" little-endian */
#define SPW_PROTO_MAJOR 1
#define SPW_PROTO_MINOR 0

/* Feature bits negotiated in HELLO: the client asks, the daemon grants the
 * intersection with what it supports. */
#define SPW_FEAT_RING_POLL   (1u << 0) /* daemon polls the SQ briefly before sleeping */
#define SPW_FEAT_SWAP        (1u << 1) /* swappable tensors (NVMe tier) */
#define SPW_FEAT_PERSISTENT  (1u << 2) /* sessions that outlive their client */
#define SPW_FEAT_UNPIN_COPY  (1u << 3) /* UNPIN with SPW_UNPIN_COPY_OF (spw-ring.h) */

/* Control frames. len counts the JSON payload only. A frame larger than
 * SPW_PROTO_MAX_FRAME is a protocol violation: the daemon drops the client. */
#define SPW_PROTO_MAX_FRAME (64u * 1024u)
#define SPW_PROTO_MAX_FDS   4

struct spw_proto_frame_hdr {
	uint32_t len;   /* bytes of JSON that follow, 1..SPW_PROTO_MAX_FRAME */
	uint32_t flags; /* reserved, must be zero */
};
_Static_assert(sizeof(struct spw_proto_frame_hdr) == 8, "frame header is 8 bytes");

/*
 * Control messages ("type" key). Requests (client -> daemon):
 *
 *   hello       {magic, major, minor, features}
 *   attach      {session, region_bytes, page_size, persistent?, lease_s?,
 *                swap_bytes?}
 *               swap_bytes: the session's swap on NVMe (0 = none); absent:
 *               the daemon's swap.session_bytes, or what fits.
 *               persistent: the session outlives a client that dies
 *               without detach, orphaned for lease_s (default 900); an
 *               attach of an orphan's name by its uid takes it over
 *   register    {name, bytes, kind: "resident"|"swappable", adopt?}
 *               adopt: take over the tensor of that name a reattached
 *               session holds (same bytes and kind) instead of a new one
 *   unregister  {tensor}
 *   detach      {}
 *   drop        {session}: ends an orphaned session (its uid or root)
 *   io_log      {session}: a read-only descriptor of the session's rings
 *               memfd, to read its I/O log (spillwayctl trace; its uid
 *               or root)
 *
 * Replies (daemon -> client) repeat "type" and carry "ok": true plus the
 * fields below, or {"type":"error","errno":N,"message":"..."} where errno is
 * a positive errno value and message a sentence meant for a person.
 *
 *   hello       {magic, major, minor, features}
 *   attach      {session, region_bytes, page_size, slots, sq_entries,
 *                cq_entries, rings_bytes, locked, hugepages, numa_node,
 *                swap_bytes, persistent, lease_s, reattached, tensors,
 *                committed_step, step_open, loss_scale, good_steps}
 *               + fds, in this order: region memfd, rings memfd,
 *                 sq eventfd (client -> daemon doorbell),
 *                 cq eventfd (daemon -> client doorbell)
 *   register    {tensor, pages, adopted}
 *   unregister  {}
 *   detach      {}
 *   drop        {session, region_bytes}
 *   io_log      {session, rings_bytes, io_hdr_off, io_events_off, entries}
 *               + fd: the rings memfd, opened read-only
 */
#define SPW_MSG_HELLO      "hello"
#define SPW_MSG_ATTACH     "attach"
#define SPW_MSG_REGISTER   "register"
#define SPW_MSG_UNREGISTER "unregister"
#define SPW_MSG_DETACH     "detach"
#define SPW_MSG_DROP       "drop"
#define SPW_MSG_CHECKPOINT "checkpoint"
#define SPW_MSG_RESTORE    "restore"
#define SPW_MSG_IO_LOG     "io_log"
#define SPW_MSG_ERROR      "error"

#define SPW_ATTACH_FD_REGION 0
#define SPW_ATTACH_FD_RINGS  1
#define SPW_ATTACH_FD_SQ_EVT 2
#define SPW_ATTACH_FD_CQ_EVT 3
#define SPW_ATTACH_NFDS      4

/* Names: a session is "job/rank"-like; see util/names.h for the rule. */
#define SPW_PROTO_MAX_SESSION_NAME 128
#define SPW_PROTO_MAX_TENSOR_NAME  256

/* Page sizes: powers of two in [64 KiB, 64 MiB]. */
#define SPW_PAGE_SIZE_MIN     (64u * 1024u)
#define SPW_PAGE_SIZE_MAX     (64u * 1024u * 1024u)
#define SPW_PAGE_SIZE_DEFAULT (4u * 1024u * 1024u)

/* True when the session name is a name by util/names.h's rule (visible
 * ASCII but '"' and '\\', not starting with '/' or '.', no "..") of
 * 1..SPW_PROTO_MAX_SESSION_NAME bytes. */
int spw_proto_session_name_valid(const char *name);

/* True when the tensor name is one or more such names joined by single
 * spaces ("layer.0.weight exp_avg"), 1..SPW_PROTO_MAX_TENSOR_NAME bytes. */
int spw_proto_tensor_name_valid(const char *name);

/* True when page_size is a power of two within the bounds above. */
int spw_proto_page_size_valid(uint64_t page_size);

/*
 * Frame I/O over a unix stream socket, shared by both sides.
 *
 * spw_proto_send() writes one frame (header + payload) and attaches nfds
 * descriptors. Returns 0, or a negative errno (-EMSGSIZE when len is 0 or
 * over the maximum, -EPIPE/-ECONNRESET when the peer is gone).
 *
 * spw_proto_recv() reads one whole frame into buf (cap bytes, at least
 * SPW_PROTO_MAX_FRAME + 1 so the payload can be NUL-terminated), stores
 * received descriptors in fds (up to *nfds, updated to the count received,
 * all O_CLOEXEC). Returns the payload length, 0 on orderly EOF before a
 * frame starts, or a negative errno: -EPROTO for a bad header, reserved
 * flags, truncated control data (every received fd is closed) or EOF inside
 * a frame; -EMSGSIZE for an oversized frame. Blocking; callers that need a
 * deadline poll() first or set SO_RCVTIMEO.
 */
int spw_proto_send(int fd, const void *payload, uint32_t len, const int *fds, unsigned nfds);
int spw_proto_recv(int fd, char *buf, size_t cap, int *fds, unsigned *nfds);

#ifdef __cplusplus
}
#endif

#endif
