/* SPDX-License-Identifier: MIT */
/*
 * ring.c: the client side of the data plane. We produce on the SQ and
 * consume the CQ; spw-ring.h is the contract.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "client-private.h"
#include "util/clock.h"

#define load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define full_fence() __atomic_thread_fence(__ATOMIC_SEQ_CST)

int spw__ring_init(struct spw__ring *r, void *rings, const struct spw_ring_layout *l,
		   int sq_evt, int cq_evt, int wake_fd, uint32_t spin_us)
{
	char *base = rings;

	memset(r, 0, sizeof(*r));
	r->sq_hdr = (struct spw_ring_hdr *)(base + l->sq_hdr_off);
	r->cq_hdr = (struct spw_ring_hdr *)(base + l->cq_hdr_off);
	r->sqes = (struct spw_sqe *)(base + l->sqes_off);
	r->cqes = (struct spw_cqe *)(base + l->cqes_off);
	r->io_hdr = (const struct spw_io_log_hdr *)(base + l->io_hdr_off);
	r->io_events = (const struct spw_io_event *)(base + l->io_events_off);
	r->sq_entries = l->sq_entries;
	r->cq_entries = l->cq_entries;
	r->sq_evt = sq_evt;
	r->cq_evt = cq_evt;
	r->wake_fd = wake_fd;
	r->spin_us = spin_us;

	/* The daemon initialised the headers before it sent the fds, and the
	 * sendmsg/recvmsg pair orders those stores before these loads. We
	 * adopt its starting indices (io_uring does the same), which lets a
	 * test start them near UINT32_MAX to exercise wraparound. */
	r->sq_tail = load_acquire(&r->sq_hdr->tail);
	r->cq_head = load_acquire(&r->cq_hdr->head);
	if (r->sq_tail - load_acquire(&r->sq_hdr->head) != 0 ||
	    load_acquire(&r->cq_hdr->tail) - r->cq_head != 0)
		return -EPROTO; /* a fresh session has nothing queued either way */

	r->tags = calloc(r->cq_entries, sizeof(*r->tags));
	r->free_tags = calloc(r->cq_entries, sizeof(*r->free_tags));
	r->backlog = calloc(r->cq_entries, sizeof(*r->backlog));
	if (!r->tags || !r->free_tags || !r->backlog) {
		spw__ring_fini(r);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < r->cq_entries; i++)
		r->free_tags[i] = r->cq_entries - 1 - i; /* pop order 0, 1, 2, ... */
	r->nfree = r->cq_entries;
	return 0;
}

void spw__ring_fini(struct spw__ring *r)
{
	free(r->tags);
	free(r->free_tags);
	free(r->backlog);
	r->tags = NULL;
	r->free_tags = NULL;
	r->backlog = NULL;
	r->nfree = 0;
}

static int check_ready(spw_client *c)
{
	if (c->dead)
		return c->dead_err;
	if (!c->attached)
		return spw__error(c, -ENOTCONN, "no session attached (call spw_client_attach first)");
	return 0;
}

/* The daemon is gone: -ECONNRESET, the error a trainer may reconnect
 * after. The message says which sign was seen: spillwayd hangs up before
 * it frees a session's rings, so a hang-up is usually there by the time
 * the client reads freed rings; an older daemon frees them first. */
static int daemon_gone(spw_client *c, bool hung_up)
{
	if (hung_up)
		return spw__dead(c, spw__error(c, -ECONNRESET,
					       "session %s: spillwayd closed the connection (the daemon exited, was killed, or ended the session)",
					       c->session));
	return spw__dead(c, spw__error(c, -ECONNRESET,
				       "session %s: the daemon ended the session or exited (its rings were freed)",
				       c->session));
}

/* Whether the daemon hung up the control socket, waiting up to
 * timeout_ms for it. No reply is pending: anything readable is EOF or a
 * violation, which the caller reports as such. */
static bool hung_up(spw_client *c, int timeout_ms)
{
	struct pollfd p = { .fd = c->ctl, .events = POLLIN };
	char b;

	return poll(&p, 1, timeout_ms) == 1 && recv(c->ctl, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* An index the daemon writes says something impossible. A daemon that
 * ends the session, or exits, frees the rings' pages (they read as zeros
 * from then on) and hangs up its end of the control socket: that is the
 * daemon gone. Anything else is a daemon breaking the protocol (-EPROTO),
 * unless the hang-up follows within 200 ms. Either way the session is
 * dead. */
static int ring_broken(spw_client *c, uint32_t daemon_index, const char *what)
{
	if (hung_up(c, 0))
		return daemon_gone(c, true);
	if (daemon_index == 0)
		return daemon_gone(c, false);
	if (hung_up(c, 200))
		return daemon_gone(c, true);
	return spw__dead(c, spw__error(c, -EPROTO, "session %s: %s", c->session, what));
}

/* Queues one sqe and rings the doorbell if the daemon sleeps. */
static int submit_arg(spw_client *c, uint8_t opcode, uint8_t flags, uint32_t tensor, uint32_t page,
		      uint64_t arg, uint64_t user_data, bool sync)
{
	struct spw__ring *r = &c->ring;
	struct spw_sqe *sqe;
	uint32_t head, idx;
	int err = check_ready(c);

	if (err < 0)
		return err;
	/* Acquire: the daemon copies an entry out before it moves the head
	 * past it, so once we see the new head we may overwrite those slots. */
	head = load_acquire(&r->sq_hdr->head);
	if (r->sq_tail - head > r->sq_entries)
		return ring_broken(c, head, "the daemon moved the submission head past the tail");
	if (r->sq_tail - head == r->sq_entries || r->nfree == 0)
		return spw__error(c, -EBUSY,
				  "session %s: %s full (reap completions before submitting more)", c->session,
				  r->nfree == 0 ? "completion ring" : "submission ring");

	idx = r->free_tags[--r->nfree];
	r->tags[idx].user_data = user_data;
	r->tags[idx].gen++;
	r->tags[idx].in_use = true;
	r->tags[idx].sync = sync;

	sqe = &r->sqes[r->sq_tail & (r->sq_entries - 1)];
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = opcode;
	sqe->flags = flags;
	sqe->tensor = tensor;
	sqe->page = page;
	sqe->arg = arg;
	sqe->user_data = (uint64_t)r->tags[idx].gen << 32 | idx;
	r->sq_tail++;
	/* Release: the sqe's contents become visible to the daemon no later
	 * than the tail that hands the entry over. */
	store_release(&r->sq_hdr->tail, r->sq_tail);
	/* Full fence: orders the tail store before the flag load below. It
	 * pairs with the daemon's fence between setting NEED_WAKEUP and
	 * re-reading the tail, so either the daemon sees our entry or we see
	 * its flag; never neither. */
	full_fence();
	if (load_relaxed(&r->sq_hdr->flags) & SPW_RING_NEED_WAKEUP) {
		uint64_t one = 1;
		ssize_t w;

		do
			w = write(r->sq_evt, &one, sizeof(one));
		while (w < 0 && errno == EINTR);
		/* EAGAIN means the counter is saturated: the daemon has a
		 * wakeup pending anyway. */
		if (w < 0 && errno != EAGAIN)
			return spw__dead(c, spw__error(c, -errno, "session %s: ringing the daemon's doorbell: %s",
						       c->session, spw_strerror(-errno)));
	}
	return 0;
}

static int submit(spw_client *c, uint8_t opcode, uint8_t flags, uint32_t tensor, uint32_t page,
		  uint64_t user_data, bool sync)
{
	return submit_arg(c, opcode, flags, tensor, page, 0, user_data, sync);
}

SPW_EXPORT int spw_submit_nop(spw_client *c, uint64_t user_data)
{
	if (!c)
		return -EINVAL;
	return submit(c, SPW_OP_NOP, 0, 0, 0, user_data, false);
}

SPW_EXPORT int spw_submit_pin(spw_client *c, uint32_t tensor, uint32_t page, uint64_t user_data)
{
	if (!c)
		return -EINVAL;
	return submit(c, SPW_OP_PIN, 0, tensor, page, user_data, false);
}

SPW_EXPORT int spw_submit_unpin(spw_client *c, uint32_t tensor, uint32_t page, unsigned flags,
				uint64_t user_data)
{
	if (!c)
		return -EINVAL;
	if (flags & ~SPW_DIRTY)
		return spw__error(c, -EINVAL, "unpin: unknown flags 0x%x (SPW_CLEAN or SPW_DIRTY)", flags);
	return submit(c, SPW_OP_UNPIN, (uint8_t)flags, tensor, page, user_data, false);
}

SPW_EXPORT int spw_submit_unpin_copy(spw_client *c, uint32_t tensor, uint32_t page, uint32_t src_tensor,
				     uint32_t src_page, uint64_t user_data)
{
	if (!c)
		return -EINVAL;
	if (c->attached && !(c->features & SPW_FEAT_UNPIN_COPY))
		return spw__error(c, -EOPNOTSUPP,
				  "unpin as a copy: spillwayd does not offer it (an older daemon): unpin dirty instead");
	return submit_arg(c, SPW_OP_UNPIN, SPW_UNPIN_DIRTY | SPW_UNPIN_COPY_OF, tensor, page,
			  (uint64_t)src_tensor << 32 | src_page, user_data, false);
}

/* A completion the daemon posted, matched to its operation. */
struct matched {
	uint32_t tag;
	bool sync;
	struct spw_completion comp;
};

/* Takes up to max completions off the CQ into out. Returns the count or
 * -EPROTO (the session is then marked dead). */
static int drain_cq(spw_client *c, struct matched *out, unsigned max)
{
	struct spw__ring *r = &c->ring;
	uint32_t tail, avail;
	unsigned n = 0;

	/* Acquire: the daemon writes an entry before it publishes the tail
	 * that covers it, so entries below this tail are complete. */
	tail = load_acquire(&r->cq_hdr->tail);
	avail = tail - r->cq_head;
	if (avail > r->cq_entries)
		return ring_broken(c, tail, "the daemon's completion tail is out of the ring's range");
	while (n < max && n < avail) {
		/* Copy first, then check: the entry lives in memory the
		 * daemon can still write. */
		struct spw_cqe cqe = r->cqes[r->cq_head & (r->cq_entries - 1)];
		uint32_t idx = (uint32_t)cqe.user_data, gen = (uint32_t)(cqe.user_data >> 32);
		struct spw__tag *t;

		/* A daemon that ends the session frees the rings' pages: they
		 * read as zeros, which could pass for a completion of tag 0.
		 * The tail moving back below the head after the copy says the
		 * entry was read from freed pages. */
		if (load_acquire(&r->cq_hdr->tail) - r->cq_head > r->cq_entries)
			return daemon_gone(c, hung_up(c, 0));

		if (idx >= r->cq_entries || !r->tags[idx].in_use || r->tags[idx].gen != gen) {
			store_release(&r->cq_hdr->head, r->cq_head);
			return spw__dead(c, spw__error(c, -EPROTO,
						       "session %s: the daemon posted a completion (0x%llx) for no operation in flight",
						       c->session, (unsigned long long)cqe.user_data));
		}
		t = &r->tags[idx];
		out[n].tag = idx;
		out[n].sync = t->sync;
		out[n].comp.user_data = t->user_data;
		out[n].comp.res = cqe.res;
		out[n].comp.flags = 0;
		t->in_use = false;
		r->free_tags[r->nfree++] = idx;
		r->cq_head++;
		n++;
	}
	if (n)
		/* Release: our copies of the entries are done before the daemon
		 * sees the head move and reuses their slots. */
		store_release(&r->cq_hdr->head, r->cq_head);
	return (int)n;
}

/* True when the control socket reports that the daemon hung up. Anything
 * else readable there is a protocol violation: no reply is pending. */
static int check_control(spw_client *c)
{
	char b;
	ssize_t n = recv(c->ctl, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		return daemon_gone(c, true);
	if (n > 0)
		return spw__dead(c, spw__error(c, -EPROTO,
					       "session %s: spillwayd sent a control message nobody asked for",
					       c->session));
	return 0;
}

static bool cq_ready(struct spw__ring *r)
{
	/* Relaxed is enough to decide whether to look: drain_cq() re-reads
	 * the tail with acquire before touching entries. */
	return load_relaxed(&r->cq_hdr->tail) != r->cq_head;
}

/* Waits until the CQ holds an entry. timeout_ms < 0: no limit. Returns 0,
 * -ETIMEDOUT, -EINTR, or the error that made the client dead. */
static int wait_cq(spw_client *c, int timeout_ms, int extra_fd)
{
	struct spw__ring *r = &c->ring;
	uint64_t start = now_ns(), deadline = 0;
	int err = 0;

	if (cq_ready(r))
		return 0;
	if (timeout_ms > 0)
		deadline = start + (uint64_t)timeout_ms * 1000000ull;
	/* A caller with a second fd to watch cannot spin on it cheaply, so it
	 * sleeps at once. */
	if (r->spin_us != SPW_SPIN_NEVER && extra_fd < 0) {
		uint64_t spin_end = start + (uint64_t)r->spin_us * 1000ull;

		if (deadline && spin_end > deadline)
			spin_end = deadline;
		do {
			for (int i = 0; i < 32; i++) {
				if (cq_ready(r))
					return 0;
				cpu_relax();
			}
		} while (now_ns() < spin_end);
	}

	for (;;) {
		struct pollfd pfd[3] = {
			{ .fd = r->cq_evt, .events = POLLIN },
			{ .fd = r->wake_fd, .events = POLLIN },
			{ .fd = extra_fd, .events = POLLIN },
		};
		int ms = -1, pr;

		store_relaxed(&r->cq_hdr->flags, SPW_RING_NEED_WAKEUP);
		/* Full fence: our flag store is globally visible before we
		 * look at the tail again. Pairs with the daemon's fence
		 * between its tail store and its flag load: either it sees
		 * the flag and writes the eventfd, or we see its entry here. */
		full_fence();
		if (cq_ready(r))
			break;
		if (deadline) {
			uint64_t now = now_ns();

			if (now >= deadline) {
				err = -ETIMEDOUT;
				break;
			}
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		/* A negative fd in the set is ignored by poll(). */
		pr = poll(pfd, 3, ms);
		if (pr < 0) {
			err = -errno;
			if (err == -EINTR)
				spw__error(c, err, "session %s: interrupted while waiting for completions",
					   c->session);
			break;
		}
		if (pfd[0].revents & POLLIN) {
			uint64_t v;

			/* poll said readable and we are the eventfd's only
			 * reader, so this read does not block even if the
			 * daemon created it blocking. It resets the counter. */
			if (read(r->cq_evt, &v, sizeof(v)) < 0 && errno != EAGAIN && errno != EINTR) {
				err = spw__dead(c, spw__error(c, -errno, "session %s: reading the completion doorbell: %s",
							      c->session, spw_strerror(-errno)));
				break;
			}
		}
		if (pfd[0].revents & (POLLERR | POLLNVAL)) {
			err = spw__dead(c, spw__error(c, -EPROTO, "session %s: the completion doorbell is broken",
						      c->session));
			break;
		}
		if (r->wake_fd >= 0 && pfd[1].revents) {
			err = check_control(c);
			if (err < 0)
				break;
		}
		if (extra_fd >= 0 && pfd[2].revents)
			break;
	}
	/* Awake: the daemon need not ring any more. Relaxed, because a stale
	 * flag only costs the daemon a spurious eventfd write, which the next
	 * sleep absorbs. */
	store_relaxed(&r->cq_hdr->flags, 0);
	if (err == -ETIMEDOUT)
		spw__error(c, err, "session %s: no completion within %d ms", c->session, timeout_ms);
	return err;
}

SPW_EXPORT int spw_reap(spw_client *c, struct spw_completion *out, unsigned max, int timeout_ms)
{
	struct spw__ring *r;
	struct matched m[32];
	unsigned n = 0;
	int err;

	if (!c || !out || max == 0 || timeout_ms < -1)
		return c ? spw__error(c, -EINVAL, "spw_reap: out must not be NULL, max >= 1, timeout >= -1") : -EINVAL;
	err = check_ready(c);
	if (err < 0)
		return err;
	r = &c->ring;

	for (;;) {
		/* Completions parked by a sync call came off the CQ first. */
		while (n < max && r->bl_count) {
			out[n++] = r->backlog[r->bl_head];
			r->bl_head = (r->bl_head + 1) & (r->cq_entries - 1);
			r->bl_count--;
		}
		while (n < max) {
			unsigned want = max - n < 32 ? max - n : 32;
			int got = drain_cq(c, m, want);

			if (got < 0)
				return got;
			/* A sync call waits out its own completion (it
			 * retries EINTR), so one never reaches here; if it
			 * did, it would be dropped rather than reported with
			 * a user_data the caller never chose. */
			for (int i = 0; i < got; i++)
				if (!m[i].sync)
					out[n++] = m[i].comp;
			if ((unsigned)got < want)
				break;
		}
		if (n > 0 || timeout_ms == 0)
			return (int)n;
		err = wait_cq(c, timeout_ms, -1);
		if (err < 0)
			return err;
	}
}

static void park(struct spw__ring *r, const struct spw_completion *comp)
{
	/* Cannot overflow: at most cq_entries operations are in flight, and
	 * the sync one is never parked. */
	r->backlog[(r->bl_head + r->bl_count) & (r->cq_entries - 1)] = *comp;
	r->bl_count++;
}

/* Submits one operation and waits for its own completion, parking others
 * for spw_reap(). Returns 0 with the daemon's answer in *res, or the
 * library's own error (already described in the last-error message). */
static int sync_op_arg(spw_client *c, uint8_t opcode, uint8_t flags, uint32_t tensor, uint32_t page, uint64_t arg,
		       int32_t *res)
{
	int err = submit_arg(c, opcode, flags, tensor, page, arg, 0, true);

	if (err < 0)
		return err;
	for (;;) {
		struct matched m[16];
		bool done = false;
		int got = drain_cq(c, m, 16);

		if (got < 0)
			return got;
		/* Park the whole batch around ours, so none is lost. */
		for (int i = 0; i < got; i++) {
			if (m[i].sync) {
				*res = m[i].comp.res;
				done = true;
			} else {
				park(&c->ring, &m[i].comp);
			}
		}
		if (done)
			return 0;
		if (got == 0) {
			/* Keep waiting through signals: returning now would
			 * leave this operation in flight with nobody to
			 * receive its completion. A daemon that answers nothing
			 * within reply_timeout_ms (stopped, wedged) leaves it so
			 * anyway: the client is abandoned, as after a control
			 * reply that never came, rather than wait for ever. */
			do
				err = wait_cq(c, (int)c->reply_timeout_ms, -1);
			while (err == -EINTR);
			if (err == -ETIMEDOUT)
				return spw__dead(c, spw__error(c, err,
					"session %s: spillwayd sent no completion within %u ms (stopped or wedged?); "
					"the client is abandoned: free it and attach again", c->session,
					c->reply_timeout_ms));
			if (err < 0)
				return err;
		}
	}
}

static int sync_op(spw_client *c, uint8_t opcode, uint8_t flags, uint32_t tensor, uint32_t page, int32_t *res)
{
	return sync_op_arg(c, opcode, flags, tensor, page, 0, res);
}

int spw__mark_sync(spw_client *c, uint8_t flags, uint64_t step)
{
	int32_t res = 0;
	int r = sync_op_arg(c, SPW_OP_MARK, flags, 0, 0, step, &res);

	if (r < 0)
		return r;
	return res < 0 ? spw__error(c, res, "session %s: marking step %llu: %s", c->session,
				    (unsigned long long)step, spw_strerror(res)) : 0;
}

int spw__mark_open_write(spw_client *c, uint64_t step)
{
	int32_t res = 0;
	int r = sync_op_arg(c, SPW_OP_MARK, SPW_MARK_OPEN, 0, SPW_MARK_BY_WRITE, step, &res);

	if (r < 0)
		return r;
	return res < 0 ? spw__error(c, res, "session %s: marking step %llu open for a write: %s", c->session,
				    (unsigned long long)step, spw_strerror(res)) : 0;
}

static int op_error(spw_client *c, const char *what, uint32_t tensor, uint32_t page, int res)
{
	return spw__error(c, res, "session %s: %s tensor %u page %u: %s", c->session, what, tensor, page,
			  spw_strerror(res));
}

SPW_EXPORT int spw_nop(spw_client *c)
{
	int32_t res;
	int r;

	if (!c)
		return -EINVAL;
	r = sync_op(c, SPW_OP_NOP, 0, 0, 0, &res);
	if (r < 0)
		return r;
	if (res < 0)
		return spw__error(c, res, "session %s: nop: %s", c->session, spw_strerror(res));
	return 0;
}

SPW_EXPORT int spw_pin(spw_client *c, uint32_t tensor, uint32_t page, void **ret_ptr)
{
	int32_t res;
	int r;

	if (!c)
		return -EINVAL;
	r = sync_op(c, SPW_OP_PIN, 0, tensor, page, &res);
	if (r < 0)
		return r;
	if (res < 0)
		return op_error(c, "pin", tensor, page, res);
	if ((uint32_t)res >= c->slots)
		return spw__dead(c, spw__error(c, -EPROTO,
					       "session %s: the daemon pinned tensor %u page %u into slot %d, but the region has %u slots",
					       c->session, tensor, page, res, c->slots));
	if (ret_ptr)
		*ret_ptr = (char *)c->region + (size_t)res * c->page_size;
	return res;
}

SPW_EXPORT int spw_unpin(spw_client *c, uint32_t tensor, uint32_t page, unsigned flags)
{
	int32_t res;
	int r;

	if (!c)
		return -EINVAL;
	if (flags & ~SPW_DIRTY)
		return spw__error(c, -EINVAL, "unpin: unknown flags 0x%x (SPW_CLEAN or SPW_DIRTY)", flags);
	r = sync_op(c, SPW_OP_UNPIN, (uint8_t)flags, tensor, page, &res);
	if (r < 0)
		return r;
	if (res < 0)
		return op_error(c, "unpin", tensor, page, res);
	return 0;
}

SPW_EXPORT void *spw_slot_ptr(const spw_client *c, uint32_t slot)
{
	if (!c || !c->attached || slot >= c->slots)
		return NULL;
	return (char *)c->region + (size_t)slot * c->page_size;
}

int spw__submit_op(spw_client *c, uint8_t opcode, uint8_t flags, uint32_t tensor, uint32_t page,
		   uint64_t user_data)
{
	if (!c)
		return -EINVAL;
	return submit(c, opcode, flags, tensor, page, user_data, false);
}

int spw__submit_mark(spw_client *c, uint8_t flags, uint64_t step, uint32_t scale_bits, uint32_t good,
		     uint64_t user_data)
{
	if (!c)
		return -EINVAL;
	return submit_arg(c, SPW_OP_MARK, flags, scale_bits, good, step, user_data, false);
}

int spw__wait_ring(spw_client *c, int timeout_ms, int extra_fd)
{
	int err = check_ready(c);

	if (err < 0)
		return err;
	/* Completions parked by a sync call are ready already. */
	if (c->ring.bl_count)
		return 0;
	return wait_cq(c, timeout_ms, extra_fd);
}
