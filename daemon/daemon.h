/* SPDX-License-Identifier: MIT */
/*
 * daemon.h: spillwayd's internal objects. One libuv loop, one thread:
 *
 *   struct daemon   the loop, config, listeners, every client and session
 *   struct client   one control connection (control.c)
 *   struct session  one attached trainer: region, page table, rings (session.c,
 *                   dataplane.c)
 *
 * Ownership: the daemon owns its clients; a client owns at most one session
 * (persistent sessions that outlive their client come with the NVMe tier).
 * Objects that embed libuv handles are freed from the handle's close
 * callback; everything else they hold is released synchronously first, so
 * the pool figures are right the moment a client is gone.
 */
#ifndef SPW_DAEMON_H
#define SPW_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "daemon-config.h"
#include "region.h"
#include "spw-proto.h"
#include "spw-ring.h"

struct list {
	struct list *prev, *next;
};

static inline void list_init(struct list *l)
{
	l->prev = l->next = l;
}

static inline bool list_empty(const struct list *l)
{
	return l->next == l;
}

static inline void list_add_tail(struct list *head, struct list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static inline void list_del(struct list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}

#define list_entry(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))
#define list_for_each_safe(pos, tmp, head) \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

struct region;

/* --- page table --------------------------------------------------------- */

/* Every tensor's pages, resident and swappable, live in the session's pager
 * (pager.h): one page table and one slot allocator per session. The
 * session keeps only the tensor names, for the duplicate-name check. */
struct pager;
struct uring;
struct swap_dir;

/* --- sessions ----------------------------------------------------------- */

struct ring_stats {
	uint64_t ops, errors;
	uint64_t by_op[SPW_OP__COUNT];
};

struct daemon;
struct client;

struct session {
	struct daemon *d;
	struct client *owner;
	struct list link;       /* daemon.sessions */
	struct list poll_link;  /* daemon.polling while the daemon polls its SQ */
	char *name;
	uid_t uid;
	pid_t pid;

	uint64_t bytes;          /* counted in the pool from the moment of attach */
	bool attaching;          /* the region is being built on the threadpool */
	bool locked_counted;     /* counted in daemon.locked_bytes */
	uv_work_t work;
	struct region_opts ropts;
	int work_result;
	char work_err[768];

	struct region *region;   /* NULL while attaching */
	uint32_t page_size;
	uint32_t nslots;
	uint64_t swap_bytes;     /* swap reserved at attach (0: resident tensors only) */
	struct pager *pager;     /* the page table; NULL until the region is mapped */
	uint32_t pending;        /* PIN/FLUSH accepted by the pager, CQE not yet posted */
	uint64_t attached_ns;    /* for the tier's average MB/s */
	uint64_t errors_logged;  /* the pager's error count last logged */

	char **tnames;          /* by tensor id (the pager's); NULL: free id */
	uint32_t ntnames_cap;
	uint32_t ntensors;      /* registered */
	uint32_t max_tensors;

	/* Rings: the memfd is shared; everything below it is the daemon's own
	 * and the only copy it trusts. */
	int rings_fd;
	uint8_t *rings;
	struct spw_ring_layout layout;
	struct spw_ring_hdr *sqh, *cqh;
	struct spw_sqe *sqes;
	struct spw_cqe *cqes;
	uint32_t sq_head;       /* ours: next SQ entry to consume */
	uint32_t cq_tail;       /* ours: next CQ entry to fill */
	uint32_t cq_head_seen;  /* the client's CQ head as last read */

	int sq_evt, cq_evt;
	uv_poll_t *sq_poll;     /* its own allocation: freed in the close callback */
	bool poll;              /* SPW_FEAT_RING_POLL granted: poll after a doorbell */
	bool polling;
	bool backlog;           /* asleep with entries left because the CQ was full */
	uint64_t last_active_ns;
	uint32_t max_garbage;
	uint32_t garbage;       /* invalid entries since the last valid one */
	struct ring_stats stats;
};

/* Starts attaching: the session is listed and its bytes counted in the pool
 * at once (so concurrent attaches see them); the region is built on the
 * libuv threadpool, since locking and prefaulting gigabytes takes seconds
 * the loop must not stall for. control_attach_done() gets the result.
 * Returns 0, or a negative errno with a sentence in err. */
int session_attach(struct daemon *d, struct client *owner, const char *name, uint64_t region_bytes,
		   uint32_t page_size, uint64_t swap_bytes, char *err, size_t errlen);
/* Releases everything now (the pager first: it waits, bounded, for its I/O
 * and removes the swap files, before the region is unmapped); the poll
 * handle's memory goes in its close cb. Never called on a session that is
 * still attaching. */
struct session *session_free(struct session *s);
struct session *session_find(struct daemon *d, const char *name);

int session_register(struct session *s, const char *name, uint64_t bytes, bool swappable, uint32_t *id,
		     uint32_t *npages, char *err, size_t errlen);
int session_unregister(struct session *s, uint32_t id, char *err, size_t errlen);
/* The tensor's name, or NULL for an unknown id. */
const char *session_tensor_name(const struct session *s, uint32_t id);

/* --- data plane (dataplane.c) ------------------------------------------ */

int dataplane_start(struct session *s);
void dataplane_stop(struct session *s);
/* Consumes the SQ and posts completions. Returns entries consumed, or
 * -EPROTO when the client broke the ring protocol (end the session). */
int dataplane_drain(struct session *s);
void dataplane_idle_cb(uv_idle_t *h);
void dataplane_backlog_cb(uv_timer_t *t);
/* The pager's completion callback (ctx is the session): posts the CQE and
 * rings the client's doorbell. Never calls the pager. */
void dataplane_complete(void *ctx, uint64_t user_data, int32_t res);
/* Logs the pager errors no completion reported (failed write-backs). */
void dataplane_log_tier_errors(struct daemon *d);

/* --- control plane (control.c) ----------------------------------------- */

struct client {
	struct daemon *d;
	struct list link;      /* daemon.clients */
	int fd;
	uv_poll_t poll;
	unsigned id;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool hello;
	bool closing;
	bool close_after_tx;
	bool attaching;        /* waiting for the region: read nothing meanwhile */
	uint32_t features;
	struct session *session;

	/* The frame being reassembled: a client may send it a byte at a time. */
	uint8_t hdr[sizeof(struct spw_proto_frame_hdr)];
	size_t hdr_len;
	char *payload;
	uint32_t payload_len, payload_got;
	char close_reason[256];
	uint8_t *tx;           /* the reply not yet fully written */
	size_t tx_len, tx_off;
	int tx_fds[SPW_PROTO_MAX_FDS];
	unsigned tx_nfds;
};

int control_listen(struct daemon *d);
/* The end of session_attach(): r is 0 or a negative errno with the message
 * in s->work_err. Replies to the owner, or frees s when the owner left. */
void control_attach_done(struct session *s, int r);
void control_client_close(struct client *c, const char *why);
void control_close_all(struct daemon *d);

/* --- status plane (status.c) ------------------------------------------- */

int status_listen(struct daemon *d);
/* The status document as seen by uid; the caller frees it. */
char *status_render(struct daemon *d, uid_t uid);

/* --- the daemon (daemon.c) --------------------------------------------- */

struct daemon {
	uv_loop_t loop;
	struct config *cfg;
	const char *config_path; /* as given on the command line, or NULL */

	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t watchdog;
	uint64_t watchdog_usec;

	int control_fd, status_fd;
	int spare_fd;           /* /dev/null, given up to refuse at EMFILE */
	uv_poll_t control_poll, status_poll;
	char control_path[128], status_path[128];

	uv_idle_t idle;         /* active while any session is polled */
	uv_timer_t backlog_timer;
	struct list polling;
	struct list clients;
	struct list sessions;
	unsigned next_client_id;

	int numa_node;          /* resolved from pool.numa_node / pool.gpu, -1 local */

	/* The NVMe tier: one io_uring for every session's swap I/O, created at
	 * start and freed after the last pager. swap_dirs is the daemon's own
	 * copy of swap.dirs (a reload does not move swap files under live
	 * sessions; it takes a restart). */
	struct uring *uring;
	uv_poll_t uring_poll;
	struct swap_dir *swap_dirs;
	unsigned nswap_dirs;
	unsigned uring_depth, uring_files, uring_buffers;
	uint64_t used_bytes, locked_bytes;
	uint64_t start_ns;
	bool stopping;
};

int daemon_run(struct config *cfg, const char *config_path);
void daemon_update_status(struct daemon *d);
/* socket.dir/name into buf; -ENAMETOOLONG when it does not fit. */
int daemon_socket_path(struct daemon *d, const char *name, char *buf, size_t len);
/* accept4() for a listener; at the descriptor limit it refuses the pending
 * connection (through a spare descriptor kept for that, as libuv does) so
 * a level-triggered listener does not spin. Returns the fd or -errno. */
int daemon_accept(struct daemon *d, int lfd);
/* Creates a listening unix socket at path with mode and group. */
int daemon_listen_unix(struct daemon *d, const char *path, unsigned mode, bool set_group);

#endif
