/* SPDX-License-Identifier: MIT */
/*
 * The status plane: connect, read one frame of JSON, done. The daemon
 * writes the whole document at once into the fresh socket's empty send
 * buffer and never waits for a reader, so a status client cannot stall the
 * loop. A peer sees the sessions of its own uid (root sees all); other
 * uids' sessions only as the aggregate "others".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "region.h"

static cJSON *session_json(const struct session *s)
{
	cJSON *o = cJSON_CreateObject(), *ring;

	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddNumberToObject(o, "uid", s->uid);
	cJSON_AddNumberToObject(o, "pid", s->pid);
	cJSON_AddStringToObject(o, "state", s->attaching ? "attaching" : "attached");
	cJSON_AddNumberToObject(o, "region_bytes", (double)s->bytes);
	cJSON_AddNumberToObject(o, "page_size", s->page_size);
	cJSON_AddNumberToObject(o, "slots", s->nslots);
	cJSON_AddNumberToObject(o, "slots_used", s->slots.n - s->slots.nfree);
	cJSON_AddNumberToObject(o, "tensors", s->ntensors);
	cJSON_AddNumberToObject(o, "pages_pinned", (double)s->pages_pinned);
	cJSON_AddBoolToObject(o, "locked", s->region && s->region->locked);
	cJSON_AddBoolToObject(o, "hugepages", s->region && s->region->hugepages);
	cJSON_AddNumberToObject(o, "numa_node", s->region ? s->region->numa_node : -1);
	ring = cJSON_AddObjectToObject(o, "ring");
	cJSON_AddNumberToObject(ring, "ops", (double)s->stats.ops);
	cJSON_AddNumberToObject(ring, "errors", (double)s->stats.errors);
	cJSON_AddNumberToObject(ring, "nop", (double)s->stats.by_op[SPW_OP_NOP]);
	cJSON_AddNumberToObject(ring, "pin", (double)s->stats.by_op[SPW_OP_PIN]);
	cJSON_AddNumberToObject(ring, "unpin", (double)s->stats.by_op[SPW_OP_UNPIN]);
	return o;
}

static cJSON *build(struct daemon *d, uid_t uid, unsigned max_listed, unsigned *listed)
{
	const struct config *cfg = d->cfg;
	struct rusage ru = { 0 };
	uint64_t hfree = 0, others_bytes = 0;
	unsigned others = 0;
	cJSON *o = cJSON_CreateObject(), *x, *arr;
	struct list *p, *t;

	getrusage(RUSAGE_SELF, &ru);
	cJSON_AddStringToObject(o, "version", SPW_VERSION);
	x = cJSON_AddObjectToObject(o, "proto");
	cJSON_AddNumberToObject(x, "major", SPW_PROTO_MAJOR);
	cJSON_AddNumberToObject(x, "minor", SPW_PROTO_MINOR);
	cJSON_AddNumberToObject(o, "pid", getpid());
	cJSON_AddNumberToObject(o, "uptime_s", (double)(uv_hrtime() - d->start_ns) / 1e9);
	cJSON_AddNumberToObject(o, "cpu_s", (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
						  (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);

	x = cJSON_AddObjectToObject(o, "config");
	cJSON_AddStringToObject(x, "socket_dir", cfg->socket_dir);
	cJSON_AddNumberToObject(x, "page_size", cfg->session_page_size);
	cJSON_AddNumberToObject(x, "ring_entries", cfg->session_ring_entries);
	cJSON_AddNumberToObject(x, "poll_us", cfg->ring_poll_us);

	x = cJSON_AddObjectToObject(o, "pool");
	cJSON_AddNumberToObject(x, "max_bytes", (double)cfg->pool_max_bytes);
	cJSON_AddNumberToObject(x, "session_max_bytes", (double)cfg->pool_session_max_bytes);
	cJSON_AddNumberToObject(x, "used_bytes", (double)d->used_bytes);
	cJSON_AddNumberToObject(x, "locked_bytes", (double)d->locked_bytes);
	cJSON_AddNumberToObject(x, "free_bytes",
				(double)(cfg->pool_max_bytes > d->used_bytes ? cfg->pool_max_bytes - d->used_bytes : 0));
	region_hugetlb_size(&hfree);
	cJSON_AddBoolToObject(x, "hugepages", cfg->pool_hugepages != CONFIG_HUGEPAGES_NEVER && hfree > 0);
	cJSON_AddNumberToObject(x, "numa_node", d->numa_node);
	cJSON_AddBoolToObject(x, "locked", d->locked_bytes == d->used_bytes);

	arr = cJSON_AddArrayToObject(o, "sessions");
	*listed = 0;
	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if ((uid == 0 || uid == s->uid) && *listed < max_listed) {
			cJSON_AddItemToArray(arr, session_json(s));
			(*listed)++;
		} else {
			others++;
			others_bytes += s->bytes;
		}
	}
	x = cJSON_AddObjectToObject(o, "others");
	cJSON_AddNumberToObject(x, "sessions", others);
	cJSON_AddNumberToObject(x, "region_bytes", (double)others_bytes);
	return o;
}

char *status_render(struct daemon *d, uid_t uid)
{
	unsigned max = UINT32_MAX, listed = 0;

	/* A document that outgrows one frame lists fewer sessions and folds
	 * the rest into "others" (with "truncated": true). */
	for (;;) {
		cJSON *o = build(d, uid, max, &listed);
		char *s;

		if (max != UINT32_MAX)
			cJSON_AddTrueToObject(o, "truncated");
		s = cJSON_PrintUnformatted(o);
		cJSON_Delete(o);
		if (!s || strlen(s) <= SPW_PROTO_MAX_FRAME || listed == 0)
			return s;
		free(s);
		max = listed / 2;
	}
}

static void serve(struct daemon *d, int fd)
{
	struct ucred cred = { .uid = (uid_t)-1 };
	socklen_t len = sizeof(cred);
	struct spw_proto_frame_hdr h = { 0 };
	char *doc = NULL, junk[4096];
	struct iovec iov[2];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	ssize_t r;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		goto out;
	doc = status_render(d, cred.uid);
	if (!doc)
		goto out;
	h.len = (uint32_t)strlen(doc);
	iov[0] = (struct iovec){ .iov_base = &h, .iov_len = sizeof(h) };
	iov[1] = (struct iovec){ .iov_base = doc, .iov_len = h.len };
	r = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (r != (ssize_t)(sizeof(h) + h.len))
		log_debug("status: pid %d: wrote %zd of %zu bytes; dropped", (int)cred.pid, r, sizeof(h) + h.len);
	/* Whatever the peer sent is ignored; reading it first keeps close()
	 * from resetting the connection under the reply. */
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 16 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
		;
out:
	free(doc);
	close(fd);
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct daemon *d = h->data;

	for (int i = 0; i < 16; i++) {
		int fd = daemon_accept(d, d->status_fd);

		if (fd < 0) {
			if (fd == -EINTR || fd == -ECONNABORTED)
				continue;
			if (fd != -EAGAIN)
				log_warn("status: accept failed: %s", strerror(-fd));
			return;
		}
		serve(d, fd);
	}
}

int status_listen(struct daemon *d)
{
	int r = daemon_socket_path(d, "status.sock", d->status_path, sizeof(d->status_path));

	if (r < 0)
		return r;
	/* Anyone may ask; what they see is filtered by uid. */
	r = daemon_listen_unix(d, d->status_path, 0666, false);
	if (r < 0)
		return r;
	d->status_fd = r;
	r = uv_poll_init(&d->loop, &d->status_poll, d->status_fd);
	if (r < 0)
		return r;
	d->status_poll.data = d;
	return uv_poll_start(&d->status_poll, UV_READABLE, on_accept);
}
