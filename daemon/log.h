/* SPDX-License-Identifier: MIT */
/*
 * log.h: the daemon's log, one line per decision, to stderr. Under systemd
 * (JOURNAL_STREAM set) each line carries a <N> syslog priority prefix so the
 * journal keeps the level; elsewhere a "spillwayd: level:" prefix.
 */
#ifndef SPW_DAEMON_LOG_H
#define SPW_DAEMON_LOG_H

#include <stddef.h>
#include <stdint.h>

/* format_bytes() for the messages, from util/ (the daemon's files have
 * always found it here). */
#include "util/bytes.h"

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN,
	LOG_LVL_INFO,
	LOG_LVL_DEBUG,
};

void log_set_level(int level);
int log_get_level(void);

/* Returns the level for "error"|"warn"|"info"|"debug", or -EINVAL. */
int log_level_from_string(const char *s);
const char *log_level_name(int level);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)


#endif
