/* SPDX-License-Identifier: MIT */
/*
 * fuzz-control: every control request handler of the daemon (daemon/
 * control.c: hello, attach, register, unregister, detach, drop, and
 * whatever a frame names) fed from bytes, against a real but small daemon: a tiny
 * pool, a swap directory under /var/tmp, real regions, rings, pagers and
 * the io_uring, the libuv loop and its threadpool. No listening socket:
 * each connection is one end of a socketpair adopted with
 * control_client_adopt(), the daemon's replies are read from the other.
 *
 * The input is a stream of records, each a route byte and a control
 * frame (spw-proto.h: header and payload), cut with proto/frame.c's own
 * decoder (spw_proto_recv) from a socketpair holding the input; the first
 * broken frame ends the input, as the daemon hangs up on it.
 *
 *   route bits 0-1: the connection (0, 1 and 3 are uid 1000, 2 is uid
 *                   1001; limits.connections_per_uid is 2, so 3 is
 *                   refused while 0 and 1 are open)
 *         bit 2:    that connection's client goes away first (its end
 *                   closed, as a kill -9 would): the daemon notices on
 *                   the loop and releases its session (or keeps a
 *                   persistent one, orphaned); the frame goes to a new
 *                   connection
 *         bit 3:    the payload is no request but ring entries for the
 *                   connection's attached session (ring_run(): the data
 *                   plane, the pager and the disk behind it), bits 4-6
 *                   what else the client does to its rings
 *
 * The connection is made on first use. Each frame is handed to
 * control_handle_frame() once the connection waits for nothing (one
 * request at a time, as control-conn.c reads them), and the loop runs
 * until an attach's region is built or a dying tensor's unregister is
 * answered. Then:
 *
 *   - exactly one reply, strict JSON (json_strict_check) with a "type";
 *     an error has "errno" > 0 and a one-line "message" (no control
 *     bytes: client text is escaped), and no descriptors; a success has
 *     the request's type, and an attach's the four descriptors, the region
 *     memfd of the size it states;
 *   - the pool: used bytes are the sessions' bytes (and those still
 *     draining), never over pool.max_bytes; locked bytes never over used;
 *     each session is its owner's and that owner's only, or an orphan of
 *     a persistent one; no uid over limits.sessions_per_uid or
 *     limits.region_bytes_per_uid;
 *   - ring records: see ring_run();
 *   - at the end every connection closes and the orphans go as at
 *     shutdown: no session, no pool or locked
 *     byte, no swap file, no descriptor and no loop handle is left
 *     (uv_loop_close() succeeds); LeakSanitizer sees the memory.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "control-conn.h"
#include "daemon.h"
#include "dataplane.h"
#include "fuzz.h"
#include "json-strict.h"
#include "log.h"
#include "pager.h"
#include "persist.h"
#include "session.h"
#include "spw-proto.h"
#include "status.h"
#include "uring.h"
#include "util/unixsock.h"

#define NCONN 4
#define INPUT_MAX (64u * 1024u) /* what one socket buffer surely holds */
#define FD_SCAN 1024

#define RING_OPS_MAX (INPUT_MAX / 4)
#define STALL_NS (8ull * 1000000000ull) /* under libFuzzer's -timeout=10 */
#define SEEN_SUBMITTED 1
#define SEEN_COMPLETED 2

#define POOL_MAX (4u << 20)
#define REGION_PER_UID (3u << 20)
#define SESSIONS_PER_UID 2u

static char swap_dir[64];

static const uid_t conn_uid[NCONN] = { 1000, 1000, 1001, 1000 };

/* The client side of an attached session's rings (from the attach reply). */
struct ring {
	uint8_t *mem;
	size_t bytes;
	struct spw_ring_layout l;
	struct spw_ring_hdr *sqh, *cqh;
	struct spw_sqe *sqes;
	struct spw_cqe *cqes;
	int sq_evt;
	uint32_t nslots;
	uint32_t sq_tail, cq_head;
	uint64_t next_ud;
	uint64_t ncqes, nfailed;    /* for FUZZ_CONTROL_VERBOSE */
	bool lied;                  /* the harness moved an index: CQEs are no longer checked */
	uint8_t seen[RING_OPS_MAX]; /* by user_data: submitted, completed */
};

struct conn {
	struct client *c; /* NULL: not connected */
	int peer;         /* the client's end */
	struct ring *ring; /* while attached */
};

static struct {
	struct daemon *d;
	uv_poll_t uring_poll;
	struct conn conn[NCONN];
} f;

static void cleanup(void)
{
	if (swap_dir[0])
		rmdir(swap_dir);
}

static unsigned open_fds(void)
{
	unsigned n = 0;

	for (int fd = 0; fd < FD_SCAN; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static unsigned files_in(const char *dir)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	FUZZ_CHECK(dd != NULL);
	while ((de = readdir(dd)))
		n += de->d_name[0] != '.';
	closedir(dd);
	return n;
}

/* The daemon's loop polls the ring's eventfd and reaps (daemon.c). */
static void on_uring(uv_poll_t *h, int status, int events)
{
	(void)h;
	(void)status;
	(void)events;
	if (uring_reap(f.d->uring)) {
		dataplane_log_tier_errors(f.d);
		pager_room_kick();
	}
}

static void daemon_up(void)
{
	char json[1024], err[768];
	struct config *cfg = NULL;
	struct daemon *d;
	int n;

	n = snprintf(json, sizeof(json),
		     "{\"socket\": {\"dir\": \"%s\"},"
		     " \"pool\": {\"max_bytes\": \"4MiB\", \"session_max_bytes\": \"2MiB\", \"hugepages\": \"never\"},"
		     " \"session\": {\"page_size\": \"64KiB\", \"ring_entries\": 16, \"max_tensors\": 6, \"max_garbage\": 100},"
		     " \"log\": {\"level\": \"error\"},"
		     " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"64MiB\"}], \"queue_depth\": 8, \"session_bytes\": \"512KiB\"},"
		     " \"limits\": {\"sessions_per_uid\": %u, \"connections_per_uid\": 2,"
		     " \"region_bytes_per_uid\": \"3MiB\", \"swap_bytes_per_uid\": \"1MiB\", \"hello_timeout_ms\": 0,"
		     " \"ring_ops_per_s\": 0}}",
		     swap_dir, swap_dir, SESSIONS_PER_UID);
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(json));
	if (config_parse(json, (size_t)n, "fuzz-control", &cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz-control: %s\n", err);
		abort();
	}
	FUZZ_CHECK(cfg->pool_max_bytes == POOL_MAX && cfg->limits_region_bytes_per_uid == REGION_PER_UID);
	log_set_level(cfg->log_level);
	d = calloc(1, sizeof(*d));
	FUZZ_CHECK(d != NULL && uv_loop_init(&d->loop) == 0);
	/* What daemon_run() sets up before it listens, minus signals,
	 * watchdog, sockets and the swap dir's lock. */
	d->cfg = cfg;
	d->control.fd = d->status.fd = -1;
	d->spare_fd = -1;
	d->numa_node = -1;
	list_init(&d->polling);
	list_init(&d->clients);
	list_init(&d->sessions);
	uv_timer_init(&d->loop, &d->backlog_timer);
	uv_idle_init(&d->loop, &d->idle);
	d->backlog_timer.data = d->idle.data = d;
	d->swap_dirs = calloc(1, sizeof(*d->swap_dirs));
	FUZZ_CHECK(d->swap_dirs != NULL);
	d->swap_dirs[0].path = strdup(swap_dir);
	d->nswap_dirs = 1;
	d->uring_depth = cfg->swap_queue_depth;
	FUZZ_CHECK(uring_new(d->uring_depth, false, 64, 64, &d->uring) == 0);
	FUZZ_CHECK(uv_poll_init(&d->loop, &f.uring_poll, uring_eventfd(d->uring)) == 0);
	f.uring_poll.data = d;
	uv_poll_start(&f.uring_poll, UV_READABLE, on_uring);
	f.d = d;
}

static void daemon_down(void)
{
	struct daemon *d = f.d;

	d->stopping = true;
	control_close_all(d);
	persist_release_all(d); /* orphans do not outlive the daemon */
	/* Sessions that ended with disk I/O in flight hold their region
	 * until it completes: the ring's poll handle stays until then. */
	for (int i = 0; i < 10000 && session_draining(); i++)
		uv_run(&d->loop, UV_RUN_ONCE);
	FUZZ_CHECK(session_draining() == 0);
	status_stop(d);
	uv_close((uv_handle_t *)&f.uring_poll, NULL);
	uv_close((uv_handle_t *)&d->backlog_timer, NULL);
	uv_close((uv_handle_t *)&d->idle, NULL);
	uv_run(&d->loop, UV_RUN_DEFAULT);
	FUZZ_CHECK(list_empty(&d->sessions) && list_empty(&d->clients) && list_empty(&d->polling));
	FUZZ_CHECK(d->used_bytes == 0 && d->locked_bytes == 0); /* every byte back in the pool */
	FUZZ_CHECK(session_draining() == 0);
	FUZZ_CHECK(uring_busy(d->uring) == 0);
	d->uring = uring_free(d->uring);
	FUZZ_CHECK(uv_loop_close(&d->loop) == 0); /* no handle left open */
	free((char *)d->swap_dirs[0].path);
	free(d->swap_dirs);
	config_free(d->cfg);
	free(d);
	f.d = NULL;
	FUZZ_CHECK(files_in(swap_dir) == 0); /* every swap file removed */
}

static bool listed(const struct client *c)
{
	struct list *p;

	for (p = f.d->clients.next; p != &f.d->clients; p = p->next)
		if (list_entry(p, struct client, link) == c)
			return true;
	return false;
}

/* Runs the loop until pred() is false or the client is gone (bounded:
 * a threadpool job, a poll event or the status timer each wake it). */
static void run_while(struct client *c, bool (*pred)(const struct client *c))
{
	for (int i = 0; i < 100000 && listed(c) && pred(c); i++)
		uv_run(&f.d->loop, UV_RUN_ONCE);
	FUZZ_CHECK(!listed(c) || !pred(c));
}

static bool waiting(const struct client *c)
{
	return c->attaching || c->unregistering || c->tx;
}

static bool alive(const struct client *c)
{
	(void)c;
	return true;
}

static size_t pending_bytes(int fd)
{
	int n = 0;

	FUZZ_CHECK(ioctl(fd, FIONREAD, &n) == 0);
	return (size_t)n;
}

/* Checks one reply to a request of type req_type (NULL: not a string). */
static void check_reply(const char *buf, int len, const int *fds, unsigned nfds, const char *req_type)
{
	const cJSON *type, *ok, *err, *msg;
	cJSON *r;
	size_t at;
	const char *why;

	FUZZ_CHECK(json_strict_check(buf, (size_t)len, &at, &why) == 0);
	r = cJSON_ParseWithLength(buf, (size_t)len);
	FUZZ_CHECK(cJSON_IsObject(r));
	type = cJSON_GetObjectItemCaseSensitive(r, "type");
	ok = cJSON_GetObjectItemCaseSensitive(r, "ok");
	err = cJSON_GetObjectItemCaseSensitive(r, "errno");
	msg = cJSON_GetObjectItemCaseSensitive(r, "message");
	FUZZ_CHECK(cJSON_IsString(type));
	if (err) {
		FUZZ_CHECK(!strcmp(type->valuestring, SPW_MSG_ERROR) && !ok);
		FUZZ_CHECK(cJSON_IsNumber(err) && err->valuedouble >= 1 && err->valuedouble < 4096);
		FUZZ_CHECK(cJSON_IsString(msg) && msg->valuestring[0]);
		for (const unsigned char *p = (const unsigned char *)msg->valuestring; *p; p++)
			FUZZ_CHECK(*p >= 0x20 && *p != 0x7f); /* one line, escaped */
		FUZZ_CHECK(nfds == 0);
	} else {
		FUZZ_CHECK(cJSON_IsTrue(ok) && req_type && !strcmp(type->valuestring, req_type));
		if (!strcmp(req_type, SPW_MSG_ATTACH)) {
			const cJSON *rb = cJSON_GetObjectItemCaseSensitive(r, "region_bytes");
			struct stat st;

			FUZZ_CHECK(nfds == SPW_ATTACH_NFDS && cJSON_IsNumber(rb));
			FUZZ_CHECK(fstat(fds[SPW_ATTACH_FD_REGION], &st) == 0 && (double)st.st_size == rb->valuedouble);
		} else if (!strcmp(req_type, SPW_MSG_IO_LOG)) {
			/* The rings, read-only: a write through it must fail. */
			const cJSON *rb = cJSON_GetObjectItemCaseSensitive(r, "rings_bytes");
			struct stat st;

			FUZZ_CHECK(nfds == 1 && cJSON_IsNumber(rb));
			FUZZ_CHECK(fstat(fds[0], &st) == 0 && (double)st.st_size == rb->valuedouble);
			FUZZ_CHECK((fcntl(fds[0], F_GETFL) & O_ACCMODE) == O_RDONLY);
		} else {
			FUZZ_CHECK(nfds == 0);
		}
	}
	cJSON_Delete(r);
}

/* The data plane as a client drives it, for the sessions the fuzzed
 * requests attach: what a ring record (route bit 3) carries becomes SQ
 * entries, four bytes each:
 *
 *   byte 0  opcode (0-6 valid, 7 invalid); bit 7: a reserved field set
 *   byte 1  flags (any: unknown bits are invalid)
 *   byte 2  tensor id (0-7)
 *   byte 3  page (0-39); a MARK's step
 *
 * Route bit 4 also moves the SQ tail past what was written and bit 5 the
 * CQ head past what was posted: protocol violations that end the session
 * alone. Bit 6 leaves what was submitted in flight (what fits in the SQ,
 * one turn of the loop): the next request (an unregister, a detach, a
 * hang-up) meets disk I/O still running.
 *
 * Every CQE is checked: its user_data was submitted and completes once,
 * flags zero, a PIN's slot inside the region, other ops 0 or an errno.
 * Otherwise the loop runs until the daemon took every entry and its disk
 * I/O and pending operations are done: an accepted operation always
 * completes. */
static void hang_up(struct conn *k);

static void ring_drop(struct conn *k)
{
	struct ring *r = k->ring;

	if (!r)
		return;
	munmap(r->mem, r->bytes);
	close(r->sq_evt);
	free(r);
	k->ring = NULL;
}

static void ring_attach(struct conn *k, const char *buf, int len, const int *fds)
{
	cJSON *m = cJSON_ParseWithLength(buf, (size_t)len);
	struct ring *r = calloc(1, sizeof(*r));
	uint32_t sq, cq;
	struct stat st;

	FUZZ_CHECK(m && r);
	sq = (uint32_t)cJSON_GetObjectItemCaseSensitive(m, "sq_entries")->valuedouble;
	cq = (uint32_t)cJSON_GetObjectItemCaseSensitive(m, "cq_entries")->valuedouble;
	r->nslots = (uint32_t)cJSON_GetObjectItemCaseSensitive(m, "slots")->valuedouble;
	cJSON_Delete(m);
	FUZZ_CHECK(spw_ring_layout(sq, cq, &r->l) == 0);
	FUZZ_CHECK(fstat(fds[SPW_ATTACH_FD_RINGS], &st) == 0 && (size_t)st.st_size == r->l.bytes);
	r->bytes = r->l.bytes;
	r->mem = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[SPW_ATTACH_FD_RINGS], 0);
	FUZZ_CHECK(r->mem != MAP_FAILED);
	r->sqh = (struct spw_ring_hdr *)(r->mem + r->l.sq_hdr_off);
	r->cqh = (struct spw_ring_hdr *)(r->mem + r->l.cq_hdr_off);
	r->sqes = (struct spw_sqe *)(r->mem + r->l.sqes_off);
	r->cqes = (struct spw_cqe *)(r->mem + r->l.cqes_off);
	r->sq_evt = fcntl(fds[SPW_ATTACH_FD_SQ_EVT], F_DUPFD_CLOEXEC, 0);
	FUZZ_CHECK(r->sq_evt >= 0);
	ring_drop(k);
	k->ring = r;
}

static void ring_reap(struct ring *r)
{
	uint32_t tail = __atomic_load_n(&r->cqh->tail, __ATOMIC_ACQUIRE);

	for (; r->cq_head != tail; r->cq_head++) {
		const struct spw_cqe *e = &r->cqes[r->cq_head & (r->l.cq_entries - 1)];
		uint64_t ud = e->user_data >> 8;
		uint8_t op = (uint8_t)e->user_data;

		r->ncqes++;
		r->nfailed += e->res < 0;
		if (r->lied)
			continue;
		FUZZ_CHECK(ud < r->next_ud && r->seen[ud] == SEEN_SUBMITTED); /* submitted, and once */
		r->seen[ud] = SEEN_COMPLETED;
		FUZZ_CHECK(e->flags == 0);
		if (op == SPW_OP_PIN && e->res >= 0)
			FUZZ_CHECK((uint32_t)e->res < r->nslots);
		else
			FUZZ_CHECK(e->res <= 0 && e->res > -4096);
	}
	__atomic_store_n(&r->cqh->head, r->cq_head, __ATOMIC_RELEASE);
}

static uint32_t ring_submit(struct ring *r, const uint8_t *ops, uint32_t n)
{
	uint32_t head = __atomic_load_n(&r->sqh->head, __ATOMIC_ACQUIRE), done = 0;
	uint64_t one = 1;

	while (done < n && r->sq_tail - head < r->l.sq_entries && r->next_ud < RING_OPS_MAX) {
		const uint8_t *o = ops + 4 * done;
		struct spw_sqe e = {
			.opcode = o[0] & 7, .flags = o[1], .tensor = o[2] & 7u, .page = o[3] % 40u,
			.reserved1 = o[0] >> 7, .user_data = r->next_ud << 8 | (o[0] & 7),
			.arg = (o[0] & 7) == SPW_OP_MARK ? o[3] : 0, /* the step */
		};

		r->seen[r->next_ud++] = SEEN_SUBMITTED;
		r->sqes[r->sq_tail++ & (r->l.sq_entries - 1)] = e;
		done++;
	}
	/* Release: the entries before the tail. */
	__atomic_store_n(&r->sqh->tail, r->sq_tail, __ATOMIC_RELEASE);
	if (write(r->sq_evt, &one, sizeof(one)) < 0)
		FUZZ_CHECK(errno == EAGAIN);
	return done;
}

static bool ring_idle(struct conn *k)
{
	struct session *s = k->c->session;

	return s && __atomic_load_n(&k->ring->sqh->head, __ATOMIC_ACQUIRE) == k->ring->sq_tail &&
	       s->pending == 0 && uring_busy(f.d->uring) == 0;
}

static void ring_run(struct conn *k, const uint8_t *ops, uint32_t n, uint8_t route)
{
	struct ring *r = k->ring;
	struct client *c = k->c;
	uint64_t t0 = uv_hrtime();
	int i;

	n /= 4;
	r->lied |= (route & 0x30) != 0;
	if (route & 0x10) {
		r->sq_tail += 1 + ops[0];
		__atomic_store_n(&r->sqh->tail, r->sq_tail, __ATOMIC_RELEASE);
	}
	if (route & 0x20)
		__atomic_store_n(&r->cqh->head, r->cq_head + 1 + (n ? ops[0] : 0), __ATOMIC_RELEASE);
	if (route & 0x40) {
		ring_submit(r, ops, n);
		uv_run(&f.d->loop, UV_RUN_NOWAIT);
		n = 0;
	}
	/* Bounded in time, not turns: a checksum on the threadpool or a
	 * CQ retry timer may take a while on a loaded machine. */
	for (i = 0; uv_hrtime() - t0 < STALL_NS && listed(c) && !(route & 0x40); i++) {
		uint32_t sent = ring_submit(r, ops, n);

		ops += 4 * sent;
		n -= sent;
		uv_run(&f.d->loop, UV_RUN_NOWAIT);
		if (!listed(c))
			break;
		ring_reap(r);
		if (n == 0 && ring_idle(k))
			break;
		if (uring_busy(f.d->uring)) {
			struct pollfd p = { .fd = uring_eventfd(f.d->uring), .events = POLLIN };

			poll(&p, 1, 10);
		} else if (i > 100) {
			/* Waiting for the threadpool (a page's checksum) or
			 * asleep on a full CQ until its retry timer: the loop
			 * wakes for either (and for the status timer, every
			 * second, at the latest). */
			uv_run(&f.d->loop, UV_RUN_ONCE);
		}
	}
	if (getenv("FUZZ_CONTROL_VERBOSE"))
		fprintf(stderr, "  ring (route 0x%02x) -> %llu completions so far, %llu failed%s\n", route,
			(unsigned long long)r->ncqes, (unsigned long long)r->nfailed, listed(c) ? "" : "; session ended");
	if (!listed(c)) {
		/* The daemon ended the session for breaking the ring protocol,
		 * and with it the connection: the client's end sees EOF. */
		char b;

		uv_run(&f.d->loop, UV_RUN_NOWAIT); /* its close callback closes the fd */
		FUZZ_CHECK(read(k->peer, &b, 1) == 0);
		k->c = NULL;
		hang_up(k);
		return;
	}
	FUZZ_CHECK((route & 0x40) || (n == 0 && ring_idle(k))); /* everything taken, done or answered */
}

/* The one reply the request got. */
static void read_reply(struct conn *k, const char *req_type)
{
	static char buf[SPW_PROTO_MAX_FRAME + 1];
	int fds[SPW_PROTO_MAX_FDS];
	unsigned nfds = SPW_PROTO_MAX_FDS;
	int n;

	FUZZ_CHECK(pending_bytes(k->peer) > 0);
	n = spw_proto_recv(k->peer, buf, sizeof(buf), fds, &nfds);
	FUZZ_CHECK(n > 0);
	if (getenv("FUZZ_CONTROL_VERBOSE"))
		fprintf(stderr, "  %s -> %.*s (%u fds)\n", req_type ? req_type : "-", n > 300 ? 300 : n, buf, nfds);
	check_reply(buf, n, fds, nfds, req_type);
	if (nfds == SPW_ATTACH_NFDS)
		ring_attach(k, buf, n, fds);
	else if (req_type && !strcmp(req_type, SPW_MSG_DETACH) && !strstr(buf, "\"errno\""))
		ring_drop(k);
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	FUZZ_CHECK(pending_bytes(k->peer) == 0); /* exactly one */
}

/* The client goes away: its end closes, and the daemon finds out on the
 * loop as it would from a killed trainer. */
static void hang_up(struct conn *k)
{
	struct client *c = k->c;

	ring_drop(k);
	close(k->peer);
	k->peer = -1;
	k->c = NULL;
	if (c)
		run_while(c, alive); /* until the daemon let it go */
}

static bool connect_conn(unsigned i)
{
	struct conn *k = &f.conn[i];
	int sv[2];

	FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
	k->peer = sv[1];
	k->c = control_client_adopt(f.d, sv[0], conn_uid[i], conn_uid[i], (pid_t)(4000 + i));
	if (k->c)
		return true;
	/* Over limits.connections_per_uid: refused with a reason, then
	 * closed; the frame goes nowhere. */
	read_reply(k, NULL);
	uv_run(&f.d->loop, UV_RUN_NOWAIT);
	close(k->peer);
	k->peer = -1;
	return false;
}

static void check_pool(void)
{
	struct daemon *d = f.d;
	uint64_t used = 0, by_uid[2] = { 0 };
	unsigned sessions[2] = { 0 };
	struct list *p;

	for (p = d->sessions.next; p != &d->sessions; p = p->next) {
		struct session *s = list_entry(p, struct session, link);
		unsigned u = s->uid == 1001;

		/* Its owner's only, or a persistent session's orphan. */
		FUZZ_CHECK(!s->attaching);
		if (s->owner)
			FUZZ_CHECK(s->owner->session == s && listed(s->owner));
		else
			FUZZ_CHECK(s->persistent && s->orphaned_ns);
		FUZZ_CHECK(s->uid == 1000 || s->uid == 1001);
		used += s->bytes;
		by_uid[u] += s->bytes;
		sessions[u]++;
	}
	for (p = d->clients.next; p != &d->clients; p = p->next) {
		struct client *c = list_entry(p, struct client, link);

		FUZZ_CHECK(!c->session || c->session->owner == c);
	}
	/* Sessions that ended with I/O in flight still hold their bytes. */
	FUZZ_CHECK(session_draining() ? used <= d->used_bytes : used == d->used_bytes);
	FUZZ_CHECK(d->used_bytes <= POOL_MAX && d->locked_bytes <= d->used_bytes);
	for (unsigned u = 0; u < 2; u++)
		FUZZ_CHECK(sessions[u] <= SESSIONS_PER_UID && by_uid[u] <= REGION_PER_UID);
}

/* The request's "type" when it is a string, for matching its reply. */
static const char *request_type(const char *buf, int len, char *out, size_t outlen)
{
	cJSON *m = cJSON_ParseWithLength(buf, (size_t)len);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "type");
	const char *r = NULL;

	if (cJSON_IsString(t) && strlen(t->valuestring) < outlen) {
		strcpy(out, t->valuestring);
		r = out;
	}
	cJSON_Delete(m);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char frame[SPW_PROTO_MAX_FRAME + 1];
	unsigned fds0;
	int in[2];

	if (size > INPUT_MAX)
		return 0;
	if (!swap_dir[0]) {
		snprintf(swap_dir, sizeof(swap_dir), "/var/tmp/spw-fuzz-control-XXXXXX");
		FUZZ_CHECK(mkdtemp(swap_dir) != NULL);
		atexit(cleanup);
		/* libuv's first loop opens descriptors it keeps for the
		 * process (its signal lock): not ours to count. */
		{
			uv_loop_t l;

			FUZZ_CHECK(uv_loop_init(&l) == 0 && uv_loop_close(&l) == 0);
		}
	}
	fds0 = open_fds();
	FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) == 0);
	{
		int sz = 4 * INPUT_MAX;

		setsockopt(in[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(in[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	FUZZ_CHECK(size == 0 || write(in[0], data, size) == (ssize_t)size);
	close(in[0]);
	daemon_up();
	for (unsigned i = 0; i < NCONN; i++)
		f.conn[i] = (struct conn){ .c = NULL, .peer = -1 };

	for (;;) {
		uint8_t route;
		char tbuf[64];
		const char *type;
		struct conn *k;
		int n;

		if (read(in[1], &route, 1) != 1)
			break;
		k = &f.conn[route & 3];
		if ((route & 4) && k->peer >= 0)
			hang_up(k);
		n = spw_proto_recv(in[1], frame, sizeof(frame), NULL, NULL);
		if (n <= 0)
			break; /* the end, or a frame the daemon would hang up on */
		if (route & 8) {
			/* A ring record: for the connection's session, if any. */
			if (k->peer >= 0 && k->ring)
				ring_run(k, (const uint8_t *)frame, (uint32_t)n, route);
			check_pool();
			continue;
		}
		if (k->peer < 0 && !connect_conn(route & 3)) {
			check_pool();
			continue;
		}
		type = request_type(frame, n, tbuf, sizeof(tbuf));
		control_handle_frame(k->c, frame, (uint32_t)n);
		run_while(k->c, waiting);
		FUZZ_CHECK(listed(k->c)); /* a request is answered, not hung up on */
		read_reply(k, type);
		check_pool();
	}
	close(in[1]);
	for (unsigned i = 0; i < NCONN; i++)
		if (f.conn[i].peer >= 0)
			hang_up(&f.conn[i]);
	check_pool();
	daemon_down();
	FUZZ_CHECK(open_fds() == fds0); /* no descriptor left behind */
	return 0;
}
