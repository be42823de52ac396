/* SPDX-License-Identifier: MIT */
/*
 * spillway.h: the client library of spillway, a per-node service that holds
 * a trainer's offloaded tensors in pinned host memory shared with it.
 *
 * A trainer process creates a client, connects it to spillwayd, attaches a
 * session (a named region of pinned memory cut into slots of page_size
 * bytes), registers tensors, and then pins pages of those tensors into slots
 * through a shared-memory ring. A pinned page is plain memory in this
 * process: spw_slot_ptr() says where.
 *
 *   spw_client *c;
 *   struct spw_client_opts o = { .size = sizeof(o) };
 *   struct spw_attach_opts a = { .size = sizeof(a), .session = "job/0",
 *                                .region_bytes = 256 << 20 };
 *   if (spw_client_new(&o, &c) < 0) ...;
 *   if (spw_client_connect(c, NULL) < 0 || spw_client_attach(c, &a) < 0)
 *           fprintf(stderr, "spillway: %s\n", spw_client_last_error(c));
 *
 * Conventions, for every function below:
 *
 * - Errors are negative errno values; spw_strerror() names them. Functions
 *   that talk to the daemon also leave a sentence in the client's last-error
 *   message (spw_client_last_error()), which carries the daemon's own
 *   explanation when the daemon refused.
 * - A function that creates an object takes an out-pointer last and leaves
 *   it untouched when it fails.
 * - Structs passed in or filled begin with `size`, which the caller sets
 *   to sizeof the struct it was compiled with, so that later versions can
 *   append fields and callers built against an older or newer header keep
 *   working. Any size from the struct's first version up is taken; a
 *   smaller one is -EINVAL, and one over 4096 bytes -E2BIG.
 *   Option structs (*_opts): fields the caller leaves zero, or that its
 *   size does not cover, take the documented defaults. A size beyond this
 *   library's struct is taken only when the bytes past it are zero, else
 *   -E2BIG (the caller set an option this library does not know).
 *   Structs the library fills (info, result, stats): it writes only the
 *   bytes the caller's size covers, zeroes the caller's bytes past its own
 *   struct, and sets size to the bytes it filled.
 *   New fields go after a struct's last byte, never into its tail padding.
 * - The library never logs, never aborts and installs no signal handlers.
 *   It keeps every descriptor O_CLOEXEC.
 * - If the daemon goes away (exits, crashes, or ends the session), every
 *   call that waits for it returns -ECONNRESET within about a second, and
 *   every later call on that client returns -ECONNRESET at once. The
 *   client must then be freed; a new one can attach again.
 *
 * Thread safety: an spw_client is not thread-safe. Calls on one client
 * must not overlap (use one client per thread, or a lock of your own).
 * Distinct clients are independent, and spw_strerror(),
 * spw_status_fetch() and spw_socket_path() may be called from any thread.
 */
#ifndef SPILLWAY_H
#define SPILLWAY_H

#include <stddef.h>
#include <stdint.h>

#include <spillway/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden; only what carries this is
 * part of the ABI (and of libspillway.map). */
#if defined(__GNUC__)
#define SPW_EXPORT __attribute__((visibility("default")))
#else
#define SPW_EXPORT
#endif

typedef struct spw_client spw_client;

/*
 * Returns the version of the libspillway loaded at run time, "MAJOR.MINOR.PATCH"
 * (static). SPW_VERSION_STRING (spillway/version.h) is the version of the
 * header a program was built with; they differ when the library was
 * upgraded under it. Thread-safe.
 */
SPW_EXPORT const char *spw_version(void);

/* ------------------------------------------------------------------ */
/* Errors */

/*
 * Returns a static, human-readable description of err, a negative errno
 * value as returned by this library (a positive value is read as its
 * negation). Never returns NULL. Thread-safe.
 */
SPW_EXPORT const char *spw_strerror(int err);

/*
 * Returns the client's last error message: a sentence describing why the
 * last failed call on c failed, naming the thing involved (the socket path,
 * the session, the daemon's refusal text). Returns "" when no call has
 * failed yet, and a static message when c is NULL. The string belongs to c
 * and stays valid until the next call on c.
 */
SPW_EXPORT const char *spw_client_last_error(const spw_client *c);

/* ------------------------------------------------------------------ */
/* Client lifetime */

struct spw_client_opts {
	size_t size;          /* sizeof(struct spw_client_opts) */
	/* Microseconds to spin on the completion ring before sleeping on its
	 * eventfd; 0 means the default, 50. Spinning buys latency with CPU
	 * time of the waiting thread. SPW_SPIN_NEVER disables spinning. */
	uint32_t spin_us;
	/* Milliseconds to wait for each control reply (connect, attach,
	 * register, ...) before failing with -ETIMEDOUT; 0 means the default,
	 * 30000. A daemon that dies is noticed at once regardless. */
	uint32_t reply_timeout_ms;
	/* A file for the timeline of every optimizer made on this client
	 * (Chrome trace-event JSON, see spw_trace_flush() in optimizer.h); NULL
	 * means $SPILLWAY_TRACE, when that is set. The string is copied. */
	const char *trace_path;
};
#define SPW_SPIN_NEVER UINT32_MAX

/*
 * Creates an unconnected client and stores it in *ret. opts may be NULL
 * for the defaults.
 *
 * Returns 0 on success. Returns -EINVAL when ret is NULL or opts->size is
 * smaller than the first version of the struct; -E2BIG when opts->size is
 * larger than this library's struct and sets a field it does not know, or
 * is over 4096; and -ENOMEM when memory runs out.
 */
SPW_EXPORT int spw_client_new(const struct spw_client_opts *opts, spw_client **ret);

/*
 * Closes everything c holds and frees it. An attached session is ended by
 * closing the control socket, which the daemon treats as a detach; call
 * spw_client_detach() first to learn whether a clean detach succeeded.
 * Pointers into the region become invalid. Accepts NULL. Returns NULL, so
 * that `c = spw_client_free(c);` clears the caller's pointer.
 */
SPW_EXPORT spw_client *spw_client_free(spw_client *c);

/* Which socket spw_socket_path() names. */
enum spw_socket_kind {
	SPW_SOCKET_CONTROL = 0, /* control.sock: connect, attach, register */
	SPW_SOCKET_STATUS = 1,  /* status.sock: one JSON status document */
};

/*
 * Writes the default path of the daemon's socket of the given kind into buf
 * (len bytes, NUL-terminated). The socket directory is, in order: the
 * directory of $SPILLWAY_SOCKET when set (for SPW_SOCKET_CONTROL the
 * variable itself); $XDG_RUNTIME_DIR/spillway when it exists; /run/spillway.
 * Thread-safe.
 *
 * Returns the length of the path. Returns -EINVAL for an unknown kind or a
 * NULL buf, and -ENAMETOOLONG when the path does not fit in len bytes or in
 * a unix socket address.
 */
SPW_EXPORT int spw_socket_path(enum spw_socket_kind kind, char *buf, size_t len);

/*
 * Connects c to spillwayd's control socket at socket_path, or at the
 * default path (spw_socket_path(SPW_SOCKET_CONTROL)) when socket_path is
 * NULL, and exchanges HELLO: protocol major version and features.
 *
 * Returns 0 on success. Returns -EINVAL when c is NULL; -EISCONN when c
 * is already connected; -ENAMETOOLONG when the path does not fit a unix
 * socket address; -ENOENT or -ECONNREFUSED when no daemon listens
 * there (the last-error message names the path tried and how to start
 * spillwayd); -EACCES when the socket may not be opened; -EPROTONOSUPPORT
 * when the daemon speaks another major protocol version; -EPROTO when it
 * answers something malformed; -ETIMEDOUT when it does not answer within
 * reply_timeout_ms; -ECONNRESET when it hangs up.
 */
SPW_EXPORT int spw_client_connect(spw_client *c, const char *socket_path);

/* ------------------------------------------------------------------ */
/* Sessions */

struct spw_attach_opts {
	size_t size;           /* sizeof(struct spw_attach_opts) */
	const char *session;   /* "job/rank": [A-Za-z0-9._/-], no leading '/' or '.', no ".." */
	uint64_t region_bytes; /* pinned memory to reserve, rounded up to whole pages */
	uint32_t page_size;    /* power of two in [64 KiB, 64 MiB]; 0 = 4 MiB */
	/* Added after the first version (an older caller's struct ends
	 * above; it gets the daemon's default swap). */
	uint64_t swap_bytes;   /* with SPW_ATTACH_SWAP_BYTES: the swap to reserve, exactly;
				* 0 is a resident-only session that reserves none */
	uint32_t flags;        /* SPW_ATTACH_* */
	/* Added after swap_bytes (docs/persistent.md). */
	uint32_t persistent;   /* 1: the session outlives a client that dies without
				* detach, and the next attach of its name by this uid
				* takes it over (spw_session_info.reattached) */
	uint32_t lease_s;      /* persistent: seconds an orphan is kept; 0 = 900, at most 7 days */
};

/* spw_attach_opts.flags: swap_bytes says how much swap the session gets.
 * Without it the daemon gives its swap.session_bytes (or what fits). */
#define SPW_ATTACH_SWAP_BYTES (1u << 0)

/*
 * Attaches the session named opts->session: the daemon reserves
 * region_bytes of pinned memory and the client maps it together with the
 * session's rings. A session is attached by one client at a time.
 *
 * Returns 0 on success. Returns -EINVAL when c or opts is NULL, for an
 * opts->size below the struct's first version, a bad session name or page
 * size, or a region of 0 bytes or over 2^32 pages (checked before asking
 * the daemon); -E2BIG for an opts->size as spw_client_new() refuses;
 * -ENOTCONN when c is not connected; -EALREADY when c already has a
 * session attached.
 * -EINVAL also for flags the library does not know.
 * The daemon refuses with -EBUSY when another client holds the session,
 * -EPERM when the session belongs to another uid, -EDQUOT when region_bytes
 * exceeds the per-session cap (pool.session_max_bytes), -ENOSPC when the
 * node's pool (pool.max_bytes) has not that much left, -ENOMEM when pinned
 * memory cannot be had, and -EOPNOTSUPP for features it lacks; its
 * message, which names the limits and the config file, is the last-error
 * text. Returns -EPROTO when the daemon's reply or the memory it passes
 * does not match the protocol (wrong descriptor count, sizes or seals);
 * the client is then unusable. -ETIMEDOUT and -ECONNRESET as for
 * spw_client_connect().
 */
SPW_EXPORT int spw_client_attach(spw_client *c, const struct spw_attach_opts *opts);

/*
 * Ends the attached session cleanly: the daemon releases the region and
 * every tensor, and c unmaps them. The control connection stays open, so
 * c may attach again. Completions not yet reaped are discarded.
 *
 * Returns 0 on success. Returns -EINVAL when c is NULL, -ENOTCONN when
 * nothing is attached (-ECONNRESET instead once the daemon went away), and
 * -ETIMEDOUT, -ECONNRESET or the daemon's errno (with its message) when the
 * daemon did not confirm; the mappings are released in every case.
 */
SPW_EXPORT int spw_client_detach(spw_client *c);

struct spw_session_info {
	size_t size;            /* set by the caller: sizeof(struct spw_session_info) */
	uint64_t region_bytes;  /* bytes of the region */
	uint32_t page_size;     /* bytes of one slot */
	uint32_t slots;         /* region_bytes / page_size */
	uint32_t sq_entries;    /* submission ring size */
	uint32_t cq_entries;    /* completion ring size: most operations in flight */
	uint32_t features;      /* SPW_FEAT_* bits the daemon granted */
	int32_t numa_node;      /* node the region is bound to, -1 when none */
	uint8_t locked;         /* region is mlocked */
	uint8_t hugepages;      /* region is hugepage-backed */
	uint8_t reserved[6];
	/* Added after the first version. */
	uint64_t swap_bytes;    /* NVMe-tier swap the daemon reserved for the session */
	/* Added after swap_bytes: persistent sessions. */
	uint8_t persistent;     /* the session outlives this client (lease_s) */
	uint8_t reattached;     /* this attach took the session over from a client that died */
	uint8_t step_open;      /* reattached: that client died inside a step's updates, so the
				 * state mixes two steps (spw_optimizer_new refuses it) */
	uint8_t reserved2;
	uint32_t lease_s;
	uint32_t tensors;       /* tensors the session held at attach */
	uint32_t good_steps;    /* committed: the dynamic loss scale's steps since it last grew */
	uint64_t committed_step; /* the last step whose updates are all in the state (0: none) */
	float loss_scale;       /* committed: the loss scale for the next step */
	uint32_t skipped;       /* committed: that step was skipped (its number repeats) */
	/* Added after skipped: crash recovery (docs/persistent.md). */
	uint32_t damaged_pages; /* reattached after a daemon crash: pages whose CRC failed; they are
				 * never handed out (a pin fails -EBADMSG) and spw_optimizer_new
				 * refuses the session: load the last checkpoint */
	uint32_t reserved3;
	/* Added after damaged_pages: a kill inside spw_optimizer_write. */
	uint64_t released_write_step; /* persistent, not reattached: the orphan of this name was
				       * released at this attach because its last client died
				       * inside spw_optimizer_write (load_state_dict) when it had
				       * opened this step, its state partly overwritten; this is a
				       * fresh session (nothing resumed): write the state again in
				       * full. 0: none */
};

/*
 * Fills *info (whose size field the caller sets; see the conventions at
 * the top) with the attached session's geometry. Returns 0 on success,
 * -EINVAL when an argument is NULL or info->size is smaller than the
 * struct's first version, -E2BIG when info->size is over 4096, and
 * -ENOTCONN when nothing is attached. Leaves no last-error sentence (c is
 * const).
 */
SPW_EXPORT int spw_client_info(const spw_client *c, struct spw_session_info *info);

/*
 * Ends the orphaned persistent session named session at once (what its
 * lease's end would do): its region, tensors and swap are released. The
 * caller's uid must own it, or be root. c needs no session of its own.
 * Returns 0; -ENOENT for no such session, -EPERM for another user's,
 * -EBUSY while a client holds it (only orphans are dropped), with the
 * daemon's sentence as the last error.
 */
SPW_EXPORT int spw_client_drop(spw_client *c, const char *session);

/*
 * Goes back to the persistent session c attached after spillwayd went
 * away under it (every call then fails with -ECONNRESET, "closed the
 * connection"): a restart with persist.state_dir saves the session at a
 * commit point and restores it as an orphan at the next start. Forgets
 * the old connection and its mappings (pointers into the old region
 * become invalid), dials the same control socket again every 50 ms for up
 * to wait_ms, and attaches the same session with the same options, which
 * takes the orphan over; spw_client_info() then says what was committed.
 * An optimizer holds the old mappings: the sequence is
 *
 *   spw_optimizer_free(o);                  // no answer is awaited from a dead daemon
 *   spw_client_reconnect(c, 60000);
 *   spw_optimizer_new(c, &opts, &o);        // and the same spw_optimizer_add*() calls
 *   next = spw_optimizer_resumed_step(o) + 1;   // read SPW_STATE_PARAM back into the model
 *
 * Returns 0 once taken over. -EINVAL for a c that attached no persistent
 * session, or detached it; -EBUSY while an optimizer on c is not freed;
 * -ENOENT when the daemon that answers holds no state of the session (a
 * restart without persist.state_dir: the empty session the attach made is
 * detached again); after wait_ms, the last error met (-ENOENT or
 * -ECONNREFUSED: no daemon listens yet; -EAGAIN: the session is still
 * being restored); any other refusal of the attach at once.
 */
SPW_EXPORT int spw_client_reconnect(spw_client *c, uint32_t wait_ms);

/* What a checkpoint or a restore did (docs/persistent.md, "Checkpoints"). */
struct spw_checkpoint_result {
	size_t size;             /* set by the caller: sizeof(struct spw_checkpoint_result) */
	uint64_t committed_step; /* the step the state is of */
	uint64_t bytes;          /* tensor bytes written (checkpoint) or loaded (restore) */
	uint64_t copied_bytes;   /* checkpoint: of which reflinked from swap files (XFS, btrfs) */
	double seconds;          /* the copy (checkpoint: the session trains on meanwhile) */
	double wait_seconds;     /* checkpoint: waiting for the session's next commit point */
	uint32_t tensors;
	uint32_t lease_s;        /* restore: the orphan's lease */
	uint64_t bytes_total;    /* the tensors' bytes, what bytes reached (came after the first version);
				  * while one runs, the status document's checkpoint_bytes_done and
				  * _total (restore_bytes_done and _total) say how far it is */
	/* Checkpoint, copy-on-write (docs/persistent.md, "Checkpoints"): */
	double stall_seconds;        /* what the session's ring was held: the plan at the commit point, and
				      * PINs held at the ring until the copy had their page (a PIN that
				      * waits for a slot is not counted here) */
	uint64_t steps_during_copy;  /* steps the session committed while the copy ran */
	uint64_t cow_bytes;          /* pages the daemon saved aside before the trainer changed them */
	uint64_t cow_peak_bytes;     /* of which held at once, at most (never above checkpoint.cow_bytes) */
	uint64_t cow_waits;          /* pages whose change waited for the copy (checkpoint.cow_bytes spent,
				      * or the copy was reading them) */
	/* Checkpoint: how the pages not reflinked were written
	 * (bytes = copied_bytes + direct_bytes + buffered_bytes): */
	uint64_t direct_bytes;       /* with O_DIRECT, from page-aligned buffers through io_uring */
	uint64_t buffered_bytes;     /* through the page cache: the filesystem refuses O_DIRECT, or is tmpfs */
	uint64_t cow_moved_bytes;    /* pages on disk at the commit point, rewritten before the copy had them,
				      * whose write-back went to spare swap pages of the session (their old
				      * homes kept for the copy) instead of waiting for it */
	/* Checkpoint, checkpoint.priority "low": how often the copy held back
	 * to one request in flight because a session waited on the disk, and
	 * for how long in all (0 under "normal"). */
	uint64_t yields;
	double yield_seconds;
	/* Checkpoint: of cow_bytes, pages on disk at the commit point that the
	 * session's own reads brought into memory during the copy, saved aside
	 * as they came: the copy wrote them without reading them again. */
	uint64_t cow_from_reads_bytes;
	/* Checkpoint: bytes the copy read from swap files itself (pages on
	 * disk that did not reflink and that the session did not read first). */
	uint64_t swap_read_bytes;
};

/* How long spw_client_checkpoint() and spw_client_restore() wait for
 * the daemon's answer: a copy of terabytes takes a while, and its
 * reply comes once, at the end. */
#define SPW_CHECKPOINT_TIMEOUT_MS (6u * 3600u * 1000u)

/*
 * Writes a checkpoint of the persistent session named session (the
 * caller's uid must own it, or be root) into dir, a directory that must
 * not exist yet, in a parent directory the caller owns. c needs no
 * session of its own: a second client may ask while the session's own
 * trainer trains. The daemon waits for the session's next commit point
 * (no step's updates open), notes there where every page is, and lets
 * the trainer go on at once while it copies (copy-on-write: a page the
 * trainer pins before the copy reached it is saved aside first, or, past
 * the daemon's checkpoint.cow_bytes, the PIN waits for the copy to take
 * that page); it writes dir.tmp-PID, fsyncs it and renames it to dir. A relative dir is taken from the current
 * directory. out (may be NULL; out->size set by the caller) gets what was
 * done. Waits at most SPW_CHECKPOINT_TIMEOUT_MS.
 *
 * Returns 0; -EINVAL for a bad argument or a session that is not
 * persistent; -ENOENT for no such session, -EPERM for another user's
 * session or a parent directory the caller does not own, -EEXIST when dir
 * exists, -EBUSY while another checkpoint of the session runs, -EAGAIN
 * before its first committed step, -ESTALE when its client died inside a
 * step's updates, -ECANCELED when the session ended first, or the errno
 * of the file operation that failed (its file named in the last error);
 * dir is then absent.
 */
SPW_EXPORT int spw_client_checkpoint(spw_client *c, const char *session, const char *dir,
				     struct spw_checkpoint_result *out);

/*
 * spw_client_checkpoint() with meta_json (may be NULL), the text of a
 * JSON object the caller attaches to the checkpoint: the daemon keeps it
 * in the manifest as "client" and never reads it back. OffloadAdamW puts
 * the parameters' shapes and its param groups' hyperparameters there, for
 * `python -m spillway.checkpoint to-torch` (docs/persistent.md, "Portable
 * checkpoints"). The request must fit a control frame: meta_json up to
 * about 60 KiB. Returns what spw_client_checkpoint() does, and -EINVAL
 * for meta_json that is not a JSON object, -E2BIG for one too long.
 */
SPW_EXPORT int spw_client_checkpoint_meta(spw_client *c, const char *session, const char *dir,
					  const char *meta_json, struct spw_checkpoint_result *out);

/* The CRC-32C (Castagnoli) of len bytes at buf continuing crc (0 to
 * start): the checksum of every page in a checkpoint's manifest. For
 * tools that read and write checkpoints without a daemon. */
SPW_EXPORT uint32_t spw_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * Creates the persistent session named session for the caller's uid
 * from the checkpoint in dir, orphaned with a lease of lease_s seconds
 * (0: 900), so that the next persistent attach of that name with the
 * checkpoint's region size and page size takes it over and an optimizer
 * on it resumes after the checkpoint's committed step, as after a kill.
 * Every page's CRC-32C is checked. c must not be attached itself.
 *
 * Returns 0; -EINVAL for a bad argument or manifest, -EEXIST when a
 * session of that name exists, -EPERM for a checkpoint of another user,
 * -EBADMSG when a page's CRC does not match (the last error names tensor,
 * page and file), -EDQUOT/-ENOSPC as an attach; nothing is left behind
 * on failure.
 */
SPW_EXPORT int spw_client_restore(spw_client *c, const char *session, const char *dir, uint32_t lease_s,
				  struct spw_checkpoint_result *out);

/*
 * Flushes the persistent session named session (the caller's, or root
 * asks): spillwayd saves its state at its next commit point into
 * persist.state_dir (replacing the last flush, in one rename), so that a
 * kill -9 of the daemon or a power cut loses only the steps after it: the
 * next spillwayd restores it as an orphan, as after a restart. Ask from a
 * client of its own, as spw_client_checkpoint() (the trainer's client's
 * engine watches its socket); it waits for the copy, during which the
 * session's ring is not served. out (may be NULL) gets the step saved and
 * the figures as for spw_client_checkpoint(). Returns 0; -EOPNOTSUPP when
 * the daemon has no persist.state_dir; -ENOENT, -EPERM, -EINVAL (not
 * persistent), -EAGAIN (no committed step yet) as for a checkpoint;
 * -EBADMSG for a session that came back damaged from a crash.
 */
SPW_EXPORT int spw_client_flush(spw_client *c, const char *session, struct spw_checkpoint_result *out);

/* ------------------------------------------------------------------ */
/* Tensors */

enum spw_tensor_kind {
	SPW_TENSOR_RESIDENT = 0,  /* always keeps its slots (CPU offload) */
	SPW_TENSOR_SWAPPABLE = 1, /* homed on NVMe, slots while pinned (needs SPW_FEAT_SWAP) */
	/* A flag OR'd into either kind: the tensor's bytes matter only inside
	 * a step (an overlapped optimizer's undo copy of its weights), so a
	 * checkpoint, which is taken between steps, leaves it out (a save
	 * for a daemon restart keeps it). */
	SPW_TENSOR_SCRATCH = 0x100,
};

/*
 * Registers a tensor of bytes bytes named name (printable ASCII, 1..256
 * bytes) in the attached session. The daemon assigns its id, stored in
 * *ret_tensor, and cuts it into pages of page_size, whose count is stored
 * in *ret_pages when ret_pages is not NULL.
 *
 * Returns 0 on success. Returns -EINVAL for a NULL c or ret_tensor, a bad
 * name, size or kind; -ENOTCONN when nothing is attached; -ENOMEM; and
 * -EPROTO when the daemon's reply lacks the id or gives a wrong page count
 * (the client is then unusable). The daemon refuses with -EEXIST when
 * the name is taken, -ENOSPC when the session's region lacks free slots
 * for a resident tensor this large (its message says how many are free),
 * and -EOPNOTSUPP for a swappable tensor without the NVMe tier. -ETIMEDOUT
 * or -ECONNRESET as for spw_client_connect(). ret_tensor and ret_pages
 * are untouched on failure.
 */
SPW_EXPORT int spw_tensor_register(spw_client *c, const char *name, uint64_t bytes,
				   enum spw_tensor_kind kind, uint32_t *ret_tensor, uint32_t *ret_pages);

/*
 * On a reattached session (spw_session_info.reattached): takes over the
 * tensor named name that the session already holds, with its contents,
 * instead of registering a new one. bytes and kind must be what it was
 * registered with, or 0 to take it at whatever size it has (ret_pages
 * says how many pages). Returns as spw_tensor_register(); the daemon
 * refuses with -ENOENT when the session holds no tensor of that name and
 * -EEXIST when its size or kind differ or this client already took it,
 * naming both sizes.
 */
SPW_EXPORT int spw_tensor_adopt(spw_client *c, const char *name, uint64_t bytes, enum spw_tensor_kind kind,
				uint32_t *ret_tensor, uint32_t *ret_pages);

/*
 * Unregisters a tensor; its pages must not be pinned. Returns 0 on success,
 * -EINVAL when c is NULL, -ENOTCONN when nothing is attached, -ENOENT for
 * an unknown id, -EBUSY when a page is still pinned, and -ETIMEDOUT or
 * -ECONNRESET as above.
 */
SPW_EXPORT int spw_tensor_unregister(spw_client *c, uint32_t tensor);

/* ------------------------------------------------------------------ */
/* The data plane: asynchronous operations */

/* A finished operation. */
struct spw_completion {
	uint64_t user_data; /* as passed to spw_submit_*() */
	int32_t res;        /* >= 0 on success (PIN: the slot index), -errno on failure */
	uint32_t flags;     /* reserved, zero */
};

/* Flags for unpin. */
#define SPW_CLEAN 0u        /* the page was only read */
#define SPW_DIRTY (1u << 0) /* the page was written: the daemon must keep the new contents */

/*
 * Queue one operation on the session's submission ring and tell the daemon.
 * user_data comes back untouched in the operation's completion.
 *
 *   nop:   completes with res 0; measures the round trip.
 *   pin:   completes with the slot index that holds (tensor, page); the page
 *          stays there until unpinned. spw_slot_ptr() turns it into an
 *          address.
 *   unpin: completes with 0; flags is SPW_CLEAN or SPW_DIRTY.
 *
 * At most cq_entries operations may be in flight (submitted but not yet
 * reaped), and the submission ring holds sq_entries (spw_client_info()).
 *
 * Returns 0 when queued. Returns -EBUSY when the submission ring is full or
 * cq_entries operations are in flight: reap completions and try again.
 * Returns -EINVAL for unknown flags, -ENOTCONN when nothing is attached, and
 * -ECONNRESET when the daemon has gone away. Errors about the tensor or page
 * (-ENOENT, -ERANGE, ...) arrive in the completion, not here.
 */
SPW_EXPORT int spw_submit_nop(spw_client *c, uint64_t user_data);
SPW_EXPORT int spw_submit_pin(spw_client *c, uint32_t tensor, uint32_t page, uint64_t user_data);
SPW_EXPORT int spw_submit_unpin(spw_client *c, uint32_t tensor, uint32_t page, unsigned flags,
				uint64_t user_data);

/*
 * Unpins (tensor, page), dirty, whose bytes the caller made a whole copy
 * of page src_page of src_tensor as that page was pinned (an undo copy
 * kept before the source is changed in place). Where the source is still
 * pinned, was pinned clean from disk and has not been unpinned since, the
 * daemon does not write the copy: it takes over the source's disk copy,
 * and the source gets the copy's old disk home and is written there when
 * unpinned (dirty, whatever its unpin says). So unpin the copy before the
 * source. The completion's res is 1 when the disk copy was taken over, 0
 * when the page was unpinned dirty as by spw_submit_unpin().
 *
 * Returns as spw_submit_unpin(); -EOPNOTSUPP when the daemon does not
 * offer it (SPW_FEAT_UNPIN_COPY in spw_client_info()'s features): unpin
 * dirty instead. A bad source (no such tensor or page, or the page
 * itself) fails in the completion with -EINVAL.
 */
SPW_EXPORT int spw_submit_unpin_copy(spw_client *c, uint32_t tensor, uint32_t page, uint32_t src_tensor,
				     uint32_t src_page, uint64_t user_data);

/*
 * Copies up to max finished operations into out and returns how many.
 * Waits up to timeout_ms milliseconds for the first one when none is ready
 * (0: do not wait; -1: wait without limit): the caller spins for spin_us,
 * then sleeps on the completion eventfd, and wakes early if the daemon
 * hangs up.
 *
 * Returns the number of completions (>= 1), or 0 when timeout_ms is 0 and
 * none is ready. Returns -ETIMEDOUT when the timeout passed with none,
 * -EINVAL for bad arguments, -ENOTCONN when nothing is attached,
 * -ECONNRESET when the daemon went away (detected within about a second
 * even with timeout -1), -EPROTO when the daemon posted a completion
 * that matches no operation in flight (the session is then unusable), and
 * -EINTR when a signal interrupted the sleep.
 */
SPW_EXPORT int spw_reap(spw_client *c, struct spw_completion *out, unsigned max, int timeout_ms);

/* ------------------------------------------------------------------ */
/* The data plane: synchronous conveniences */

/*
 * Each submits one operation and waits for its own completion;
 * completions of other operations that arrive meanwhile are kept for
 * spw_reap(). They fail like spw_submit_*() and spw_reap(), and return the
 * operation's own error (its completion's res) when the daemon refused it.
 * A daemon that completes nothing for reply_timeout_ms (spw_client_opts;
 * stopped or wedged) gets -ETIMEDOUT with a sentence naming the session,
 * and the client is abandoned (the operation may still complete): every
 * later call returns -ETIMEDOUT; free it and attach again.
 *
 * spw_nop() returns 0. spw_pin() returns the slot index (>= 0) and, when
 * ret_ptr is not NULL, stores the page's address in *ret_ptr (untouched on
 * failure). spw_unpin() returns 0.
 */
SPW_EXPORT int spw_nop(spw_client *c);
SPW_EXPORT int spw_pin(spw_client *c, uint32_t tensor, uint32_t page, void **ret_ptr);
SPW_EXPORT int spw_unpin(spw_client *c, uint32_t tensor, uint32_t page, unsigned flags);

/*
 * Returns the address of slot in this process's mapping of the region
 * (region base + slot * page_size), or NULL when nothing is attached or
 * slot is out of range. The address is valid until detach or free; the
 * page's contents belong to the caller only while the page is pinned.
 */
SPW_EXPORT void *spw_slot_ptr(const spw_client *c, uint32_t slot);

/* ------------------------------------------------------------------ */
/* Status */

/*
 * Reads the daemon's status document from the status socket at path (NULL:
 * spw_socket_path(SPW_SOCKET_STATUS)) and stores it in *ret_json as a
 * NUL-terminated JSON string that the caller releases with free(). Waits
 * at most 5 s. Thread-safe.
 *
 * Returns 0 on success. Returns -EINVAL when ret_json is NULL,
 * -ENAMETOOLONG for an over-long path, -ENOENT or -ECONNREFUSED when no
 * daemon listens at path, -EACCES when the socket may not be opened,
 * -ETIMEDOUT when the daemon sends nothing in time, -EPROTO for a
 * malformed frame, and -ENOMEM when memory runs out.
 */
SPW_EXPORT int spw_status_fetch(const char *path, char **ret_json);

#ifdef __cplusplus
}
#endif

/* The optimizer (the offload pipeline, docs/pipeline.md) has a header of
 * its own; every program that includes this one gets it too. */
#include <spillway/optimizer.h>

#endif
