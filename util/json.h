/* SPDX-License-Identifier: MIT */
/*
 * util/json.h: reading integers out of cJSON, which holds every number as
 * a double.
 */
#ifndef SPW_UTIL_JSON_H
#define SPW_UTIL_JSON_H

#include <stdint.h>

#include <cjson/cJSON.h>

/* The largest integer every smaller one of which a double holds exactly. */
#define JSON_UINT_MAX 9007199254740992ull /* 2^53 */

/* Stores v in *ret when v is a JSON number holding a whole value in
 * [0, max] (max above 2^53 counts as 2^53: a larger double may already be
 * rounded). Returns 0; -EINVAL when v is NULL or not a number (*ret
 * untouched); -ERANGE when it is negative, fractional, not finite or over
 * max (*ret untouched). */
int json_uint(const cJSON *v, uint64_t max, uint64_t *ret);

/* The member at a dotted path of object keys ("tier.pages.dirty"), keys
 * compared case-sensitively; NULL when o is NULL or any step is missing.
 * Keys longer than 63 bytes never match. */
const cJSON *json_path(const cJSON *o, const char *path);

#endif
