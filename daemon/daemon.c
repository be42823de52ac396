/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "config.h"
#include "control.h"
#include "daemon.h"
#include "dataplane.h"
#include "log.h"
#include "persist.h"
#include "metrics.h"
#include "notify.h"
#include "pager.h"
#include "region.h"
#include "session.h"
#include "spw-proto.h"
#include "state.h"
#include "status.h"
#include "safedir.h"
#include "swap.h"
#include "swap-lock.h"
#include "uring.h"

/* socket.dir/name into buf; -ENAMETOOLONG when it does not fit. */
static int daemon_socket_path(struct daemon *d, const char *name, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%s", d->cfg->socket_dir, name);

	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		log_error("socket.dir %s is too long for a unix socket path", d->cfg->socket_dir);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int mkdir_p(const char *dir)
{
	char tmp[256];
	size_t n = strlen(dir);

	if (n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, dir, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* socket.dir, opened and checked once (safedir.h); the sockets are made,
 * re-moded and removed relative to it, never by name after the check. */
static int socket_dirfd = -1;

/* The socket's name inside socket.dir, and the address that reaches it
 * through the checked descriptor: bind() and connect() take only a path,
 * and /proc/self/fd/N/name resolves through the open directory itself.
 * Without /proc, the path (the directory is not writable by others, so
 * the name cannot be swapped under us). */
static const char *socket_name(const char *path, struct sockaddr_un *sa)
{
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	int n = -1;

	if (socket_dirfd >= 0 && access("/proc/self/fd", X_OK) == 0)
		n = snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", socket_dirfd, name);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path)) {
		/* Fits: daemon_socket_path() refuses a path sun_path cannot hold. */
		size_t len = strnlen(path, sizeof(sa->sun_path) - 1);

		memcpy(sa->sun_path, path, len);
		sa->sun_path[len] = '\0';
	}
	return name;
}

static void socket_unlink(const char *path)
{
	struct sockaddr_un sa;
	const char *name = socket_name(path, &sa);

	if (socket_dirfd >= 0)
		unlinkat(socket_dirfd, name, 0);
	else
		unlink(path);
}

/* Creates a listening unix socket at path with mode and group. */
static int daemon_listen_unix(struct daemon *d, const char *path, unsigned mode, bool set_group)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *name = socket_name(path, &sa);
	int dfd = socket_dirfd >= 0 ? socket_dirfd : AT_FDCWD;
	struct stat st;
	mode_t old;
	int fd, r;

	/* Both sockets follow socket.mode and socket.group: a status socket
	 * wider than the control one would show the pool and every uid's
	 * session count to users the operator kept out. */
	mode &= d->cfg->socket_mode;
	set_group = true;
	if (dfd == AT_FDCWD)
		name = path;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			log_error("%s exists and is not a socket; move it away or change socket.dir", path);
			return -EEXIST;
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			log_error("another spillwayd is already listening on %s; stop it first or use another socket.dir",
				  path);
			return -EADDRINUSE;
		}
		if (fd >= 0)
			close(fd);
		unlinkat(dfd, name, 0); /* stale, from a daemon that did not shut down */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Nobody may connect before the mode and group are right. */
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0) {
		r = -errno;
		log_error("cannot bind %s: %s", path, strerror(-r));
		goto fail;
	}
	if (fchmodat(dfd, name, mode, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (set_group && d->cfg->socket_group &&
	     fchownat(dfd, name, (uid_t)-1, d->cfg->socket_gid, AT_SYMLINK_NOFOLLOW) < 0)) {
		r = -errno;
		log_error("cannot set mode %04o%s%s on %s: %s", mode, set_group && d->cfg->socket_group ? " and group " : "",
			  set_group && d->cfg->socket_group ? d->cfg->socket_group : "", path, strerror(-r));
		goto fail;
	}
	if (listen(fd, 128) < 0) {
		r = -errno;
		log_error("cannot listen on %s: %s", path, strerror(-r));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	unlinkat(dfd, name, 0);
	return r;
}

uint32_t daemon_features(const struct daemon *d)
{
	/* SWAP only with swap.dirs; swappable tensors do not require it. */
	return SPW_FEAT_RING_POLL | SPW_FEAT_UNPIN_COPY | (d->nswap_dirs ? SPW_FEAT_SWAP : 0u);
}

/* accept4() for a listener; at the descriptor limit it refuses the pending
 * connection (through a spare descriptor kept for that, as libuv does) so
 * a level-triggered listener does not spin. Returns the fd or -errno. */
static int daemon_accept(struct daemon *d, int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd >= 0 || (errno != EMFILE && errno != ENFILE) || d->spare_fd < 0)
		return fd < 0 ? -errno : fd;
	close(d->spare_fd);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0) {
		log_warn("out of file descriptors (LimitNOFILE); refused a connection");
		close(fd);
	}
	d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return -EAGAIN;
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct listener *l = h->data;

	for (int i = 0; i < 16; i++) {
		int fd = daemon_accept(l->d, l->fd);

		if (fd < 0) {
			if (fd == -EINTR || fd == -ECONNABORTED)
				continue;
			if (fd != -EAGAIN)
				log_warn("%s: accept failed: %s", l->what, strerror(-fd));
			return;
		}
		l->serve(l->d, fd);
	}
}

int daemon_listen(struct daemon *d, struct listener *l, const char *name, const char *what, unsigned mode,
		  bool set_group, void (*serve)(struct daemon *d, int fd))
{
	int r = daemon_socket_path(d, name, l->path, sizeof(l->path));

	if (r < 0)
		return r;
	r = daemon_listen_unix(d, l->path, mode, set_group);
	if (r < 0)
		return r;
	l->d = d;
	l->fd = r;
	l->what = what;
	l->serve = serve;
	r = uv_poll_init(&d->loop, &l->poll, l->fd);
	if (r < 0)
		return r;
	l->poll.data = l;
	return uv_poll_start(&l->poll, UV_READABLE, on_accept);
}

static int resolve_numa(const struct config *c)
{
	int n;

	if (c->pool_numa_node >= 0)
		return c->pool_numa_node;
	if (!c->pool_gpu)
		return -1;
	n = region_pci_numa_node(c->pool_gpu);
	if (n < 0)
		log_info("pool.gpu %s: its NUMA node is unknown (/sys/bus/pci/devices/%s/numa_node); regions stay on "
			 "the node they are first touched on", c->pool_gpu, c->pool_gpu);
	return n;
}

void daemon_update_status(struct daemon *d)
{
	char line[160], a[32], b[32];
	unsigned n = 0;
	struct list *p, *t;

	list_for_each_safe(p, t, &d->sessions)
		n++;
	snprintf(line, sizeof(line), "STATUS=%u session%s, %s of %s pinned", n, n == 1 ? "" : "s",
		 format_bytes(d->used_bytes, a, sizeof(a)), format_bytes(d->cfg->pool_max_bytes, b, sizeof(b)));
	notify_send(line);
}

/* No session survives a restart (yet), so every swap file of this naming
 * in the configured directories is left over from a daemon that was
 * killed: remove it, or its space stays reserved against max_bytes. But
 * only once this daemon holds the directory's lock (swap-lock.h): a live
 * spillwayd on another socket.dir holds it, and starting is refused with
 * its pid instead of deleting its files. The locks are held until exit.
 * A directory that does not exist yet stays unlocked (as before, attaches
 * with swap fail until it exists). */
static struct swap_lock **swap_locks;

static int swap_remove_stale(struct daemon *d)
{
	char err[512];

	swap_locks = calloc(d->nswap_dirs ? d->nswap_dirs : 1, sizeof(*swap_locks));
	if (!swap_locks)
		return -ENOMEM;
	for (unsigned i = 0; i < d->nswap_dirs; i++) {
		int r = swap_lock_take(d->swap_dirs[i].path, d->cfg->socket_dir, &swap_locks[i], err, sizeof(err));

		if (r == -ENOENT) {
			log_warn("%s; attaches with swap will fail until it exists", err);
			continue;
		}
		if (r < 0) {
			log_error("%s", err);
			return r;
		}
		r = swap_dir_probe_direct(swap_lock_dirfd(swap_locks[i]), d->swap_dirs[i].path, err, sizeof(err));
		if (r < 0) {
			log_error("%s", err);
			return r;
		}
		swap_lock_remove_stale(swap_locks[i]);
		d->swap_dirs[i].fd = swap_lock_dirfd(swap_locks[i]);
		d->swap_dirs[i].have_fd = true;
	}
	return 0;
}

static void swap_locks_release(struct daemon *d)
{
	for (unsigned i = 0; swap_locks && i < d->nswap_dirs; i++)
		swap_locks[i] = swap_lock_release(swap_locks[i]);
	free(swap_locks);
	swap_locks = NULL;
}

/* Shutdown with sessions still draining (ended with I/O in flight): the
 * ring's poll handle stays open until their last request completes, or
 * until this timer gives up on a drive that does not answer. */
#define DRAIN_TIMEOUT_MS 30000
static uv_timer_t *drain_timer;

static void free_handle(uv_handle_t *h)
{
	free(h);
}

static void drain_end(struct daemon *d)
{
	if (d->uring_poll.loop && !uv_is_closing((uv_handle_t *)&d->uring_poll))
		uv_close((uv_handle_t *)&d->uring_poll, NULL);
	if (drain_timer && !uv_is_closing((uv_handle_t *)drain_timer))
		uv_close((uv_handle_t *)drain_timer, free_handle);
	drain_timer = NULL;
}

/* Every DRAIN_CHECK_MS: done when the last ended session let go (its
 * last request may end off the ring, a checksum on the threadpool), or
 * given up after DRAIN_TIMEOUT_MS. */
#define DRAIN_CHECK_MS 50
static uint64_t drain_waited_ms;

static void on_drain_timeout(uv_timer_t *t)
{
	struct daemon *d = t->data;

	if (!session_draining()) {
		drain_end(d);
		return;
	}
	drain_waited_ms += DRAIN_CHECK_MS;
	if (drain_waited_ms < DRAIN_TIMEOUT_MS)
		return;
	log_warn("shutdown: %u ended session%s still wait%s for the disk after %d s; exiting without them",
		 session_draining(), session_draining() == 1 ? "" : "s", session_draining() == 1 ? "s" : "",
		 DRAIN_TIMEOUT_MS / 1000);
	drain_end(d);
}

static void on_uring(uv_poll_t *h, int status, int events)
{
	struct daemon *d = h->data;

	/* Completions post CQEs and ring client doorbells from in here. */
	if (uring_reap(d->uring)) {
		dataplane_log_tier_errors(d);
		/* Room again: the sessions whose write-behind found none. */
		pager_room_kick();
	}
	/* Saving sessions at shutdown still needs their I/O. */
	if (d->stopping && !state_saving() && !session_draining())
		drain_end(d);
	(void)status;
	(void)events;
}

/* Copies swap.dirs: the pagers keep pointing at them across reloads. */
static int swap_dirs_copy(struct daemon *d, const struct config *cfg)
{
	if (!cfg->n_swap_dirs)
		return 0;
	d->swap_dirs = calloc(cfg->n_swap_dirs, sizeof(*d->swap_dirs));
	if (!d->swap_dirs)
		return -ENOMEM;
	for (size_t i = 0; i < cfg->n_swap_dirs; i++) {
		d->swap_dirs[i].path = strdup(cfg->swap_dirs[i].path);
		d->swap_dirs[i].max_bytes = cfg->swap_dirs[i].max_bytes;
		d->nswap_dirs++;
		if (!d->swap_dirs[i].path)
			return -ENOMEM;
	}
	return 0;
}

static void swap_dirs_free(struct daemon *d)
{
	for (unsigned i = 0; i < d->nswap_dirs; i++)
		free((char *)d->swap_dirs[i].path);
	free(d->swap_dirs);
	d->swap_dirs = NULL;
	d->nswap_dirs = 0;
}

/* One ring for every session's swap I/O. Every session gets a pager (it is
 * the page table for resident tensors too), so the ring is needed even
 * without swap.dirs. Registered-file and fixed-buffer tables are sized for
 * many sessions; running out only costs speed (buffers) or refuses one
 * attach with a message (files). */
static int uring_start(struct daemon *d)
{
	const struct config *cfg = d->cfg;
	struct rlimit rl = { 0 };
	uint64_t bufs = cfg->pool_max_bytes / (1ull << 30) + 1024;
	unsigned files = 1024 * (d->nswap_dirs ? d->nswap_dirs : 1);
	int r;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 2 < files)
		files = rl.rlim_cur / 2 > 16 ? (unsigned)(rl.rlim_cur / 2) : 16;
	if (bufs > 16384)
		bufs = 16384; /* the kernel's cap on registered buffers */
	d->uring_depth = cfg->swap_queue_depth;
	if (getenv("SPILLWAY_FAULTS") && *getenv("SPILLWAY_FAULTS"))
		log_warn("SPILLWAY_FAULTS=\"%s\" is set: disk faults will be injected (test-only)%s",
			 getenv("SPILLWAY_FAULTS"), SPW_FAULT_INJECTION ? "" : "; this build has no fault injection, ignored");
	r = uring_new(d->uring_depth, cfg->swap_sqpoll, files, (unsigned)bufs, &d->uring);
	if (r < 0) {
		log_error("cannot set up io_uring (depth %u): %s%s", d->uring_depth, strerror(-r),
			  r == -EINVAL ? " (bad SPILLWAY_FAULTS?)"
			  : r == -ENOSYS || r == -EPERM ? " (io_uring is disabled: kernel.io_uring_disabled, or a seccomp "
							  "filter without io_uring_setup)" : "");
		return r;
	}
	r = uv_poll_init(&d->loop, &d->uring_poll, uring_eventfd(d->uring));
	if (r < 0)
		return r;
	d->uring_poll.data = d;
	return uv_poll_start(&d->uring_poll, UV_READABLE, on_uring);
}

static void teardown(struct daemon *d)
{
	/* Frees every pager (bounded waits for their I/O) before the ring's
	 * poll handle goes; the ring itself is freed after the loop. */
	control_close_all(d);
	persist_release_all(d);
	metrics_stop(d);
	if (session_draining() && d->uring_poll.loop && (drain_timer = malloc(sizeof(*drain_timer)))) {
		/* Sessions whose I/O is still in flight keep the ring's poll
		 * handle, and so the loop, going until it drains (bounded). */
		log_info("shutdown: %u ended session%s wait%s for disk I/O in flight", session_draining(),
			 session_draining() == 1 ? "" : "s", session_draining() == 1 ? "s" : "");
		uv_timer_init(&d->loop, drain_timer);
		drain_timer->data = d;
		uv_timer_start(drain_timer, on_drain_timeout, DRAIN_CHECK_MS, DRAIN_CHECK_MS);
	} else {
		drain_end(d);
	}
	if (d->control.poll.loop)
		uv_close((uv_handle_t *)&d->control.poll, NULL);
	if (d->status.poll.loop)
		uv_close((uv_handle_t *)&d->status.poll, NULL);
	if (d->control.fd >= 0)
		socket_unlink(d->control.path);
	if (d->status.fd >= 0)
		socket_unlink(d->status.path);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
	uv_close((uv_handle_t *)&d->watchdog, NULL);
	uv_close((uv_handle_t *)&d->idle, NULL);
	uv_close((uv_handle_t *)&d->backlog_timer, NULL);
	state_flush_stop();
	status_stop(d);
}

static void on_stop(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;
	unsigned n = 0;
	struct list *p, *t;

	if (d->stopping)
		return;
	d->stopping = true;
	list_for_each_safe(p, t, &d->sessions)
		n++;
	log_info("%s: shutting down; detaching %u session%s", strsignal(signum), n, n == 1 ? "" : "s");
	notify_send("STOPPING=1\nSTATUS=shutting down");
	/* Persistent sessions go to persist.state_dir first, each at its
	 * next commit point; the teardown follows. */
	if (!state_save_all(d, teardown))
		teardown(d);
}

static void on_reload(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;
	struct config *n = NULL, *o = d->cfg;
	char err[768], a[32], b[32];
	char *tmp;

	if (config_load(d->config_path, &n, err, sizeof(err)) < 0) {
		log_error("SIGHUP: %s; keeping the running configuration", err);
		return;
	}
	/* The listening sockets exist already: their settings stay until a
	 * restart. Swap the old values back in and say so. */
	if (strcmp(n->socket_dir, o->socket_dir)) {
		log_warn("SIGHUP: socket.dir changed (%s -> %s); restart spillwayd to apply", o->socket_dir, n->socket_dir);
		tmp = n->socket_dir;
		n->socket_dir = o->socket_dir;
		o->socket_dir = tmp;
	}
	if (n->socket_mode != o->socket_mode)
		log_warn("SIGHUP: socket.mode changed (%04o -> %04o); restart spillwayd to apply", o->socket_mode,
			 n->socket_mode);
	if ((n->socket_group == NULL) != (o->socket_group == NULL) ||
	    (n->socket_group && strcmp(n->socket_group, o->socket_group)))
		log_warn("SIGHUP: socket.group changed; restart spillwayd to apply");
	if ((n->metrics_listen == NULL) != (o->metrics_listen == NULL) ||
	    (n->metrics_listen && strcmp(n->metrics_listen, o->metrics_listen)))
		log_warn("SIGHUP: metrics.listen changed; restart spillwayd to apply");
	n->socket_mode = o->socket_mode;
	tmp = n->socket_group;
	n->socket_group = o->socket_group;
	o->socket_group = tmp;
	n->socket_gid = o->socket_gid;
	/* Swap files of live sessions stay where they are, and the ring keeps
	 * its size: these take a restart. The rest of swap.* applies to new
	 * sessions. */
	{
		bool same = n->n_swap_dirs == d->nswap_dirs;

		for (size_t i = 0; same && i < n->n_swap_dirs; i++)
			same = !strcmp(n->swap_dirs[i].path, d->swap_dirs[i].path) &&
			       n->swap_dirs[i].max_bytes == d->swap_dirs[i].max_bytes;
		if (!same)
			log_warn("SIGHUP: swap.dirs changed; restart spillwayd to apply (sessions keep the old dirs)");
		if (n->swap_queue_depth != o->swap_queue_depth || n->swap_sqpoll != o->swap_sqpoll)
			log_warn("SIGHUP: swap.queue_depth/swap.sqpoll changed; restart spillwayd to apply");
	}
	if (n->pool_max_bytes < d->used_bytes)
		log_warn("SIGHUP: pool.max_bytes is now %s with %s in use; attached sessions keep their regions, new "
			 "attaches are refused until enough detach", format_bytes(n->pool_max_bytes, a, sizeof(a)),
			 format_bytes(d->used_bytes, b, sizeof(b)));
	d->cfg = n;
	config_free(o);
	log_set_level(n->log_level);
	d->numa_node = resolve_numa(n);
	log_info("SIGHUP: reloaded %s: log.level %s, pool.max_bytes %s, pool.session_max_bytes %s, ring.poll_us %u "
		 "(caps, page size and ring size apply to new sessions)",
		 n->origin, log_level_name(n->log_level), format_bytes(n->pool_max_bytes, a, sizeof(a)),
		 format_bytes(n->pool_session_max_bytes, b, sizeof(b)), n->ring_poll_us);
	daemon_update_status(d);
	(void)signum;
}

static void on_watchdog(uv_timer_t *t)
{
	notify_send("WATCHDOG=1");
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int daemon_run(struct config *cfg, const char *config_path)
{
	struct daemon *d;
	char a[32], b[32], line[256];
	int r, rc = 1;

	d = calloc(1, sizeof(*d));
	if (!d || uv_loop_init(&d->loop) < 0) {
		fprintf(stderr, "spillwayd: out of memory\n");
		free(d);
		config_free(cfg);
		return 1;
	}
	d->cfg = cfg;
	d->config_path = config_path;
	d->control.fd = d->status.fd = -1;
	d->state_fd = -1;
	d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	d->start_ns = uv_hrtime();
	list_init(&d->polling);
	list_init(&d->clients);
	list_init(&d->sessions);
	log_set_level(cfg->log_level);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();

	uv_signal_init(&d->loop, &d->sig_term);
	uv_signal_init(&d->loop, &d->sig_int);
	uv_signal_init(&d->loop, &d->sig_hup);
	uv_timer_init(&d->loop, &d->watchdog);
	uv_timer_init(&d->loop, &d->backlog_timer);
	uv_idle_init(&d->loop, &d->idle);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	d->watchdog.data = d->backlog_timer.data = d->idle.data = d;

	d->numa_node = resolve_numa(cfg);
	r = mkdir_p(cfg->socket_dir);
	if (r < 0) {
		log_error("cannot create socket.dir %s: %s", cfg->socket_dir, strerror(-r));
		goto out;
	}
	{
		char err[512];

		r = safedir_open("socket.dir", cfg->socket_dir, err, sizeof(err));
		if (r < 0) {
			log_error("%s", err);
			goto out;
		}
		socket_dirfd = r;
	}
	r = swap_dirs_copy(d, cfg);
	if (r < 0) {
		log_error("out of memory");
		goto out;
	}
	/* The swap dirs' locks prove no other spillwayd uses them, so stale
	 * files can go before the listeners exist; and everything a start
	 * logs is logged before the first client can connect. */
	r = swap_remove_stale(d);
	if (r < 0)
		goto out;
	r = uring_start(d);
	if (r < 0)
		goto out;
	/* Restores start before the first client can attach their names. */
	r = state_start(d);
	if (r < 0)
		goto out;
	r = control_listen(d);
	if (r < 0)
		goto out;
	r = status_listen(d);
	if (r < 0)
		goto out;
	r = metrics_start(d);
	if (r < 0)
		goto out;
	uv_signal_start(&d->sig_term, on_stop, SIGTERM);
	uv_signal_start(&d->sig_int, on_stop, SIGINT);
	uv_signal_start(&d->sig_hup, on_reload, SIGHUP);
	d->watchdog_usec = notify_watchdog_usec();
	if (d->watchdog_usec) {
		/* Twice per interval, as sd_watchdog_enabled(3) recommends. */
		uint64_t ms = d->watchdog_usec / 2000 ? d->watchdog_usec / 2000 : 1;
		uv_timer_start(&d->watchdog, on_watchdog, ms, ms);
	}
	log_info("spillwayd %s ready (%s): control %s, status %s, pool %s, session cap %s, page %u KiB, ring %u, "
		 "poll %u us, NUMA node %d", SPW_VERSION, cfg->origin, d->control.path, d->status.path,
		 format_bytes(cfg->pool_max_bytes, a, sizeof(a)), format_bytes(cfg->pool_session_max_bytes, b, sizeof(b)),
		 cfg->session_page_size / 1024, cfg->session_ring_entries, cfg->ring_poll_us, d->numa_node);
	{
		struct uring_stats us;

		uring_get_stats(d->uring, &us);
		for (unsigned i = 0; i < d->nswap_dirs; i++)
			log_info("swap dir %s, max_bytes %s", d->swap_dirs[i].path,
				 format_bytes(d->swap_dirs[i].max_bytes, a, sizeof(a)));
		log_info("io_uring: depth %u, sqpoll %s, fixed files %s, fixed buffers %s; %s", d->uring_depth,
			 us.sqpoll ? "on" : "off", us.fixed_files ? "on" : "off", us.fixed_buffers ? "on" : "off",
			 d->nswap_dirs ? "swappable tensors enabled"
				       : "no swap.dirs: resident tensors only (set swap.dirs for swappable ones)");
	}
	snprintf(line, sizeof(line), "READY=1\nSTATUS=0 sessions, 0 B of %s pinned",
		 format_bytes(cfg->pool_max_bytes, a, sizeof(a)));
	notify_send(line);
	rc = 0;
out:
	if (rc != 0)
		teardown(d);
	/* Runs until SIGTERM/SIGINT closes every handle (or, after a failed
	 * start, just finishes the closes). */
	uv_run(&d->loop, UV_RUN_DEFAULT);
	if (d->control.fd >= 0)
		close(d->control.fd);
	if (d->status.fd >= 0)
		close(d->status.fd);
	if (d->spare_fd >= 0)
		close(d->spare_fd);
	if (socket_dirfd >= 0)
		close(socket_dirfd);
	socket_dirfd = -1;
	/* Every pager is gone by now (sessions end in teardown, attaches
	 * still on the threadpool end before uv_run returns). */
	d->uring = uring_free(d->uring);
	state_stop(d);
	swap_locks_release(d);
	swap_dirs_free(d);
	r = uv_loop_close(&d->loop);
	if (r < 0) {
		log_error("shutdown: handles still open (%s)", uv_strerror(r));
		rc = 1;
	}
	if (rc == 0)
		log_info("stopped cleanly");
	config_free(d->cfg);
	free(d);
	return rc;
}
