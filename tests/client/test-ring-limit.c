/* SPDX-License-Identifier: MIT */
/*
 * limits.ring_ops_per_s: a session that floods its ring is served at its
 * rate and no faster, so it cannot take all of the daemon's time from the
 * others. Every operation still completes, in order, with its own
 * result; the status counts the times the session hit its limit. A
 * session under the limit is never held back.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"
#include "session-figure.h"

#define OPS 4000

static double throttled(const struct spw_test_daemon *d, const char *session)
{
	return session_figure(d->status, session, "ring.throttled");
}

/* OPS NOPs kept in flight as fast as the ring takes them; each comes back
 * exactly once. */
static void flood(const struct spw_test_daemon *d, const char *session)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = session, .region_bytes = 4u << 20 };
	static unsigned char seen[OPS];
	struct spw_completion cq[64];
	spw_client *c = NULL;
	unsigned sent = 0, done = 0;

	memset(seen, 0, sizeof(seen));
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d->control));
	ASSERT_OK(spw_client_attach(c, &a));
	while (done < OPS) {
		int n;

		while (sent < OPS && spw_submit_nop(c, sent) == 0)
			sent++;
		n = spw_reap(c, cq, 64, 5000);
		ASSERT_GT(n, 0);
		for (int i = 0; i < n; i++) {
			ASSERT_EQ(cq[i].res, 0);
			ASSERT_TRUE(cq[i].user_data < OPS && !seen[cq[i].user_data]);
			seen[cq[i].user_data] = 1;
			done++;
		}
	}
	ASSERT_GT(throttled(d, session) + 1, 0); /* the session is listed */
	if (!strcmp(session, "limit/held"))
		ASSERT_TRUE(throttled(d, session) > 0);
	else
		ASSERT_TRUE(throttled(d, session) == 0);
	spw_client_free(c);
}

int main(void)
{
	struct spw_test_daemon d;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	/* 20,000 ops/s: a bucket of 200; 4,000 NOPs take ~0.2 s. */
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		" \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"limits\": {\"ring_ops_per_s\": 20000},"
		" \"log\": {\"level\": \"info\"}}"));
	flood(&d, "limit/held");
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);

	/* 0: no limit. */
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		" \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"limits\": {\"ring_ops_per_s\": 0},"
		" \"log\": {\"level\": \"info\"}}"));
	flood(&d, "limit/free");
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
