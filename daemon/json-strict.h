/* SPDX-License-Identifier: MIT */
/*
 * json-strict.h: RFC 8259 JSON, checked before cJSON sees it.
 *
 * cJSON is lenient where the daemon must not be: it stops at the end of
 * the first value and ignores what follows, takes numbers with leading
 * zeros ("010"), and keeps raw control characters and invalid UTF-8
 * inside strings. A config (or a control frame) with any of these was
 * written wrong or is hostile; refusing it, with where and why, is
 * better than guessing what was meant.
 */
#ifndef SPW_DAEMON_JSON_STRICT_H
#define SPW_DAEMON_JSON_STRICT_H

#include <stddef.h>

/* Deepest nesting of arrays and objects accepted. */
#define JSON_STRICT_MAX_DEPTH 64

/* Checks that buf[0..len) is exactly one JSON value with optional
 * whitespace around it, per RFC 8259, with strings in valid UTF-8.
 * Returns 0, or -EINVAL with *off set to the offending byte's offset and
 * *why to a short phrase ("a number with a leading zero", ...). */
int json_strict_check(const char *buf, size_t len, size_t *off, const char **why);

/* 1-based line and column of byte off in buf (for messages). */
void json_strict_position(const char *buf, size_t len, size_t off, unsigned *line, unsigned *col);

#endif
