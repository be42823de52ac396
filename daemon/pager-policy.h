/* SPDX-License-Identifier: MIT */
/*
 * pager-policy.h: the pager's paging policy as pure code: the access order
 * learned between two STEP marks, the next use it predicts for a page, and
 * the choice of the slot to evict (furthest next use with a learned order,
 * else a clock). No I/O and no page table: a page is only its place in the
 * order (struct pager_order_page, embedded in the caller's page), and a slot
 * is only what the caller's candidate function says of it. The pager
 * (pager.c) and the simulation test (tests/tier/test-pager-policy.c) are
 * the two users.
 *
 * See "Policy" in pager.h for what the pager makes of it.
 */
#ifndef SPW_DAEMON_PAGER_POLICY_H
#define SPW_DAEMON_PAGER_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define PAGER_POLICY_NONE UINT32_MAX     /* no position / no slot */
#define PAGER_POLICY_NO_LIMIT UINT64_MAX /* no bound on a next use; "never" */

/* A page's place in the order being followed. Zero-initialised pages are
 * not valid: both fields start PAGER_POLICY_NONE. Only pages of the
 * current plan hold other values. */
struct pager_order_page {
	uint32_t first, next_pos; /* plan positions: first occurrence, next one at/after the cursor */
};

/* The recording of this step and the plan learned from the last one. */
struct pager_order {
	struct pager_order_page **rec, **plan;
	uint8_t *rec_ow, *plan_ow; /* per position: the access rewrites the page whole (no read needed) */
	uint32_t *nxt;            /* plan position -> next position of the same page, NONE */
	uint32_t cap, rec_len, plan_len, cursor, consec_div;
	bool rec_overflow, plan_ok;
	unsigned window;          /* the read-ahead window; sets how much noise the plan tolerates */
	uint64_t resyncs;         /* accesses off the expected position, found further on */
	uint64_t divergences;     /* accesses not in the recording */
};

/* Room to record `pages` pages touched a few times each. Returns 0 or
 * -ENOMEM (the order keeps what it had). */
int pager_policy_grow(struct pager_order *o, uint64_t pages);
void pager_policy_free(struct pager_order *o);

/* Where the page is next used, in positions from the start of this step
 * (past plan_len: in the next step), or PAGER_POLICY_NO_LIMIT when the
 * plan does not have it. Meaningful while plan_ok. */
uint64_t pager_policy_next_use(const struct pager_order *o, const struct pager_order_page *pg);

/* The page at position i of the plan, counted from this step's start and
 * wrapping into the next steps; NULL when there is no plan. */
struct pager_order_page *pager_policy_at(const struct pager_order *o, uint64_t i);

/* An access: the plan's cursor follows it, then it is recorded. */
void pager_policy_follow(struct pager_order *o, struct pager_order_page *pg);
void pager_policy_record(struct pager_order *o, struct pager_order_page *pg);
/* The same for an access that rewrites the page whole (a PIN for
 * overwrite): the plan then knows there is nothing to read ahead there. */
void pager_policy_record_overwrite(struct pager_order *o, struct pager_order_page *pg);

/* Whether pg's next access in the plan (this step's after the cursor, else
 * the next step's first) rewrites it whole: then nothing needs reading
 * ahead for any of its accesses until that one. false without a plan. */
bool pager_policy_rewritten_next(const struct pager_order *o, const struct pager_order_page *pg);

/* Whether the access at position i of the plan (as pager_policy_at())
 * rewrites its page whole; false when there is no plan. */
bool pager_policy_overwrite_at(const struct pager_order *o, uint64_t i);

/* STEP: the recording becomes the plan (an empty one keeps the old plan; an
 * overflowed one leaves none) and a new recording starts. */
void pager_policy_step(struct pager_order *o);

/* Drops the plan and the recording (a page they point to is going away). */
void pager_policy_forget(struct pager_order *o);

/* The clock: one reference bit per slot, and its hand. */
struct pager_clock {
	uint8_t *ref;
	uint32_t hand;
};

/* The page in slot s when it may be evicted, else NULL. */
typedef const struct pager_order_page *(*pager_policy_candidate_fn)(const void *ctx, uint32_t s);

/* The slot to evict among nslots, or PAGER_POLICY_NONE: with a plan, the
 * candidate used furthest in the future, and only if that is after `limit`
 * (PAGER_POLICY_NO_LIMIT: any); without one, the clock's choice (second
 * chance: a referenced candidate loses its bit and is passed over once). */
uint32_t pager_policy_victim(const struct pager_order *o, struct pager_clock *clk, uint32_t nslots, uint64_t limit,
			     pager_policy_candidate_fn candidate, const void *ctx);

#endif
