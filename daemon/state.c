/* SPDX-License-Identifier: MIT */
/*
 * persist.state_dir: persistent sessions across a daemon restart. At
 * SIGTERM each persistent session is checkpointed into the state
 * directory at its next commit point (checkpoint.c; the shutdown waits
 * for those, at most persist.commit_wait_s for a commit point to come,
 * and keeps the service manager's stop timeout from running out while
 * the saves make progress);
 * at start each checkpoint found there is restored as an orphan
 * (restore.c), its lease counted from the start. The same save, while the
 * daemon runs, is a flush: asked for by the session's client (FLUSH,
 * checkpoint.c) or every persist.flush_interval_s, so that a kill -9 of
 * the daemon (or a power cut) loses only what came after the last one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "daemon.h"
#include "log.h"
#include "notify.h"
#include "safedir.h"
#include "session.h"
#include "state.h"

/* While saving at shutdown: every EXTEND_TICK_MS, EXTEND_TIMEOUT_USEC
 * (systemd >= 236) of EXTEND_US, so a save of 100 GiB is not killed by
 * TimeoutStopSec; not once the saves made no progress for STALL_TICKS. */
#define EXTEND_TICK_MS 5000
#define EXTEND_US 30000000ull
#define STALL_TICKS 12

static unsigned saving;
static bool starting;
static uv_timer_t flush_timer;
static bool flush_timer_on;
static uv_timer_t *wait_timer;
static uv_timer_t *extend_timer;
static uint64_t extend_done;
static unsigned extend_stalled;
static void (*then_fn)(struct daemon *d);
static struct daemon *then_d;

/* A session's entry in the state directory: its name with '/' made '+'
 * (no session name holds a '+'). */
static void entry_name(const char *session, char *buf, size_t len)
{
	snprintf(buf, len, "%s", session);
	for (char *p = buf; *p; p++)
		if (*p == '/')
			*p = '+';
}

void state_entry_path(const struct daemon *d, const char *session, char *buf, size_t len)
{
	char entry[SPW_PROTO_MAX_SESSION_NAME + 1];

	entry_name(session, entry, sizeof(entry));
	snprintf(buf, len, "%s/%s", d->cfg->persist_state_dir, entry);
}

static void run_then_now(void);

static void timer_freed(uv_handle_t *h)
{
	free(h);
}

static void run_then(uv_timer_t *t)
{
	void (*fn)(struct daemon *d) = then_fn;

	uv_close((uv_handle_t *)t, timer_freed);
	wait_timer = NULL;
	then_fn = NULL;
	if (fn)
		fn(then_d);
}

/* The shutdown's saves, for the service manager: how far they are, and
 * more time while they get on (a save waiting for a commit point is
 * bounded by the wait timer; a stalled drive is not, so no more time
 * once nothing moved for STALL_TICKS). */
static void extend_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;
	uint64_t done = 0, total = 0, a, b;
	unsigned waiting = 0;
	char line[512], ext[64], copied[96], wait[96], x[32], y[32];
	struct list *p, *n;

	list_for_each_safe(p, n, &d->sessions) {
		const struct session *s = list_entry(p, struct session, link);

		if (!checkpoint_saving_state(s))
			continue;
		checkpoint_progress(s, &a, &b);
		done += a;
		total += b;
		waiting += !strcmp(checkpoint_state(s), "waiting");
	}
	extend_stalled = done > extend_done || waiting ? 0 : extend_stalled + 1;
	extend_done = done;
	if (extend_stalled == STALL_TICKS)
		log_warn("shutdown: the saves into persist.state_dir made no progress in %d s; the service manager's "
			 "stop timeout runs again", STALL_TICKS * EXTEND_TICK_MS / 1000);
	snprintf(ext, sizeof(ext), "EXTEND_TIMEOUT_USEC=%llu\n", EXTEND_US);
	snprintf(copied, sizeof(copied), "%s of %s copied", format_bytes(done, x, sizeof(x)),
		 format_bytes(total, y, sizeof(y)));
	snprintf(wait, sizeof(wait), "%u waiting for a commit point (persist.commit_wait_s)", waiting);
	snprintf(line, sizeof(line), "%sSTATUS=shutdown: saving %u persistent session%s into persist.state_dir: %s%s%s",
		 extend_stalled < STALL_TICKS ? ext : "", saving, saving == 1 ? "" : "s", total ? copied : "",
		 total && waiting ? ", " : "", waiting ? wait : "");
	notify_send(line);
}

static void extend_stop(void)
{
	if (extend_timer)
		uv_close((uv_handle_t *)extend_timer, timer_freed);
	extend_timer = NULL;
}

/* The last save ended: the teardown runs from the loop, not from inside
 * whatever ended it (a session being freed, say). */
static void finish(void)
{
	if (saving || starting || !then_fn)
		return;
	extend_stop();
	if (wait_timer)
		uv_timer_start(wait_timer, run_then, 0, 0);
	else
		run_then_now();
}

static void run_then_now(void)
{
	void (*fn)(struct daemon *d) = then_fn;

	then_fn = NULL;
	if (fn)
		fn(then_d);
}

static void saved(void *arg, int err)
{
	char *name = arg;

	if (err == 0)
		log_info("shutdown: session %s saved in persist.state_dir", name);
	else
		log_error("shutdown: session %s could not be saved in persist.state_dir: %s", name, strerror(-err));
	free(name);
	saving--;
	finish();
}

static void waited(uv_timer_t *t)
{
	struct daemon *d = t->data;
	struct list *p, *n;

	starting = true;
	list_for_each_safe(p, n, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);

		if (checkpoint_cancel_waiting(s, ECANCELED, "no commit point came in time"))
			log_warn("shutdown: session %s reached no commit point in %u s (step %llu open); not saved "
				 "(persist.commit_wait_s)",
				 s->name, d->cfg->persist_commit_wait_s, (unsigned long long)s->opened_step);
	}
	starting = false;
	finish();
}

static void flushed(void *arg, int err)
{
	char *name = arg;

	if (err == 0)
		log_debug("persist.flush_interval_s: session %s flushed into persist.state_dir", name);
	else
		log_warn("persist.flush_interval_s: session %s was not flushed into persist.state_dir: %s; its last "
			 "flush stays", name, strerror(-err));
	free(name);
}

/* Every persistent session that committed a step since its last flush is
 * saved into the state directory at its next commit point; an orphan
 * left inside a step's updates since its last flush, as it is. */
static void flush_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;
	char path[4096];
	struct list *p, *n;

	list_for_each_safe(p, n, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);
		bool torn = s->orphaned_ns && s->opened_step > s->committed_step && s->opened_step > s->flushed_opened;
		char *name;

		if (!s->persistent || !s->pager || s->attaching || s->restore || s->ckpt || s->nbad ||
		    !s->committed_step || (s->committed_step <= s->flushed_step && !torn))
			continue;
		state_entry_path(d, s->name, path, sizeof(path));
		s->flushed_step = s->committed_step;
		s->flushed_opened = s->opened_step;
		if (!(name = strdup(s->name)) || checkpoint_save(s, d->state_fd, path, flushed, name) < 0) {
			log_warn("persist.flush_interval_s: session %s: out of memory; not flushed", s->name);
			free(name);
		}
	}
}

void state_forget(struct session *s)
{
	char entry[SPW_PROTO_MAX_SESSION_NAME + 1];
	struct stat st;

	if (s->d->state_fd < 0 || !s->persistent)
		return;
	entry_name(s->name, entry, sizeof(entry));
	if (fstatat(s->d->state_fd, entry, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	checkpoint_remove_dir(s->d->state_fd, entry);
	log_info("persist.state_dir: removed %s, the last save of session %s, which ended", entry, s->name);
}

void state_flush_stop(void)
{
	if (flush_timer_on)
		uv_close((uv_handle_t *)&flush_timer, NULL);
	flush_timer_on = false;
}

bool state_save_all(struct daemon *d, void (*then)(struct daemon *d))
{
	char path[4096], entry[SPW_PROTO_MAX_SESSION_NAME + 1];
	struct list *p, *n;

	state_flush_stop();
	if (d->state_fd < 0)
		return false;
	then_fn = then;
	then_d = d;
	starting = true;
	list_for_each_safe(p, n, &d->sessions) {
		struct session *s = list_entry(p, struct session, link);
		char *name;

		if (!s->persistent || !s->pager || s->attaching || s->restore)
			continue;
		/* An orphan left inside a step's updates is saved as it is
		 * (checkpoint.c): the next trainer's takeover resumes it as
		 * if the daemon had never restarted. */
		if (s->committed_step == 0) {
			log_warn("shutdown: session %s never committed a step; not saved", s->name);
			continue;
		}
		if (s->nbad) {
			log_warn("shutdown: session %s is damaged (%u pages lost since spillwayd saved them); not saved", s->name, s->nbad);
			continue;
		}
		if (checkpoint_busy(s) && (name = strdup(s->name))) {
			/* A flush copying now is this save: the session's
			 * ring is not served again after it. */
			saving++;
			if (checkpoint_also_tell(s, saved, name)) {
				log_info("shutdown: session %s: the flush under way is its save", s->name);
				continue;
			}
			saving--;
			free(name);
		}
		if (checkpoint_busy(s) && !checkpoint_cancel_waiting(s, ESHUTDOWN, "spillwayd is shutting down")) {
			log_warn("shutdown: session %s is being checkpointed by request; not saved in persist.state_dir",
				 s->name);
			continue;
		}
		entry_name(s->name, entry, sizeof(entry));
		snprintf(path, sizeof(path), "%s/%s", d->cfg->persist_state_dir, entry);
		name = strdup(s->name);
		saving++; /* before: a save that fails at once reports at once */
		if (!name || checkpoint_save(s, d->state_fd, path, saved, name) < 0) {
			log_error("shutdown: session %s: out of memory; not saved", s->name);
			free(name);
			saving--;
		}
	}
	starting = false;
	if (!saving) {
		then_fn = NULL;
		return false;
	}
	log_info("shutdown: saving %u persistent session%s in %s", saving, saving == 1 ? "" : "s",
		 d->cfg->persist_state_dir);
	wait_timer = saving ? malloc(sizeof(*wait_timer)) : NULL;
	if (wait_timer) {
		uv_timer_init(&d->loop, wait_timer);
		wait_timer->data = d;
		uv_timer_start(wait_timer, waited, (uint64_t)d->cfg->persist_commit_wait_s * 1000u, 0);
	}
	extend_timer = malloc(sizeof(*extend_timer));
	if (extend_timer) {
		uv_timer_init(&d->loop, extend_timer);
		extend_timer->data = d;
		extend_done = 0;
		extend_stalled = 0;
		uv_timer_start(extend_timer, extend_tick, 0, EXTEND_TICK_MS);
	}
	return true;
}

int state_start(struct daemon *d)
{
	const char *dir = d->cfg->persist_state_dir;
	char err[512];
	struct dirent *e;
	DIR *dd;
	int fd, r;

	d->state_fd = -1;
	if (!dir)
		return 0;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		log_error("persist.state_dir %s: %s", dir, strerror(errno));
		return -errno;
	}
	r = safedir_open("persist.state_dir", dir, err, sizeof(err));
	if (r < 0) {
		log_error("%s", err);
		return r;
	}
	d->state_fd = r;
	fd = fcntl(d->state_fd, F_DUPFD_CLOEXEC, 0);
	dd = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dd) {
		log_error("persist.state_dir %s: %s", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((e = readdir(dd))) {
		if (e->d_name[0] == '.')
			continue;
		if (strstr(e->d_name, ".tmp-")) {
			/* A save that never finished: the previous one, if
			 * any, is whole beside it. */
			log_info("persist.state_dir: removed %s, a save the last shutdown did not finish", e->d_name);
			checkpoint_remove_dir(d->state_fd, e->d_name);
			continue;
		}
		restore_from_state(d, d->state_fd, dir, e->d_name);
	}
	closedir(dd);
	if (d->cfg->persist_flush_interval_s) {
		uint64_t ms = (uint64_t)d->cfg->persist_flush_interval_s * 1000u;

		uv_timer_init(&d->loop, &flush_timer);
		flush_timer.data = d;
		uv_timer_start(&flush_timer, flush_tick, ms, ms);
		flush_timer_on = true;
	}
	return 0;
}

bool state_saving(void)
{
	return then_fn != NULL;
}

void state_stop(struct daemon *d)
{
	if (d->state_fd >= 0)
		close(d->state_fd);
	d->state_fd = -1;
}
