/* SPDX-License-Identifier: MIT */
/*
 * daemon.h: spillwayd's loop. One libuv loop, one thread:
 *
 *   struct daemon   the loop, config, listeners, every client and session
 *                   (daemon.c)
 *   struct client   one control connection (control.h, control-conn.h)
 *   struct session  one attached trainer: region, page table, rings
 *                   (session.h, dataplane.h)
 *
 * Ownership: the daemon owns its clients; a client owns at most one session
 * (persistent sessions that outlive their client come with the NVMe tier).
 * Objects that embed libuv handles are freed from the handle's close
 * callback; everything else they hold is released synchronously first, so
 * the pool figures are right the moment a client is gone.
 */
#ifndef SPW_DAEMON_H
#define SPW_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "daemon-config.h"
#include "list.h"

struct swap_dir;
struct uring;

/* A listening unix socket on the loop (control.sock, status.sock). */
struct listener {
	struct daemon *d;
	int fd;                 /* -1 until listening */
	uv_poll_t poll;
	char path[128];
	const char *what;       /* for messages: "control", "status" */
	void (*serve)(struct daemon *d, int fd); /* takes each accepted fd */
};

struct daemon {
	uv_loop_t loop;
	struct config *cfg;
	const char *config_path; /* as given on the command line, or NULL */

	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t watchdog;
	uint64_t watchdog_usec;

	struct listener control, status;
	int spare_fd;           /* /dev/null, given up to refuse at EMFILE */

	uv_idle_t idle;         /* active while any session is polled */
	uv_timer_t backlog_timer;
	struct list polling;
	struct list clients;
	struct list sessions;
	unsigned next_client_id;

	int numa_node;          /* resolved from pool.numa_node / pool.gpu, -1 local */

	/* The NVMe tier: one io_uring for every session's swap I/O, created at
	 * start and freed after the last pager. swap_dirs is the daemon's own
	 * copy of swap.dirs (a reload does not move swap files under live
	 * sessions; it takes a restart). */
	struct uring *uring;
	uv_poll_t uring_poll;
	struct swap_dir *swap_dirs;
	unsigned nswap_dirs;
	unsigned uring_depth;
	uint64_t used_bytes, locked_bytes;
	uint64_t start_ns;
	bool stopping;
	int state_fd;            /* persist.state_dir, opened at start; -1 when off (state.c) */
};

int daemon_run(struct config *cfg, const char *config_path);
/* The SPW_FEAT_* bits this daemon can grant at hello. */
uint32_t daemon_features(const struct daemon *d);
void daemon_update_status(struct daemon *d);
/* Listens on socket.dir/name with mode (and socket.group when set_group)
 * and hands each connection accepted to serve(); what names l in messages.
 * Returns 0 or a negative errno. */
int daemon_listen(struct daemon *d, struct listener *l, const char *name, const char *what, unsigned mode,
		  bool set_group, void (*serve)(struct daemon *d, int fd));

#endif
