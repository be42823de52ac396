/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/uio.h>

#include <liburing.h>

#include "config.h"
#include "uring.h"

/* The kernel caps one fixed buffer at 1 GiB. */
#define FIXED_BUF_MAX (1ull << 30)

enum fault_kind { FAULT_NONE, FAULT_EIO, FAULT_ENOSPC, FAULT_SHORT, FAULT_FLIP, FAULT_STALL };

struct fault_rule {
	enum uring_op op;
	enum fault_kind kind;
	uint64_t nth;
	bool and_later;
	uint64_t stall_ms;
};

struct fixed_buf {
	uint8_t *base;
	size_t len;
	int handle; /* first index of the registration this piece belongs to, -1 when free */
};

struct uring {
	struct io_uring ring;
	int evfd;
	unsigned depth;
	unsigned inflight;
	unsigned waited; /* atomic: urgent requests not finished (uring_waited) */
	/* What waits for room in the ring, per class: [0] someone waits for
	 * these (a PIN, a FLUSH, a slot), [1] background (read-ahead,
	 * write-behind); the first class goes out first. Within a class each
	 * owner (a session) has its own FIFO, and the owners with something
	 * waiting take turns: one request each, round and round. */
	struct uring_owner *active_head[2], *active_tail[2];
	struct uring_owner anyone; /* the owner of requests that name none */

	int *files;             /* plain fds; also tells which registered slots are taken */
	unsigned max_files;
	bool fixed_files;

	struct fixed_buf *bufs;
	unsigned max_bufs;
	bool fixed_bufs;

	struct fault_rule faults[16];
	unsigned nfaults;
	uint64_t seen[2]; /* requests seen per op, for fault matching */
	uint64_t *count;  /* where they are counted: seen, or counters several rings share (uring_faults) */

	struct uring_stats st;
};

static int parse_faults(struct uring *u, const char *spec)
{
	char *copy, *save = NULL;
	int r = 0;

	if (!spec || !*spec)
		return 0;
	copy = strdup(spec);
	if (!copy)
		return -ENOMEM;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct fault_rule f = { 0 };
		char op[8], kind[8], *end;
		const char *at = strchr(tok, '@'), *eq = strchr(tok, '=');

		if (u->nfaults == sizeof(u->faults) / sizeof(u->faults[0]) || !at ||
		    sscanf(tok, "%7[a-z]:%7[a-z]", op, kind) != 2 || (eq && eq > at)) {
			r = -EINVAL;
			break;
		}
		if (!strcmp(op, "read"))
			f.op = URING_READ;
		else if (!strcmp(op, "write"))
			f.op = URING_WRITE;
		else {
			r = -EINVAL;
			break;
		}
		if (!strcmp(kind, "eio"))
			f.kind = FAULT_EIO;
		else if (!strcmp(kind, "enospc"))
			f.kind = FAULT_ENOSPC;
		else if (!strcmp(kind, "short"))
			f.kind = FAULT_SHORT;
		else if (!strcmp(kind, "flip") && f.op == URING_READ)
			f.kind = FAULT_FLIP;
		else if (!strcmp(kind, "stall") && eq)
			f.kind = FAULT_STALL;
		else {
			r = -EINVAL;
			break;
		}
		/* Only stall takes an argument: "=<ms>", 1 ms to 10 minutes. */
		if (eq) {
			unsigned long ms = strtoul(eq + 1, &end, 10);

			if (f.kind != FAULT_STALL || end != at || ms == 0 || ms > 600000 || eq[1] < '0' || eq[1] > '9') {
				r = -EINVAL;
				break;
			}
			f.stall_ms = ms;
		} else if ((size_t)(at - tok) != strlen(op) + 1 + strlen(kind)) {
			r = -EINVAL;
			break;
		}
		f.nth = strtoull(at + 1, &end, 10);
		f.and_later = *end == '+';
		if (f.nth == 0 || (*end && strcmp(end, "+"))) {
			r = -EINVAL;
			break;
		}
		u->faults[u->nfaults++] = f;
	}
	free(copy);
	return r;
}

static uint8_t fault_for(struct uring *u, struct uring_req *req)
{
	uint64_t n;

	if (req->op == URING_FSYNC)
		return FAULT_NONE;
	/* Atomic: the counters may be shared with rings of other threads. */
	n = __atomic_add_fetch(&u->count[req->op], 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < u->nfaults; i++) {
		const struct fault_rule *f = &u->faults[i];
		if (f->op == req->op && (n == f->nth || (f->and_later && n > f->nth))) {
			req->fault_rule = (uint8_t)i;
			return (uint8_t)f->kind;
		}
	}
	return FAULT_NONE;
}

int uring_new(unsigned queue_depth, bool sqpoll, unsigned max_files, unsigned max_buffers, struct uring **ret)
{
	struct io_uring_params p = { 0 };
	struct uring *u;
	int r;

	if (queue_depth == 0 || queue_depth > 4096 || max_files == 0 || max_buffers == 0)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->evfd = -1;
	u->count = u->seen;
	u->depth = queue_depth;
	u->max_files = max_files;
	u->max_bufs = max_buffers;
	u->files = malloc(sizeof(*u->files) * max_files);
	u->bufs = calloc(max_buffers, sizeof(*u->bufs));
	if (!u->files || !u->bufs) {
		r = -ENOMEM;
		goto fail_alloc;
	}
	for (unsigned i = 0; i < max_files; i++)
		u->files[i] = -1;
	for (unsigned i = 0; i < max_buffers; i++)
		u->bufs[i].handle = -1;

#if SPW_FAULT_INJECTION
	r = parse_faults(u, getenv("SPILLWAY_FAULTS"));
	if (r < 0)
		goto fail_alloc;
#else
	(void)parse_faults;
#endif

	if (sqpoll) {
		p.flags = IORING_SETUP_SQPOLL;
		p.sq_thread_idle = 50; /* ms: the poller thread sleeps when the disk is idle */
		r = io_uring_queue_init_params(queue_depth, &u->ring, &p);
		u->st.sqpoll = r == 0;
		if (r < 0)
			memset(&p, 0, sizeof(p));
	}
	if (!u->st.sqpoll) {
		r = io_uring_queue_init_params(queue_depth, &u->ring, &p);
		if (r < 0)
			goto fail_alloc;
	}

	u->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (u->evfd < 0) {
		r = -errno;
		goto fail_ring;
	}
	r = io_uring_register_eventfd(&u->ring, u->evfd);
	if (r < 0)
		goto fail_evfd;

	/* Registered files and buffers save a file-table lookup and a page
	 * pinning per request; both are optional, so a refusal only costs
	 * speed. */
	u->fixed_files = io_uring_register_files_sparse(&u->ring, max_files) == 0;
	u->fixed_bufs = io_uring_register_buffers_sparse(&u->ring, max_buffers) == 0;
	u->st.fixed_files = u->fixed_files;
	u->st.fixed_buffers = u->fixed_bufs;
	*ret = u;
	return 0;

fail_evfd:
	close(u->evfd);
fail_ring:
	io_uring_queue_exit(&u->ring);
fail_alloc:
	free(u->files);
	free(u->bufs);
	free(u);
	return r;
}

int uring_faults(struct uring *u, const char *spec, uint64_t *seen)
{
#if SPW_FAULT_INJECTION
	int r;

	u->nfaults = 0;
	r = parse_faults(u, spec);
	if (r < 0)
		u->nfaults = 0;
	u->count = seen ? seen : u->seen;
	return r;
#else
	(void)u;
	(void)seen;
	return spec && *spec ? -EOPNOTSUPP : 0;
#endif
}

struct uring *uring_free(struct uring *u)
{
	if (!u)
		return NULL;
	/* Requests still in the kernel point into memory the caller is about
	 * to free: wait for them (bounded) before tearing the ring down. */
	for (int i = 0; i < 100 && u->inflight; i++)
		uring_wait(u, 100);
	io_uring_queue_exit(&u->ring);
	if (u->evfd >= 0)
		close(u->evfd);
	free(u->files);
	free(u->bufs);
	free(u);
	return NULL;
}

int uring_eventfd(const struct uring *u)
{
	return u->evfd;
}

int uring_file_register(struct uring *u, int fd)
{
	for (unsigned i = 0; i < u->max_files; i++) {
		if (u->files[i] >= 0)
			continue;
		if (u->fixed_files) {
			int r = io_uring_register_files_update(&u->ring, i, &fd, 1);
			if (r < 0)
				return r;
		}
		u->files[i] = fd;
		return (int)i;
	}
	return -ENOSPC;
}

void uring_file_unregister(struct uring *u, int index)
{
	int none = -1;

	if (index < 0 || (unsigned)index >= u->max_files || u->files[index] < 0)
		return;
	if (u->fixed_files)
		io_uring_register_files_update(&u->ring, (unsigned)index, &none, 1);
	u->files[index] = -1;
}

int uring_buffer_register(struct uring *u, void *base, size_t len)
{
	unsigned need = (unsigned)((len + FIXED_BUF_MAX - 1) / FIXED_BUF_MAX), first, run = 0;
	struct iovec iov[64] = { 0 };
	__u64 tags[64] = { 0 };
	int r;

	if (!u->fixed_bufs)
		return -EOPNOTSUPP;
	if (len == 0 || need > 64)
		return -EINVAL;
	for (first = 0; first < u->max_bufs; first++) {
		run = u->bufs[first].handle < 0 ? run + 1 : 0;
		if (run == need)
			break;
	}
	if (run < need)
		return -ENOSPC;
	first = first + 1 - need;
	for (unsigned i = 0; i < need; i++) {
		size_t off = (size_t)i * FIXED_BUF_MAX;
		iov[i].iov_base = (uint8_t *)base + off;
		iov[i].iov_len = len - off < FIXED_BUF_MAX ? len - off : FIXED_BUF_MAX;
	}
	r = io_uring_register_buffers_update_tag(&u->ring, first, iov, tags, need);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < need; i++)
		u->bufs[first + i] = (struct fixed_buf){ iov[i].iov_base, iov[i].iov_len, (int)first };
	return (int)first;
}

void uring_buffer_unregister(struct uring *u, int handle)
{
	if (handle < 0 || (unsigned)handle >= u->max_bufs)
		return;
	for (unsigned i = (unsigned)handle; i < u->max_bufs && u->bufs[i].handle == handle; i++) {
		struct iovec none = { 0 };
		__u64 tag = 0;

		/* An empty iovec unregisters the slot; requests already in
		 * flight keep their own reference to the pages. */
		io_uring_register_buffers_update_tag(&u->ring, i, &none, &tag, 1);
		u->bufs[i] = (struct fixed_buf){ NULL, 0, -1 };
	}
}

static int fixed_index(const struct uring *u, const uint8_t *addr, size_t len)
{
	for (unsigned i = 0; i < u->max_bufs; i++) {
		const struct fixed_buf *b = &u->bufs[i];
		if (b->handle >= 0 && addr >= b->base && addr + len <= b->base + b->len)
			return (int)i;
	}
	return -1;
}

/* Puts req's next transfer into an SQE; false when the SQ is full. */
static bool prep(struct uring *u, struct uring_req *req)
{
	struct io_uring_sqe *sqe;
	uint8_t *addr = req->addr ? req->addr + req->done : NULL; /* an fsync has none */
	uint32_t len = req->len - req->done;
	uint64_t off = req->off + req->done;
	int file = u->fixed_files ? req->file : u->files[req->file];
	int buf;

	if (u->inflight >= u->depth)
		return false;
	sqe = io_uring_get_sqe(&u->ring);
	if (!sqe)
		return false;

	if (req->held) {
		/* The hold first, as a timeout in the ring; its completion sends
		 * the transfer itself (handle_cqe), so the request stays busy
		 * the whole time. The kernel copies the timespec at submission,
		 * and the request (its home) outlives that. */
		io_uring_prep_timeout(sqe, (struct __kernel_timespec *)req->hold_ts, 0, 0);
	} else if (req->fault == FAULT_EIO || req->fault == FAULT_ENOSPC) {
		io_uring_prep_nop(sqe);
	} else if (req->op == URING_FSYNC) {
		io_uring_prep_fsync(sqe, file, 0);
	} else {
		/* A short fault cuts the first transfer in half; 4 KiB keeps
		 * O_DIRECT's alignment for the remainder. */
		if (req->fault == FAULT_SHORT && req->done == 0 && len >= 8192)
			len = (len / 2) & ~4095u;
		buf = fixed_index(u, addr, len);
		if (req->op == URING_READ) {
			if (buf >= 0)
				io_uring_prep_read_fixed(sqe, file, addr, len, off, buf);
			else
				io_uring_prep_read(sqe, file, addr, len, off);
		} else {
			if (buf >= 0)
				io_uring_prep_write_fixed(sqe, file, addr, len, off, buf);
			else
				io_uring_prep_write(sqe, file, addr, len, off);
		}
	}
	if (u->fixed_files && !req->held && req->fault != FAULT_EIO && req->fault != FAULT_ENOSPC)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, req);
	u->inflight++;
	return true;
}

static struct uring_owner *owner_of(struct uring *u, const struct uring_req *req)
{
	return req->owner ? req->owner : &u->anyone;
}

/* The owner joins the end of the class's turns (it has something waiting). */
static void owner_list(struct uring *u, struct uring_owner *o, unsigned c)
{
	if (o->listed[c])
		return;
	o->listed[c] = true;
	o->next[c] = NULL;
	if (u->active_tail[c])
		u->active_tail[c]->next[c] = o;
	else
		u->active_head[c] = o;
	u->active_tail[c] = o;
}

/* The first owner in the class's turns leaves them (nothing left, or its
 * turn is over and it goes to the end). */
static void owner_unlist_first(struct uring *u, unsigned c)
{
	struct uring_owner *o = u->active_head[c];

	u->active_head[c] = o->next[c];
	if (!u->active_head[c])
		u->active_tail[c] = NULL;
	o->listed[c] = false;
	o->next[c] = NULL;
}

static void queue_push(struct uring *u, struct uring_req *req)
{
	unsigned c = !req->urgent;
	struct uring_owner *o = owner_of(u, req);

	req->next = NULL;
	if (o->tail[c])
		o->tail[c]->next = req;
	else
		o->head[c] = req;
	o->tail[c] = req;
	req->queued = (uint8_t)(1 + c);
	u->st.queued++;
	owner_list(u, o, c);
}

static bool anything_queued(const struct uring *u)
{
	return u->active_head[0] || u->active_head[1];
}

static void submit_queued(struct uring *u)
{
	bool any = false;

	for (unsigned c = 0; c < 2; c++) {
		struct uring_owner *o;

		while ((o = u->active_head[c]) && prep(u, o->head[c])) {
			struct uring_req *req = o->head[c];

			req->queued = 0;
			o->head[c] = req->next;
			if (!o->head[c])
				o->tail[c] = NULL;
			u->st.queued--;
			any = true;
			/* Its turn is over: to the end of the line, if it
			 * still has something waiting. */
			owner_unlist_first(u, c);
			if (o->head[c])
				owner_list(u, o, c);
		}
		if (u->active_head[c])
			break; /* the ring is full: the next class waits too */
	}
	if (any)
		io_uring_submit(&u->ring);
}

/* req is urgent now: counted once until it finishes. */
static void count_waited(struct uring *u, struct uring_req *req)
{
	if (req->waited || !req->live)
		return;
	req->waited = true;
	__atomic_add_fetch(&u->waited, 1, __ATOMIC_RELAXED);
}

void uring_hurry(struct uring *u, struct uring_req *req)
{
	struct uring_owner *o = owner_of(u, req);
	struct uring_req **pp = &o->head[1], *prev = NULL;

	req->urgent = true;
	count_waited(u, req);
	if (req->queued != 2)
		return; /* in the ring already, or in the first class */
	while (*pp && *pp != req) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = req->next;
	if (o->tail[1] == req)
		o->tail[1] = prev;
	u->st.queued--;
	if (!o->head[1]) {
		/* Nothing left in the background class: out of its turns. */
		struct uring_owner **op = &u->active_head[1], *oprev = NULL;

		while (*op != o) {
			oprev = *op;
			op = &(*op)->next[1];
		}
		*op = o->next[1];
		if (u->active_tail[1] == o)
			u->active_tail[1] = oprev;
		o->listed[1] = false;
		o->next[1] = NULL;
	}
	queue_push(u, req);
}

void uring_hurry_owner(struct uring *u, struct uring_owner *owner, unsigned n)
{
	struct uring_owner *o = owner ? owner : &u->anyone;

	/* The head each time: uring_hurry() finds it at once. */
	for (; n > 0 && o->head[1]; n--)
		uring_hurry(u, o->head[1]);
}

static void hold(struct uring_req *req, uint64_t ms)
{
	struct __kernel_timespec *ts = (struct __kernel_timespec *)req->hold_ts;

	_Static_assert(sizeof(req->hold_ts) == sizeof(*ts), "hold_ts holds a __kernel_timespec");
	ts->tv_sec = (long long)(ms / 1000);
	ts->tv_nsec = (long long)(ms % 1000) * 1000000;
	req->held = true;
}

void uring_submit_after(struct uring *u, struct uring_req *req, unsigned delay_ms)
{
	req->live = true;
	req->waited = false;
	if (req->urgent)
		count_waited(u, req);
	req->done = 0;
	req->next = NULL;
	req->queued = 0;
	req->held = false;
	req->fault = fault_for(u, req);
	if (req->fault == FAULT_STALL) {
		/* A drive that stops answering: held in the ring like a delay. */
		hold(req, u->faults[req->fault_rule].stall_ms + delay_ms);
		req->fault = FAULT_NONE;
	} else if (delay_ms) {
		hold(req, delay_ms);
	}
	/* FIFO within a class: nothing overtakes what already waits in its
	 * own class or a more urgent one. */
	if (u->active_head[0] || (!req->urgent && u->active_head[1]) || !prep(u, req)) {
		queue_push(u, req);
		return;
	}
	io_uring_submit(&u->ring);
}

void uring_submit(struct uring *u, struct uring_req *req)
{
	uring_submit_after(u, req, 0);
}

static void finish(struct uring *u, struct uring_req *req, int res)
{
	req->live = false;
	if (req->waited) {
		req->waited = false;
		__atomic_sub_fetch(&u->waited, 1, __ATOMIC_RELAXED);
	}
	if (res < 0) {
		u->st.errors++;
	} else if (req->op == URING_READ) {
		u->st.reads++;
		u->st.read_bytes += req->len;
		if (req->fault == FAULT_FLIP && req->len)
			req->addr[req->len / 2] ^= 0x5a;
	} else if (req->op == URING_WRITE) {
		u->st.writes++;
		u->st.write_bytes += req->len;
	} else {
		u->st.fsyncs++;
	}
	req->complete(req, res);
}

static void handle_cqe(struct uring *u, struct uring_req *req, int res)
{
	u->inflight--;
	if (req->held) {
		req->held = false;
		queue_push(u, req);
		return;
	}
	if (req->fault == FAULT_EIO || req->fault == FAULT_ENOSPC) {
		finish(u, req, req->fault == FAULT_EIO ? -EIO : -ENOSPC);
		return;
	}
	if (res == -EAGAIN || res == -EINTR) {
		u->st.resubmits++;
		queue_push(u, req);
		return;
	}
	if (res < 0) {
		finish(u, req, res);
		return;
	}
	if (req->op == URING_FSYNC) {
		finish(u, req, 0);
		return;
	}
	/* A transfer of 0 bytes would loop forever; the file was cut short. */
	if (res == 0 && req->done < req->len) {
		finish(u, req, -EIO);
		return;
	}
	req->done += (uint32_t)res;
	if (req->done < req->len) {
		u->st.resubmits++;
		queue_push(u, req);
		return;
	}
	finish(u, req, 0);
}

unsigned uring_reap(struct uring *u)
{
	struct io_uring_cqe *cqe;
	unsigned n = 0;
	uint64_t junk;

	/* Clear the doorbell before looking, so a completion that lands
	 * after the last peek rings it again. */
	while (read(u->evfd, &junk, sizeof(junk)) > 0)
		;
	while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
		struct uring_req *req = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&u->ring, cqe);
		handle_cqe(u, req, res);
		n++;
	}
	submit_queued(u);
	return n;
}

int uring_wait(struct uring *u, int timeout_ms)
{
	struct pollfd pfd = { .fd = u->evfd, .events = POLLIN };
	int r;

	if (!u->inflight && !anything_queued(u))
		return 0;
	submit_queued(u);
	r = poll(&pfd, 1, timeout_ms);
	if (r < 0)
		return -errno;
	return (int)uring_reap(u);
}

unsigned uring_busy(const struct uring *u)
{
	return u->inflight + u->st.queued;
}

unsigned uring_waited(const struct uring *u)
{
	return __atomic_load_n(&u->waited, __ATOMIC_RELAXED);
}

void uring_get_stats(const struct uring *u, struct uring_stats *st)
{
	*st = u->st;
	st->inflight = u->inflight;
	st->queue_depth = u->depth;
	st->max_files = u->max_files;
	st->max_buffers = u->max_bufs;
}
