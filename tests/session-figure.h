/* SPDX-License-Identifier: MIT */
/*
 * tests/session-figure.h: one number of one session from the daemon's
 * status document (spw_status_fetch), by a dotted path under the session
 * ("tier.overwrites", "ring.throttled"): what the client-side tests read
 * to see what the daemon did. Header-only: the tests that use it link
 * libspillway and cJSON already.
 */
#ifndef SPW_TESTS_SESSION_FIGURE_H
#define SPW_TESTS_SESSION_FIGURE_H

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "test.h"
#include "util/json.h"

/* The figure, or -1 when the session or the path is not there. Fails the
 * test when the status cannot be fetched or parsed. */
static inline double session_figure(const char *status_path, const char *session, const char *path)
{
	char *json = NULL;
	cJSON *doc, *s;
	double v = -1;

	ASSERT_OK(spw_status_fetch(status_path, &json));
	doc = cJSON_Parse(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name"), *x = json_path(s, path);

		if (cJSON_IsString(n) && !strcmp(n->valuestring, session) && cJSON_IsNumber(x))
			v = x->valuedouble;
	}
	cJSON_Delete(doc);
	free(json);
	return v;
}

/* A number of the whole document by dotted path ("pool.used_bytes"), or
 * the length of the array there ("sessions"); -1 when it is neither. */
static inline double status_figure(const char *status_path, const char *path)
{
	char *json = NULL;
	const cJSON *x;
	cJSON *doc;
	double v = -1;

	ASSERT_OK(spw_status_fetch(status_path, &json));
	doc = cJSON_Parse(json);
	ASSERT_TRUE(doc != NULL);
	x = json_path(doc, path);
	if (cJSON_IsNumber(x))
		v = x->valuedouble;
	else if (cJSON_IsArray(x))
		v = cJSON_GetArraySize(x);
	cJSON_Delete(doc);
	free(json);
	return v;
}

#endif
