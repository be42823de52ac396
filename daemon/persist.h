/* SPDX-License-Identifier: MIT */
/*
 * persist.h: persistent sessions (persist.c). A session attached with
 * "persistent" is kept, orphaned, when its client dies without DETACH:
 * region, tensors and swap stay, counted against every cap, for lease_s
 * seconds. An attach of its name by the same uid takes it over (fresh
 * rings, the same region), "drop" ends it at once, and the lease's end
 * releases it. The client marks each step's updates (SPW_OP_MARK), so a
 * takeover can say which step the state holds.
 */
#ifndef SPW_DAEMON_PERSIST_H
#define SPW_DAEMON_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "spw-ring.h"

struct client;
struct daemon;
struct session;

#define PERSIST_LEASE_DEFAULT_S 900u
#define PERSIST_LEASE_MAX_S (7u * 24u * 3600u)

/* s's client left without DETACH (why says how). A persistent session is
 * kept as an orphan and true returned; otherwise false and the caller
 * frees it. */
bool persist_orphan(struct session *s, const char *why);
/* A session restore.c built from a checkpoint, with no client: kept as
 * an orphan for its lease_s. false when out of memory (the caller frees
 * it). */
bool persist_restored(struct session *s);
/* An attach by c of the name of s, an orphan of c's uid, asking for the
 * same geometry: c takes it over, or gets an error reply saying why not. */
void persist_take_over(struct client *c, struct session *s, uint64_t region_bytes, uint32_t page_size,
		       uint32_t lease_s);
/* REGISTER with "adopt": the session's tensor of that name, if its size
 * and kind match and this client has not adopted it yet; it is scratch
 * (session_register) as the adopter says. Returns 0, or -ENOENT / -EEXIST
 * with a sentence in err. */
int persist_adopt(struct session *s, const char *name, uint64_t bytes, bool swappable, bool scratch, uint32_t *id,
		  uint32_t *npages, char *err, size_t errlen);
/* SPW_OP_MARK (checked by spw_sqe_check). Returns the CQE's result. */
int32_t persist_mark(struct session *s, const struct spw_sqe *sqe);
/* An orphan's last pending PIN or FLUSH completed: its pins go now. */
void persist_settled(struct session *s);
/* "drop": ends the orphaned session name for c (its uid, or root). */
void persist_drop(struct client *c, const char *name);
/* "; orphaned sessions hold ...: a (uid 1000, lease 840 s left), ...;
 * spillwayctl drop NAME releases one" for the orphans of uid (all uids
 * when any_uid), or "" when there are none. */
void persist_orphans_text(struct daemon *d, bool any_uid, uid_t uid, char *buf, size_t len);
/* For the status document: seconds since orphaned and of lease left (0
 * for a session a client holds). */
uint64_t persist_orphan_age_s(const struct session *s);
uint64_t persist_lease_left_s(const struct session *s);
/* Shutdown: every orphan is released (they do not outlive the daemon). */
void persist_release_all(struct daemon *d);

#endif
