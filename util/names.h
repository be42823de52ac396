/* SPDX-License-Identifier: MIT */
/*
 * util/names.h: the one rule for names a trainer gives (sessions, tensors,
 * optimizer tensors), and the names of swap files.
 *
 * A name is 1..max bytes of visible ASCII (0x21..0x7e) other than '"' and
 * '\\', that does not start with '.' or '/' and holds no "..".
 *
 * Why each part: visible ASCII prints as it is in a log line, a status
 * document and an error message, with nothing to escape (hence no quote or
 * backslash either) and nothing that looks like two fields (no space);
 * the '.', '/' and ".." parts keep a name that ends up in a path (a
 * session's swap files, a checkpoint) inside the directory it is meant for.
 * "job/0", "torch/123.1", "0:layers.0.weight" and "spw.opt.w.exp_avg" are
 * names; "", "/abs", ".hidden", "a/../b", "sp ace" and "quo\"te" are not.
 * The caller picks max (SPW_PROTO_MAX_SESSION_NAME and friends).
 */
#ifndef SPW_UTIL_NAMES_H
#define SPW_UTIL_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when name (may be NULL) follows the rule above and is at most max
 * bytes long. */
bool name_valid(const char *name, size_t max);

/* True when s is one or more names joined by single spaces, at most max
 * bytes in all: a tensor's name on the wire, which may carry its role
 * after the name ("layer.0.weight exp_avg"). */
bool name_list_valid(const char *s, size_t max);

/*
 * Swap files: <dir>/spillway-<session>-<8 hex digits>.swap, where <session>
 * is the session's name cut to 64 bytes with every byte outside
 * [A-Za-z0-9_-] (and a leading '.') made '_', so a file name never holds a
 * '/' and never starts a hidden file, whoever picked the session's name.
 */
#define SWAPFILE_PREFIX "spillway-"
#define SWAPFILE_SUFFIX ".swap"

/* The longest swap-file name, with its NUL: prefix, 64, '-', 8, suffix. */
#define SWAPFILE_NAME_MAX 96

/* Writes the file name (no directory) for session and tag into buf;
 * returns buf. SWAPFILE_NAME_MAX bytes always suffice. */
const char *swapfile_name(char *buf, size_t len, const char *session, uint32_t tag);

/* True when a directory entry's name is a spillway swap file (of any
 * session, from this daemon or an earlier one). */
bool swapfile_name_match(const char *name);

/* The swap files in dir: how many, and the bytes their blocks take on
 * the drive. Returns 0 or -errno when dir cannot be read. */
int swapfile_scan(const char *dir, uint64_t *count, uint64_t *bytes);

#endif
