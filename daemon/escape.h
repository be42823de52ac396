/* SPDX-License-Identifier: MIT */
/*
 * escape.h: client-supplied text made safe for a log line or an error
 * reply. Whatever a client sends, the result is one line of valid UTF-8
 * with no control characters: newlines cannot start a forged log line (or
 * a journald "<N>" priority prefix, which only counts at a line's start),
 * terminals see no escape sequences, and a cut never splits a character.
 */
#ifndef SPW_DAEMON_ESCAPE_H
#define SPW_DAEMON_ESCAPE_H

#include <stddef.h>

/* The buffer that holds any escape of n input bytes in full. */
#define ESCAPE_BUF(n) ((n) * 4 + 4)

/* Writes s (at most n bytes, fewer at a NUL) into buf, len >= 8 bytes:
 * printable ASCII as is except '\\' and '"' (escaped as \\ and \"), \n \r
 * \t as those escapes, other bytes below 0x20 and 0x7f as \xHH, complete
 * shortest-form UTF-8 characters from U+00A0 up as is, and every other
 * byte (invalid or cut UTF-8, C1 controls) as \xHH. When buf is too small
 * the text ends at a whole character or escape, followed by "...".
 * Returns buf (NULL s gives "(null)"). */
const char *escape_text(const char *s, size_t n, char *buf, size_t len);

#endif
