/* SPDX-License-Identifier: MIT */
/*
 * tests/daemon/raw.h: the wire spoken by hand, for daemon tests that must
 * not depend on libspillway: frames, replies, attach with its four
 * descriptors, and both halves of the ring protocol from the client side.
 */
#ifndef SPW_TEST_RAW_H
#define SPW_TEST_RAW_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "spw-proto.h"
#include "spw-ring.h"

/* Sends one frame of text. Returns 0 or -errno. */
int raw_send(int fd, const char *json);

/* Receives one reply (5 s timeout) and parses it; fds (up to *nfds) get the
 * descriptors. NULL on EOF, timeout or non-JSON; *err gets the recv result. */
cJSON *raw_recv(int fd, int *fds, unsigned *nfds, int *err);

/* raw_send + raw_recv, descriptors closed. */
cJSON *raw_request(int fd, const char *json);

/* 0 for an ok reply, -errno from an error reply, -EPROTO for no reply. */
int raw_reply_errno(const cJSON *reply);
const char *raw_reply_message(const cJSON *reply);

/* Features asked for in hello (default SPW_FEAT_RING_POLL). */
extern uint32_t raw_hello_features;

/* Connects and says hello; returns the fd (asserts on failure). */
int raw_connect_hello(const char *control);

/* True when the daemon closed fd (EOF within timeout_ms). */
bool raw_wait_eof(int fd, int timeout_ms);

struct raw_session {
	int ctl;
	int fds[SPW_ATTACH_NFDS];
	uint8_t *region;
	size_t region_bytes;
	uint8_t *rings;
	size_t rings_bytes;
	struct spw_ring_layout l;
	struct spw_ring_hdr *sqh, *cqh;
	struct spw_sqe *sqes;
	struct spw_cqe *cqes;
	uint32_t page_size, slots;
	uint32_t sq_tail, cq_head;
	char message[512]; /* the error message of a refused attach */
};

/* Connects, hellos, attaches and maps. Returns 0, or -errno from the
 * daemon's error reply (message copied into s->message). */
int raw_attach(const char *control, const char *name, uint64_t bytes, uint32_t page_size, struct raw_session *s);
/* The same with "persistent": true (lease_s: the daemon's default). */
int raw_attach_persistent(const char *control, const char *name, uint64_t bytes, uint32_t page_size,
			  struct raw_session *s);
void raw_session_close(struct raw_session *s);

/* Registers a resident tensor: returns its id or -errno; *pages if non-NULL. */
int raw_register(struct raw_session *s, const char *name, uint64_t bytes, uint32_t *pages);
/* The same with a kind: "resident" or "swappable". */
int raw_register_kind(struct raw_session *s, const char *name, uint64_t bytes, const char *kind, uint32_t *pages);

/* Producer side of the SQ: queue one entry, publish, ring if asked to. */
void raw_submit(struct raw_session *s, const struct spw_sqe *sqe);
/* Publishes the tail only (for tests that write several entries). */
void raw_publish(struct raw_session *s);
/* Consumer side of the CQ: waits up to timeout_ms for one completion.
 * Returns 0, -ETIMEDOUT, or -EPIPE when the rings were freed under it
 * (the daemon ended the session and punched the rings memfd). */
int raw_reap(struct raw_session *s, struct spw_cqe *cqe, int timeout_ms);
/* Submit one op and wait for its completion; returns cqe.res. */
int32_t raw_op(struct raw_session *s, uint8_t op, uint8_t flags, uint32_t tensor, uint32_t page);

/* One status document (as the caller's uid sees it). */
cJSON *raw_status(const char *status_path);
const cJSON *raw_status_session(const cJSON *st, const char *name);
/* A number at a dotted path ("pool.used_bytes"); NaN when absent. */
double raw_num(const cJSON *o, const char *path);

/* spillwayd's swap files in dir (the util/names.h rule), or -errno when
 * dir cannot be read. */
int raw_swap_files(const char *dir);

/* spw_test_daemon_start(d, config) with the daemon's stderr going to
 * logpath (truncated) and SPILLWAY_FAULTS=faults (NULL: none) in its
 * environment only; then raw_guard(d). Fails the test on error. */
void raw_start_logged(struct spw_test_daemon *d, const char *config, const char *logpath, const char *faults);

/* The file at path (its first MiB), NUL-terminated, in a static buffer
 * the next call reuses. Fails the test when it cannot be read. */
char *raw_read_file(const char *path);

/* On abort (a failed assertion), SIGKILL the daemon too, so a failing
 * test never leaves a spillwayd behind holding meson's output pipe. */
struct spw_test_daemon;
void raw_guard(struct spw_test_daemon *d);

/* Open descriptors of a process (from /proc/pid/fd). */
int raw_count_fds(pid_t pid);
/* A process's CPU time (user + system) so far, in seconds (/proc). */
double raw_cpu_seconds(pid_t pid);

/* The service manager's side of sd_notify: binds a datagram socket (its
 * path into path, for $NOTIFY_SOCKET) drained by a child (*reader) into
 * a pipe whose read end it returns. raw_notify_wait() waits up to
 * timeout_ms for a notification containing needle, consuming what it
 * read up to there. */
int raw_notify_listen(char *path, size_t len, pid_t *reader);
bool raw_notify_wait(int fd, const char *needle, int timeout_ms);

#endif
