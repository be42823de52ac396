/* SPDX-License-Identifier: MIT */
/* client/ctl-trace.h: spillwayctl trace (ctl-trace.c). */
#ifndef SPW_CTL_TRACE_H
#define SPW_CTL_TRACE_H

/* Captures session's disk I/O for seconds (NULL: 10) from the daemon whose
 * sockets are in dir (NULL: the default), writing Chrome trace JSON to out
 * (NULL or "-": stdout). Returns the exit status. */
int ctl_trace_main(const char *dir, const char *session, const char *seconds, const char *out);

#endif
