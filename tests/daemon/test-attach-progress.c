/* SPDX-License-Identifier: MIT */
/*
 * Attach progress in the status document: while a 256 MiB region is being
 * locked, a second thread reads status as fast as it can. Every reading of
 * the session has 0 <= region_ready_bytes <= region_bytes, a whole number of
 * REGION_READY_STEPs (or the whole region), never less than the reading
 * before; once attached, region_ready_bytes is the region. How many
 * readings fell in between depends on the machine and is only printed
 * (tests/daemon/test-region.c checks the steps themselves).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"
#include "region.h"
#include "test.h"

#define MiB (1024.0 * 1024.0)
#define REGION (256 * MiB)

static struct spw_test_daemon d;
static atomic_bool done;

struct readings {
	unsigned attaching, between;
	atomic_uint attached; /* the main thread waits for the first */
	double last;
};

static void *watch(void *arg)
{
	struct readings *rd = arg;

	while (!atomic_load(&done)) {
		cJSON *st = raw_status(d.status);
		const cJSON *ss = raw_status_session(st, "job/big");

		if (ss) {
			const char *state = cJSON_GetObjectItem(ss, "state")->valuestring;
			double ready = raw_num(ss, "region_ready_bytes");

			ASSERT_TRUE(!isnan(ready));
			ASSERT_TRUE(raw_num(ss, "region_bytes") == REGION);
			ASSERT_TRUE(ready >= 0 && ready <= REGION);
			ASSERT_TRUE(ready == REGION || fmod(ready, (double)REGION_READY_STEP) == 0);
			ASSERT_TRUE(ready >= rd->last);
			rd->last = ready;
			if (!strcmp(state, "attaching")) {
				rd->attaching++;
				rd->between += ready > 0 && ready < REGION;
			} else {
				ASSERT_TRUE(ready == REGION);
				atomic_fetch_add(&rd->attached, 1);
			}
		}
		cJSON_Delete(st);
	}
	return NULL;
}

int main(void)
{
	struct readings rd = { 0 };
	struct raw_session s;
	pthread_t t;
	cJSON *st;

	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"1GiB\", \"session_max_bytes\": \"512MiB\", \"require_locked\": false},"
		" \"log\": {\"level\": \"warn\"}}"));
	ASSERT_EQ(pthread_create(&t, NULL, watch, &rd), 0);
	ASSERT_OK(raw_attach(d.control, "job/big", (uint64_t)REGION, 4u << 20, &s));
	/* Until the watcher has read the session attached too (a fixed
	 * sleep here is not enough on a loaded machine: one status request
	 * under ASan can take longer). */
	for (int i = 0; i < 1000 && atomic_load(&rd.attached) == 0; i++)
		usleep(10000);
	atomic_store(&done, true);
	ASSERT_EQ(pthread_join(t, NULL), 0);
	fprintf(stderr, "status readings: %u attaching (%u part way), %u attached\n", rd.attaching, rd.between,
		atomic_load(&rd.attached));
	ASSERT_GT(atomic_load(&rd.attached), 0);

	st = raw_status(d.status);
	ASSERT_TRUE(raw_num(raw_status_session(st, "job/big"), "region_ready_bytes") == REGION);
	cJSON_Delete(st);
	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
