/* SPDX-License-Identifier: MIT */
/*
 * control-conn.h: one control connection and its framing, shared by
 * control-conn.c (the connection: accept, frame reassembly, replies with
 * SCM_RIGHTS descriptors) and control.c (the request handlers). Nothing
 * else in the daemon includes it: they use control.h.
 */
#ifndef SPW_DAEMON_CONTROL_CONN_H
#define SPW_DAEMON_CONTROL_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "control.h"
#include "list.h"
#include "spw-proto.h"

struct client {
	struct daemon *d;
	struct list link;      /* daemon.clients */
	int fd;
	uv_poll_t poll;
	int watching;          /* the events poll is started with; 0: stopped */
	unsigned id;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool hello;
	bool closing;
	bool close_after_tx;
	bool attaching;        /* waiting for the region: read nothing meanwhile */
	bool unregistering;    /* waiting for a dying tensor's I/O: the same */
	bool waiting;          /* a checkpoint or restore request, or a detach behind a checkpoint: the same */
	bool detach_waits;     /* its DETACH waits for a checkpoint of its session to finish copying */
	struct client **waitp; /* the field of the checkpoint or restore that will answer it */
	uint32_t features;
	struct session *session;

	/* The frame being reassembled: a client may send it a byte at a time. */
	uint8_t hdr[sizeof(struct spw_proto_frame_hdr)];
	size_t hdr_len;
	char *payload;
	uint32_t payload_len, payload_got;
	uint32_t payload_cap;  /* grows as bytes arrive, not from the header's claim */
	uint64_t accepted_ms;  /* uv_now() at accept: limits.hello_timeout_ms counts from it */
	char close_reason[256];
	uint8_t *tx;           /* the reply not yet fully written */
	size_t tx_len, tx_off;
	int tx_fds[SPW_PROTO_MAX_FDS];
	unsigned tx_nfds;
};

/* Makes fd, a connected unix stream socket, a control connection of the
 * peer uid/gid/pid: what accepting a connection does once its SO_PEERCRED
 * is read (the limits.connections_per_uid check, the hello deadline).
 * The fuzz target (tests/fuzz/fuzz-control.c) adopts one end of a
 * socketpair this way and hands decoded frames to control_handle_frame().
 * Returns the connection, or NULL when it was refused (fd closed; when
 * over the limit the refusal is queued on fd and the connection closes
 * itself on the loop). */
struct client *control_client_adopt(struct daemon *d, int fd, uid_t uid, gid_t gid, pid_t pid);

/* Polls c for what it waits for now: its reply to go out, or a request
 * (nothing while an attach is being prepared). */
void control_client_watch(struct client *c);

/* Queues msg (freed here) as c's one reply, with nfds descriptors to pass,
 * and writes what it can; a failure closes c. */
void control_send_json(struct client *c, cJSON *msg, const int *fds, unsigned nfds);
/* A reply object {"type": type, "ok": true} to add fields to. */
cJSON *control_reply(const char *type);
/* Logs and sends an error reply with errno err. */
void control_reply_error(struct client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* One whole request frame (len bytes, NUL-terminated): control.c. */
/* Whether c's peer has hung up, though the loop has not seen it yet. */
bool control_client_gone(const struct client *c);
void control_handle_frame(struct client *c, const char *buf, uint32_t len);

#endif
