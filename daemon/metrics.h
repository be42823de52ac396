/* SPDX-License-Identifier: MIT */
/*
 * metrics.h: the daemon's figures for Prometheus (metrics.c renders them,
 * metrics-server.c serves them over HTTP on metrics.listen).
 *
 * The figures are the status document's (status.c): nothing is counted
 * twice and nothing costs anything until a scrape asks. Every session is
 * shown, whatever the scraper's uid: the endpoint is off by default,
 * loopback unless metrics.allow_remote, and a unix socket path follows
 * socket.mode and socket.group.
 */
#ifndef SPW_DAEMON_METRICS_H
#define SPW_DAEMON_METRICS_H

#include <stddef.h>

struct daemon;

/* The text exposition (format 0.0.4) of everything now; the caller frees
 * it. NULL when out of memory. */
char *metrics_render(struct daemon *d, size_t *len);

/* Starts listening on metrics.listen when it is set (0 and nothing
 * otherwise). Returns 0 or a negative errno, logged with the address. */
int metrics_start(struct daemon *d);
/* What the endpoint listens on ("127.0.0.1:9464", the kernel's port for
 * port 0, or the unix socket's path), or NULL when it does not. */
const char *metrics_listening(void);
/* Closes the listener and every connection (their memory goes in the
 * close callbacks, so the loop must run afterwards); removes a unix
 * socket. Safe to call when metrics_start() did nothing or failed. */
void metrics_stop(struct daemon *d);

#endif
