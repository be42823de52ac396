/* SPDX-License-Identifier: MIT */
/*
 * The control plane's connections: length-prefixed JSON frames on a unix
 * stream socket (spw-proto.h). Sockets are non-blocking and every frame is
 * reassembled incrementally, so a client that sends half a frame stalls
 * only itself. A client gets exactly one reply per request; while a reply
 * is still queued the daemon reads nothing more from it, which bounds what
 * a client that never reads can make the daemon hold to one reply. The
 * requests themselves are handled in control.c.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "control-conn.h"
#include "daemon.h"
#include "log.h"
#include "persist.h"
#include "session.h"
#include "util/unixsock.h"

#define FRAMES_PER_WAKEUP 16
/* A payload buffer starts this small and doubles as bytes arrive, so a
 * header that claims 64 KiB costs nothing until 64 KiB come. */
#define PAYLOAD_FIRST 4096u

/* Closes connections that said no hello within limits.hello_timeout_ms:
 * one timer for all of them, running only while one is waiting. */
static uv_timer_t *hello_timer;

static void client_event(uv_poll_t *h, int status, int events);

/* Waiting for something of its own (an attach's region, a dying tensor's
 * I/O, a checkpoint or restore): nothing more is read from it meanwhile. */
static bool control_client_busy(const struct client *c)
{
	return c->attaching || c->unregistering || c->waiting;
}

void control_client_watch(struct client *c)
{
	int ev = c->tx ? UV_WRITABLE : UV_READABLE | UV_DISCONNECT;

	if (c->closing)
		return;
	if (control_client_busy(c) && !c->tx)
		ev = 0;
	/* uv_poll_start() takes the fd out of epoll and puts it back even
	 * when the events stay the same: two epoll_ctl calls (one failing
	 * with EEXIST) after every reply, a quarter of the control plane's
	 * system calls under a registration storm. epoll is level-triggered:
	 * a request already waiting is seen at the next poll all the same. */
	if (ev == c->watching)
		return;
	c->watching = ev;
	if (ev)
		uv_poll_start(&c->poll, ev, client_event);
	else
		uv_poll_stop(&c->poll);
}

static void client_freed(uv_handle_t *h)
{
	struct client *c = h->data;

	close(c->fd);
	free(c);
}

void control_client_close(struct client *c, const char *why)
{
	char a[32];

	if (!c || c->closing)
		return;
	c->closing = true;
	/* Hang up before the session's rings are freed below: a client that
	 * finds them zeroed then also finds the hang-up, and says the daemon
	 * closed the connection rather than guess at a broken protocol. */
	shutdown(c->fd, SHUT_RDWR);
	if (c->waitp) {
		/* A checkpoint or restore goes on; its answer has nobody to go to. */
		*c->waitp = NULL;
		c->waitp = NULL;
	}
	if (c->session && c->session->attaching) {
		/* The threadpool still builds its region: it is freed when that
		 * work comes back (control_attach_done with no owner). */
		log_info("attach %s: client %u (uid %u, pid %d) %s while its region was being prepared",
			 c->session->name, c->id, (unsigned)c->uid, (int)c->pid, why);
		c->session->owner = NULL;
		c->session = NULL;
	} else if (c->session && persist_orphan(c->session, why)) {
		c->session = NULL;
		daemon_update_status(c->d);
	} else if (c->session) {
		log_info("detach %s: client %u (uid %u, pid %d) %s; released %s", c->session->name, c->id,
			 (unsigned)c->uid, (int)c->pid, why, format_bytes(c->session->bytes, a, sizeof(a)));
		c->session = session_free(c->session);
		daemon_update_status(c->d);
	} else {
		log_debug("client %u (uid %u, pid %d): %s", c->id, (unsigned)c->uid, (int)c->pid, why);
	}
	list_del(&c->link);
	free(c->payload);
	c->payload = NULL;
	free(c->tx);
	c->tx = NULL;
	uv_close((uv_handle_t *)&c->poll, client_freed);
}

bool control_client_gone(const struct client *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void timer_freed(uv_handle_t *h)
{
	free(h);
}

void control_close_all(struct daemon *d)
{
	struct list *p, *t;

	if (hello_timer)
		uv_close((uv_handle_t *)hello_timer, timer_freed);
	hello_timer = NULL;
	list_for_each_safe(p, t, &d->clients)
		control_client_close(list_entry(p, struct client, link), "detached: spillwayd is shutting down");
}

/* Writes what it can of the queued reply. Returns 0 or a negative errno
 * (the client is gone). */
static int flush_tx(struct client *c)
{
	while (c->tx_off < c->tx_len) {
		struct iovec iov = { .iov_base = c->tx + c->tx_off, .iov_len = c->tx_len - c->tx_off };
		ssize_t r = fd_sendmsg(c->fd, &iov, 1, c->tx_fds, c->tx_nfds, MSG_DONTWAIT);

		if (r == -EAGAIN) {
			control_client_watch(c);
			return 0;
		}
		if (r < 0)
			return (int)r;
		/* The descriptors went with the first byte written. */
		c->tx_nfds = 0;
		c->tx_off += (size_t)r;
	}
	free(c->tx);
	c->tx = NULL;
	c->tx_len = c->tx_off = 0;
	if (c->close_after_tx)
		control_client_close(c, c->close_reason);
	else
		control_client_watch(c);
	return 0;
}

void control_send_json(struct client *c, cJSON *msg, const int *fds, unsigned nfds)
{
	struct spw_proto_frame_hdr h = { 0 };
	char *s = cJSON_PrintUnformatted(msg);
	size_t len;
	int r;

	cJSON_Delete(msg);
	if (!s) {
		control_client_close(c, "out of memory while replying");
		return;
	}
	len = strlen(s);
	c->tx = malloc(sizeof(h) + len);
	if (!c->tx || len == 0 || len > SPW_PROTO_MAX_FRAME) {
		free(s);
		control_client_close(c, "could not build a reply");
		return;
	}
	h.len = (uint32_t)len;
	memcpy(c->tx, &h, sizeof(h));
	memcpy(c->tx + sizeof(h), s, len);
	free(s);
	c->tx_len = sizeof(h) + len;
	c->tx_off = 0;
	c->tx_nfds = nfds;
	if (nfds)
		memcpy(c->tx_fds, fds, sizeof(int) * nfds);
	r = flush_tx(c);
	if (r < 0)
		control_client_close(c, r == -EPIPE || r == -ECONNRESET ? "disconnected before reading its reply"
									: "could not be written to");
}

cJSON *control_reply(const char *type)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "type", type);
	cJSON_AddTrueToObject(o, "ok");
	return o;
}

void control_reply_error(struct client *c, int err, const char *fmt, ...)
{
	char m[768];
	cJSON *o;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	log_info("client %u (uid %u, pid %d): refused: %s", c->id, (unsigned)c->uid, (int)c->pid, m);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", SPW_MSG_ERROR);
	cJSON_AddNumberToObject(o, "errno", err);
	cJSON_AddStringToObject(o, "message", m);
	control_send_json(c, o, NULL, 0);
}

/* A framing violation: say why, then hang up once the reply is out. */
static void protocol_error(struct client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void protocol_error(struct client *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->close_reason, sizeof(c->close_reason), fmt, ap);
	va_end(ap);
	c->close_after_tx = true;
	control_reply_error(c, err, "%s; closing the connection", c->close_reason);
}

/* recv() that closes every descriptor a client attaches: the daemon never
 * takes descriptors from clients. More than fit in the control buffer
 * (util/unixsock.h) fail the read with -EPROTO, which ends the connection:
 * none leaks either way. */
static ssize_t recv_some(struct client *c, void *buf, size_t len)
{
	unsigned closed = 0;
	ssize_t r = fd_recvmsg(c->fd, buf, len, MSG_DONTWAIT, NULL, NULL, 0, &closed);

	if (closed)
		log_debug("client %u: sent %u descriptors; closed them", c->id, closed);
	return r;
}

static void read_frames(struct client *c)
{
	/* One request at a time: nothing more is read while a reply is queued
	 * or an attach is being prepared (replies stay in order). */
	for (int frames = 0; frames < FRAMES_PER_WAKEUP && !c->closing && !c->tx && !control_client_busy(c);) {
		struct spw_proto_frame_hdr h;
		bool in_hdr = c->hdr_len < sizeof(c->hdr);
		void *dst = in_hdr ? (void *)(c->hdr + c->hdr_len) : (void *)(c->payload + c->payload_got);
		size_t want = in_hdr ? sizeof(c->hdr) - c->hdr_len : c->payload_cap - c->payload_got;
		ssize_t r = recv_some(c, dst, want);

		if (r == -EAGAIN)
			return;
		if (r == 0) {
			control_client_close(c, c->hdr_len ? "closed the connection inside a frame" : "disconnected");
			return;
		}
		if (r < 0) {
			control_client_close(c, strerror((int)-r));
			return;
		}
		if (in_hdr) {
			c->hdr_len += (size_t)r;
			if (c->hdr_len < sizeof(c->hdr))
				continue;
			memcpy(&h, c->hdr, sizeof(h));
			if (h.flags) {
				protocol_error(c, EPROTO, "frame header flags 0x%x: reserved bits must be zero", h.flags);
				return;
			}
			if (h.len == 0 || h.len > SPW_PROTO_MAX_FRAME) {
				protocol_error(c, EMSGSIZE, "frame of %u bytes; a frame carries 1 to %u bytes", h.len,
					       SPW_PROTO_MAX_FRAME);
				return;
			}
			c->payload_cap = h.len < PAYLOAD_FIRST ? h.len : PAYLOAD_FIRST;
			c->payload = malloc((size_t)c->payload_cap + 1);
			if (!c->payload) {
				control_client_close(c, "out of memory");
				return;
			}
			c->payload_len = h.len;
			c->payload_got = 0;
			continue;
		}
		c->payload_got += (uint32_t)r;
		if (c->payload_got == c->payload_cap && c->payload_cap < c->payload_len) {
			uint32_t cap = c->payload_cap * 2 < c->payload_len ? c->payload_cap * 2 : c->payload_len;
			char *n = realloc(c->payload, (size_t)cap + 1);

			if (!n) {
				control_client_close(c, "out of memory");
				return;
			}
			c->payload = n;
			c->payload_cap = cap;
		}
		if (c->payload_got < c->payload_len)
			continue;
		c->payload[c->payload_len] = '\0';
		control_handle_frame(c, c->payload, c->payload_len);
		free(c->payload);
		c->payload = NULL;
		c->hdr_len = 0;
		frames++;
	}
}

static void client_event(uv_poll_t *h, int status, int events)
{
	struct client *c = h->data;
	int r;

	if (status < 0) {
		control_client_close(c, uv_strerror(status));
		return;
	}
	if (c->tx && (events & UV_WRITABLE)) {
		r = flush_tx(c);
		if (r < 0) {
			control_client_close(c, "disconnected before reading its reply");
			return;
		}
	}
	if (!c->closing && !c->tx && !control_client_busy(c) && (events & (UV_READABLE | UV_DISCONNECT)))
		read_frames(c);
}

static void hello_sweep(uv_timer_t *t)
{
	struct daemon *d = t->data;
	uint32_t ms = d->cfg->limits_hello_timeout_ms;
	uint64_t now = uv_now(&d->loop);
	bool waiting = false;
	struct list *p, *n;

	list_for_each_safe(p, n, &d->clients) {
		struct client *c = list_entry(p, struct client, link);

		if (c->hello || c->closing)
			continue;
		if (!ms || now - c->accepted_ms < ms) {
			waiting = true;
			continue;
		}
		/* A reply already queued (to a request before hello) is the
		 * one it never read: just hang up. */
		if (c->tx)
			control_client_close(c, "sent no hello within limits.hello_timeout_ms");
		else
			protocol_error(c, ETIMEDOUT, "no hello within %u ms (limits.hello_timeout_ms); send hello first",
				       ms);
	}
	if (!waiting)
		uv_timer_stop(t);
}

/* Runs the sweep while a connection waits for its hello. */
static void hello_watch(struct daemon *d)
{
	uint32_t ms = d->cfg->limits_hello_timeout_ms, period;

	if (!ms || d->stopping)
		return;
	if (!hello_timer) {
		hello_timer = malloc(sizeof(*hello_timer));
		if (!hello_timer || uv_timer_init(&d->loop, hello_timer) < 0) {
			free(hello_timer);
			hello_timer = NULL;
			return;
		}
		hello_timer->data = d;
	}
	if (uv_is_active((uv_handle_t *)hello_timer))
		return;
	/* A quarter of the deadline: a connection goes at most 25% late. */
	period = ms / 4 < 10 ? 10 : ms / 4 > 1000 ? 1000 : ms / 4;
	uv_timer_start(hello_timer, hello_sweep, period, period);
}

/* limits.connections_per_uid: the connections uid holds besides c. */
static unsigned uid_connections(struct daemon *d, const struct client *c)
{
	unsigned n = 0;
	struct list *p, *t;

	list_for_each_safe(p, t, &d->clients) {
		const struct client *o = list_entry(p, struct client, link);

		n += o != c && o->uid == c->uid && !o->closing;
	}
	return n;
}

struct client *control_client_adopt(struct daemon *d, int fd, uid_t uid, gid_t gid, pid_t pid)
{
	struct client *c = calloc(1, sizeof(*c));
	unsigned n;

	if (!c || uv_poll_init(&d->loop, &c->poll, fd) < 0) {
		log_warn("control: refusing a connection from pid %d: out of memory", (int)pid);
		free(c);
		close(fd);
		return NULL;
	}
	c->d = d;
	c->fd = fd;
	c->poll.data = c;
	c->id = ++d->next_client_id;
	c->uid = uid;
	c->gid = gid;
	c->pid = pid;
	c->accepted_ms = uv_now(&d->loop);
	list_add_tail(&d->clients, &c->link);
	log_debug("client %u (uid %u, pid %d): connected", c->id, (unsigned)c->uid, (int)c->pid);
	control_client_watch(c);
	n = uid_connections(d, c);
	if (n >= d->cfg->limits_connections_per_uid) {
		protocol_error(c, EDQUOT, "uid %u already has %u control connections open, the most "
			       "limits.connections_per_uid (%u) allows; close some or raise "
			       "limits.connections_per_uid in %s", (unsigned)c->uid, n,
			       d->cfg->limits_connections_per_uid, d->cfg->origin);
		return NULL;
	}
	hello_watch(d);
	return c;
}

static void client_new(struct daemon *d, int fd)
{
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		log_warn("control: cannot read the peer credentials of a new connection: %s", strerror(errno));
		close(fd);
		return;
	}
	control_client_adopt(d, fd, cred.uid, cred.gid, cred.pid);
}

int control_listen(struct daemon *d)
{
	return daemon_listen(d, &d->control, "control.sock", "control", d->cfg->socket_mode, true, client_new);
}

uint32_t control_client_features(const struct client *c)
{
	return c->features;
}

void control_client_set_session(struct client *c, struct session *s)
{
	c->session = s;
}
