/* SPDX-License-Identifier: MIT */
/*
 * client/ctl-progress.c: the progress line of spillwayctl checkpoint and
 * restore. The control request answers once, at the end; while it waits,
 * a thread reads the status document (the session's checkpoint_bytes_done
 * and _total, or restore_bytes_done and _total) five times a second and
 * redraws one line. Only on a terminal: a script reading stdout gets the
 * final line alone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "ctl-progress.h"
#include "util/bytes.h"

#define PERIOD_MS 200

struct ctl_progress {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, drawn;
	char *status_path, *session, *verb;
};

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* The line for the session's entry in the status document, or false
 * when there is nothing to say yet. */
static bool line_of(const struct ctl_progress *p, const char *json, char *out, size_t len)
{
	cJSON *doc = cJSON_Parse(json), *ss, *s;
	bool restore = !strcmp(p->verb, "restore"), ok = false;

	ss = cJSON_GetObjectItemCaseSensitive(doc, "sessions");
	cJSON_ArrayForEach(s, ss) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name");
		const cJSON *state = cJSON_GetObjectItemCaseSensitive(s, "checkpoint");
		double done = num(s, restore ? "restore_bytes_done" : "checkpoint_bytes_done");
		double total = num(s, restore ? "restore_bytes_total" : "checkpoint_bytes_total");
		char a[32], b[32];

		if (!cJSON_IsString(name) || strcmp(name->valuestring, p->session))
			continue;
		if (!restore && cJSON_IsString(state) && !strcmp(state->valuestring, "waiting")) {
			snprintf(out, len, "checkpoint %s: waiting for its next commit point", p->session);
			ok = true;
		} else if (total > 0) {
			format_bytes((uint64_t)done, a, sizeof(a));
			format_bytes((uint64_t)total, b, sizeof(b));
			snprintf(out, len, "%s %s: %s of %s (%.0f%%)", p->verb, p->session, a, b, 100.0 * done / total);
			ok = true;
		}
		break;
	}
	cJSON_Delete(doc);
	return ok;
}

static void *run(void *arg)
{
	struct ctl_progress *p = arg;
	struct timespec until;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		char *json = NULL, line[512];

		pthread_mutex_unlock(&p->lock);
		if (spw_status_fetch(p->status_path, &json) == 0 && line_of(p, json, line, sizeof(line))) {
			printf("\r\033[K%s", line);
			fflush(stdout);
			p->drawn = true;
		}
		free(json);
		pthread_mutex_lock(&p->lock);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += PERIOD_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!p->stop && pthread_cond_timedwait(&p->cond, &p->lock, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct ctl_progress *ctl_progress_start(const char *status_path, const char *session, const char *verb)
{
	struct ctl_progress *p;

	if (!isatty(STDOUT_FILENO) || !(p = calloc(1, sizeof(*p))))
		return NULL;
	p->status_path = strdup(status_path);
	p->session = strdup(session);
	p->verb = strdup(verb);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	if (!p->status_path || !p->session || !p->verb || pthread_create(&p->th, NULL, run, p) != 0) {
		free(p->status_path);
		free(p->session);
		free(p->verb);
		free(p);
		return NULL;
	}
	return p;
}

void ctl_progress_stop(struct ctl_progress *p, uint64_t done, uint64_t total)
{
	char a[32], b[32];

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->th, NULL);
	if (total) {
		format_bytes(done, a, sizeof(a));
		format_bytes(total, b, sizeof(b));
		printf("\r\033[K%s %s: %s of %s (%.0f%%)\n", p->verb, p->session, a, b, 100.0 * (double)done / (double)total);
	} else if (p->drawn) {
		printf("\r\033[K");
	}
	fflush(stdout);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p->status_path);
	free(p->session);
	free(p->verb);
	free(p);
}
