/* SPDX-License-Identifier: MIT */
/* ctl-progress.h: spillwayctl checkpoint/restore's progress line. */
#ifndef SPW_CTL_PROGRESS_H
#define SPW_CTL_PROGRESS_H

#include <stdint.h>

struct ctl_progress;

/* When stdout is a terminal: a thread that redraws one line on it, from
 * the status document at status_path, with how far the checkpoint or
 * restore (verb) of session is, until ctl_progress_stop(). NULL when
 * stdout is not a terminal (or the thread cannot start): nothing is drawn. */
struct ctl_progress *ctl_progress_start(const char *status_path, const char *session, const char *verb);
/* Ends the thread; with total > 0 (it succeeded) the line is drawn a
 * last time at done of total and ended, otherwise cleared. p may be NULL. */
void ctl_progress_stop(struct ctl_progress *p, uint64_t done, uint64_t total);

#endif
