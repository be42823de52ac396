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

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The session's state ("orphaned", "attached"...; "" when there is no
 * such session), its committed step (-1: none) and whether a step is open. */
static inline void session_marks(const char *status_path, const char *session, char *st, size_t stlen,
				 double *committed, bool *open)
{
	char *json = NULL;
	cJSON *doc, *s;

	st[0] = '\0';
	*committed = -1;
	*open = false;
	ASSERT_OK(spw_status_fetch(status_path, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, session)) {
			snprintf(st, stlen, "%s", cJSON_GetObjectItem(s, "state")->valuestring);
			*committed = cJSON_GetObjectItem(s, "committed_step")->valuedouble;
			*open = cJSON_IsTrue(cJSON_GetObjectItem(s, "step_open"));
		}
	}
	cJSON_Delete(doc);
}

/* Waits (up to 5 s) for the session to be an orphan (after its trainer's
 * kill, or after a daemon start: the restore loads it first); its marks
 * then. */
static inline void session_wait_orphaned(const char *status_path, const char *session, double *committed,
					 bool *open)
{
	char st[64];

	for (int i = 0; i < 500; i++) {
		session_marks(status_path, session, st, sizeof(st), committed, open);
		if (!strcmp(st, "orphaned"))
			return;
		usleep(10 * 1000);
	}
	TEST_FAIL("session %s is not an orphan (state \"%s\")", session, st);
}

#endif
