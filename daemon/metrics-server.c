/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint: HTTP/1.x on the daemon's loop, one request per
 * connection. Every step is non-blocking libuv (uv_read, uv_write,
 * uv_shutdown); the text is rendered in one go on the loop (status.c does
 * the same for its document), so a scrape costs the loop what the status
 * socket costs it.
 *
 * Hostile peers: a request is at most HTTP_MAX_REQUEST bytes (431 past
 * that), garbage is refused at its first bad byte (400), and every
 * connection lives at most METRICS_DEADLINE_MS from accept, whatever it
 * does (slowloris, or never reading the answer). At most METRICS_MAX_CONNS
 * are open; beyond that libuv leaves further connections in the kernel's
 * backlog until one closes, so a flood delays scrapes but costs no memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "config.h"
#include "daemon.h"
#include "http.h"
#include "list.h"
#include "log.h"
#include "metrics.h"
#include "metrics-addr.h"

#define METRICS_MAX_CONNS   16
#define METRICS_DEADLINE_MS 5000
/* What is read after the answer, so that close() does not reset the
 * connection under it (unread data makes the kernel send RST). */
#define METRICS_DRAIN_MAX   65536

union stream {
	uv_handle_t handle;
	uv_stream_t stream;
	uv_tcp_t tcp;
	uv_pipe_t pipe;
};

struct mserver {
	struct daemon *d;
	union stream l;
	struct metrics_addr addr;
	struct list conns;
	unsigned nconns;
	char where[128];       /* what it listens on, the kernel's port filled in */
	bool backlog;          /* a connection waits in libuv for a free place */
	bool bound;            /* the unix socket file is ours to remove */
	bool closing;
};

struct mconn {
	struct mserver *srv;
	struct list link;
	union stream h;
	uv_timer_t timer;
	uv_write_t wr;
	uv_shutdown_t sd;
	int handles;           /* open handles: freed when both closed */
	bool answered, closing;
	size_t len, drained;
	char *resp;
	char buf[HTTP_MAX_REQUEST];
};

static struct mserver *server;

static void conn_handle_closed(uv_handle_t *h)
{
	struct mconn *c = h->data;

	if (--c->handles > 0)
		return;
	free(c->resp);
	free(c);
}

static void accept_one(struct mserver *s);

static void conn_close(struct mconn *c)
{
	struct mserver *s = c->srv;

	if (c->closing)
		return;
	c->closing = true;
	list_del(&c->link);
	s->nconns--;
	uv_close(&c->h.handle, conn_handle_closed);
	uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
	if (s->backlog && !s->closing) {
		s->backlog = false;
		accept_one(s);
	}
}

static void on_deadline(uv_timer_t *t)
{
	struct mconn *c = t->data;

	log_debug("metrics: a connection took more than %d ms; closed", METRICS_DEADLINE_MS);
	conn_close(c);
}

static void on_drain_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	struct mconn *c = h->data;

	*b = uv_buf_init(c->buf, sizeof(c->buf));
	(void)suggested;
}

static void on_drain(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
	struct mconn *c = st->data;

	if (n > 0)
		c->drained += (size_t)n;
	if (n < 0 || c->drained > METRICS_DRAIN_MAX)
		conn_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct mconn *c = req->data;

	if (c->closing)
		return;
	if (status < 0 || uv_read_start(&c->h.stream, on_drain_alloc, on_drain) < 0)
		conn_close(c);
}

static void on_written(uv_write_t *req, int status)
{
	struct mconn *c = req->data;

	if (c->closing)
		return;
	c->sd.data = c;
	if (status < 0 || uv_shutdown(&c->sd, &c->h.stream, on_shutdown) < 0)
		conn_close(c);
}

/* Sends code with body (NULL: the reason phrase) and closes afterwards. */
static void respond(struct mconn *c, int code, const char *type, char *body, size_t blen, const char *extra)
{
	char head[320];
	int hl;
	uv_buf_t bufs[2];

	c->answered = true;
	uv_read_stop(&c->h.stream);
	if (!body) {
		char line[80];

		snprintf(line, sizeof(line), "%d %s\n", code, http_reason(code));
		body = strdup(line);
		blen = body ? strlen(body) : 0;
		type = "text/plain; charset=utf-8";
	}
	hl = snprintf(head, sizeof(head),
		      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n", code,
		      http_reason(code), type, blen, extra ? extra : "");
	c->resp = malloc((size_t)hl + blen);
	if (!c->resp) {
		free(body);
		conn_close(c);
		return;
	}
	memcpy(c->resp, head, (size_t)hl);
	if (blen)
		memcpy(c->resp + hl, body, blen);
	free(body);
	bufs[0] = uv_buf_init(c->resp, (unsigned)((size_t)hl + blen));
	c->wr.data = c;
	if (uv_write(&c->wr, &c->h.stream, bufs, 1, on_written) < 0)
		conn_close(c);
}

static void handle(struct mconn *c, const struct http_request *req)
{
	char *text;
	size_t len = 0;
	uint64_t t0;

	if (strcmp(req->method, "GET")) {
		respond(c, 405, NULL, NULL, 0, "Allow: GET\r\n");
		return;
	}
	if (strcmp(req->path, "/metrics")) {
		respond(c, 404, NULL, NULL, 0, NULL);
		return;
	}
	t0 = uv_hrtime();
	text = metrics_render(c->srv->d, &len);
	log_debug("metrics: rendered %zu bytes in %.0f us", len, (double)(uv_hrtime() - t0) / 1e3);
	if (!text) {
		respond(c, 500, NULL, NULL, 0, NULL);
		return;
	}
	respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	struct mconn *c = h->data;

	/* The parser caps the request below the buffer, so room is left. */
	*b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
	(void)suggested;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
	struct mconn *c = st->data;
	struct http_request req;

	if (n == 0 || c->answered)
		return;
	if (n < 0) {
		conn_close(c); /* EOF before a whole request, or an error */
		return;
	}
	c->len += (size_t)n;
	switch (http_parse(c->buf, c->len, sizeof(c->buf), &req)) {
	case HTTP_NEED_MORE:
		return;
	case HTTP_COMPLETE:
		handle(c, &req);
		return;
	case HTTP_TOO_LARGE:
		respond(c, 431, NULL, NULL, 0, NULL);
		return;
	case HTTP_BAD_VERSION:
		respond(c, 505, NULL, NULL, 0, NULL);
		return;
	case HTTP_BAD:
		respond(c, 400, NULL, NULL, 0, NULL);
		return;
	}
}

static int stream_init(struct mserver *s, union stream *u)
{
	return s->addr.is_unix ? uv_pipe_init(&s->d->loop, &u->pipe, 0) : uv_tcp_init(&s->d->loop, &u->tcp);
}

static void accept_one(struct mserver *s)
{
	struct mconn *c;
	int r;

	if (s->nconns >= METRICS_MAX_CONNS) {
		s->backlog = true; /* libuv stops polling the listener until we accept */
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->srv = s;
	if (stream_init(s, &c->h) < 0) {
		free(c);
		return;
	}
	c->h.handle.data = c;
	c->handles = 1;
	r = uv_accept(&s->l.stream, &c->h.stream);
	if (r < 0) {
		uv_close(&c->h.handle, conn_handle_closed);
		return;
	}
	uv_timer_init(&s->d->loop, &c->timer);
	c->timer.data = c;
	c->handles = 2;
	list_add_tail(&s->conns, &c->link);
	s->nconns++;
	uv_timer_start(&c->timer, on_deadline, METRICS_DEADLINE_MS, 0);
	if (uv_read_start(&c->h.stream, on_alloc, on_read) < 0)
		conn_close(c);
}

static void on_connection(uv_stream_t *l, int status)
{
	struct mserver *s = l->data;

	if (status < 0) {
		log_warn("metrics: accept failed: %s", uv_strerror(status));
		return;
	}
	accept_one(s);
}

/* A unix socket path: refuse what is not a socket, take over a stale one
 * (nobody answers on it), refuse a live one. */
static int unix_prepare(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, r;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		log_error("metrics.listen: %s exists and is not a socket; move it away or choose another path", path);
		return -EEXIST;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (r == 0) {
		log_error("metrics.listen: something already listens on %s; stop it or choose another path", path);
		return -EADDRINUSE;
	}
	unlink(path);
	return 0;
}

static int listen_on(struct mserver *s)
{
	const struct config *cfg = s->d->cfg;
	int r;

	if (s->addr.is_unix) {
		mode_t old;

		r = unix_prepare(s->addr.path);
		if (r < 0)
			return r;
		/* Nobody may connect before the mode and group are right. */
		old = umask(0177);
		r = uv_pipe_bind(&s->l.pipe, s->addr.path);
		umask(old);
		if (r < 0)
			return r;
		s->bound = true;
		if (chmod(s->addr.path, cfg->socket_mode) < 0 ||
		    (cfg->socket_group && chown(s->addr.path, (uid_t)-1, cfg->socket_gid) < 0))
			return -errno;
	} else {
		struct sockaddr_storage sa;
		int len = sizeof(sa);
		char ip[INET6_ADDRSTRLEN] = "?";

		r = uv_tcp_bind(&s->l.tcp, (const struct sockaddr *)&s->addr.sa, 0);
		if (r < 0)
			return r;
		r = uv_listen(&s->l.stream, 64, on_connection);
		if (r < 0)
			return r;
		/* The port the kernel gave (it picks one for port 0). */
		r = uv_tcp_getsockname(&s->l.tcp, (struct sockaddr *)&sa, &len);
		if (r < 0)
			return r;
		if (sa.ss_family == AF_INET6) {
			const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&sa;

			inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
			snprintf(s->where, sizeof(s->where), "[%s]:%u", ip, ntohs(in6->sin6_port));
		} else {
			const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;

			inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
			snprintf(s->where, sizeof(s->where), "%s:%u", ip, ntohs(in->sin_port));
		}
		return 0;
	}
	snprintf(s->where, sizeof(s->where), "%s", s->addr.path);
	return uv_listen(&s->l.stream, 64, on_connection);
}

const char *metrics_listening(void)
{
	return server && !server->closing && server->where[0] ? server->where : NULL;
}

int metrics_start(struct daemon *d)
{
	const char *spec = d->cfg->metrics_listen;
	char why[160];
	struct mserver *s;
	int r;

	if (!spec)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->d = d;
	list_init(&s->conns);
	r = metrics_addr_parse(spec, &s->addr, why, sizeof(why));
	if (r < 0) {
		log_error("metrics.listen: \"%s\" %s", spec, why);
		free(s);
		return r;
	}
	r = stream_init(s, &s->l);
	if (r < 0) {
		free(s);
		return r;
	}
	s->l.handle.data = s;
	server = s;
	r = listen_on(s);
	if (r < 0) {
		log_error("metrics.listen: cannot listen on %s: %s (change metrics.listen, or free the port)", spec,
			  uv_strerror(r));
		metrics_stop(d);
		return r;
	}
	log_info("metrics: serving http://%s/metrics%s", server->where,
		 s->addr.loopback ? "" : " to remote hosts (metrics.allow_remote)");
	return 0;
}

static void server_closed(uv_handle_t *h)
{
	free(h->data);
}

void metrics_stop(struct daemon *d)
{
	struct mserver *s = server;
	struct list *p, *t;

	if (!s || s->closing)
		return;
	s->closing = true;
	list_for_each_safe(p, t, &s->conns)
		conn_close(list_entry(p, struct mconn, link));
	if (s->bound)
		unlink(s->addr.path);
	uv_close(&s->l.handle, server_closed);
	server = NULL;
	(void)d;
}
