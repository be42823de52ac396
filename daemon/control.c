/* SPDX-License-Identifier: MIT */
/*
 * The control plane: length-prefixed JSON frames on a unix stream socket
 * (spw-proto.h). Sockets are non-blocking and every frame is reassembled
 * incrementally, so a client that sends half a frame stalls only itself.
 * A client gets exactly one reply per request; while a reply is still
 * queued the daemon reads nothing more from it, which bounds what a client
 * that never reads can make the daemon hold to one reply.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "region.h"
#include "swap.h"

#define FRAMES_PER_WAKEUP 16
#define MAX_RX_FDS 16

static void client_event(uv_poll_t *h, int status, int events);

static void client_watch(struct client *c)
{
	int ev = c->tx ? UV_WRITABLE : UV_READABLE | UV_DISCONNECT;

	if (c->closing)
		return;
	if (c->attaching && !c->tx)
		uv_poll_stop(&c->poll);
	else
		uv_poll_start(&c->poll, ev, client_event);
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
	if (c->session && c->session->attaching) {
		/* The threadpool still builds its region: it is freed when that
		 * work comes back (control_attach_done with no owner). */
		log_info("attach %s: client %u (uid %u, pid %d) %s while its region was being prepared",
			 c->session->name, c->id, (unsigned)c->uid, (int)c->pid, why);
		c->session->owner = NULL;
		c->session = NULL;
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

void control_close_all(struct daemon *d)
{
	struct list *p, *t;

	list_for_each_safe(p, t, &d->clients)
		control_client_close(list_entry(p, struct client, link), "detached: spillwayd is shutting down");
}

/* Writes what it can of the queued reply. Returns 0 or a negative errno
 * (the client is gone). */
static int flush_tx(struct client *c)
{
	while (c->tx_off < c->tx_len) {
		union {
			char buf[CMSG_SPACE(sizeof(int) * SPW_PROTO_MAX_FDS)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { .iov_base = c->tx + c->tx_off, .iov_len = c->tx_len - c->tx_off };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t r;

		if (c->tx_nfds) {
			struct cmsghdr *cm;

			memset(&ctl, 0, sizeof(ctl));
			msg.msg_control = ctl.buf;
			msg.msg_controllen = CMSG_SPACE(sizeof(int) * c->tx_nfds);
			cm = CMSG_FIRSTHDR(&msg);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * c->tx_nfds);
			memcpy(CMSG_DATA(cm), c->tx_fds, sizeof(int) * c->tx_nfds);
		}
		r = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				client_watch(c);
				return 0;
			}
			return -errno;
		}
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
		client_watch(c);
	return 0;
}

static void send_json(struct client *c, cJSON *msg, const int *fds, unsigned nfds)
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

static cJSON *reply(const char *type)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "type", type);
	cJSON_AddTrueToObject(o, "ok");
	return o;
}

static void reply_error(struct client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reply_error(struct client *c, int err, const char *fmt, ...)
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
	send_json(c, o, NULL, 0);
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
	reply_error(c, err, "%s; closing the connection", c->close_reason);
}

/* A non-negative integer field. Returns 1 when present and valid, 0 when
 * absent and optional, -EINVAL with a message otherwise. */
static int field_uint(const cJSON *msg, const char *type, const char *key, bool required, uint64_t max,
		      uint64_t *out, char *err, size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
	double x;

	if (!v) {
		if (!required)
			return 0;
		snprintf(err, errlen, "%s: \"%s\" is missing", type, key);
		return -EINVAL;
	}
	if (!cJSON_IsNumber(v)) {
		snprintf(err, errlen, "%s: \"%s\" must be an integer", type, key);
		return -EINVAL;
	}
	x = v->valuedouble;
	if (!isfinite(x) || x < 0 || floor(x) != x || x > (double)max || x > 9007199254740992.0) {
		snprintf(err, errlen, "%s: \"%s\" is %.17g; expected an integer from 0 to %llu", type, key, x,
			 (unsigned long long)(max > 9007199254740992ull ? 9007199254740992ull : max));
		return -EINVAL;
	}
	*out = (uint64_t)x;
	return 1;
}

static int field_string(const cJSON *msg, const char *type, const char *key, const char **out, char *err,
			size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);

	if (!cJSON_IsString(v)) {
		snprintf(err, errlen, "%s: \"%s\" %s", type, key, v ? "must be a string" : "is missing");
		return -EINVAL;
	}
	*out = v->valuestring;
	return 0;
}

static int field_bool(const cJSON *msg, const char *type, const char *key, bool *out, char *err, size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);

	if (!v) {
		*out = false;
		return 0;
	}
	if (!cJSON_IsBool(v)) {
		snprintf(err, errlen, "%s: \"%s\" must be true or false", type, key);
		return -EINVAL;
	}
	*out = cJSON_IsTrue(v);
	return 0;
}

static void do_hello(struct client *c, const cJSON *msg)
{
	uint64_t magic = 0, major = 0, minor = 0, features = 0;
	char err[256];
	cJSON *o;

	if (c->hello) {
		reply_error(c, EPROTO, "hello: this connection already said hello");
		return;
	}
	if (field_uint(msg, "hello", "magic", true, UINT32_MAX, &magic, err, sizeof(err)) < 0 ||
	    field_uint(msg, "hello", "major", true, UINT16_MAX, &major, err, sizeof(err)) < 0 ||
	    field_uint(msg, "hello", "minor", true, UINT16_MAX, &minor, err, sizeof(err)) < 0 ||
	    field_uint(msg, "hello", "features", false, UINT32_MAX, &features, err, sizeof(err)) < 0) {
		reply_error(c, EINVAL, "%s", err);
		return;
	}
	if (magic != SPW_PROTO_MAGIC) {
		reply_error(c, EPROTO, "hello: magic 0x%08llx is not spillway's (0x%08x); is this a spillway client?",
			    (unsigned long long)magic, SPW_PROTO_MAGIC);
		return;
	}
	if (major != SPW_PROTO_MAJOR) {
		reply_error(c, EPROTONOSUPPORT,
			    "hello: protocol version mismatch: the client speaks %llu.%llu, spillwayd %s speaks %d.%d; "
			    "use a libspillway and spillwayd of the same major version",
			    (unsigned long long)major, (unsigned long long)minor, SPW_VERSION, SPW_PROTO_MAJOR,
			    SPW_PROTO_MINOR);
		return;
	}
	c->hello = true;
	/* SWAP only with swap.dirs, and only when asked (older clients refuse
	 * bits they did not ask for); swappable tensors do not require it. */
	c->features = (uint32_t)features & (SPW_FEAT_RING_POLL | (c->d->nswap_dirs ? SPW_FEAT_SWAP : 0u));
	log_debug("client %u (uid %u, pid %d): hello %llu.%llu, features 0x%llx granted 0x%x", c->id, (unsigned)c->uid,
		  (int)c->pid, (unsigned long long)major, (unsigned long long)minor, (unsigned long long)features,
		  c->features);
	o = reply(SPW_MSG_HELLO);
	cJSON_AddNumberToObject(o, "magic", SPW_PROTO_MAGIC);
	cJSON_AddNumberToObject(o, "major", SPW_PROTO_MAJOR);
	cJSON_AddNumberToObject(o, "minor", SPW_PROTO_MINOR);
	cJSON_AddNumberToObject(o, "features", c->features);
	send_json(c, o, NULL, 0);
}

/* The swap a session gets when its attach names none: swap.session_bytes,
 * or less when the directories have less room, split evenly (a drive
 * short of space would otherwise refuse an attach that never asked for
 * swap). 0 when not even one page per directory fits. */
static uint64_t swap_default(struct daemon *d, const char *name, uint32_t page_size)
{
	uint64_t want = d->cfg->swap_session_bytes, per = UINT64_MAX, unit = (uint64_t)page_size * d->nswap_dirs;
	char a[32], b[32], m[32];
	const char *short_dir = NULL;

	for (unsigned i = 0; i < d->nswap_dirs; i++) {
		const struct swap_dir *sd = &d->swap_dirs[i];
		struct statvfs v;
		uint64_t room = 0;

		if (statvfs(sd->path, &v) == 0)
			room = (uint64_t)v.f_bavail * v.f_frsize;
		if (sd->max_bytes) {
			int64_t used = swap_dir_used(sd->path);
			uint64_t left = used >= 0 && (uint64_t)used < sd->max_bytes ? sd->max_bytes - (uint64_t)used : 0;

			if (left < room)
				room = left;
		}
		if (room < per) {
			per = room;
			short_dir = sd->path;
		}
	}
	/* Keep 1% of the smallest directory's room: fallocate needs some
	 * metadata blocks of its own. */
	per -= per / 100;
	if (per / page_size * unit < want) {
		uint64_t fits = per / page_size * unit;

		/* Exact byte counts too: 1.98 GiB prints as "2.0 GiB". */
		log_info("attach %s: swap dir %s has room for %s (%llu bytes, 1%% kept for metadata); the session "
			 "gets %s (%llu bytes) of swap instead of swap.session_bytes (%s)",
			 name, short_dir, format_bytes(per, a, sizeof(a)), (unsigned long long)per,
			 format_bytes(fits, b, sizeof(b)), (unsigned long long)fits, format_bytes(want, m, sizeof(m)));
		want = fits;
	}
	return want;
}

static void do_attach(struct client *c, const cJSON *msg)
{
	struct daemon *d = c->d;
	const struct config *cfg = d->cfg;
	const char *name;
	uint64_t bytes = 0, page_size = cfg->session_page_size, swap = 0;
	bool persistent = false;
	int have_swap;
	char err[768], a[32], b[32], m[32], u[32];
	struct session *s, *other;
	int r;

	if (c->session) {
		reply_error(c, EISCONN, "attach: this connection is already attached to session %s; detach first",
			    c->session->name);
		return;
	}
	if (field_string(msg, "attach", "session", &name, err, sizeof(err)) < 0 ||
	    field_uint(msg, "attach", "region_bytes", true, UINT64_MAX, &bytes, err, sizeof(err)) < 0 ||
	    field_uint(msg, "attach", "page_size", false, UINT32_MAX, &page_size, err, sizeof(err)) < 0 ||
	    field_bool(msg, "attach", "persistent", &persistent, err, sizeof(err)) < 0 ||
	    (have_swap = field_uint(msg, "attach", "swap_bytes", false, 1ull << 50, &swap, err, sizeof(err))) < 0) {
		reply_error(c, EINVAL, "%s", err);
		return;
	}
	if (!spw_proto_session_name_valid(name)) {
		reply_error(c, EINVAL, "attach: session name is not 1..%d characters of [A-Za-z0-9._/-] not starting "
			    "with '/' or '.' and without \"..\"", SPW_PROTO_MAX_SESSION_NAME);
		return;
	}
	if (persistent) {
		reply_error(c, EOPNOTSUPP, "attach %s: persistent sessions (that outlive their client) are not "
			    "supported by this spillwayd yet; attach without \"persistent\"", name);
		return;
	}
	if (!spw_proto_page_size_valid(page_size)) {
		reply_error(c, EINVAL, "attach %s: page_size %llu is not a power of two from 64 KiB to 64 MiB", name,
			    (unsigned long long)page_size);
		return;
	}
	if (bytes == 0) {
		reply_error(c, EINVAL, "attach %s: region_bytes is 0; ask for at least one page (%s)", name,
			    format_bytes(page_size, a, sizeof(a)));
		return;
	}
	/* Whole slots; bytes <= 2^53, so rounding up cannot overflow. */
	bytes = (bytes + page_size - 1) / page_size * page_size;
	other = session_find(d, name);
	if (other && other->uid != c->uid && c->uid != 0) {
		reply_error(c, EPERM, "attach %s: the session belongs to uid %u; uid %u may not attach to it", name,
			    (unsigned)other->uid, (unsigned)c->uid);
		return;
	}
	if (other) {
		reply_error(c, EBUSY, "attach %s: the session is already attached by pid %d; pick another name or "
			    "detach that one first", name, (int)other->pid);
		return;
	}
	if (bytes > cfg->pool_session_max_bytes) {
		reply_error(c, EDQUOT,
			    "attach %s: region %s would exceed pool.session_max_bytes (%s; pool.max_bytes is %s, %s in "
			    "use); raise pool.session_max_bytes in %s or ask for less",
			    name, format_bytes(bytes, a, sizeof(a)), format_bytes(cfg->pool_session_max_bytes, b, sizeof(b)),
			    format_bytes(cfg->pool_max_bytes, m, sizeof(m)), format_bytes(d->used_bytes, u, sizeof(u)),
			    cfg->origin);
		return;
	}
	if (d->used_bytes > cfg->pool_max_bytes || bytes > cfg->pool_max_bytes - d->used_bytes) {
		reply_error(c, ENOSPC,
			    "attach %s: region %s would exceed pool.max_bytes (%s, %s in use); raise pool.max_bytes in "
			    "%s or ask for less",
			    name, format_bytes(bytes, a, sizeof(a)), format_bytes(cfg->pool_max_bytes, m, sizeof(m)),
			    format_bytes(d->used_bytes, u, sizeof(u)), cfg->origin);
		return;
	}
	if (have_swap && swap && !d->nswap_dirs) {
		reply_error(c, EOPNOTSUPP, "attach %s: swap_bytes asks for %s of swap, but no swap directories are "
			    "configured; set swap.dirs in %s and restart spillwayd, or attach without swap_bytes", name,
			    format_bytes(swap, a, sizeof(a)), cfg->origin);
		return;
	}
	if (!have_swap)
		swap = d->nswap_dirs ? swap_default(d, name, (uint32_t)page_size) : 0;
	r = session_attach(d, c, name, bytes, (uint32_t)page_size, swap, err, sizeof(err));
	if (r < 0) {
		reply_error(c, -r, "%s", err);
		return;
	}
	s = c->session;
	s->uid = c->uid;
	s->pid = c->pid;
	c->attaching = true;
	client_watch(c);
}

void control_attach_done(struct session *s, int r)
{
	struct client *c = s->owner;
	char a[32], b[32], sw[32];
	int fds[SPW_ATTACH_NFDS];
	cJSON *o;

	if (!c) {
		log_info("attach %s: released, its client is gone", s->name);
		session_free(s);
		return;
	}
	c->attaching = false;
	if (r < 0) {
		char err[sizeof(s->work_err)];

		memcpy(err, s->work_err, sizeof(err));
		c->session = session_free(s);
		reply_error(c, -r, "%s", err);
		return;
	}
	log_info("attach %s: client %u (uid %u, pid %d): %s in %u slots of %s, %s, %s, NUMA node %d, swap %s", s->name,
		 c->id, (unsigned)c->uid, (int)c->pid, format_bytes(s->bytes, a, sizeof(a)), s->nslots,
		 format_bytes(s->page_size, b, sizeof(b)), s->region->locked ? "locked" : "NOT locked",
		 s->region->hugepages ? "hugetlb pages" : "ordinary pages", s->region->numa_node,
		 format_bytes(s->swap_bytes, sw, sizeof(sw)));
	daemon_update_status(c->d);

	o = reply(SPW_MSG_ATTACH);
	cJSON_AddStringToObject(o, "session", s->name);
	cJSON_AddNumberToObject(o, "region_bytes", (double)s->region->bytes);
	cJSON_AddNumberToObject(o, "page_size", s->page_size);
	cJSON_AddNumberToObject(o, "slots", s->nslots);
	cJSON_AddNumberToObject(o, "sq_entries", s->layout.sq_entries);
	cJSON_AddNumberToObject(o, "cq_entries", s->layout.cq_entries);
	cJSON_AddNumberToObject(o, "rings_bytes", (double)s->layout.bytes);
	cJSON_AddBoolToObject(o, "locked", s->region->locked);
	cJSON_AddBoolToObject(o, "hugepages", s->region->hugepages);
	cJSON_AddNumberToObject(o, "numa_node", s->region->numa_node);
	cJSON_AddNumberToObject(o, "swap_bytes", (double)s->swap_bytes);
	fds[SPW_ATTACH_FD_REGION] = s->region->fd;
	fds[SPW_ATTACH_FD_RINGS] = s->rings_fd;
	fds[SPW_ATTACH_FD_SQ_EVT] = s->sq_evt;
	fds[SPW_ATTACH_FD_CQ_EVT] = s->cq_evt;
	send_json(c, o, fds, SPW_ATTACH_NFDS);
}

static void do_register(struct client *c, const cJSON *msg)
{
	const char *name, *kind = "resident";
	uint64_t bytes = 0;
	bool persistent = false, swappable;
	uint32_t id, npages;
	char err[768], a[32];
	const cJSON *k;
	cJSON *o;
	int r;

	if (!c->session) {
		reply_error(c, ENOTCONN, "register: attach to a session first");
		return;
	}
	if (field_string(msg, "register", "name", &name, err, sizeof(err)) < 0 ||
	    field_uint(msg, "register", "bytes", true, UINT64_MAX, &bytes, err, sizeof(err)) < 0 ||
	    field_bool(msg, "register", "persistent", &persistent, err, sizeof(err)) < 0) {
		reply_error(c, EINVAL, "%s", err);
		return;
	}
	k = cJSON_GetObjectItemCaseSensitive(msg, "kind");
	if (k && !cJSON_IsString(k)) {
		reply_error(c, EINVAL, "register: \"kind\" must be \"resident\" or \"swappable\"");
		return;
	}
	if (k)
		kind = k->valuestring;
	if (!spw_proto_tensor_name_valid(name)) {
		reply_error(c, EINVAL, "register: tensor name is not 1..%d printable ASCII characters",
			    SPW_PROTO_MAX_TENSOR_NAME);
		return;
	}
	swappable = !strcmp(kind, "swappable");
	if (swappable && !c->d->nswap_dirs) {
		reply_error(c, EOPNOTSUPP, "register %s: swappable tensors need swap directories on NVMe, and none are "
			    "configured; set swap.dirs in %s and restart spillwayd, or register it as \"resident\"",
			    name, c->d->cfg->origin);
		return;
	}
	if (!swappable && strcmp(kind, "resident")) {
		reply_error(c, EINVAL, "register %s: kind must be \"resident\" or \"swappable\"", name);
		return;
	}
	if (persistent) {
		reply_error(c, EOPNOTSUPP, "register %s: persistent tensors are not supported by this spillwayd yet; "
			    "register it without \"persistent\"", name);
		return;
	}
	if (bytes == 0) {
		reply_error(c, EINVAL, "register %s: bytes is 0; a tensor holds at least one byte", name);
		return;
	}
	r = session_register(c->session, name, bytes, swappable, &id, &npages, err, sizeof(err));
	if (r < 0) {
		reply_error(c, -r, "%s", err);
		return;
	}
	log_debug("register %s in %s: tensor %u, %s %s in %u pages", name, c->session->name, id, kind,
		  format_bytes(bytes, a, sizeof(a)), npages);
	o = reply(SPW_MSG_REGISTER);
	cJSON_AddNumberToObject(o, "tensor", id);
	cJSON_AddNumberToObject(o, "pages", npages);
	send_json(c, o, NULL, 0);
}

static void do_unregister(struct client *c, const cJSON *msg)
{
	uint64_t id = 0;
	char err[512];
	int r;

	if (!c->session) {
		reply_error(c, ENOTCONN, "unregister: attach to a session first");
		return;
	}
	if (field_uint(msg, "unregister", "tensor", true, UINT32_MAX, &id, err, sizeof(err)) < 0) {
		reply_error(c, EINVAL, "%s", err);
		return;
	}
	r = session_unregister(c->session, (uint32_t)id, err, sizeof(err));
	if (r < 0) {
		reply_error(c, -r, "%s", err);
		return;
	}
	log_debug("unregister in %s: tensor %llu", c->session->name, (unsigned long long)id);
	send_json(c, reply(SPW_MSG_UNREGISTER), NULL, 0);
}

static void do_detach(struct client *c)
{
	char a[32];

	if (!c->session) {
		reply_error(c, ENOTCONN, "detach: this connection is not attached to a session");
		return;
	}
	log_info("detach %s: client %u (uid %u, pid %d) asked; released %s", c->session->name, c->id,
		 (unsigned)c->uid, (int)c->pid, format_bytes(c->session->bytes, a, sizeof(a)));
	c->session = session_free(c->session);
	daemon_update_status(c->d);
	send_json(c, reply(SPW_MSG_DETACH), NULL, 0);
}

static void handle_frame(struct client *c, const char *buf, uint32_t len)
{
	cJSON *msg = cJSON_ParseWithLength(buf, len);
	const cJSON *type;

	if (!msg || !cJSON_IsObject(msg)) {
		reply_error(c, EBADMSG, "the message is not a JSON object");
		goto out;
	}
	type = cJSON_GetObjectItemCaseSensitive(msg, "type");
	if (!cJSON_IsString(type)) {
		reply_error(c, EBADMSG, "the message has no string \"type\"");
		goto out;
	}
	if (!strcmp(type->valuestring, SPW_MSG_HELLO)) {
		do_hello(c, msg);
		goto out;
	}
	if (!c->hello) {
		reply_error(c, EPROTO, "\"%.32s\" before hello; send hello first", type->valuestring);
		goto out;
	}
	if (!strcmp(type->valuestring, SPW_MSG_ATTACH))
		do_attach(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_REGISTER))
		do_register(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_UNREGISTER))
		do_unregister(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_DETACH))
		do_detach(c);
	else
		reply_error(c, EOPNOTSUPP, "unknown message type \"%.32s\"", type->valuestring);
out:
	cJSON_Delete(msg);
}

/* recv() that closes every descriptor a client attaches: the daemon never
 * takes descriptors from clients. */
static ssize_t recv_some(struct client *c, void *buf, size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_RX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	ssize_t r;

	do
		r = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int fd;

			for (size_t i = 0; i < n; i++) {
				memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				close(fd);
			}
			log_debug("client %u: sent %zu descriptors; closed them", c->id, n);
		}
	}
	return r;
}

static void read_frames(struct client *c)
{
	/* One request at a time: nothing more is read while a reply is queued
	 * or an attach is being prepared (replies stay in order). */
	for (int frames = 0; frames < FRAMES_PER_WAKEUP && !c->closing && !c->tx && !c->attaching;) {
		struct spw_proto_frame_hdr h;
		bool in_hdr = c->hdr_len < sizeof(c->hdr);
		void *dst = in_hdr ? (void *)(c->hdr + c->hdr_len) : (void *)(c->payload + c->payload_got);
		size_t want = in_hdr ? sizeof(c->hdr) - c->hdr_len : c->payload_len - c->payload_got;
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
			c->payload = malloc((size_t)h.len + 1);
			if (!c->payload) {
				control_client_close(c, "out of memory");
				return;
			}
			c->payload_len = h.len;
			c->payload_got = 0;
			continue;
		}
		c->payload_got += (uint32_t)r;
		if (c->payload_got < c->payload_len)
			continue;
		c->payload[c->payload_len] = '\0';
		handle_frame(c, c->payload, c->payload_len);
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
	if (!c->closing && !c->tx && !c->attaching && (events & (UV_READABLE | UV_DISCONNECT)))
		read_frames(c);
}

static void client_new(struct daemon *d, int fd)
{
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t len = sizeof(cred);
	struct client *c;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		log_warn("control: cannot read the peer credentials of a new connection: %s", strerror(errno));
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c || uv_poll_init(&d->loop, &c->poll, fd) < 0) {
		log_warn("control: refusing a connection from pid %d: out of memory", (int)cred.pid);
		free(c);
		close(fd);
		return;
	}
	c->d = d;
	c->fd = fd;
	c->poll.data = c;
	c->id = ++d->next_client_id;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->pid = cred.pid;
	list_add_tail(&d->clients, &c->link);
	log_debug("client %u (uid %u, pid %d): connected", c->id, (unsigned)c->uid, (int)c->pid);
	client_watch(c);
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct daemon *d = h->data;

	for (int i = 0; i < 16; i++) {
		int fd = daemon_accept(d, d->control_fd);

		if (fd < 0) {
			if (fd == -EINTR || fd == -ECONNABORTED)
				continue;
			if (fd != -EAGAIN)
				log_warn("control: accept failed: %s", strerror(-fd));
			return;
		}
		client_new(d, fd);
	}
}

int control_listen(struct daemon *d)
{
	int r = daemon_socket_path(d, "control.sock", d->control_path, sizeof(d->control_path));

	if (r < 0)
		return r;
	r = daemon_listen_unix(d, d->control_path, d->cfg->socket_mode, true);
	if (r < 0)
		return r;
	d->control_fd = r;
	r = uv_poll_init(&d->loop, &d->control_poll, d->control_fd);
	if (r < 0)
		return r;
	d->control_poll.data = d;
	return uv_poll_start(&d->control_poll, UV_READABLE, on_accept);
}
