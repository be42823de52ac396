/* SPDX-License-Identifier: MIT */
/*
 * The data plane: each session's SQ is consumed inside the libuv loop with
 * io_uring's SQPOLL protocol (spw-ring.h). A doorbell on the sq eventfd
 * wakes the session; the daemon then polls its SQ on every loop iteration
 * (a uv_idle handle keeps the loop from blocking) until ring.poll_us pass
 * without an entry, then sets NEED_WAKEUP and lets the loop sleep. With no
 * session polling there is no idle handle and the loop blocks in epoll.
 *
 * A poll that finds no entry yields the CPU (sched_yield): the daemon
 * shares cores with trainers, and a loop that spins through its window
 * takes a full scheduler share from whichever trainer thread wants that
 * core, for nothing. Yielding, it runs only when nobody else on the core
 * is runnable, and still sees the next entry within a syscall. Measured
 * (spillway-bench tenants, the daemon on the bystander's core): the
 * bystander's step 25-35% shorter alone and with four noisy tenants; ring
 * round trips 0.26 -> 0.28-0.31 us at the median, p99 halved.
 *
 * Everything in the rings memfd is written by a client that may be hostile:
 * indices are checked against the daemon's own copies, each entry is read
 * once into private memory and only the copy is validated and used.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "daemon.h"
#include "dataplane.h"
#include "log.h"
#include "pager.h"
#include "persist.h"
#include "session.h"

#define BACKLOG_RETRY_MS 10

static char violation[256];

static int protocol_violation(struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int protocol_violation(struct session *s, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(violation, sizeof(violation), "session %s: ", s->name);

	va_start(ap, fmt);
	vsnprintf(violation + n, sizeof(violation) - (size_t)n, fmt, ap);
	va_end(ap);
	return -EPROTO;
}

static void end_session(struct session *s)
{
	control_client_close(s->owner, violation);
}

static int32_t invalid(struct session *s)
{
	s->stats.errors++;
	s->garbage++;
	return -EINVAL;
}

/* Client mistakes (a bad id, a page not pinned, a full region) are the
 * client's to read in its CQE: logged at debug. Anything else is the disk
 * or the tier failing, which an operator must see. */
static void log_failure(struct session *s, const char *op, uint32_t tensor, uint32_t page, int32_t res)
{
	const char *why = pager_last_error(s->pager);

	if (res == -EINVAL || res == -ENOMEM || res == -EBUSY)
		log_debug("session %s: %s of tensor %u page %u: %s (%s)", s->name, op, tensor, page, strerror(-res),
			  why);
	else if (*why)
		log_warn("%s", why); /* names session, tensor, page and file */
	else
		log_warn("session %s: %s of tensor %u page %u failed: %s", s->name, op, tensor, page, strerror(-res));
}

/* Runs one copied entry. Returns the result to post now, or PAGER_PENDING
 * when the pager posts it later through dataplane_complete(). */
static int32_t execute(struct session *s, const struct spw_sqe *sqe)
{
	int32_t r;

	s->stats.ops++;
	if (spw_sqe_check(sqe) < 0)
		return invalid(s);
	s->stats.by_op[sqe->opcode]++;
	switch (sqe->opcode) {
	case SPW_OP_NOP:
		r = 0;
		break;
	case SPW_OP_PIN:
		if (s->nbad && session_page_bad(s, sqe->tensor, sqe->page)) {
			r = -EBADMSG; /* its bytes failed their CRC after a crash: never handed out */
			break;
		}
		r = sqe->flags & SPW_PIN_OVERWRITE ?
			    pager_pin_overwrite(s->pager, sqe->tensor, sqe->page, sqe->user_data) :
			    pager_pin(s->pager, sqe->tensor, sqe->page, sqe->user_data);
		if (r == PAGER_PENDING) {
			s->pending++;
			s->garbage = 0;
			return r;
		}
		if (r == PAGER_WAIT) {
			/* Tried again whole after the checkpoint's copier
			 * wakes the session: not counted twice. */
			s->stats.ops--;
			s->stats.by_op[sqe->opcode]--;
			return r;
		}
		break;
	case SPW_OP_UNPIN:
		if (sqe->flags & SPW_UNPIN_COPY_OF)
			r = pager_unpin_copy(s->pager, sqe->tensor, sqe->page, (uint32_t)(sqe->arg >> 32),
					     (uint32_t)sqe->arg);
		else
			r = pager_unpin(s->pager, sqe->tensor, sqe->page, (sqe->flags & SPW_UNPIN_DIRTY) != 0);
		break;
	case SPW_OP_PREFETCH:
		r = pager_prefetch(s->pager, sqe->tensor, sqe->page);
		break;
	case SPW_OP_STEP:
		pager_step(s->pager);
		r = 0;
		break;
	case SPW_OP_MARK:
		r = persist_mark(s, sqe);
		break;
	case SPW_OP_FLUSH:
		r = pager_flush(s->pager, sqe->user_data);
		if (r == PAGER_PENDING) {
			s->pending++;
			s->garbage = 0;
			return r;
		}
		break;
	default:
		return invalid(s);
	}
	if (r == -EINVAL) {
		/* A bad tensor or page, or an UNPIN of a page not pinned: what
		 * a flood of garbage looks like, so it counts towards it. */
		log_failure(s, spw_op_name(sqe->opcode), sqe->tensor, sqe->page, r);
		return invalid(s);
	}
	s->garbage = 0;
	if (r < 0) {
		s->stats.errors++;
		log_failure(s, spw_op_name(sqe->opcode), sqe->tensor, sqe->page, r);
	}
	return r;
}

/* Publishes the CQ tail and rings the client's doorbell if it sleeps. */
static void cq_publish(struct session *s)
{
	/* Release: the CQEs written before become visible no later than the
	 * tail that publishes them. */
	__atomic_store_n(&s->cqh->tail, s->cq_tail, __ATOMIC_RELEASE);
	/* Full fence: the tail store must be globally visible before we read
	 * the client's NEED_WAKEUP; pairs with the client's fence between
	 * setting the flag and re-reading the tail, so one of us sees the other. */
	atomic_thread_fence(memory_order_seq_cst);
	if (__atomic_load_n(&s->cqh->flags, __ATOMIC_RELAXED) & SPW_RING_NEED_WAKEUP) {
		uint64_t one = 1;
		if (write(s->cq_evt, &one, sizeof(one)) < 0 && errno != EAGAIN)
			log_debug("session %s: cq doorbell: %s", s->name, strerror(errno));
	}
}

static void cq_post(struct session *s, uint64_t user_data, int32_t res)
{
	struct spw_cqe cqe = { .user_data = user_data, .res = res, .flags = 0 };

	memcpy(&s->cqes[s->cq_tail & (s->layout.cq_entries - 1)], &cqe, sizeof(cqe));
	s->cq_tail++;
}

void dataplane_log_tier_errors(struct daemon *d)
{
	static uint64_t seen;
	struct list *p, *t;

	/* After every reap: look at the sessions only when some pager
	 * counted a new error, not at every session for every completion. */
	if (pager_errors_total() == seen)
		return;
	seen = pager_errors_total();

	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);
		uint64_t n;

		if (!s->pager)
			continue;
		n = pager_error_count(s->pager);
		if (n != s->errors_logged) {
			/* A failed write-back has no operation waiting for it:
			 * say so now, not only at the page's next PIN. */
			log_warn("%s", pager_last_error(s->pager));
			s->errors_logged = n;
		}
	}
}

void dataplane_complete(void *ctx, uint64_t user_data, int32_t res)
{
	struct session *s = ctx;

	/* Room is guaranteed: an entry is popped only while the free CQ
	 * entries exceed the pending operations (dataplane_drain). */
	s->pending--;
	if (res < 0) {
		s->stats.errors++;
		/* The pager's sentence names the session, tensor, page and file. */
		if (*pager_last_error(s->pager))
			log_warn("%s", pager_last_error(s->pager));
		else
			log_warn("session %s: completion %s", s->name, strerror(-res));
		s->errors_logged = pager_error_count(s->pager);
	}
	if (!s->owner) {
		/* An orphan: its client is gone, and so is the reader of
		 * this completion. */
		persist_settled(s);
		return;
	}
	cq_post(s, user_data, res);
	cq_publish(s);
}

/* Reads the client's CQ head and checks it moved only forward and never
 * past what the daemon posted. Returns the free CQ entries or -EPROTO. */
static int cq_space(struct session *s)
{
	/* Acquire: the client is done reading the entries before the head it
	 * publishes, so the daemon may overwrite them. */
	uint32_t head = __atomic_load_n(&s->cqh->head, __ATOMIC_ACQUIRE);

	if ((uint32_t)(head - s->cq_head_seen) > (uint32_t)(s->cq_tail - s->cq_head_seen))
		return protocol_violation(s, "CQ head %u moved backwards or past the tail %u (last seen %u)", head,
					  s->cq_tail, s->cq_head_seen);
	s->cq_head_seen = head;
	return (int)(s->layout.cq_entries - (s->cq_tail - head));
}

/* Free CQ entries as of the client's head last read (a stale head only
 * understates them). */
static uint32_t cq_free(const struct session *s)
{
	return s->layout.cq_entries - (s->cq_tail - s->cq_head_seen);
}

/* Ring entries s may take now under limits.ring_ops_per_s (UINT32_MAX:
 * no limit). The bucket holds at most 10 ms of the rate, so a trainer's
 * bursts pass and a session that floods its ring gets its share of the
 * daemon's time, not all of it. */
static uint32_t ring_budget(struct session *s)
{
	uint64_t rate = s->d->cfg->limits_ring_ops_per_s, now, cap;

	if (!rate)
		return UINT32_MAX;
	now = uv_hrtime();
	cap = rate / 100 ? rate / 100 : 1;
	if (s->tokens_ns == 0)
		s->tokens = cap;
	else
		s->tokens += (now - s->tokens_ns) * rate / 1000000000u;
	if (s->tokens > cap)
		s->tokens = cap;
	s->tokens_ns = now;
	return s->tokens > UINT32_MAX ? UINT32_MAX : (uint32_t)s->tokens;
}

int dataplane_drain(struct session *s)
{
	const uint32_t sq_mask = s->layout.sq_entries - 1;
	uint32_t tail, n = 0, budget;
	int space;

	/* Acquire: the entries up to tail were written before the client
	 * published the tail (it stores it with release). */
	tail = __atomic_load_n(&s->sqh->tail, __ATOMIC_ACQUIRE);
	if (tail - s->sq_head > s->layout.sq_entries)
		return protocol_violation(s, "SQ overflow: tail %u is %u entries ahead of head %u, the ring holds %u",
					  tail, tail - s->sq_head, s->sq_head, s->layout.sq_entries);
	space = cq_space(s);
	if (space < 0)
		return space;
	/* Every pending PIN/FLUSH will post one CQE whenever the disk answers,
	 * and an entry may post one now: pop only while the CQ has room for
	 * all of them, so a completion never finds the CQ full. Completions
	 * that run meanwhile (inside the pager calls) take one free entry and
	 * one pending each, which keeps the difference. */
	budget = ring_budget(s);
	/* Paused: a PIN waits for a checkpoint's copier (see execute()). */
	while (!s->sq_paused && s->sq_head != tail && cq_free(s) > s->pending && n < budget) {
		const uint64_t *src = (const uint64_t *)&s->sqes[s->sq_head & sq_mask];
		uint64_t w[sizeof(struct spw_sqe) / sizeof(uint64_t)];
		struct spw_sqe sqe;
		int32_t res;

		/* One read of each word: the client may rewrite the entry while
		 * we look at it, so only this private copy is ever used. */
		for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
			w[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
		memcpy(&sqe, w, sizeof(sqe));
		s->sq_head++;

		res = execute(s, &sqe);
		if (res == PAGER_WAIT) {
			/* The page is owed to a checkpoint's copy: the ring
			 * stops at this entry until the copier has it
			 * (checkpoint.c resumes it). */
			s->sq_head--;
			s->sq_paused = true;
			break;
		}
		if (res != PAGER_PENDING)
			cq_post(s, sqe.user_data, res);
		n++;
		if (s->garbage > s->max_garbage)
			return protocol_violation(s, "%u invalid ring entries without a valid one (session.max_garbage is %u)",
						  s->garbage, s->max_garbage);
	}
	s->throttled = false;
	if (budget != UINT32_MAX) {
		s->tokens -= n;
		if (n == budget && s->sq_head != tail) {
			s->stats.throttled++;
			s->throttled = true;
		}
	}
	if (n == 0)
		return 0;
	/* Release: the client may reuse SQ entries before head once it sees it;
	 * our reads of them are done. */
	__atomic_store_n(&s->sqh->head, s->sq_head, __ATOMIC_RELEASE);
	cq_publish(s);
	return (int)n;
}

static void poll_begin(struct session *s)
{
	struct daemon *d = s->d;

	s->backlog = false;
	s->last_active_ns = uv_hrtime();
	/* Awake: a client that sees the flag clear need not ring. Only the
	 * daemon stores to the SQ flags. */
	__atomic_store_n(&s->sqh->flags, 0, __ATOMIC_RELAXED);
	if (!s->polling) {
		s->polling = true;
		list_add_tail(&d->polling, &s->poll_link);
		uv_idle_start(&d->idle, dataplane_idle_cb);
	}
}

static void poll_end(struct session *s)
{
	if (s->polling) {
		list_del(&s->poll_link);
		s->polling = false;
	}
}

/* Returns true when the session may sleep, false when it must keep polling. */
static bool try_sleep(struct session *s)
{
	struct daemon *d = s->d;
	uint32_t tail;

	__atomic_store_n(&s->sqh->flags, SPW_RING_NEED_WAKEUP, __ATOMIC_RELAXED);
	/* Full fence: the flag store is visible before we re-read the tail;
	 * pairs with the client's fence between its tail store and its flag
	 * load: either we see its entry now or it sees the flag and rings. */
	atomic_thread_fence(memory_order_seq_cst);
	tail = __atomic_load_n(&s->sqh->tail, __ATOMIC_ACQUIRE);
	if (tail != s->sq_head && !s->sq_paused) {
		int space = cq_space(s);
		/* Out of ring budget (less than a tenth of a refill left): sleep
		 * like a full CQ and look again on the timer, rather than spin
		 * on a session the limit holds back. */
		uint64_t rate = d->cfg->limits_ring_ops_per_s;
		bool held = rate && ring_budget(s) < (rate / 1000 ? rate / 1000 : 1);

		if (!held && (space < 0 || (uint32_t)space > s->pending)) {
			/* Work arrived (or the client broke the CQ: drain reports it). */
			__atomic_store_n(&s->sqh->flags, 0, __ATOMIC_RELAXED);
			return false;
		}
		/* Entries wait for CQ room the client has not freed. It owes us
		 * no doorbell for reaping, so look again on a slow timer. */
		s->backlog = true;
		if (!uv_is_active((uv_handle_t *)&d->backlog_timer))
			uv_timer_start(&d->backlog_timer, dataplane_backlog_cb, BACKLOG_RETRY_MS, 0);
	}
	poll_end(s);
	return true;
}

void dataplane_idle_cb(uv_idle_t *h)
{
	struct daemon *d = h->data;
	uint64_t now = uv_hrtime(), window = (uint64_t)d->cfg->ring_poll_us * 1000u;
	struct list *p, *t;
	bool work = false;

	list_for_each_safe(p, t, &d->polling) {
		struct session *s = list_entry(p, struct session, poll_link);
		int n = dataplane_drain(s);

		work |= n != 0;

		/* Ending a session removes only s from the list, never t. */
		if (n < 0) {
			end_session(s);
			continue;
		}
		if (n > 0 && !s->throttled)
			s->last_active_ns = now;
		else if ((s->throttled || now - s->last_active_ns >= (s->poll ? window : 0)) && !try_sleep(s))
			s->last_active_ns = now;
	}
	if (list_empty(&d->polling))
		uv_idle_stop(h);
	else if (!work)
		sched_yield(); /* polite polling: see the top of this file */
}

static void wake(struct session *s)
{
	int n;

	poll_begin(s);
	n = dataplane_drain(s);
	if (n < 0) {
		end_session(s);
		return;
	}
	if (!s->poll || s->d->cfg->ring_poll_us == 0 || s->throttled)
		try_sleep(s);
}

void dataplane_backlog_cb(uv_timer_t *timer)
{
	struct daemon *d = timer->data;
	struct list *p, *t;

	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		/* wake() may end s; t is another session and stays valid. */
		if (s->backlog)
			wake(s);
	}
}

static void on_sq_event(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;
	uint64_t v;

	if (!s)
		return;
	/* Reset the doorbell; EAGAIN only means someone else already did. */
	if (read(s->sq_evt, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_debug("session %s: sq doorbell: %s", s->name, strerror(errno));
	wake(s);
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

int dataplane_start(struct session *s)
{
	uv_poll_t *h = calloc(1, sizeof(*h));
	int r;

	if (!h)
		return UV_ENOMEM;
	r = uv_poll_init(&s->d->loop, h, s->sq_evt);
	if (r < 0) {
		free(h);
		return r;
	}
	h->data = s;
	s->sq_poll = h;
	return uv_poll_start(h, UV_READABLE, on_sq_event);
}

void dataplane_resume(struct session *s)
{
	s->sq_paused = false;
	/* Entries may have come while paused, with no doorbell after. */
	if (s->sq_poll)
		wake(s);
}

void dataplane_stop(struct session *s)
{
	poll_end(s);
	s->backlog = false;
	if (s->sq_poll) {
		/* uv_close stops the watcher now; the memory goes in the callback. */
		s->sq_poll->data = NULL;
		uv_close((uv_handle_t *)s->sq_poll, free_handle);
		s->sq_poll = NULL;
	}
}
