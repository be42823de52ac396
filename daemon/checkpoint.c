/* SPDX-License-Identifier: MIT */
/*
 * Checkpoints: a persistent session's tensors written to a directory at a
 * committed step. The request waits for the commit point (no step's
 * updates open); there, on the loop and between two ring entries, the
 * plan says where each page is (its slot, its swap file, or nowhere) and
 * the session trains on at once: the pager guards the planned pages
 * (copy-on-write, pager-snap.c) while a threadpool thread copies every
 * page: from the region (through the daemon's own mapping of its memfd),
 * from a side buffer the loop saved it into before the trainer changed
 * it, or, for pages only on disk, from the swap file (a reflink, or a direct read).
 * The directory is written as <dir>.tmp-<pid>, made durable (one syncfs()
 * for its files and entries), and renamed into place last
 * (checkpoint-write.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "checkpoint-private.h"
#include "checkpoint.h"
#include "control-conn.h"
#include "control.h"
#include "daemon.h"
#include "dataplane.h"
#include "log.h"
#include "pager.h"
#include "region.h"
#include "session.h"
#include "state.h"
#include "status.h"


static void ck_set_client(struct checkpoint *ck, struct client *c)
{
	ck->c = c;
	if (c) {
		c->waiting = true;
		c->waitp = &ck->c;
		control_client_watch(c);
	}
}

static void ck_freed(uv_handle_t *h)
{
	free(h->data);
}

static void ck_free(struct checkpoint *ck)
{
	if (!ck)
		return;
	if (ck->c) {
		ck->c->waitp = NULL;
		ck->c->waiting = false;
	}
	for (uint32_t i = 0; ck->t && i < ck->nt; i++)
		free(ck->t[i].name);
	free(ck->t);
	free(ck->pages);
	for (unsigned i = 0; i < ck->nsrc; i++) {
		close(ck->srcfd[i]);
		if (ck->srcdfd[i] >= 0)
			close(ck->srcdfd[i]);
	}
	if (ck->map)
		munmap((void *)ck->map, ck->map_len);
	if (ck->parent >= 0)
		close(ck->parent);
	cJSON_Delete(ck->meta);
	free(ck->faults);
	free(ck->session);
	free(ck->path);
	free(ck->tmp);
	/* After the copier ended and the pager let go of it. */
	pager_snap_free(ck->snap);
	if (ck->wake_on)
		uv_close((uv_handle_t *)&ck->wake, ck_freed); /* the handle is inside ck */
	else
		free(ck);
}

/* The answer to whoever asked (nobody when it left), and ck freed. */
static void ck_reply_error(struct checkpoint *ck, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ck_reply_error(struct checkpoint *ck, int err, const char *fmt, ...)
{
	struct client *c = ck->c;
	char msg[1100];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c) {
		ck->c = NULL;
		c->waitp = NULL;
		c->waiting = false;
		control_reply_error(c, err, "%s", msg);
	} else {
		log_warn("%s", msg);
	}
	if (ck->done)
		ck->done(ck->done_arg, -err);
	if (ck->also)
		ck->also(ck->also_arg, -err);
	ck_free(ck);
}

int checkpoint_open_parent(char *path, const char **base, char *err, size_t errlen)
{
	size_t n = strlen(path);
	char *slash;
	int fd;

	while (n > 1 && path[n - 1] == '/')
		path[--n] = '\0';
	slash = strrchr(path, '/');
	if (path[0] != '/' || n >= PATH_MAX || !slash || !slash[1] || !strcmp(slash + 1, ".") ||
	    !strcmp(slash + 1, "..")) {
		snprintf(err, errlen, "\"%.200s\" is not an absolute path naming a directory to create", path);
		return -EINVAL;
	}
	*slash = '\0';
	fd = open(slash == path ? "/" : path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		fd = -errno;
		snprintf(err, errlen, "%.400s: %s", slash == path ? "/" : path, strerror(-fd));
	}
	*slash = '/';
	*base = slash + 1;
	return fd;
}

/* Whether ck may start now. At a commit point (no step's updates open)
 * any checkpoint may. A save into persist.state_dir (a flush, the save
 * at SIGTERM) of an orphan left inside a step's updates may too, once
 * its dead client's last requests completed: nothing changes its pages
 * any more, so a byte-exact copy of every tensor (the tile journal and
 * the undo copies with the rest) and of both marks comes back as the
 * same orphan, and the next trainer's takeover finishes or redoes the
 * step as it would have without the restart. A user's checkpoint never
 * holds such a mix (it waits, or is refused: checkpoint_request). One
 * that never committed a step is not worth it (state.c skips it). */
static bool ck_ready(const struct checkpoint *ck, const struct session *s)
{
	if (s->opened_step <= s->committed_step)
		return true;
	return ck->state && s->orphaned_ns && !s->owner && !s->settling && s->committed_step > 0;
}

/* The refusal of a user's checkpoint of an orphan inside updates. */
static void orphan_refusal(const struct session *s, char *buf, size_t len)
{
	if (s->write_step == s->opened_step) {
		snprintf(buf, len, "its client died inside spw_optimizer_write (load_state_dict) with step %" PRIu64
			 " open, so its state is partly overwritten and holds no step: there is nothing to checkpoint; "
			 "a persistent attach of %s starts anew (nothing resumed), and the trainer loads its checkpoint "
			 "again", s->opened_step, s->name);
		return;
	}
	snprintf(buf, len, "its client died inside step %" PRIu64 "'s updates, so its state mixes steps %" PRIu64
		 " and %" PRIu64 " and no commit will come; a checkpoint holds a committed step only: take it over "
		 "first (a persistent attach of %s: the new optimizer finishes or redoes step %" PRIu64 "), then "
		 "checkpoint it at its next commit (a flush, spillwayctl flush %s, saves it as it is into "
		 "persist.state_dir)", s->opened_step, s->committed_step, s->opened_step, s->name, s->opened_step,
		 s->name);
}

/* From the copier's thread: a page the loop waited for is copied. */
static void ck_wake_send(void *arg)
{
	struct checkpoint *ck = arg;

	uv_async_send(&ck->wake);
}

/* On the loop: whatever waited for the copier goes on. */
static void ck_wake(uv_async_t *h)
{
	struct checkpoint *ck = h->data;
	struct session *s = ck->s;

	if (!s || !s->pager)
		return;
	pager_snap_progress(s->pager);
	/* A PIN that waited is tried again (not when shutting down: the
	 * session is kept at its commit point). */
	if (s->sq_paused && !s->d->stopping)
		dataplane_resume(s);
}

/* Whether tensor id goes into ck: every named one, but a user's
 * checkpoint leaves out scratch tensors (their bytes matter only inside a
 * step, and it is taken between steps); a save into persist.state_dir
 * keeps them (an orphan saved inside a step's updates needs them). */
static bool ck_takes(const struct checkpoint *ck, const struct session *s, uint32_t id)
{
	return s->tnames[id] && (ck->state || !s->tscratch[id]);
}

/* On the loop at the commit point: where every page is. */
static int ck_plan(struct checkpoint *ck, char *err, size_t errlen)
{
	struct session *s = ck->s;
	uint64_t np = 0;
	uint32_t nt = 0;

	for (uint32_t id = 0; id < s->ntnames_cap; id++) {
		uint64_t bytes;
		uint32_t npages;
		bool sw;

		if (ck_takes(ck, s, id) && pager_tensor_info(s->pager, id, &bytes, &sw, &npages) == 0) {
			nt++;
			np += npages;
		}
	}
	ck->t = calloc(nt ? nt : 1, sizeof(*ck->t));
	ck->pages = calloc(np ? np : 1, sizeof(*ck->pages));
	ck->snap = pager_snap_new(s->pager, np, s->d->cfg->checkpoint_cow_bytes, ck_wake_send, ck);
	ck->low_priority = s->d->cfg->checkpoint_priority == CONFIG_PRIORITY_LOW;
	if (!ck->t || !ck->pages || !ck->snap) {
		snprintf(err, errlen, "out of memory for the plan of %" PRIu64 " pages", np);
		return -ENOMEM;
	}
	np = 0;
	for (uint32_t id = 0; id < s->ntnames_cap; id++) {
		struct ck_tensor *t = &ck->t[ck->nt];

		if (!ck_takes(ck, s, id) || pager_tensor_info(s->pager, id, &t->bytes, &t->swappable, &t->npages) < 0)
			continue;
		ck->total += t->bytes;
		if (!(t->name = strdup(s->tnames[id]))) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		snprintf(t->file, sizeof(t->file), "t%05u.bin", ck->nt);
		t->first = np;
		ck->nt++;
		for (uint32_t i = 0; i < t->npages; i++, np++) {
			struct ck_page *pg = &ck->pages[np];
			struct pager_src src;
			unsigned k;
			int r = pager_snap_plan(s->pager, ck->snap, id, i, np, &src);

			if (r < 0) {
				snprintf(err, errlen, "tensor %s page %u: %s", t->name, i, pager_last_error(s->pager));
				return r;
			}
			pg->kind = (uint8_t)src.kind;
			pg->slot = src.slot;
			pg->off = src.off;
			pg->crc = src.crc;
			pg->next_use = src.next_use;
			if (src.kind != PAGER_SRC_DISK)
				continue;
			for (k = 0; k < ck->nsrc && ck->srcorig[k] != src.fd; k++)
				;
			if (k == ck->nsrc) {
				char proc[64];

				if (k == MAX_SRC) {
					snprintf(err, errlen, "more than %d swap files", MAX_SRC);
					return -EMFILE;
				}
				/* Open files of the copier's own, which the pager
				 * closing its own cannot take away: one for reflinks
				 * (and reads where O_DIRECT is refused), one for
				 * reads past the page cache (checkpoint-write.c). */
				snprintf(proc, sizeof(proc), "/proc/self/fd/%d", src.fd);
				ck->srcfd[k] = open(proc, O_RDONLY | O_CLOEXEC);
				if (ck->srcfd[k] < 0) {
					snprintf(err, errlen, "reopening swap file %s: %s", src.path, strerror(errno));
					return -errno;
				}
				ck->srcdfd[k] = open(proc, O_RDONLY | O_DIRECT | O_CLOEXEC);
				ck->srcorig[k] = src.fd;
				ck->srcpath[k] = src.path;
				ck->nsrc++;
			}
			pg->src = (uint8_t)k;
		}
	}
	ck->npages = np;
	ck->map_len = s->region->bytes;
	ck->map = mmap(NULL, ck->map_len, PROT_READ, MAP_SHARED, s->region->fd, 0);
	if (ck->map == MAP_FAILED) {
		ck->map = NULL;
		snprintf(err, errlen, "mapping the session's region: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static void ck_done(uv_work_t *w, int status)
{
	struct checkpoint *ck = w->data;
	struct session *s = ck->s;
	double secs = (double)(uv_hrtime() - ck->t_start) / 1e9;
	struct client *c;
	char a[32], b[32], c2[32], c3[32], c4[32], d1[32], d2[32];
	cJSON *o;

	if (status < 0 && !ck->err) {
		ck->err = status;
		snprintf(ck->msg, sizeof(ck->msg), "the copy could not run: %s", uv_strerror(status));
	}
	if (ck->stale[0])
		log_info("checkpoint %s: removed %s beside %s: what a checkpoint left when its spillwayd died "
			 "before finishing it", ck->session, ck->stale, ck->path);
	if (s) {
		struct client *owner = s->owner;

		s->ckpt = NULL;
		if (s->committed_step > ck->step)
			ck->steps_during = s->committed_step - ck->step;
		pager_snap_detach(s->pager);
		pager_snap_progress(s->pager);
		/* Either may end s: nothing touches it after. Shutting down,
		 * the trainer stays where it is until its connection closes. */
		if (owner && owner->detach_waits) {
			owner->detach_waits = false;
			owner->waiting = false;
			control_detach(owner);
		} else if (s->sq_paused && !s->d->stopping) {
			dataplane_resume(s);
		}
	}
	pager_snap_stats(ck->snap, &ck->cow);
	if (ck->err) {
		ck_reply_error(ck, -ck->err, "checkpoint %s to %s: %s; nothing was left behind", ck->session, ck->path,
			       ck->msg);
		return;
	}
	if (ck->link_note[0])
		log_warn("checkpoint %s: %s", ck->session, ck->link_note);
	if (ck->link)
		log_info("checkpoint %s: a stopping daemon's save: %" PRIu64 " pages (%s) left where they are in the "
			 "session's swap files, linked into %s; the rest written", ck->session, ck->kept / ck->page_size,
			 format_bytes(ck->kept, a, sizeof(a)), ck->path);
	if (ck->note[0] && ck->buffered)
		log_info("checkpoint %s: its data files were written through the page cache: %s", ck->session, ck->note);
	log_info("checkpoint %s: step %" PRIu64 ", %u tensors, %s in %.3f s (%.0f MB/s; %s reflinked, %s "
		 "written with O_DIRECT, %s buffered) to %s; the session committed %" PRIu64 " step%s meanwhile, its ring "
		 "waited %.3f s (plan %.3f s), %s saved for the copy (%s of it as the session's reads brought it in; "
		 "the copy read %s from swap itself), %" PRIu64 " rewritten pages moved to spare swap, "
		 "%" PRIu64 " pages waited for it; it gave the disk to waiting sessions %" PRIu64 " times (%.3f s)",
		 ck->session, ck->step, ck->nt, format_bytes(ck->bytes, a, sizeof(a)), secs,
		 secs > 0 ? (double)ck->bytes / secs / 1e6 : 0.0, format_bytes(ck->copied, b, sizeof(b)),
		 format_bytes(ck->direct, d1, sizeof(d1)), format_bytes(ck->buffered, d2, sizeof(d2)), ck->path,
		 ck->steps_during, ck->steps_during == 1 ? "" : "s",
		 (double)(ck->plan_ns + ck->cow.held_ns) / 1e9, (double)ck->plan_ns / 1e9,
		 format_bytes(ck->cow.saved_bytes, c2, sizeof(c2)), format_bytes(ck->cow.read_saved_bytes, c3, sizeof(c3)),
		 format_bytes(ck->swap_read, c4, sizeof(c4)), ck->cow.moved, ck->cow.waits, ck->yields,
		 (double)ck->yield_ns / 1e9);
	c = ck->c;
	if (c) {
		ck->c = NULL;
		c->waitp = NULL;
		c->waiting = false;
		o = control_reply(SPW_MSG_CHECKPOINT);
		cJSON_AddStringToObject(o, "session", ck->session);
		cJSON_AddStringToObject(o, "dir", ck->path);
		cJSON_AddNumberToObject(o, "committed_step", (double)ck->step);
		cJSON_AddNumberToObject(o, "tensors", ck->nt);
		cJSON_AddNumberToObject(o, "bytes", (double)ck->bytes);
		cJSON_AddNumberToObject(o, "bytes_total", (double)ck->total);
		cJSON_AddNumberToObject(o, "copied_bytes", (double)ck->copied);
		/* The rest, written from memory: with O_DIRECT, or through the
		 * page cache where the filesystem refuses it (tmpfs). */
		cJSON_AddNumberToObject(o, "direct_bytes", (double)ck->direct);
		cJSON_AddNumberToObject(o, "buffered_bytes", (double)ck->buffered);
		cJSON_AddNumberToObject(o, "seconds", secs);
		cJSON_AddNumberToObject(o, "wait_seconds", (double)(ck->t_start - ck->t_ask) / 1e9);
		/* Copy-on-write: what the trainer paid, and what it did meanwhile. */
		cJSON_AddNumberToObject(o, "stall_seconds", (double)(ck->plan_ns + ck->cow.held_ns) / 1e9);
		cJSON_AddNumberToObject(o, "steps_during_copy", (double)ck->steps_during);
		cJSON_AddNumberToObject(o, "cow_bytes", (double)ck->cow.saved_bytes);
		cJSON_AddNumberToObject(o, "cow_peak_bytes", (double)ck->cow.peak_bytes);
		cJSON_AddNumberToObject(o, "cow_waits", (double)ck->cow.waits);
		cJSON_AddNumberToObject(o, "cow_moved_bytes", (double)(ck->cow.moved * ck->page_size));
		cJSON_AddNumberToObject(o, "cow_from_reads_bytes", (double)ck->cow.read_saved_bytes);
		/* What the copy read from swap files itself. */
		cJSON_AddNumberToObject(o, "swap_read_bytes", (double)ck->swap_read);
		/* checkpoint.priority "low": what the copy gave to sessions waiting on the disk. */
		cJSON_AddNumberToObject(o, "yields", (double)ck->yields);
		cJSON_AddNumberToObject(o, "yield_seconds", (double)ck->yield_ns / 1e9);
		control_send_json(c, o, NULL, 0);
	}
	if (ck->done)
		ck->done(ck->done_arg, 0);
	if (ck->also)
		ck->also(ck->also_arg, 0);
	ck_free(ck);
}

/* At the commit point, between two ring entries: plan, guard, copy; the
 * session goes on at once. */
static void ck_start(struct checkpoint *ck)
{
	struct session *s = ck->s;
	char err[768];
	int r;

	ck->running = true;
	ck->t_start = uv_hrtime();
	ck->step = s->committed_step;
	ck->opened = s->opened_step > s->committed_step ? s->opened_step : s->committed_step;
	ck->opened_by_write = ck->opened > s->committed_step && s->write_step == ck->opened;
	ck->scale_bits = s->scale_bits;
	ck->good_steps = s->good_steps;
	ck->page_size = s->page_size;
	ck->region_bytes = s->bytes;
	ck->swap_bytes = s->swap_bytes;
	ck->lease_s = s->lease_s;
	/* Stopping, the session is not served after the commit point (its
	 * ring stays paused below): its pages on disk stay as they are. */
	ck->link = ck->state && s->d->stopping;
#if SPW_FAULT_INJECTION
	/* Test-only: a copy slow enough that the trainer certainly meets
	 * pages it has not reached. */
	if (getenv("SPILLWAY_CHECKPOINT_STALL_MS"))
		ck->stall_ms = (uint32_t)strtoul(getenv("SPILLWAY_CHECKPOINT_STALL_MS"), NULL, 10);
	/* Test-only: faults of the copier's O_DIRECT writes (uring.h's
	 * rules, counted over every checkpoint of the daemon), and a
	 * filesystem that refuses O_DIRECT. */
	if (getenv("SPILLWAY_CHECKPOINT_FAULTS"))
		ck->faults = strdup(getenv("SPILLWAY_CHECKPOINT_FAULTS"));
	ck->no_direct = getenv("SPILLWAY_CHECKPOINT_NO_DIRECT") != NULL;
#endif
	r = ck_plan(ck, err, sizeof(err));
	if (r == 0) {
		r = uv_async_init(&s->d->loop, &ck->wake, ck_wake);
		if (r < 0)
			snprintf(err, sizeof(err), "cannot set up the copier's wake: %s", uv_strerror(r));
		ck->wake.data = ck;
		ck->wake_on = r == 0;
	}
	if (r == 0) {
		r = pager_snap_attach(s->pager, ck->snap);
		if (r < 0)
			snprintf(err, sizeof(err), "out of memory");
	}
	if (r == 0) {
		ck->work.data = ck;
		r = uv_queue_work(&s->d->loop, &ck->work, checkpoint_write, ck_done);
		if (r < 0)
			snprintf(err, sizeof(err), "cannot queue the copy: %s", uv_strerror(r));
	}
	if (r < 0) {
		s->ckpt = NULL;
		pager_snap_detach(s->pager);
		ck_reply_error(ck, -r, "checkpoint %s to %s: %s", s->name, ck->path, err);
		return;
	}
	/* Shutting down, the session is saved for the next daemon: its
	 * trainer stays at this commit point (what it did after would be
	 * lost with this daemon anyway). */
	if (s->d->stopping)
		s->sq_paused = true;
	ck->plan_ns = uv_hrtime() - ck->t_start;
	log_debug("checkpoint %s: step %" PRIu64 " reached; %" PRIu64 " pages planned in %.3f ms, copied while the "
		  "session trains on", s->name, ck->step, ck->npages, (double)ck->plan_ns / 1e6);
}

void checkpoint_committed(struct session *s)
{
	if (s->ckpt && !s->ckpt->running && s->opened_step <= s->committed_step)
		ck_start(s->ckpt);
}

void checkpoint_orphaned(struct session *s)
{
	struct checkpoint *ck = s->ckpt;
	char why[512];

	if (!ck || ck->running || s->opened_step <= s->committed_step)
		return;
	if (!ck->state) {
		orphan_refusal(s, why, sizeof(why));
		checkpoint_cancel_waiting(s, ESTALE, why);
		return;
	}
	if (ck_ready(ck, s)) {
		log_info("session %s: its client died inside step %" PRIu64 "'s updates; saved in persist.state_dir as "
			 "it is (committed step %" PRIu64 ", step %" PRIu64 " open)", s->name, s->opened_step,
			 s->committed_step, s->opened_step);
		ck_start(ck);
	}
}

void checkpoint_session_gone(struct session *s)
{
	struct checkpoint *ck = s->ckpt;

	if (!ck)
		return;
	s->ckpt = NULL;
	if (!ck->running) {
		ck_reply_error(ck, ECANCELED, "checkpoint %s to %s: the session ended before its next commit point; "
			       "nothing was written", s->name, ck->path);
		return;
	}
	/* The pager goes with s; the copier keeps its snapshot (ck's). */
	pager_snap_detach(s->pager);
	ck->s = NULL;
	__atomic_store_n(&ck->aborted, 1, __ATOMIC_SEQ_CST);
}

int checkpoint_save(struct session *s, int dirfd, const char *path, void (*done)(void *arg, int err), void *arg)
{
	struct checkpoint *ck = calloc(1, sizeof(*ck));

	if (!ck)
		return -ENOMEM;
	ck->parent = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	ck->path = strdup(path);
	ck->session = strdup(s->name);
	if (ck->parent < 0 || !ck->path || !ck->session || !strrchr(ck->path, '/') ||
	    asprintf(&ck->tmp, "%s.tmp-%d", strrchr(ck->path, '/') + 1, (int)getpid()) < 0) {
		ck->tmp = NULL;
		ck_free(ck);
		return -ENOMEM;
	}
	ck->base = strrchr(ck->path, '/') + 1;
	ck->d = s->d;
	ck->s = s;
	ck->uid = s->uid;
	ck->state = true;
	ck->done = done;
	ck->done_arg = arg;
	ck->t_ask = uv_hrtime();
	s->ckpt = ck;
	if (ck_ready(ck, s))
		ck_start(ck);
	else if (s->orphaned_ns)
		log_info("session %s: its dead client's last requests are completing; saved in persist.state_dir "
			 "once they have", s->name);
	else
		log_info("session %s is inside step %" PRIu64 "; it is saved in persist.state_dir at that step's commit",
			 s->name, s->opened_step);
	return 0;
}

bool checkpoint_cancel_waiting(struct session *s, int err, const char *why)
{
	struct checkpoint *ck = s->ckpt;

	if (!ck || ck->running)
		return false;
	s->ckpt = NULL;
	ck_reply_error(ck, err, "checkpoint %s to %s: %s; nothing was written", s->name, ck->path, why);
	return true;
}

bool checkpoint_also_tell(struct session *s, void (*done)(void *arg, int err), void *arg)
{
	struct checkpoint *ck = s->ckpt;

	if (!ck || !ck->state || !ck->running || ck->also)
		return false;
	ck->also = done;
	ck->also_arg = arg;
	return true;
}

bool checkpoint_busy(const struct session *s)
{
	return s->ckpt != NULL;
}

bool checkpoint_saving_state(const struct session *s)
{
	return s->ckpt && s->ckpt->state;
}

const char *checkpoint_state(const struct session *s)
{
	return !s->ckpt ? "none" : s->ckpt->running ? "copying" : "waiting";
}

void checkpoint_progress(const struct session *s, uint64_t *done, uint64_t *total)
{
	const struct checkpoint *ck = s->ckpt;

	*done = ck && ck->running ? __atomic_load_n(&ck->bytes, __ATOMIC_RELAXED) : 0;
	*total = ck && ck->running ? ck->total : 0;
}

bool checkpoint_defer_detach(struct session *s)
{
	return s->ckpt && s->ckpt->running;
}

static const char *field(const cJSON *msg, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

void checkpoint_request(struct client *c, const cJSON *msg)
{
	const char *name = field(msg, "session"), *dir = field(msg, "dir");
	/* A flush: the save a restart or a crash restores from, into
	 * persist.state_dir (state.c), replacing the last one. */
	bool flush = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "flush"));
	char err[768], spath[PATH_MAX];
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(msg, "meta");
	struct session *s;
	struct checkpoint *ck;
	struct stat st;

	if (flush && name && spw_proto_session_name_valid(name)) {
		if (c->d->state_fd < 0) {
			control_reply_error(c, EOPNOTSUPP, "flush %s: spillwayd runs without persist.state_dir, so there "
				    "is nowhere to flush to and a crash of the daemon loses the session; set "
				    "persist.state_dir in its config (docs/persistent.md)", name);
			return;
		}
		state_entry_path(c->d, name, spath, sizeof(spath));
		dir = spath;
	}
	if (!name || !dir || !spw_proto_session_name_valid(name) || strlen(dir) >= PATH_MAX) {
		control_reply_error(c, EINVAL, "checkpoint: \"session\" (a session name) and \"dir\" (an absolute path) "
			    "are required");
		return;
	}
	/* The frame's size bounds it; it is the asker's own, for its own
	 * directory, and never read back by the daemon. */
	if (meta && !cJSON_IsObject(meta)) {
		control_reply_error(c, EINVAL, "checkpoint %s: \"meta\" must be a JSON object", name);
		return;
	}
	if (c->d->stopping) {
		control_reply_error(c, ESHUTDOWN, "checkpoint %s: spillwayd is shutting down", name);
		return;
	}
	s = session_find(c->d, name);
	if (!s || (s->uid != c->uid && c->uid != 0)) {
		control_reply_error(c, s ? EPERM : ENOENT, "checkpoint %s: %s", name,
			    s ? "the session belongs to another user (only its owner or root may checkpoint it)"
			      : "no such session (spillwayctl status lists them)");
		return;
	}
	if (!s->persistent || s->attaching || s->restore || !s->pager) {
		control_reply_error(c, s->persistent ? EAGAIN : EINVAL, "checkpoint %s: %s", name,
			    s->persistent ? "the session is still being set up; ask again in a moment"
					  : "only a persistent session marks its commit points (attach it with "
					    "persistent, OffloadAdamW(persistent=True))");
		return;
	}
	/* First: no checkpoint of it can ever be taken, copying or not (a
	 * periodic flush of such an orphan runs at once). */
	if (!flush && !s->owner && s->opened_step > s->committed_step) {
		orphan_refusal(s, err, sizeof(err));
		control_reply_error(c, ESTALE, "checkpoint %s: %s", name, err);
		return;
	}
	if (s->ckpt) {
		control_reply_error(c, EBUSY, "checkpoint %s: another checkpoint of the session is under way", name);
		return;
	}
	if (s->nbad) {
		control_reply_error(c, EBADMSG, "checkpoint %s: the session has %u damaged page%s, lost "
			    "since spillwayd saved them (spillwayctl status lists them); it is not saved: load the last "
			    "checkpoint", name,
			    s->nbad, s->nbad == 1 ? "" : "s");
		return;
	}
	if (s->committed_step == 0) {
		control_reply_error(c, EAGAIN, "checkpoint %s: the session has no committed step yet; ask after its "
			    "first step", name);
		return;
	}
	ck = calloc(1, sizeof(*ck));
	if (ck)
		ck->parent = -1;
	if (!ck || !(ck->path = strdup(dir)) || !(ck->session = strdup(name)) ||
	    (meta && !(ck->meta = cJSON_Duplicate(meta, true)))) {
		ck_free(ck);
		control_reply_error(c, ENOMEM, "checkpoint %s: out of memory", name);
		return;
	}
	ck->d = c->d;
	if (flush) {
		ck->state = true;
		ck->base = strrchr(ck->path, '/') + 1;
		ck->parent = fcntl(c->d->state_fd, F_DUPFD_CLOEXEC, 0);
		if (ck->parent < 0 || asprintf(&ck->tmp, "%s.tmp-%d", ck->base, (int)getpid()) < 0) {
			ck->tmp = NULL;
			ck_free(ck);
			control_reply_error(c, ENOMEM, "flush %s: out of memory", name);
			return;
		}
		goto start;
	}
	ck->parent = checkpoint_open_parent(ck->path, &ck->base, err, sizeof(err));
	if (ck->parent < 0) {
		int r = -ck->parent;

		ck->parent = -1;
		ck_free(ck);
		control_reply_error(c, r, "checkpoint %s: %s", name, err);
		return;
	}
	/* Checked on the descriptor: the directory asked about is the one
	 * written into, whatever its path becomes. */
	if (fstat(ck->parent, &st) < 0 || (c->uid != 0 && st.st_uid != c->uid)) {
		control_reply_error(c, EPERM, "checkpoint %s: the directory that would hold %s is not owned by uid %u",
			    name, ck->path, (unsigned)c->uid);
		ck_free(ck);
		return;
	}
	if (fstatat(ck->parent, ck->base, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
		control_reply_error(c, EEXIST, "checkpoint %s: %s already exists; a checkpoint goes into a new "
			    "directory (remove it, or pick another name)", name, ck->path);
		ck_free(ck);
		return;
	}
	if (asprintf(&ck->tmp, "%s.tmp-%d", ck->base, (int)getpid()) < 0) {
		ck->tmp = NULL;
		ck_free(ck);
		control_reply_error(c, ENOMEM, "checkpoint %s: out of memory", name);
		return;
	}
start:
	ck->s = s;
	ck->uid = flush ? s->uid : c->uid;
	ck->gid = c->gid;
	ck->t_ask = uv_hrtime();
	s->ckpt = ck;
	ck_set_client(ck, c);
	if (ck_ready(ck, s))
		ck_start(ck);
	else
		log_debug("checkpoint %s: step %" PRIu64 " is open; waiting for %s", name, s->opened_step,
			  s->orphaned_ns ? "its dead client's last requests" : "its commit");
}
