/* SPDX-License-Identifier: MIT */
/*
 * Persistent sessions: orphaned when their client dies, taken over by the
 * next client of their uid, dropped, or released when their lease ends.
 * What a takeover hands on is only what the daemon holds anyway (region,
 * page table, swap); the client's marks say whether it is one step's
 * state (docs/persistent.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "control-conn.h"
#include "control.h"
#include "daemon.h"
#include "dataplane.h"
#include "log.h"
#include "pager.h"
#include "persist.h"
#include "session.h"
#include "state.h"
#include "status.h"

static uint64_t orphan_age_s(const struct session *s)
{
	return (uv_hrtime() - s->orphaned_ns) / 1000000000ull;
}

static uint64_t lease_left_s(const struct session *s)
{
	uint64_t age = orphan_age_s(s);

	return age < s->lease_s ? s->lease_s - age : 0;
}

static void lease_freed(uv_handle_t *h)
{
	free(h);
}

static void lease_stop(struct session *s)
{
	if (s->lease) {
		uv_close((uv_handle_t *)s->lease, lease_freed);
		s->lease = NULL;
	}
}

static void lease_over(uv_timer_t *t)
{
	struct session *s = t->data;
	struct daemon *d = s->d;
	char a[32];

	if (s->ckpt) {
		/* Its pages are being copied: a second later. */
		uv_timer_start(t, lease_over, 1000, 0);
		return;
	}
	log_info("session %s (uid %u): orphaned for %llu s, its lease (%u s) is over; released %s, its %u tensors and "
		 "its swap", s->name, (unsigned)s->uid, (unsigned long long)orphan_age_s(s), s->lease_s,
		 format_bytes(s->bytes, a, sizeof(a)), s->ntensors);
	state_forget(s);
	session_free(s);
	daemon_update_status(d);
	status_refresh_soon(d);
}

static bool lease_start(struct session *s)
{
	struct daemon *d = s->d;

	s->lease = malloc(sizeof(*s->lease));
	if (!s->lease || uv_timer_init(&d->loop, s->lease) < 0) {
		free(s->lease);
		s->lease = NULL;
		log_error("session %s: out of memory for its lease timer; released instead of kept", s->name);
		return false;
	}
	s->lease->data = s;
	uv_timer_start(s->lease, lease_over, (uint64_t)s->lease_s * 1000u, 0);
	dataplane_stop(s);
	s->owner = NULL;
	s->orphaned_ns = uv_hrtime();
	return true;
}

bool persist_restored(struct session *s)
{
	char a[32];

	if (!lease_start(s))
		return false;
	log_info("session %s (uid %u): restored with %s and %u tensors at committed step %llu%s; kept as an orphan for "
		 "%u s: a persistent attach of its name by its uid resumes it", s->name, (unsigned)s->uid,
		 format_bytes(s->bytes, a, sizeof(a)), s->ntensors, (unsigned long long)s->committed_step,
		 s->opened_step > s->committed_step && s->write_step == s->opened_step
		 ? " (its client had died inside spw_optimizer_write: the next attach starts anew)"
		 : s->opened_step > s->committed_step ? " (its client had died inside the next step's updates)" : "",
		 s->lease_s);
	status_refresh_soon(s->d);
	return true;
}

bool persist_orphan(struct session *s, const char *why)
{
	struct daemon *d = s->d;
	char a[32];

	/* Shutting down, a session whose save into persist.state_dir waits
	 * or copies stays until it is saved: a client that dies then (inside
	 * a step's updates, say) leaves an orphan saved as it is. */
	if (!s->persistent || (d->stopping && !checkpoint_saving_state(s)) || !s->pager || !lease_start(s))
		return false;
	/* Pins the dead client held are released once nothing it asked
	 * for is still on its way; what it wrote into them stays. */
	s->settling = s->pending > 0;
	if (!s->settling)
		pager_unpin_all(s->pager);
	log_warn("session %s: client (uid %u, pid %d) %s without detach; kept as an orphan for %u s with %s and %u "
		 "tensors (committed step %llu%s); attach it again with the same name to resume, or `spillwayctl drop "
		 "%s`", s->name, (unsigned)s->uid, (int)s->pid, why, s->lease_s, format_bytes(s->bytes, a, sizeof(a)),
		 s->ntensors, (unsigned long long)s->committed_step,
		 s->opened_step > s->committed_step && s->write_step == s->opened_step
		 ? ", died inside spw_optimizer_write (load_state_dict): its state is partly overwritten, and the next "
		   "attach starts anew"
		 : s->opened_step > s->committed_step ? ", died inside the next step's updates" : "", s->name);
	/* A checkpoint that waited for this step's commit gets none now: a
	 * save into persist.state_dir saves the orphan as it is (once its
	 * pins are released), a user's is refused. */
	checkpoint_orphaned(s);
	status_refresh_soon(d);
	return true;
}

void persist_settled(struct session *s)
{
	uint64_t n;

	if (!s->settling || s->pending)
		return;
	s->settling = false;
	n = pager_unpin_all(s->pager);
	log_debug("session %s: its dead client's last request completed; released %llu pins", s->name,
		  (unsigned long long)n);
	checkpoint_orphaned(s);
}

void persist_take_over(struct client *c, struct session *s, uint64_t region_bytes, uint32_t page_size,
		       uint32_t lease_s)
{
	char err[768], a[32], b[32], ra[32], rb[32];
	uint64_t age = orphan_age_s(s);
	int r;

	if (s->settling) {
		control_reply_error(c, EAGAIN, "attach %s: the session's last client died with page requests in flight; "
			    "they are completing now: attach again in a moment", s->name);
		return;
	}
	if (region_bytes != s->bytes || page_size != s->page_size) {
		control_reply_error(c, EINVAL, "attach %s: the orphaned session holds a region of %s in pages of %s, this "
			    "attach asks for %s in pages of %s; attach with the same region_bytes and page_size to "
			    "resume it, or drop it (spillwayctl drop %s)", s->name, format_bytes(s->bytes, a, sizeof(a)),
			    format_bytes(s->page_size, b, sizeof(b)), format_bytes(region_bytes, ra, sizeof(ra)),
			    format_bytes(page_size, rb, sizeof(rb)), s->name);
		return;
	}
	r = session_takeover(s, c, err, sizeof(err));
	if (r < 0) {
		control_reply_error(c, -r, "%s", err);
		return;
	}
	lease_stop(s);
	control_client_set_session(c, s);
	s->pid = c->pid;
	s->orphaned_ns = 0;
	s->lease_s = lease_s;
	s->reattaches++;
	log_info("attach %s: pid %d took over the session, orphaned %llu s ago (%u tensors, committed step %llu%s)",
		 s->name, (int)s->pid, (unsigned long long)age, s->ntensors, (unsigned long long)s->committed_step,
		 s->opened_step > s->committed_step ? "; its last client died inside the next step's updates" : "");
	daemon_update_status(s->d);
	status_refresh_soon(s->d);
	control_attach_reply(c, s, true);
}

int persist_adopt(struct session *s, const char *name, uint64_t bytes, bool swappable, bool scratch, uint32_t *id,
		  uint32_t *npages, char *err, size_t errlen)
{
	uint32_t tid = session_tensor_find(s, name);
	uint64_t have;
	bool sw;

	if (tid == UINT32_MAX || tid == s->unregistering ||
	    pager_tensor_info(s->pager, tid, &have, &sw, npages) < 0) {
		snprintf(err, errlen, "register %s in %s: the session holds no tensor of that name to adopt (it holds %u); "
			 "the model or the optimizer's settings differ from the run that left it: drop the session "
			 "(spillwayctl drop %s) to start over", name, s->name, s->ntensors, s->name);
		return -ENOENT;
	}
	if ((bytes && have != bytes) || sw != swappable) {
		snprintf(err, errlen, "register %s in %s: the session's tensor of that name holds %llu bytes, %s; this "
			 "client asks for %llu bytes, %s: the layout differs from the run that left it; drop the "
			 "session (spillwayctl drop %s) to start over", name, s->name, (unsigned long long)have,
			 sw ? "swappable" : "resident", (unsigned long long)bytes, swappable ? "swappable" : "resident",
			 s->name);
		return -EEXIST;
	}
	if (s->tclaimed[tid]) {
		snprintf(err, errlen, "register %s in %s: this client already holds that tensor (id %u)", name, s->name,
			 tid);
		return -EEXIST;
	}
	s->tclaimed[tid] = 1;
	s->tscratch[tid] = scratch;
	*id = tid;
	return 0;
}

int32_t persist_mark(struct session *s, const struct spw_sqe *sqe)
{
	if (sqe->flags == SPW_MARK_OPEN) {
		/* A write's OPEN, or the first update of the step it opened
		 * (the write was whole: the journal covers the rest). */
		if (sqe->arg > s->opened_step || (sqe->arg == s->opened_step && !sqe->page))
			s->write_step = sqe->page == SPW_MARK_BY_WRITE ? sqe->arg : 0;
		if (sqe->arg > s->opened_step)
			s->opened_step = sqe->arg;
		return 0;
	}
	if (sqe->flags == SPW_MARK_STATS) {
		float coef;

		memcpy(&coef, &sqe->tensor, sizeof(coef));
		s->clip_coef = coef >= 0.0f && coef <= 1.0f ? coef : -1.0f; /* -1: none worth showing */
		s->adam_us = sqe->page;
		return 0;
	}
	uint64_t now = uv_hrtime();

	/* The client's word: a new optimizer on the session may count
	 * from 1 again (a takeover's is held to the committed step by the
	 * library). The step time operators see (status, metrics, top): a moving
	 * average of the time between commits, 1/4 weight on the newest. */
	if (s->last_commit_ns && sqe->arg > s->committed_step)
		s->step_ns = s->step_ns ? (3 * s->step_ns + (now - s->last_commit_ns)) / 4 : now - s->last_commit_ns;
	s->last_commit_ns = now;
	s->skipped_steps += sqe->page >> 31;
	s->committed_step = sqe->arg;
	if (sqe->arg >= s->write_step)
		s->write_step = 0;
	s->scale_bits = sqe->tensor;
	s->good_steps = sqe->page;
	checkpoint_committed(s);
	return 0;
}

void persist_drop(struct client *c, const char *name)
{
	struct session *s = session_find(c->d, name);
	struct daemon *d = c->d;
	uint64_t bytes;
	char a[32];
	cJSON *o;

	/* Another uid's session is as absent as none: names are per uid. */
	if (!s || (s->uid != c->uid && c->uid != 0)) {
		control_reply_error(c, s ? EPERM : ENOENT, "drop %s: %s", name,
			    s ? "the session belongs to another user (only its owner or root may drop it)"
			      : "no such session (spillwayctl status lists them)");
		return;
	}
	if (s->ckpt || s->restore) {
		control_reply_error(c, EBUSY, "drop %s: a checkpoint or restore of the session is under way; drop it "
			    "when that is done", name);
		return;
	}
	if (s->owner || s->attaching) {
		control_reply_error(c, EBUSY, "drop %s: the session is attached by pid %d; only an orphaned session can "
			    "be dropped (stop that trainer: a detach releases the session)", name, (int)s->pid);
		return;
	}
	bytes = s->bytes;
	log_info("drop %s: uid %u (pid %d) dropped the orphaned session (orphaned %llu s ago); released %s and its %u "
		 "tensors", name, (unsigned)c->uid, (int)c->pid, (unsigned long long)orphan_age_s(s),
		 format_bytes(bytes, a, sizeof(a)), s->ntensors);
	state_forget(s);
	session_free(s);
	daemon_update_status(d);
	status_refresh_soon(d);
	o = control_reply(SPW_MSG_DROP);
	cJSON_AddStringToObject(o, "session", name);
	cJSON_AddNumberToObject(o, "region_bytes", (double)bytes);
	control_send_json(c, o, NULL, 0);
}

void persist_orphans_text(struct daemon *d, bool any_uid, uid_t uid, char *buf, size_t len)
{
	struct list *p, *t;
	uint64_t held = 0;
	unsigned n = 0;
	size_t at;
	char a[32];

	buf[0] = '\0';
	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if (s->orphaned_ns && (any_uid || s->uid == uid)) {
			held += s->bytes;
			n++;
		}
	}
	if (!n)
		return;
	at = (size_t)snprintf(buf, len, "; %u orphaned session%s hold%s %s of it:", n, n == 1 ? "" : "s",
			      n == 1 ? "s" : "", format_bytes(held, a, sizeof(a)));
	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if (at >= len || !s->orphaned_ns || !(any_uid || s->uid == uid))
			continue;
		at += (size_t)snprintf(buf + at, len - at, " %s (uid %u, %s, lease %llu s left)", s->name,
				       (unsigned)s->uid, format_bytes(s->bytes, a, sizeof(a)),
				       (unsigned long long)lease_left_s(s));
	}
	if (at < len)
		snprintf(buf + at, len - at, "; `spillwayctl drop NAME` releases one");
}

void persist_release_all(struct daemon *d)
{
	struct list *p, *t;

	list_for_each_safe(p, t, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if (!s->orphaned_ns)
			continue;
		log_warn("shutdown: released orphaned session %s (committed step %llu)%s", s->name,
			 (unsigned long long)s->committed_step,
			 d->state_fd >= 0 ? "; persist.state_dir holds it when it had committed a step"
					  : "; set persist.state_dir to keep persistent sessions across a restart");
		session_free(s);
	}
}

uint64_t persist_lease_left_s(const struct session *s)
{
	return s->orphaned_ns ? lease_left_s(s) : 0;
}

uint64_t persist_orphan_age_s(const struct session *s)
{
	return s->orphaned_ns ? orphan_age_s(s) : 0;
}
