/* SPDX-License-Identifier: MIT */
/*
 * uring.h: the daemon's one io_uring, which does every disk read and write
 * for every session's swap files.
 *
 * Requests are owned by the caller (embedded in a page record, say) and
 * never allocated here. uring_submit() never fails: what does not fit in
 * the submission queue waits and goes out as completions free room, the
 * urgent requests (someone waits for them) before the background ones,
 * and within a class the owners (sessions) take turns, each in FIFO order:
 * what keeps one tenant's write-behind from delaying another's PIN, and one
 * busy tenant from taking the whole ring. A short read or write is resubmitted for the remainder, so a
 * request's completion callback sees either the whole length done (res 0)
 * or a negative errno.
 *
 * Fault injection (test-only): when built with fault_injection and the
 * environment variable SPILLWAY_FAULTS is set at uring_new() time, chosen
 * requests fail deterministically. Rules are comma-separated,
 * "<op>:<fault>@<n>" or "@<n>+" (that one and every later one), where op is
 * read|write, fault is eio|enospc|short|flip|stall=<ms>, and n counts that
 * op's requests from 1 in submission order:
 *     SPILLWAY_FAULTS="write:eio@3,read:flip@2+,read:short@1,write:stall=500@2"
 * eio/enospc complete the request with that error without touching the
 * disk; short makes the first transfer stop halfway (the remainder is then
 * resubmitted, as for a real short transfer); flip flips one byte of what a
 * read returned, which the pager's checksum must catch; stall holds the
 * request in the kernel for <ms> milliseconds (1 to 600000) before its
 * transfer starts, as a drive that stops answering would: it counts as in
 * flight all that time.
 */
#ifndef SPW_DAEMON_URING_H
#define SPW_DAEMON_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct uring;

enum uring_op {
	URING_READ,
	URING_WRITE,
	URING_FSYNC,
};

/* Whose requests these are (a session's pager): when the ring is full,
 * the owners with requests waiting take turns within each class. Owned and
 * zero-initialised by the caller; it must outlive its waiting requests. */
struct uring_owner {
	struct uring_req *head[2], *tail[2];
	struct uring_owner *next[2];
	bool listed[2];
};

struct uring_req {
	enum uring_op op;
	int file;        /* from uring_file_register() */
	uint8_t *addr;   /* for READ/WRITE: inside a registered buffer when possible */
	uint32_t len;
	uint64_t off;
	/* Called once, from uring_reap(), with 0 when all len bytes moved (or
	 * the fsync completed) and -errno otherwise. The request may be
	 * resubmitted from inside the callback. */
	void (*complete)(struct uring_req *req, int res);
	/* Someone waits for this one (a PIN, a FLUSH, a slot): when the ring
	 * is full it goes out before every background request waiting. */
	bool urgent;
	struct uring_owner *owner; /* NULL: the ring's own catch-all owner */

	/* Engine's own, not to be touched by the caller. */
	uint32_t done;
	uint8_t fault;
	uint8_t fault_rule;
	bool held;             /* a hold (delay or stall) goes first */
	bool live;             /* submitted, not finished */
	bool waited;           /* counted in uring_waited(): urgent and live */
	uint8_t queued;        /* waiting for room: 0 no, 1 urgent class, 2 background */
	int64_t hold_ts[2];    /* its struct __kernel_timespec */
	struct uring_req *next;
};

struct uring_stats {
	uint64_t reads, writes, fsyncs;        /* completed requests */
	uint64_t read_bytes, write_bytes;
	uint64_t errors;                       /* requests completed with an error */
	uint64_t resubmits;                    /* short transfers continued */
	uint32_t inflight, queued;             /* now: in the kernel, waiting for SQ room */
	bool fixed_buffers, fixed_files, sqpoll;
	unsigned queue_depth, max_files, max_buffers; /* as given to uring_new() */
};

/* Sets up a ring of queue_depth entries (SQPOLL when sqpoll is true and
 * permitted), room for max_files registered files and max_buffers fixed
 * buffers, and an eventfd for completions. Returns 0 or -errno (-ENOSYS
 * when the kernel has no io_uring; -EINVAL for a bad SPILLWAY_FAULTS, with
 * *ret untouched). */
int uring_new(unsigned queue_depth, bool sqpoll, unsigned max_files, unsigned max_buffers, struct uring **ret);
struct uring *uring_free(struct uring *u);

/* Fault injection (test-only): the ring's rules become spec's (the
 * syntax above; none when spec is NULL or empty), and each op's requests
 * are counted in seen[URING_READ] and seen[URING_WRITE], counters that
 * several rings on several threads may share (atomically), or in the
 * ring's own when seen is NULL. Returns 0; -EINVAL for a bad spec (the
 * ring then has no rules); -EOPNOTSUPP for a spec in a build without
 * fault injection. */
int uring_faults(struct uring *u, const char *spec, uint64_t *seen);

/* Becomes readable when completions are waiting: poll it, then uring_reap(). */
int uring_eventfd(const struct uring *u);

/* Registers fd (the ring keeps no reference to it beyond the registered
 * slot; the caller closes fd when it likes after uring_file_unregister()).
 * Returns the index to put in uring_req.file, or -errno (-ENOSPC when
 * max_files are in use). With no registered-file support it still returns
 * an index, mapped to the plain fd. */
int uring_file_register(struct uring *u, int fd);
void uring_file_unregister(struct uring *u, int index);

/* Registers [base, base+len) for fixed-buffer I/O (in pieces of at most
 * 1 GiB, which a page never straddles when base is page-aligned). Returns
 * a handle >= 0 for uring_buffer_unregister(), or -errno. When the kernel
 * refuses (memlock accounting, say) the memory is still usable with plain
 * reads and writes; the caller may ignore the error. */
int uring_buffer_register(struct uring *u, void *base, size_t len);
void uring_buffer_unregister(struct uring *u, int handle);

/* Queues req. Never fails; the completion reports errors. */
void uring_submit(struct uring *u, struct uring_req *req);
/* The same, with the transfer starting delay_ms later (a timeout in the
 * ring goes first, so the loop never waits and the request counts as busy
 * meanwhile): for retries with backoff. */
void uring_submit_after(struct uring *u, struct uring_req *req, unsigned delay_ms);

/* req became urgent (a PIN now waits for its read): if it still waits
 * for room in the background class, it moves to the end of the urgent
 * one; in every case its later resubmissions are urgent. */
void uring_hurry(struct uring *u, struct uring_req *req);
/* Up to n of owner's requests that wait for room as background move to
 * the urgent class, oldest first: someone waits for one of them now (a
 * PIN for a slot that any of its write-backs frees). */
void uring_hurry_owner(struct uring *u, struct uring_owner *owner, unsigned n);

/* Processes every available completion (running callbacks) and submits
 * what is queued. Returns the number of requests completed. */
unsigned uring_reap(struct uring *u);

/* Blocks up to timeout_ms for at least one completion, then reaps. For
 * shutdown paths and tests; the daemon's loop polls the eventfd. */
int uring_wait(struct uring *u, int timeout_ms);

/* Requests submitted and not yet completed. */
unsigned uring_busy(const struct uring *u);

/* Urgent requests submitted (or hurried) and not yet completed: someone
 * waits on the disk now. The one call safe from any thread (an atomic
 * read): a checkpoint's copier asks it to give the disk to trainers. */
unsigned uring_waited(const struct uring *u);

void uring_get_stats(const struct uring *u, struct uring_stats *st);

#endif
