/* SPDX-License-Identifier: MIT */
/*
 * dataplane.h: a session's rings, consumed inside the libuv loop
 * (dataplane.c): the SQ is drained, pager completions are posted to the CQ.
 */
#ifndef SPW_DAEMON_DATAPLANE_H
#define SPW_DAEMON_DATAPLANE_H

#include <stdint.h>

#include <uv.h>

struct daemon;
struct session;

int dataplane_start(struct session *s);
void dataplane_stop(struct session *s);
/* Reads the SQ again after session.sq_paused (a checkpoint's copier has
 * the page a PIN waited for, or the copy ended). */
void dataplane_resume(struct session *s);
/* Consumes the SQ and posts completions. Returns entries consumed, or
 * -EPROTO when the client broke the ring protocol (end the session). */
int dataplane_drain(struct session *s);
void dataplane_idle_cb(uv_idle_t *h);
void dataplane_backlog_cb(uv_timer_t *t);
/* The pager's completion callback (ctx is the session): posts the CQE and
 * rings the client's doorbell. Never calls the pager. */
void dataplane_complete(void *ctx, uint64_t user_data, int32_t res);
/* Logs the pager errors no completion reported (failed write-backs). */
void dataplane_log_tier_errors(struct daemon *d);

#endif
