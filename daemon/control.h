/* SPDX-License-Identifier: MIT */
/*
 * control.h: the control plane as the rest of the daemon sees it. A
 * control connection (struct client, control-conn.h) is opaque outside
 * control-conn.c and control.c.
 */
#ifndef SPW_DAEMON_CONTROL_H
#define SPW_DAEMON_CONTROL_H

#include <stdbool.h>
#include <stdint.h>

struct client;
struct daemon;
struct session;

int control_listen(struct daemon *d);
/* The end of session_attach(): r is 0 or a negative errno with the message
 * in s->work_err. Replies to the owner, or frees s when the owner left. */
void control_attach_done(struct session *s, int r);
void control_client_close(struct client *c, const char *why);
/* The attach reply for c, now the owner of s, with its descriptors;
 * reattached: c took s over from a client that died. */
void control_attach_reply(struct client *c, struct session *s, bool reattached);
void control_close_all(struct daemon *d);

/* The SPW_FEAT_* bits granted to c at hello. */
uint32_t control_client_features(const struct client *c);
/* Makes s the session c owns (NULL: none). */
void control_client_set_session(struct client *c, struct session *s);

#endif
