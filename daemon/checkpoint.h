/* SPDX-License-Identifier: MIT */
/*
 * checkpoint.h: a persistent session's state written to a directory at a
 * committed step (checkpoint.c), and read back into a new orphaned
 * session (restore.c). docs/persistent.md ("Checkpoints") has the
 * manifest's format.
 */
#ifndef SPW_DAEMON_CHECKPOINT_H
#define SPW_DAEMON_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

struct client;
struct daemon;
struct session;

#define CHECKPOINT_FORMAT "spillway-checkpoint"
#define CHECKPOINT_VERSION 1
/* A save into persist.state_dir of an orphan left inside a step's updates
 * (its "opened_step" past its "committed_step"): the same format, another
 * number, so that a reader that does not know the open step (an older
 * spillwayd, the portable converter) refuses it instead of taking two
 * steps' mix for the committed one. */
#define CHECKPOINT_VERSION_OPEN 2
/* A save of a stopping daemon into persist.state_dir (checkpoint-write.c):
 * its swap files are hard links in the directory ("links": s00.swap, ...)
 * and a swappable tensor's pages that were on disk are left there
 * ("refs": [page, link, offset], their CRC-32C of the whole page); only
 * what was in memory went into the data files, which have holes where the
 * refs are. "opened_step" as in version 2, when there. Only spillwayd
 * reads it, and only from its state directory at start. */
#define CHECKPOINT_VERSION_LINKED 3
#define CHECKPOINT_LINK_FMT "s%02u.swap"
#define CHECKPOINT_MANIFEST "manifest.json"
/* The most a manifest may take (a CRC per page: 16 MiB is 1.4 million
 * pages, 5 TiB in pages of 4 MiB). */
#define CHECKPOINT_MANIFEST_MAX (16u << 20)

/* "checkpoint {session, dir}": waits for the session's next commit point
 * when a step is open, then writes dir and replies. One reply always
 * comes (unless c goes away first). */
void checkpoint_request(struct client *c, const cJSON *msg);
/* A COMMIT was marked on s: a checkpoint waiting for one starts now (and
 * the SQ stops being read after this entry). */
void checkpoint_committed(struct session *s);
/* s is an orphan now, or its dead client's last requests completed: a
 * save into the state directory waiting for a commit point that will not
 * come (the client died inside a step's updates) starts now, the orphan
 * saved as it is; a checkpoint asked for by a user is refused (a
 * checkpoint holds a committed step only). */
void checkpoint_orphaned(struct session *s);
/* s is being freed: a waiting checkpoint is answered with an error; one
 * copying is told to give up before it renames its directory (the
 * region is about to be released). */
void checkpoint_session_gone(struct session *s);
/* A DETACH by s's owner while a checkpoint copies: it is answered once
 * the copy is done (true); false: detach now. */
bool checkpoint_defer_detach(struct session *s);

/* A save at shutdown (state.c): a checkpoint of s at its next commit
 * point (an orphan inside a step's updates: at once, as it is) into path
 * (in dirfd, the state directory), replacing what is there, with no
 * client; done(arg, 0 or -errno) once it ended. Returns 0,
 * or -ENOMEM (then done never comes). */
int checkpoint_save(struct session *s, int dirfd, const char *path, void (*done)(void *arg, int err), void *arg);
/* A checkpoint of s still waiting for its commit point is given up with
 * err (positive) and why in its answer (or done): true. false when none
 * waits. */
bool checkpoint_cancel_waiting(struct session *s, int err, const char *why);
/* A save of s into the state directory (a flush) is copying: done(arg,
 * 0 or -errno) is called too when it ends (true). Shutdown counts on it
 * as its own save: the ring is not served again after it. */
bool checkpoint_also_tell(struct session *s, void (*done)(void *arg, int err), void *arg);
/* Whether a checkpoint of s waits or copies. */
bool checkpoint_busy(const struct session *s);
/* Whether a save of s into persist.state_dir (a flush, the shutdown's)
 * waits or copies. */
bool checkpoint_saving_state(const struct session *s);
/* "none", "waiting" or "copying", for the status document. */
const char *checkpoint_state(const struct session *s);
/* A copying checkpoint's bytes written so far and in all (0, 0 when
 * none copies), for the status document. */
void checkpoint_progress(const struct session *s, uint64_t *done, uint64_t *total);
/* Removes the flat directory name in parent (its files, then it). */
void checkpoint_remove_dir(int parent, const char *name);

/* "restore {session, dir, lease_s}". */
void restore_request(struct client *c, const cJSON *msg);
/* At start: the checkpoint in the state directory's entry name (state_fd)
 * as an orphan of the uid its manifest names, with its lease counted from
 * now; the entry stays (the session's last save) until the session ends. Returns 0 (under way) or
 * -errno (logged). */
int restore_from_state(struct daemon *d, int state_fd, const char *state_path, const char *name);
/* A restoring session's bytes loaded so far and in all (0, 0 when none). */
void restore_progress(const struct session *s, uint64_t *done, uint64_t *total);
/* session_attach()'s end for a session being restored (control.c calls
 * it instead of replying to an attach). */
void restore_attached(struct session *s, int r);

/* Splits an absolute path into its parent directory, opened (O_RDONLY,
 * O_DIRECTORY), and its last component (a pointer into path, which loses
 * its trailing slashes). Returns the descriptor or -errno with a sentence
 * in err. Shared by both sides. */
int checkpoint_open_parent(char *path, const char **base, char *err, size_t errlen);

#endif
