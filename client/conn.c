/* SPDX-License-Identifier: MIT */
/*
 * conn.c: the control plane: connecting, HELLO, attach/detach, tensor
 * registration. Rare calls; every reply is checked field by field.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cjson/cJSON.h>

#include "client-private.h"
#include "util/json.h"
#include "util/unixsock.h"

SPW_EXPORT int spw_client_new(const struct spw_client_opts *opts, spw_client **ret)
{
	struct spw_client_opts o = { .size = sizeof(o) };
	spw_client *c;
	int r;

	if (!ret)
		return -EINVAL;
	/* No client yet to hold the sentence: the errno says it. */
	if (opts && (r = spw__opts_in(&o, sizeof(o), opts, SPW__CLIENT_OPTS_SIZE_VER0,
				      "struct spw_client_opts", NULL, 0)) < 0)
		return r;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->rxbuf = malloc(SPW_PROTO_MAX_FRAME + 1);
	if (!c->rxbuf) {
		free(c);
		return -ENOMEM;
	}
	c->ctl = -1;
	c->region_fd = -1;
	c->rings_fd = -1;
	c->ring.sq_evt = -1;
	c->ring.cq_evt = -1;
	c->ring.wake_fd = -1;
	c->spin_us = o.spin_us ? o.spin_us : SPW__DEFAULT_SPIN_US;
	c->reply_timeout_ms = o.reply_timeout_ms ? o.reply_timeout_ms : SPW__DEFAULT_REPLY_TIMEOUT_MS;
	if (c->reply_timeout_ms > INT_MAX)
		c->reply_timeout_ms = INT_MAX;
	if (o.trace_path && *o.trace_path && !(c->trace_path = strdup(o.trace_path))) {
		free(c->rxbuf);
		free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Releases everything attach set up; safe on a half-built attach. */
void spw__release_session(spw_client *c)
{
	if (c->region && c->region != MAP_FAILED)
		munmap(c->region, c->region_bytes);
	if (c->rings && c->rings != MAP_FAILED)
		munmap(c->rings, c->rings_bytes);
	c->region = NULL;
	c->rings = NULL;
	close_fd(&c->region_fd);
	close_fd(&c->rings_fd);
	close_fd(&c->ring.sq_evt);
	close_fd(&c->ring.cq_evt);
	spw__ring_fini(&c->ring);
	c->attached = false;
	c->slots = 0;
}

SPW_EXPORT spw_client *spw_client_free(spw_client *c)
{
	if (!c)
		return NULL;
	spw__release_session(c);
	close_fd(&c->ctl);
	free(c->trace_path);
	free(c->rxbuf);
	free(c);
	return NULL;
}

/* A reply's integer member: absent, fractional, negative or too big for
 * the field is a daemon speaking another protocol. */
static int json_u64(const cJSON *o, const char *key, uint64_t *out)
{
	return json_uint(cJSON_GetObjectItemCaseSensitive(o, key), JSON_UINT_MAX, out) < 0 ? -EPROTO : 0;
}

static int json_u32(const cJSON *o, const char *key, uint32_t *out)
{
	uint64_t v;

	if (json_uint(cJSON_GetObjectItemCaseSensitive(o, key), UINT32_MAX, &v) < 0)
		return -EPROTO;
	*out = (uint32_t)v;
	return 0;
}

/* Booleans may come as true/false or 0/1; absent means false. */
static bool json_flag(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	return cJSON_IsNumber(v) && v->valuedouble != 0;
}

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/*
 * Sends req (consumed) and waits for its reply. On success *ret_reply holds
 * the parsed reply, whose "type" equals type and "ok" is true; received
 * descriptors land in fds (up to *nfds, updated), and a reply that brings
 * descriptors when fds is NULL is a protocol error. A refusal becomes the
 * daemon's errno with its message as the last error.
 */
static int request_for(spw_client *c, cJSON *req, const char *type, cJSON **ret_reply, int *fds, unsigned *nfds,
		       uint32_t timeout_ms)
{
	/* Ask for as many descriptors as a frame may carry, so that a reply
	 * bringing more than expected is seen and refused, not trimmed. */
	unsigned cap = nfds ? *nfds : 0, got = SPW_PROTO_MAX_FDS;
	int fdbuf[SPW_PROTO_MAX_FDS];
	struct pollfd pfd = { .fd = c->ctl, .events = POLLIN };
	cJSON *reply = NULL;
	const cJSON *t, *ok;
	char *text;
	int r;

	if (nfds)
		*nfds = 0;
	text = req ? cJSON_PrintUnformatted(req) : NULL;
	cJSON_Delete(req);
	if (!text)
		return spw__error(c, -ENOMEM, "%s: out of memory building the request", type);
	r = spw_proto_send(c->ctl, text, (uint32_t)strlen(text), NULL, 0);
	free(text);
	if (r == -EPIPE || r == -ECONNRESET)
		return spw__dead(c, spw__error(c, -ECONNRESET,
					       "%s: spillwayd at %s closed the connection (the daemon exited or was killed)",
					       type, c->socket_path));
	if (r < 0)
		return spw__dead(c, spw__error(c, r, "%s: sending to spillwayd at %s: %s", type, c->socket_path,
					       spw_strerror(r)));

	do
		r = poll(&pfd, 1, (int)timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		/* A late reply would be taken for the answer to the next
		 * request, so the connection cannot be used again. */
		return spw__dead(c, spw__error(c, -ETIMEDOUT,
					       "%s: spillwayd at %s did not answer within %u ms; the connection was abandoned",
					       type, c->socket_path, timeout_ms));
	if (r < 0)
		return spw__error(c, -errno, "%s: waiting for spillwayd: %s", type, spw_strerror(-errno));

	r = spw_proto_recv(c->ctl, c->rxbuf, SPW_PROTO_MAX_FRAME + 1, fdbuf, &got);
	if (r == 0 || r == -ECONNRESET)
		return spw__dead(c, spw__error(c, -ECONNRESET,
					       "%s: spillwayd at %s closed the connection (the daemon exited, was killed, or refused this client)",
					       type, c->socket_path));
	if (r == -EAGAIN || r == -EWOULDBLOCK)
		return spw__dead(c, spw__error(c, -ETIMEDOUT,
					       "%s: spillwayd at %s stopped in the middle of a reply; the connection was abandoned",
					       type, c->socket_path));
	if (r < 0)
		return spw__dead(c, spw__error(c, r, "%s: bad reply frame from spillwayd: %s", type, spw_strerror(r)));

	reply = cJSON_ParseWithLength(c->rxbuf, (size_t)r);
	if (!reply || !cJSON_IsObject(reply)) {
		r = spw__dead(c, spw__error(c, -EPROTO, "%s: spillwayd's reply is not a JSON object", type));
		goto fail;
	}
	t = cJSON_GetObjectItemCaseSensitive(reply, "type");
	if (cJSON_IsString(t) && !strcmp(t->valuestring, SPW_MSG_ERROR)) {
		const cJSON *msg = cJSON_GetObjectItemCaseSensitive(reply, "message");
		uint32_t e;

		if (json_u32(reply, "errno", &e) < 0 || e == 0 || e >= 4096)
			e = EPROTO;
		r = spw__error(c, -(int)e, "spillwayd refused %s: %s", type,
			       cJSON_IsString(msg) && msg->valuestring[0] ? msg->valuestring : spw_strerror(-(int)e));
		goto fail;
	}
	ok = cJSON_GetObjectItemCaseSensitive(reply, "ok");
	if (!cJSON_IsString(t) || strcmp(t->valuestring, type) || !cJSON_IsTrue(ok)) {
		r = spw__dead(c, spw__error(c, -EPROTO, "%s: spillwayd answered with a reply of another type or without \"ok\": true",
					    type));
		goto fail;
	}
	if (got > cap) {
		r = spw__dead(c, spw__error(c, -EPROTO, "%s: spillwayd passed %u descriptors, expected at most %u",
					    type, got, cap));
		goto fail;
	}
	if (fds)
		memcpy(fds, fdbuf, sizeof(int) * got);
	if (nfds)
		*nfds = got;
	*ret_reply = reply;
	return 0;

fail:
	close_fds(fdbuf, got);
	cJSON_Delete(reply);
	return r;
}

static int request(spw_client *c, cJSON *req, const char *type, cJSON **ret_reply, int *fds, unsigned *nfds)
{
	return request_for(c, req, type, ret_reply, fds, nfds, c->reply_timeout_ms);
}

static int check_connected(spw_client *c);

int spw__request(spw_client *c, cJSON *req, const char *type, cJSON **reply, uint32_t timeout_ms)
{
	int r = check_connected(c);

	if (r < 0) {
		cJSON_Delete(req);
		return r;
	}
	if (timeout_ms < c->reply_timeout_ms)
		timeout_ms = c->reply_timeout_ms;
	return request_for(c, req, type, reply, NULL, NULL, timeout_ms > INT_MAX ? INT_MAX : timeout_ms);
}

static cJSON *new_request(const char *type)
{
	cJSON *o = cJSON_CreateObject();

	if (o && !cJSON_AddStringToObject(o, "type", type)) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

/* cJSON_Add*ToObject return NULL on failure; collecting them here lets a
 * request be built in straight lines and checked once. */
/* What the daemon takes in an ATTACH (control.c: 2^50). */
#define SPW__SWAP_BYTES_MAX (1ull << 50)

static bool add_num(cJSON *o, const char *key, double v)
{
	return o && cJSON_AddNumberToObject(o, key, v);
}

/* A request that succeeded: its reply freed, the last error cleared. */
static int request_done(spw_client *c, cJSON *reply)
{
	cJSON_Delete(reply);
	c->errmsg[0] = '\0';
	return 0;
}

SPW_EXPORT int spw_client_connect(spw_client *c, const char *socket_path)
{
	struct timeval tv;
	cJSON *req, *reply = NULL;
	uint32_t magic, major, minor, features;
	int fd, r;

	if (!c)
		return -EINVAL;
	if (c->ctl >= 0)
		return spw__error(c, -EISCONN, "already connected to spillwayd at %s", c->socket_path);
	if (socket_path) {
		if (strlen(socket_path) >= sizeof(c->socket_path))
			return spw__error(c, -ENAMETOOLONG, "socket path %s is longer than a unix socket address allows",
					  socket_path);
		snprintf(c->socket_path, sizeof(c->socket_path), "%s", socket_path);
	} else {
		r = spw_socket_path(SPW_SOCKET_CONTROL, c->socket_path, sizeof(c->socket_path));
		if (r < 0)
			return spw__error(c, r, "the default control socket path (from SPILLWAY_SOCKET or XDG_RUNTIME_DIR) is too long");
	}

	fd = unix_connect(c->socket_path);
	if (fd == -ENOENT || fd == -ECONNREFUSED)
		return spw__error(c, fd,
				  "no spillwayd listening at %s (%s); start it with 'systemctl start spillwayd' "
				  "or 'spillwayd --config FILE', or set SPILLWAY_SOCKET to its control.sock",
				  c->socket_path, spw_strerror(fd));
	if (fd < 0)
		return spw__error(c, fd, "cannot connect to spillwayd at %s: %s", c->socket_path, spw_strerror(fd));
	/* A backstop for a daemon that stops in the middle of a frame: the
	 * poll() before each reply handles the common case. */
	tv.tv_sec = c->reply_timeout_ms / 1000;
	tv.tv_usec = (c->reply_timeout_ms % 1000) * 1000;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	c->ctl = fd;
	c->dead = false;

	req = new_request(SPW_MSG_HELLO);
	if (!add_num(req, "magic", SPW_PROTO_MAGIC) || !add_num(req, "major", SPW_PROTO_MAJOR) ||
	    !add_num(req, "minor", SPW_PROTO_MINOR) || !add_num(req, "features", SPW_FEAT_RING_POLL | SPW_FEAT_UNPIN_COPY)) {
		cJSON_Delete(req);
		r = spw__error(c, -ENOMEM, "hello: out of memory");
		goto fail;
	}
	r = request(c, req, SPW_MSG_HELLO, &reply, NULL, NULL);
	if (r < 0)
		goto fail;
	if (json_u32(reply, "magic", &magic) < 0 || json_u32(reply, "major", &major) < 0 ||
	    json_u32(reply, "minor", &minor) < 0 || json_u32(reply, "features", &features) < 0 ||
	    magic != SPW_PROTO_MAGIC) {
		r = spw__error(c, -EPROTO, "hello: %s does not answer like spillwayd (bad magic or missing fields)",
			       c->socket_path);
		goto fail;
	}
	if (major != SPW_PROTO_MAJOR) {
		r = spw__error(c, -EPROTONOSUPPORT,
			       "hello: spillwayd at %s speaks protocol %u.%u, this library %d.%d; install matching versions",
			       c->socket_path, major, minor, SPW_PROTO_MAJOR, SPW_PROTO_MINOR);
		goto fail;
	}
	if (features & ~(uint32_t)(SPW_FEAT_RING_POLL | SPW_FEAT_UNPIN_COPY)) {
		r = spw__error(c, -EPROTO, "hello: spillwayd granted features 0x%x that were not asked for", features);
		goto fail;
	}
	c->features = features;
	return request_done(c, reply);

fail:
	cJSON_Delete(reply);
	close_fd(&c->ctl);
	c->dead = false;
	return r;
}

static int check_connected(spw_client *c)
{
	if (c->dead)
		return c->dead_err;
	if (c->ctl < 0)
		return spw__error(c, -ENOTCONN, "not connected to spillwayd (call spw_client_connect first)");
	return 0;
}

/* A control request about the attached session: connected and attached. */
static int check_session(spw_client *c, const char *verb)
{
	int r = check_connected(c);

	if (r < 0)
		return r;
	if (!c->attached)
		return spw__error(c, -ENOTCONN, "%s: no session attached", verb);
	return 0;
}

/* Checks a memfd the daemon passed: a regular file of at least min bytes
 * that can no longer shrink (a shrinking file would turn our accesses into
 * SIGBUS). */
static int check_memfd(spw_client *c, int fd, const char *what, uint64_t min)
{
	struct stat st;
	int seals;

	if (fstat(fd, &st) < 0)
		return spw__error(c, -errno, "attach %s: fstat of the %s memfd: %s", c->session, what,
				  spw_strerror(-errno));
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < min)
		return spw__error(c, -EPROTO,
				  "attach %s: the %s memfd from spillwayd holds %lld bytes, the reply promised %llu",
				  c->session, what, (long long)st.st_size, (unsigned long long)min);
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return spw__error(c, -EPROTO, "attach %s: the %s memfd from spillwayd is not sealed against shrinking",
				  c->session, what);
	return 0;
}

/* The attach reply's persistence fields; absent ones (an older daemon)
 * read as a session that is not persistent. */
static void persist_from_reply(spw_client *c, const cJSON *reply)
{
	struct spw_session_info *p = &c->persist;
	uint32_t scale_bits = 0, good = 0;
	uint64_t step = 0;

	memset(p, 0, sizeof(*p));
	p->persistent = json_flag(reply, "persistent");
	p->reattached = json_flag(reply, "reattached");
	p->step_open = json_flag(reply, "step_open");
	if (json_u32(reply, "lease_s", &p->lease_s) < 0)
		p->lease_s = 0;
	if (json_u32(reply, "tensors", &p->tensors) < 0)
		p->tensors = 0;
	if (json_u64(reply, "committed_step", &step) == 0)
		p->committed_step = step;
	if (json_u64(reply, "released_write_step", &step) == 0)
		p->released_write_step = step;
	c->damaged_tensor[0] = '\0';
	if (json_u32(reply, "damaged_pages", &p->damaged_pages) < 0 || json_u32(reply, "damaged_page", &c->damaged_page) < 0)
		p->damaged_pages = 0;
	else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(reply, "damaged_tensor")))
		snprintf(c->damaged_tensor, sizeof(c->damaged_tensor), "%s",
			 cJSON_GetObjectItemCaseSensitive(reply, "damaged_tensor")->valuestring);
	if (json_u32(reply, "scale_bits", &scale_bits) == 0 && json_u32(reply, "good_steps", &good) == 0) {
		/* The COMMIT mark's page field: good steps, and the top bit
		 * for a skipped step (engine.c). */
		memcpy(&p->loss_scale, &scale_bits, sizeof(p->loss_scale));
		p->good_steps = good & 0x7fffffffu;
		p->skipped = good >> 31;
	}
}

SPW_EXPORT int spw_client_attach(spw_client *c, const struct spw_attach_opts *caller_opts)
{
	struct spw_attach_opts o = { .size = sizeof(o) }, *opts = &o;
	char why[256];
	int fds[SPW_ATTACH_NFDS] = { -1, -1, -1, -1 };
	unsigned nfds = SPW_ATTACH_NFDS;
	struct spw_ring_layout layout;
	uint64_t region_bytes, rings_bytes, want_bytes;
	uint32_t page_size, slots, sq_entries, cq_entries;
	cJSON *req, *reply = NULL;
	const cJSON *sess, *numa;
	int r;

	if (!c)
		return -EINVAL;
	r = check_connected(c);
	if (r < 0)
		return r;
	if (c->attached)
		return spw__error(c, -EALREADY, "session %s is already attached on this client", c->session);
	if (!caller_opts)
		return spw__error(c, -EINVAL, "attach: opts must not be NULL");
	r = spw__opts_in(&o, sizeof(o), caller_opts, SPW__ATTACH_OPTS_SIZE_VER0, "struct spw_attach_opts",
			 why, sizeof(why));
	if (r < 0)
		return spw__error(c, r, "attach: %s", why);
	if (!spw_proto_session_name_valid(opts->session))
		return spw__error(c, -EINVAL,
				  "attach: session name '%s' is not 1..%d bytes of [A-Za-z0-9._/-] without a leading '/' or '.' or '..'",
				  opts->session ? opts->session : "(null)", SPW_PROTO_MAX_SESSION_NAME);
	page_size = opts->page_size ? opts->page_size : SPW_PAGE_SIZE_DEFAULT;
	if (!spw_proto_page_size_valid(page_size))
		return spw__error(c, -EINVAL, "attach %s: page size %u is not a power of two in [64 KiB, 64 MiB]",
				  opts->session, page_size);
	/* Whole pages, as the daemon counts them; the bound keeps the slot
	 * count in 32 bits and the sum below from overflowing. */
	if (opts->region_bytes == 0 || opts->region_bytes > (uint64_t)UINT32_MAX * page_size)
		return spw__error(c, -EINVAL, "attach %s: a region of %llu bytes is empty or over 2^32 pages of %u bytes",
				  opts->session, (unsigned long long)opts->region_bytes, page_size);
	if (opts->persistent > 1 || opts->lease_s > 7u * 24u * 3600u)
		return spw__error(c, -EINVAL, "attach %s: persistent is 0 or 1 (it is %u) and lease_s at most 7 days "
				  "(it is %u s)", opts->session, opts->persistent, opts->lease_s);
	if (opts->flags & ~SPW_ATTACH_SWAP_BYTES)
		return spw__error(c, -EINVAL, "attach %s: flags 0x%x are not SPW_ATTACH_* flags this library knows",
				  opts->session, opts->flags & ~SPW_ATTACH_SWAP_BYTES);
	if ((opts->flags & SPW_ATTACH_SWAP_BYTES) && opts->swap_bytes > SPW__SWAP_BYTES_MAX)
		return spw__error(c, -EINVAL, "attach %s: swap_bytes %llu is over 2^50", opts->session,
				  (unsigned long long)opts->swap_bytes);
	want_bytes = (opts->region_bytes + page_size - 1) / page_size * page_size;
	snprintf(c->session, sizeof(c->session), "%s", opts->session);

	req = new_request(SPW_MSG_ATTACH);
	if (!req || !cJSON_AddStringToObject(req, "session", opts->session) ||
	    !add_num(req, "region_bytes", (double)want_bytes) || !add_num(req, "page_size", page_size) ||
	    ((opts->flags & SPW_ATTACH_SWAP_BYTES) && !add_num(req, "swap_bytes", (double)opts->swap_bytes)) ||
	    (opts->persistent && (!cJSON_AddBoolToObject(req, "persistent", 1) ||
				  (opts->lease_s && !add_num(req, "lease_s", opts->lease_s))))) {
		cJSON_Delete(req);
		return spw__error(c, -ENOMEM, "attach: out of memory");
	}
	r = request(c, req, SPW_MSG_ATTACH, &reply, fds, &nfds);
	if (r < 0)
		return r;

	/* From here on, everything the daemon sent is checked before use:
	 * a buggy daemon must produce an error, not a crash in the trainer. */
	r = -EPROTO;
	if (nfds != SPW_ATTACH_NFDS) {
		spw__error(c, r, "attach %s: spillwayd passed %u descriptors, the protocol says %d", c->session, nfds,
			   SPW_ATTACH_NFDS);
		goto fail;
	}
	sess = cJSON_GetObjectItemCaseSensitive(reply, "session");
	if (json_u64(reply, "region_bytes", &region_bytes) < 0 || json_u32(reply, "page_size", &page_size) < 0 ||
	    json_u32(reply, "slots", &slots) < 0 || json_u32(reply, "sq_entries", &sq_entries) < 0 ||
	    json_u32(reply, "cq_entries", &cq_entries) < 0 || json_u64(reply, "rings_bytes", &rings_bytes) < 0 ||
	    !cJSON_IsString(sess)) {
		spw__error(c, r, "attach %s: spillwayd's reply lacks a field or has one of the wrong type", c->session);
		goto fail;
	}
	if (strcmp(sess->valuestring, c->session) || page_size != (opts->page_size ? opts->page_size : SPW_PAGE_SIZE_DEFAULT) ||
	    region_bytes != want_bytes || slots == 0 || (uint64_t)slots * page_size != region_bytes) {
		spw__error(c, r,
			   "attach %s: spillwayd answered for session '%s' with %llu bytes in %u slots of %u, "
			   "asked for %llu bytes in slots of %u",
			   c->session, sess->valuestring, (unsigned long long)region_bytes, slots, page_size,
			   (unsigned long long)want_bytes, opts->page_size ? opts->page_size : SPW_PAGE_SIZE_DEFAULT);
		goto fail;
	}
	if (spw_ring_layout(sq_entries, cq_entries, &layout) < 0 || rings_bytes != layout.bytes) {
		spw__error(c, r, "attach %s: ring geometry from spillwayd (sq %u, cq %u, %llu bytes) does not match the layout",
			   c->session, sq_entries, cq_entries, (unsigned long long)rings_bytes);
		goto fail;
	}
	if ((r = check_memfd(c, fds[SPW_ATTACH_FD_REGION], "region", region_bytes)) < 0 ||
	    (r = check_memfd(c, fds[SPW_ATTACH_FD_RINGS], "rings", rings_bytes)) < 0)
		goto fail;

	c->region_fd = fds[SPW_ATTACH_FD_REGION];
	c->rings_fd = fds[SPW_ATTACH_FD_RINGS];
	c->ring.sq_evt = fds[SPW_ATTACH_FD_SQ_EVT];
	c->ring.cq_evt = fds[SPW_ATTACH_FD_CQ_EVT];
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		fds[i] = -1; /* owned by c now; release_session() closes them */
	c->region_bytes = region_bytes;
	c->rings_bytes = layout.bytes;
	c->page_size = page_size;

	/* MAP_POPULATE: the region is already backed by the daemon; building
	 * our page tables now keeps first-touch faults out of the data path. */
	c->region = mmap(NULL, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->region_fd, 0);
	if (c->region == MAP_FAILED) {
		r = spw__error(c, -errno, "attach %s: mapping the %llu-byte region: %s", c->session,
			       (unsigned long long)region_bytes, spw_strerror(-errno));
		goto fail_session;
	}
	c->rings = mmap(NULL, layout.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->rings_fd, 0);
	if (c->rings == MAP_FAILED) {
		r = spw__error(c, -errno, "attach %s: mapping the rings: %s", c->session, spw_strerror(-errno));
		goto fail_session;
	}
	r = spw__ring_init(&c->ring, c->rings, &layout, c->ring.sq_evt, c->ring.cq_evt, c->ctl, c->spin_us);
	if (r < 0) {
		spw__error(c, r, "attach %s: %s", c->session,
			   r == -ENOMEM ? "out of memory" : "the rings from spillwayd are not empty");
		goto fail_session;
	}

	c->slots = slots;
	/* Older daemons do not say; their sessions have what swap.session_bytes gave. */
	if (json_u64(reply, "swap_bytes", &c->swap_bytes) < 0)
		c->swap_bytes = 0;
	persist_from_reply(c, reply);
	c->locked = json_flag(reply, "locked");
	c->hugepages = json_flag(reply, "hugepages");
	numa = cJSON_GetObjectItemCaseSensitive(reply, "numa_node");
	c->numa_node = cJSON_IsNumber(numa) && numa->valuedouble >= 0 && numa->valuedouble < 65536 ?
			       (int32_t)numa->valuedouble : -1;
	c->attached = true;
	if (opts->persistent) {
		c->again = *opts;
		c->again.session = c->session;
	}
	return request_done(c, reply);

fail_session:
	/* The daemon has a session for us that we cannot use; closing the
	 * connection ends it, and the client must start over. */
	spw__release_session(c);
	spw__dead(c, r);
	cJSON_Delete(reply);
	return r;
fail:
	close_fds(fds, nfds);
	spw__dead(c, r);
	cJSON_Delete(reply);
	return r;
}

SPW_EXPORT int spw_client_detach(spw_client *c)
{
	cJSON *reply = NULL;
	int r;

	if (!c)
		return -EINVAL;
	if (!c->attached)
		return c->dead ? c->dead_err : spw__error(c, -ENOTCONN, "detach: no session attached");
	if (c->dead) {
		spw__release_session(c);
		return c->dead_err;
	}
	r = request(c, new_request(SPW_MSG_DETACH), SPW_MSG_DETACH, &reply, NULL, NULL);
	/* Ended on purpose: nothing to come back to. */
	c->again.size = 0;
	/* Unmap whatever the daemon said: after a detach request the session
	 * is gone or going, and its memory is not ours to use. */
	spw__release_session(c);
	cJSON_Delete(reply);
	return r;
}

SPW_EXPORT int spw_client_info(const spw_client *c, struct spw_session_info *info)
{
	struct spw_session_info all = { .size = sizeof(all) };

	/* c is const here: no sentence, the errno says it. */
	if (!c || !info)
		return -EINVAL;
	if (!c->attached)
		return -ENOTCONN;
	all.region_bytes = c->region_bytes;
	all.page_size = c->page_size;
	all.slots = c->slots;
	all.sq_entries = c->ring.sq_entries;
	all.cq_entries = c->ring.cq_entries;
	all.features = c->features;
	all.numa_node = c->numa_node;
	all.locked = c->locked;
	all.hugepages = c->hugepages;
	all.swap_bytes = c->swap_bytes;
	all.persistent = c->persist.persistent;
	all.reattached = c->persist.reattached;
	all.step_open = c->persist.step_open;
	all.lease_s = c->persist.lease_s;
	all.tensors = c->persist.tensors;
	all.committed_step = c->persist.committed_step;
	all.loss_scale = c->persist.loss_scale;
	all.good_steps = c->persist.good_steps;
	all.skipped = c->persist.skipped;
	all.damaged_pages = c->persist.damaged_pages;
	all.released_write_step = c->persist.released_write_step;
	return spw__info_out(info, &all, sizeof(all), SPW__SESSION_INFO_SIZE_VER0,
			     "struct spw_session_info", NULL, 0);
}

static int register_tensor(spw_client *c, const char *name, uint64_t bytes, enum spw_tensor_kind kind, bool adopt,
			   uint32_t *ret_tensor, uint32_t *ret_pages);

SPW_EXPORT int spw_tensor_register(spw_client *c, const char *name, uint64_t bytes, enum spw_tensor_kind kind,
				   uint32_t *ret_tensor, uint32_t *ret_pages)
{
	return register_tensor(c, name, bytes, kind, false, ret_tensor, ret_pages);
}

SPW_EXPORT int spw_tensor_adopt(spw_client *c, const char *name, uint64_t bytes, enum spw_tensor_kind kind,
				uint32_t *ret_tensor, uint32_t *ret_pages)
{
	return register_tensor(c, name, bytes, kind, true, ret_tensor, ret_pages);
}

static int register_tensor(spw_client *c, const char *name, uint64_t bytes, enum spw_tensor_kind kind, bool adopt,
			   uint32_t *ret_tensor, uint32_t *ret_pages)
{
	bool scratch = kind & SPW_TENSOR_SCRATCH;
	cJSON *req, *reply = NULL;
	uint32_t tensor, pages;
	int r;

	kind = (enum spw_tensor_kind)(kind & ~SPW_TENSOR_SCRATCH);
	if (!c)
		return -EINVAL;
	r = check_session(c, "register");
	if (r < 0)
		return r;
	if (!ret_tensor || !spw_proto_tensor_name_valid(name) || (bytes == 0 && !adopt) ||
	    (kind != SPW_TENSOR_RESIDENT && kind != SPW_TENSOR_SWAPPABLE))
		return spw__error(c, -EINVAL,
				  "register: need a name of 1..%d printable ASCII bytes, a size above 0, a known kind and ret_tensor",
				  SPW_PROTO_MAX_TENSOR_NAME);
	req = new_request(SPW_MSG_REGISTER);
	if (!req || !cJSON_AddStringToObject(req, "name", name) || !add_num(req, "bytes", (double)bytes) ||
	    !cJSON_AddStringToObject(req, "kind", kind == SPW_TENSOR_RESIDENT ? "resident" : "swappable") ||
	    (adopt && !cJSON_AddBoolToObject(req, "adopt", 1)) ||
	    (scratch && !cJSON_AddBoolToObject(req, "scratch", 1))) {
		cJSON_Delete(req);
		return spw__error(c, -ENOMEM, "register: out of memory");
	}
	r = request(c, req, SPW_MSG_REGISTER, &reply, NULL, NULL);
	if (r < 0)
		return r;
	if (json_u32(reply, "tensor", &tensor) < 0 || json_u32(reply, "pages", &pages) < 0 ||
	    (bytes && (uint64_t)pages != (bytes + c->page_size - 1) / c->page_size)) {
		cJSON_Delete(reply);
		return spw__dead(c, spw__error(c, -EPROTO,
					       "register %s: spillwayd's reply lacks the tensor id or gives a wrong page count",
					       name));
	}
	cJSON_Delete(reply);
	*ret_tensor = tensor;
	if (ret_pages)
		*ret_pages = pages;
	return 0;
}

SPW_EXPORT int spw_tensor_unregister(spw_client *c, uint32_t tensor)
{
	cJSON *req, *reply = NULL;
	int r;

	if (!c)
		return -EINVAL;
	r = check_session(c, "unregister");
	if (r < 0)
		return r;
	req = new_request(SPW_MSG_UNREGISTER);
	if (!add_num(req, "tensor", tensor)) {
		cJSON_Delete(req);
		return spw__error(c, -ENOMEM, "unregister: out of memory");
	}
	r = request(c, req, SPW_MSG_UNREGISTER, &reply, NULL, NULL);
	cJSON_Delete(reply);
	return r;
}

SPW_EXPORT int spw_client_drop(spw_client *c, const char *session)
{
	cJSON *req, *reply = NULL;
	int r;

	if (!c)
		return -EINVAL;
	r = check_connected(c);
	if (r < 0)
		return r;
	if (!spw_proto_session_name_valid(session))
		return spw__error(c, -EINVAL, "drop: '%s' is not a session name", session ? session : "(null)");
	req = new_request(SPW_MSG_DROP);
	if (!req || !cJSON_AddStringToObject(req, "session", session)) {
		cJSON_Delete(req);
		return spw__error(c, -ENOMEM, "drop: out of memory");
	}
	r = request(c, req, SPW_MSG_DROP, &reply, NULL, NULL);
	cJSON_Delete(reply);
	return r;
}
