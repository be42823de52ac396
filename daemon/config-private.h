/* SPDX-License-Identifier: MIT */
/*
 * config-private.h: what the three parts of the config parser share.
 *
 *   config.c         the document: strict JSON, sections, defaults, the
 *                    checks across keys, loading and freeing
 *   config-values.c  one JSON value into one field, or a refusal naming
 *                    the key, the value and what was expected
 *   config-keys.c    one function per key and the table of sections;
 *                    a new key is a function and a row there
 */
#ifndef SPW_DAEMON_CONFIG_PRIVATE_H
#define SPW_DAEMON_CONFIG_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "daemon-config.h"

/* Where a refusal is written: "<origin>: <sentence>". */
struct perr {
	char *buf;
	size_t len;
	const char *origin;
};

/* Writes the refusal; returns -EINVAL, so `return cfg_fail(...)` reads. */
int cfg_fail(struct perr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A short, printable rendering of a JSON value for messages, in buf. */
const char *cfg_describe(const cJSON *v, char *buf, size_t len);

/* Each reads v for key into *ret, or refuses (cfg_fail) and leaves *ret. */
int cfg_size(struct perr *e, const cJSON *v, const char *key, uint64_t min, uint64_t *ret);
int cfg_uint(struct perr *e, const cJSON *v, const char *key, uint64_t min, uint64_t max, uint64_t *ret);
int cfg_u32(struct perr *e, const cJSON *v, const char *key, uint32_t min, uint32_t max, uint32_t *ret);
int cfg_bool(struct perr *e, const cJSON *v, const char *key, bool *ret);
int cfg_string(struct perr *e, const cJSON *v, const char *key, const char **ret);
/* An absolute path of at most maxlen bytes. */
int cfg_path(struct perr *e, const cJSON *v, const char *key, size_t maxlen, const char **ret);
/* A string that is one of name(lo)..name(hi): its number in *ret, or a
 * refusal listing them. */
int cfg_choice(struct perr *e, const cJSON *v, const char *key, const char *(*name)(int), int lo, int hi,
	       int *ret);
/* Replaces *dst with a copy of s: 0 or -ENOMEM. */
int cfg_set_str(char **dst, const char *s);

typedef int (*key_fn)(struct perr *e, struct config *c, const cJSON *v, const char *key);

struct key {
	const char *name;
	key_fn fn;
};

struct section {
	const char *name;
	const struct key *keys;
	size_t n;
};

/* config-keys.c: every section the top level takes, in README order. */
extern const struct section cfg_sections[];
extern const size_t cfg_nsections;

#endif
