/* SPDX-License-Identifier: MIT */
/*
 * The control plane's requests: hello, attach, register, unregister,
 * detach. Each handler validates its message, asks session.c (and swap.c
 * for sizing) to act, and sends exactly one reply through control-conn.c,
 * which owns the connection and its framing.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "config.h"
#include "control-conn.h"
#include "daemon.h"
#include "escape.h"
#include "json-strict.h"
#include "log.h"
#include "persist.h"
#include "region.h"
#include "session.h"
#include "state.h"
#include "swap.h"
#include "util/json.h"

/* A non-negative integer field. Returns 1 when present and valid, 0 when
 * absent and optional, -EINVAL with a message otherwise. */
static int field_uint(const cJSON *msg, const char *type, const char *key, bool required, uint64_t max,
		      uint64_t *out, char *err, size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);

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
	if (json_uint(v, max, out) < 0) {
		snprintf(err, errlen, "%s: \"%s\" is %.17g; expected an integer from 0 to %llu", type, key,
			 v->valuedouble, (unsigned long long)(max > JSON_UINT_MAX ? JSON_UINT_MAX : max));
		return -EINVAL;
	}
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
		control_reply_error(c, EPROTO, "hello: this connection already said hello");
		return;
	}
	if (field_uint(msg, "hello", "magic", true, UINT32_MAX, &magic, err, sizeof(err)) < 0 ||
	    field_uint(msg, "hello", "major", true, UINT16_MAX, &major, err, sizeof(err)) < 0 ||
	    field_uint(msg, "hello", "minor", true, UINT16_MAX, &minor, err, sizeof(err)) < 0 ||
	    field_uint(msg, "hello", "features", false, UINT32_MAX, &features, err, sizeof(err)) < 0) {
		control_reply_error(c, EINVAL, "%s", err);
		return;
	}
	if (magic != SPW_PROTO_MAGIC) {
		control_reply_error(c, EPROTO, "hello: magic 0x%08llx is not spillway's (0x%08x); is this a spillway client?",
			    (unsigned long long)magic, SPW_PROTO_MAGIC);
		return;
	}
	if (major != SPW_PROTO_MAJOR) {
		control_reply_error(c, EPROTONOSUPPORT,
			    "hello: protocol version mismatch: the client speaks %llu.%llu, spillwayd %s speaks %d.%d; "
			    "use a libspillway and spillwayd of the same major version",
			    (unsigned long long)major, (unsigned long long)minor, SPW_VERSION, SPW_PROTO_MAJOR,
			    SPW_PROTO_MINOR);
		return;
	}
	c->hello = true;
	/* Only what was asked for: older clients refuse bits they did not ask
	 * for. */
	c->features = (uint32_t)features & daemon_features(c->d);
	log_debug("client %u (uid %u, pid %d): hello %llu.%llu, features 0x%llx granted 0x%x", c->id, (unsigned)c->uid,
		  (int)c->pid, (unsigned long long)major, (unsigned long long)minor, (unsigned long long)features,
		  c->features);
	o = control_reply(SPW_MSG_HELLO);
	cJSON_AddNumberToObject(o, "magic", SPW_PROTO_MAGIC);
	cJSON_AddNumberToObject(o, "major", SPW_PROTO_MAJOR);
	cJSON_AddNumberToObject(o, "minor", SPW_PROTO_MINOR);
	cJSON_AddNumberToObject(o, "features", c->features);
	control_send_json(c, o, NULL, 0);
}

/* The swap a session gets when its attach names none (swap_default_bytes()
 * sizes it), logged when the directories' room cut it below
 * swap.session_bytes. */
static uint64_t swap_default(struct daemon *d, const char *name, uint32_t page_size)
{
	uint64_t want = d->cfg->swap_session_bytes, per = 0, fits;
	char a[32], b[32], m[32];
	const char *short_dir = NULL;

	fits = swap_default_bytes(d->swap_dirs, d->nswap_dirs, page_size, want, &per, &short_dir);
	if (fits < want)
		/* Exact byte counts too: 1.98 GiB prints as "2.0 GiB". */
		log_info("attach %s: swap dir %s has room for %s (%llu bytes, 1%% kept for metadata); the session "
			 "gets %s (%llu bytes) of swap instead of swap.session_bytes (%s)",
			 name, short_dir, format_bytes(per, a, sizeof(a)), (unsigned long long)per,
			 format_bytes(fits, b, sizeof(b)), (unsigned long long)fits, format_bytes(want, m, sizeof(m)));
	return fits;
}

/* limits.*_per_uid at attach: refuses (replying) with the limit, the
 * figures and the key to raise; a swap size the attach did not name is cut
 * to what the uid has left instead. Returns 0 or -EDQUOT. */
int control_uid_limits(struct client *c, const char *name, uint64_t bytes, uint32_t page_size, bool have_swap,
		      uint64_t *swap)
{
	const struct config *cfg = c->d->cfg;
	uint64_t region_used, swap_used;
	unsigned sessions;
	char a[32], b[32], u[32];

	char orphans[512];

	session_uid_use(c->d, c->uid, &sessions, &region_used, &swap_used);
	persist_orphans_text(c->d, false, c->uid, orphans, sizeof(orphans));
	if (sessions >= cfg->limits_sessions_per_uid) {
		control_reply_error(c, EDQUOT, "attach %s: uid %u already has %u sessions, the most limits.sessions_per_uid "
			    "(%u) allows; detach one or raise limits.sessions_per_uid in %s%s", name, (unsigned)c->uid,
			    sessions, cfg->limits_sessions_per_uid, cfg->origin, orphans);
		return -EDQUOT;
	}
	if (cfg->limits_region_bytes_per_uid &&
	    (region_used > cfg->limits_region_bytes_per_uid || bytes > cfg->limits_region_bytes_per_uid - region_used)) {
		control_reply_error(c, EDQUOT, "attach %s: region %s would exceed limits.region_bytes_per_uid (%s; uid %u's "
			    "sessions hold %s); ask for less, detach a session or raise limits.region_bytes_per_uid in %s%s",
			    name, format_bytes(bytes, a, sizeof(a)), format_bytes(cfg->limits_region_bytes_per_uid, b, sizeof(b)),
			    (unsigned)c->uid, format_bytes(region_used, u, sizeof(u)), cfg->origin, orphans);
		return -EDQUOT;
	}
	if (cfg->limits_swap_bytes_per_uid) {
		uint64_t left = swap_used < cfg->limits_swap_bytes_per_uid ? cfg->limits_swap_bytes_per_uid - swap_used : 0;

		if (!have_swap && *swap > left) {
			/* Whole pages on every drive: swap files round up. */
			uint64_t unit = (uint64_t)page_size * (c->d->nswap_dirs ? c->d->nswap_dirs : 1);

			left -= left % unit;
			log_info("attach %s: uid %u has %s of limits.swap_bytes_per_uid left; the session gets that much swap",
				 name, (unsigned)c->uid, format_bytes(left, a, sizeof(a)));
			*swap = left;
		} else if (*swap > left) {
			control_reply_error(c, EDQUOT, "attach %s: swap_bytes %s would exceed limits.swap_bytes_per_uid (%s; "
				    "uid %u's sessions hold %s); ask for less, detach a session or raise "
				    "limits.swap_bytes_per_uid in %s", name, format_bytes(*swap, a, sizeof(a)),
				    format_bytes(cfg->limits_swap_bytes_per_uid, b, sizeof(b)), (unsigned)c->uid,
				    format_bytes(swap_used, u, sizeof(u)), cfg->origin);
			return -EDQUOT;
		}
	}
	return 0;
}

static void do_attach(struct client *c, const cJSON *msg)
{
	struct daemon *d = c->d;
	const struct config *cfg = d->cfg;
	const char *name;
	uint64_t bytes = 0, page_size = cfg->session_page_size, swap = 0, lease_s = PERSIST_LEASE_DEFAULT_S;
	uint64_t released_write = 0;
	bool persistent = false;
	int have_swap, have_lease;
	char err[768], a[32];
	struct session *s, *other;
	int r;

	if (c->session) {
		control_reply_error(c, EISCONN, "attach: this connection is already attached to session %s; detach first",
			    c->session->name);
		return;
	}
	if (field_string(msg, "attach", "session", &name, err, sizeof(err)) < 0 ||
	    field_uint(msg, "attach", "region_bytes", true, UINT64_MAX, &bytes, err, sizeof(err)) < 0 ||
	    field_uint(msg, "attach", "page_size", false, UINT32_MAX, &page_size, err, sizeof(err)) < 0 ||
	    field_bool(msg, "attach", "persistent", &persistent, err, sizeof(err)) < 0 ||
	    (have_lease = field_uint(msg, "attach", "lease_s", false, PERSIST_LEASE_MAX_S, &lease_s, err,
				     sizeof(err))) < 0 ||
	    (have_swap = field_uint(msg, "attach", "swap_bytes", false, 1ull << 50, &swap, err, sizeof(err))) < 0) {
		control_reply_error(c, EINVAL, "%s", err);
		return;
	}
	if (!spw_proto_session_name_valid(name)) {
		control_reply_error(c, EINVAL, "attach: session name is not 1..%d characters of [A-Za-z0-9._/-] not starting "
			    "with '/' or '.' and without \"..\"", SPW_PROTO_MAX_SESSION_NAME);
		return;
	}
	if (lease_s == 0) {
		control_reply_error(c, EINVAL, "attach %s: lease_s is 0; a persistent session is kept 1 s to %u s (7 days) "
			    "after its client dies (default %u)", name, PERSIST_LEASE_MAX_S, PERSIST_LEASE_DEFAULT_S);
		return;
	}
	if (have_lease && lease_s > cfg->limits_lease_max_s) {
		control_reply_error(c, EDQUOT, "attach %s: lease_s %llu exceeds limits.lease_max_s (%u s) in %s; ask for a "
			    "shorter lease or raise limits.lease_max_s", name, (unsigned long long)lease_s,
			    cfg->limits_lease_max_s, cfg->origin);
		return;
	}
	/* The default lease, within what this node allows. */
	if (!have_lease && lease_s > cfg->limits_lease_max_s)
		lease_s = cfg->limits_lease_max_s;
	if (!spw_proto_page_size_valid(page_size)) {
		control_reply_error(c, EINVAL, "attach %s: page_size %llu is not a power of two from 64 KiB to 64 MiB", name,
			    (unsigned long long)page_size);
		return;
	}
	if (bytes == 0) {
		control_reply_error(c, EINVAL, "attach %s: region_bytes is 0; ask for at least one page (%s)", name,
			    format_bytes(page_size, a, sizeof(a)));
		return;
	}
	/* Whole slots; bytes <= 2^53, so rounding up cannot overflow. */
	bytes = (bytes + page_size - 1) / page_size * page_size;
	other = session_find(d, name);
	if (other && other->owner && other->owner != c && control_client_gone(other->owner)) {
		/* Its trainer died a moment ago and the loop has not seen
		 * the hang-up yet: a restarted trainer races it. */
		control_client_close(other->owner, "disconnected");
		other = session_find(d, name);
	}
	if (d->stopping) {
		control_reply_error(c, ESHUTDOWN, "attach %s: spillwayd is shutting down", name);
		return;
	}
	if (other && other->restore) {
		control_reply_error(c, EAGAIN, "attach %s: the session is being restored from a checkpoint; attach again "
			    "in a moment", name);
		return;
	}
	if (other && other->attaching && !other->owner) {
		control_reply_error(c, EAGAIN, "attach %s: the session's last client left while its region was being set "
			    "up; it is being released: attach again in a moment", name);
		return;
	}
	if (other && other->uid != c->uid) {
		/* Names belong to the uid that holds them; who that is stays
		 * its business. */
		control_reply_error(c, EPERM, "attach %s: the name is held by another user's session; pick another name "
			    "(session names are owned per uid)", name);
		return;
	}
	if (other && other->orphaned_ns && persistent && other->write_step &&
	    other->write_step == other->opened_step && other->opened_step > other->committed_step) {
		/* Its client died while spw_optimizer_write overwrote the state
		 * (load_state_dict): some of it is the new state, the rest the
		 * old one, and no journal says which. Resuming it would train
		 * on that mix: the new trainer starts anew, as after a session
		 * that never committed, and is told why (released_write_step). */
		log_info("attach %s: the orphaned session's last client died inside spw_optimizer_write "
			 "(load_state_dict) after step %llu, so its state is partly overwritten; released, and "
			 "attached anew (nothing resumed: write the state again in full)", name,
			 (unsigned long long)other->committed_step);
		released_write = other->write_step;
		state_forget(other);
		session_free(other);
		other = NULL;
	}
	if (other && other->orphaned_ns && persistent && other->committed_step == 0 &&
	    (other->opened_step > 0 || other->ntensors == 0)) {
		/* Empty, or its optimizer began but never committed a step:
		 * nothing worth resuming. The new trainer starts anew. */
		log_info("attach %s: the orphaned session's optimizer never committed a step; released, and attached anew",
			 name);
		state_forget(other);
		session_free(other);
		other = NULL;
	}
	if (other && other->orphaned_ns && persistent) {
		persist_take_over(c, other, bytes, (uint32_t)page_size, (uint32_t)lease_s);
		return;
	}
	if (other && other->orphaned_ns) {
		control_reply_error(c, EBUSY, "attach %s: an orphaned persistent session of that name waits for its trainer "
			    "(orphaned %llu s ago); attach with \"persistent\" to resume it, or drop it first "
			    "(spillwayctl drop %s)", name, (unsigned long long)persist_orphan_age_s(other), name);
		return;
	}
	if (other) {
		control_reply_error(c, EBUSY, "attach %s: the session is already attached by pid %d; pick another name or "
			    "detach that one first", name, (int)other->pid);
		return;
	}
	r = session_admit(d, name, bytes, err, sizeof(err));
	if (r < 0) {
		char orphans[512];

		/* Orphans are never evicted to make room: say who they are. */
		persist_orphans_text(d, true, 0, orphans, sizeof(orphans));
		control_reply_error(c, -r, "%s%s", err, r == -ENOSPC ? orphans : "");
		return;
	}
	if (have_swap && swap && !d->nswap_dirs) {
		control_reply_error(c, EOPNOTSUPP, "attach %s: swap_bytes asks for %s of swap, but no swap directories are "
			    "configured; set swap.dirs in %s and restart spillwayd, or attach without swap_bytes", name,
			    format_bytes(swap, a, sizeof(a)), cfg->origin);
		return;
	}
	if (!have_swap)
		swap = d->nswap_dirs ? swap_default(d, name, (uint32_t)page_size) : 0;
	if (control_uid_limits(c, name, bytes, (uint32_t)page_size, have_swap, &swap) < 0)
		return;
	r = session_attach(d, c, name, bytes, (uint32_t)page_size, swap, err, sizeof(err));
	if (r < 0) {
		control_reply_error(c, -r, "%s", err);
		return;
	}
	s = c->session;
	s->uid = c->uid;
	s->pid = c->pid;
	s->persistent = persistent;
	s->lease_s = (uint32_t)lease_s;
	s->released_write_step = released_write;
	c->attaching = true;
	control_client_watch(c);
}

void control_attach_done(struct session *s, int r)
{
	struct client *c = s->owner;
	char a[32], b[32], sw[32];

	if (s->restore) {
		restore_attached(s, r);
		return;
	}
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
		control_reply_error(c, -r, "%s", err);
		return;
	}
	log_info("attach %s: client %u (uid %u, pid %d): %s in %u slots of %s, %s, %s, NUMA node %d, swap %s%s", s->name,
		 c->id, (unsigned)c->uid, (int)c->pid, format_bytes(s->bytes, a, sizeof(a)), s->nslots,
		 format_bytes(s->page_size, b, sizeof(b)), s->region->locked ? "locked" : "NOT locked",
		 s->region->hugepages ? "hugetlb pages" : "ordinary pages", s->region->numa_node,
		 format_bytes(s->swap_bytes, sw, sizeof(sw)), s->persistent ? ", persistent" : "");
	daemon_update_status(c->d);
	control_attach_reply(c, s, false);
}

void control_attach_reply(struct client *c, struct session *s, bool reattached)
{
	int fds[SPW_ATTACH_NFDS];
	cJSON *o;

	o = control_reply(SPW_MSG_ATTACH);
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
	cJSON_AddBoolToObject(o, "persistent", s->persistent);
	cJSON_AddNumberToObject(o, "lease_s", s->lease_s);
	cJSON_AddBoolToObject(o, "reattached", reattached);
	cJSON_AddNumberToObject(o, "tensors", s->ntensors);
	cJSON_AddNumberToObject(o, "committed_step", (double)s->committed_step);
	cJSON_AddBoolToObject(o, "step_open", s->opened_step > s->committed_step);
	cJSON_AddNumberToObject(o, "scale_bits", s->scale_bits);
	cJSON_AddNumberToObject(o, "good_steps", s->good_steps);
	if (s->released_write_step)
		cJSON_AddNumberToObject(o, "released_write_step", (double)s->released_write_step);
	if (s->nbad) {
		/* Back from a crash with pages that failed their CRC: the
		 * optimizer refuses to adopt it, naming the first. */
		cJSON_AddNumberToObject(o, "damaged_pages", s->nbad);
		cJSON_AddStringToObject(o, "damaged_tensor", session_tensor_name(s, s->bad[0].tensor));
		cJSON_AddNumberToObject(o, "damaged_page", s->bad[0].page);
	}
	fds[SPW_ATTACH_FD_REGION] = s->region->fd;
	fds[SPW_ATTACH_FD_RINGS] = s->rings_fd;
	fds[SPW_ATTACH_FD_SQ_EVT] = s->sq_evt;
	fds[SPW_ATTACH_FD_CQ_EVT] = s->cq_evt;
	control_send_json(c, o, fds, SPW_ATTACH_NFDS);
}

static void do_register(struct client *c, const cJSON *msg)
{
	const char *name, *kind = "resident";
	uint64_t bytes = 0;
	bool persistent = false, adopt = false, scratch = false, swappable;
	uint32_t id, npages;
	char err[768], a[32];
	const cJSON *k;
	cJSON *o;
	int r;

	if (!c->session) {
		control_reply_error(c, ENOTCONN, "register: attach to a session first");
		return;
	}
	if (field_string(msg, "register", "name", &name, err, sizeof(err)) < 0 ||
	    field_uint(msg, "register", "bytes", true, UINT64_MAX, &bytes, err, sizeof(err)) < 0 ||
	    field_bool(msg, "register", "persistent", &persistent, err, sizeof(err)) < 0 ||
	    field_bool(msg, "register", "adopt", &adopt, err, sizeof(err)) < 0 ||
	    field_bool(msg, "register", "scratch", &scratch, err, sizeof(err)) < 0) {
		control_reply_error(c, EINVAL, "%s", err);
		return;
	}
	k = cJSON_GetObjectItemCaseSensitive(msg, "kind");
	if (k && !cJSON_IsString(k)) {
		control_reply_error(c, EINVAL, "register: \"kind\" must be \"resident\" or \"swappable\"");
		return;
	}
	if (k)
		kind = k->valuestring;
	if (!spw_proto_tensor_name_valid(name)) {
		control_reply_error(c, EINVAL, "register: tensor name is not 1..%d printable ASCII characters",
			    SPW_PROTO_MAX_TENSOR_NAME);
		return;
	}
	swappable = !strcmp(kind, "swappable");
	if (swappable && !c->d->nswap_dirs) {
		control_reply_error(c, EOPNOTSUPP, "register %s: swappable tensors need swap directories on NVMe, and none are "
			    "configured; set swap.dirs in %s and restart spillwayd, or register it as \"resident\"",
			    name, c->d->cfg->origin);
		return;
	}
	if (!swappable && strcmp(kind, "resident")) {
		control_reply_error(c, EINVAL, "register %s: kind must be \"resident\" or \"swappable\"", name);
		return;
	}
	if (persistent) {
		control_reply_error(c, EOPNOTSUPP, "register %s: persistent tensors are not supported by this spillwayd yet; "
			    "register it without \"persistent\"", name);
		return;
	}
	/* An adopt of 0 bytes takes the tensor at whatever size it has. */
	if (bytes == 0 && !adopt) {
		control_reply_error(c, EINVAL, "register %s: bytes is 0; a tensor holds at least one byte", name);
		return;
	}
	r = adopt ? persist_adopt(c->session, name, bytes, swappable, scratch, &id, &npages, err, sizeof(err)) :
		    session_register(c->session, name, bytes, swappable, scratch, &id, &npages, err, sizeof(err));
	if (r < 0) {
		control_reply_error(c, -r, "%s", err);
		return;
	}
	log_debug("register %s in %s: tensor %u, %s %s in %u pages%s", name, c->session->name, id, kind,
		  format_bytes(bytes, a, sizeof(a)), npages, adopt ? ", adopted" : "");
	o = control_reply(SPW_MSG_REGISTER);
	cJSON_AddNumberToObject(o, "tensor", id);
	cJSON_AddNumberToObject(o, "pages", npages);
	cJSON_AddBoolToObject(o, "adopted", adopt);
	control_send_json(c, o, NULL, 0);
}

static void do_unregister(struct client *c, const cJSON *msg)
{
	uint64_t id = 0;
	char err[512];
	int r;

	if (!c->session) {
		control_reply_error(c, ENOTCONN, "unregister: attach to a session first");
		return;
	}
	if (field_uint(msg, "unregister", "tensor", true, UINT32_MAX, &id, err, sizeof(err)) < 0) {
		control_reply_error(c, EINVAL, "%s", err);
		return;
	}
	r = session_unregister(c->session, (uint32_t)id, err, sizeof(err));
	if (r < 0) {
		control_reply_error(c, -r, "%s", err);
		return;
	}
	if (r > 0) {
		/* Dying: its disk I/O is still in flight. The loop goes on;
		 * the reply comes from control_unregister_done(), and nothing
		 * more is read from this client until then. */
		log_debug("unregister in %s: tensor %llu waits for its I/O in flight", c->session->name,
			  (unsigned long long)id);
		c->unregistering = true;
		control_client_watch(c);
		return;
	}
	log_debug("unregister in %s: tensor %llu", c->session->name, (unsigned long long)id);
	control_send_json(c, control_reply(SPW_MSG_UNREGISTER), NULL, 0);
}

void control_unregister_done(struct session *s, uint32_t id)
{
	struct client *c = s->owner;

	if (!c || !c->unregistering)
		return;
	c->unregistering = false;
	log_debug("unregister in %s: tensor %u, after its I/O drained", s->name, id);
	control_send_json(c, control_reply(SPW_MSG_UNREGISTER), NULL, 0);
}

void control_detach(struct client *c)
{
	char a[32];

	if (!c->session) {
		control_reply_error(c, ENOTCONN, "detach: this connection is not attached to a session");
		return;
	}
	if (checkpoint_defer_detach(c->session)) {
		/* Its pages are being copied; the answer comes after. */
		c->detach_waits = c->waiting = true;
		control_client_watch(c);
		return;
	}
	log_info("detach %s: client %u (uid %u, pid %d) asked; released %s", c->session->name, c->id,
		 (unsigned)c->uid, (int)c->pid, format_bytes(c->session->bytes, a, sizeof(a)));
	state_forget(c->session);
	c->session = session_free(c->session);
	daemon_update_status(c->d);
	control_send_json(c, control_reply(SPW_MSG_DETACH), NULL, 0);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that appears twice in one object of v (cJSON keeps both
 * and its lookups take the first: {"type":"hello","type":"attach"} would
 * mean whatever the reader picks). Sorted, so a frame of thousands of keys
 * costs n log n, not n^2. Returns NULL when there is none; -ENOMEM as a
 * key that cannot be checked. */
static const char *dup_key(const cJSON *v, int *err)
{
	const cJSON *k;
	const char **names, *found = NULL;
	size_t n = 0;

	if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
		return NULL;
	for (k = v->child; k; k = k->next) {
		n++;
		if ((found = dup_key(k, err)) || *err)
			return found;
	}
	if (!cJSON_IsObject(v) || n < 2)
		return NULL;
	names = malloc(n * sizeof(*names));
	if (!names) {
		*err = -ENOMEM;
		return NULL;
	}
	n = 0;
	for (k = v->child; k; k = k->next)
		names[n++] = k->string ? k->string : "";
	qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 1; i < n && !found; i++)
		if (!strcmp(names[i - 1], names[i]))
			found = names[i];
	free(names);
	return found;
}

/* The frame is hostile text: the same strict JSON as the config
 * (json-strict.h: one value, no trailing data, no leading zeros, no raw
 * control characters, valid UTF-8) and no key twice, before cJSON, which
 * is lenient about all of these, reads it. Replies and returns NULL when
 * the frame fails. */
static cJSON *parse_strict(struct client *c, const char *buf, uint32_t len)
{
	char key[ESCAPE_BUF(32)];
	const char *why, *dup;
	size_t at = 0;
	cJSON *msg;
	int err = 0;

	if (json_strict_check(buf, len, &at, &why) < 0) {
		control_reply_error(c, EBADMSG, "the message is not a JSON object: invalid JSON at byte %zu: %s", at, why);
		return NULL;
	}
	msg = cJSON_ParseWithLength(buf, len);
	if (!msg || !cJSON_IsObject(msg)) {
		control_reply_error(c, EBADMSG, "the message is not a JSON object");
		cJSON_Delete(msg);
		return NULL;
	}
	dup = dup_key(msg, &err);
	if (err)
		control_reply_error(c, ENOMEM, "out of memory while reading the message");
	else if (dup)
		control_reply_error(c, EBADMSG, "the message has the key \"%s\" twice; send each key once",
				    escape_text(dup, 32, key, sizeof(key)));
	if (err || dup) {
		cJSON_Delete(msg);
		return NULL;
	}
	return msg;
}

/* A read-only view of a session's rings for spillwayctl trace: the I/O
 * log is there. Only its uid or root: the rings show what it does. */
static void do_io_log(struct client *c, const cJSON *msg)
{
	struct session *s;
	const char *name;
	char err[256], path[64];
	cJSON *o;
	int fd;

	if (field_string(msg, "io_log", "session", &name, err, sizeof(err)) < 0) {
		control_reply_error(c, EINVAL, "%s", err);
		return;
	}
	s = spw_proto_session_name_valid(name) ? session_find(c->d, name) : NULL;
	if (!s || (s->uid != c->uid && c->uid != 0) || s->rings_fd < 0) {
		control_reply_error(c, s && s->rings_fd >= 0 ? EPERM : ENOENT, "io_log %s: %s", s ? s->name : "?",
			    s && s->rings_fd >= 0 ? "the session belongs to another user" : "no such session with rings");
		return;
	}
	/* A new open file description, read-only: the peer cannot write
	 * the rings through it. Kept with the rings (a reply may wait for
	 * the socket, and sends the descriptor then). */
	if (s->rings_ro_fd < 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", s->rings_fd);
		s->rings_ro_fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	fd = s->rings_ro_fd;
	if (fd < 0) {
		control_reply_error(c, errno, "io_log %s: reopening the rings read-only: %s", s->name, strerror(errno));
		return;
	}
	o = control_reply(SPW_MSG_IO_LOG);
	cJSON_AddStringToObject(o, "session", s->name);
	cJSON_AddNumberToObject(o, "rings_bytes", (double)s->layout.bytes);
	cJSON_AddNumberToObject(o, "io_hdr_off", (double)s->layout.io_hdr_off);
	cJSON_AddNumberToObject(o, "io_events_off", (double)s->layout.io_events_off);
	cJSON_AddNumberToObject(o, "entries", SPW_IO_LOG_ENTRIES);
	control_send_json(c, o, &fd, 1);
}

static void do_drop(struct client *c, const cJSON *msg)
{
	const char *name;
	char err[256];

	if (field_string(msg, "drop", "session", &name, err, sizeof(err)) < 0) {
		control_reply_error(c, EINVAL, "%s", err);
		return;
	}
	if (!spw_proto_session_name_valid(name)) {
		control_reply_error(c, EINVAL, "drop: that is not a session name");
		return;
	}
	persist_drop(c, name);
}

void control_handle_frame(struct client *c, const char *buf, uint32_t len)
{
	cJSON *msg = parse_strict(c, buf, len);
	char tname[ESCAPE_BUF(32)];
	const cJSON *type;

	if (!msg)
		return;
	type = cJSON_GetObjectItemCaseSensitive(msg, "type");
	if (!cJSON_IsString(type)) {
		control_reply_error(c, EBADMSG, "the message has no string \"type\"");
		goto out;
	}
	if (!strcmp(type->valuestring, SPW_MSG_HELLO)) {
		do_hello(c, msg);
		goto out;
	}
	/* The type is the client's text: one escaped line in log and reply. */
	escape_text(type->valuestring, 32, tname, sizeof(tname));
	if (!c->hello) {
		control_reply_error(c, EPROTO, "\"%s\" before hello; send hello first", tname);
		goto out;
	}
	if (!strcmp(type->valuestring, SPW_MSG_ATTACH))
		do_attach(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_REGISTER))
		do_register(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_UNREGISTER))
		do_unregister(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_DETACH))
		control_detach(c);
	else if (!strcmp(type->valuestring, SPW_MSG_DROP))
		do_drop(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_CHECKPOINT))
		checkpoint_request(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_RESTORE))
		restore_request(c, msg);
	else if (!strcmp(type->valuestring, SPW_MSG_IO_LOG))
		do_io_log(c, msg);
	else
		control_reply_error(c, EOPNOTSUPP, "unknown message type \"%s\"", tname);
out:
	cJSON_Delete(msg);
}

