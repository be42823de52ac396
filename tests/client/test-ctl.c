/* SPDX-License-Identifier: MIT */
/*
 * test-ctl: spillwayctl status, as a table and as JSON, shows a session
 * that this process attached; a missing daemon gives a sentence naming
 * the socket, and exit status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"
#include "util/command.h"

/* Runs cmd through the shell and returns its output (stdout and stderr)
 * in a static buffer, and its exit status in *status. */
static const char *run(const char *cmd, int *status)
{
	static char out[65536];
	int st = command_output(cmd, out, sizeof(out));

	ASSERT_TRUE(st >= 0);
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	return out;
}

int main(void)
{
	const char *ctl = getenv("SPILLWAYCTL");
	struct spw_test_daemon d;
	struct spw_attach_opts a = { .size = sizeof(a), .session = "ctl/0", .region_bytes = 32u << 20 };
	spw_client *c = NULL;
	char cmd[1024];
	const char *out;
	cJSON *doc, *s;
	uint32_t t;
	int st, found = 0;

	if (!getenv("SPILLWAYD") || !ctl)
		SKIP("spillwayd or spillwayctl is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "w", 8u << 20, SPW_TENSOR_RESIDENT, &t, NULL));
	ASSERT_GE(spw_pin(c, t, 1, NULL), 0);

	/* The table: the session's row, sizes in MiB/GiB. */
	snprintf(cmd, sizeof(cmd), "'%s' --status '%s' status 2>&1", ctl, d.status);
	out = run(cmd, &st);
	fprintf(stderr, "%s", out);
	ASSERT_EQ(st, 0);
	ASSERT_CONTAINS(out, "SESSION");
	ASSERT_CONTAINS(out, "ctl/0");
	ASSERT_CONTAINS(out, "32.0 MiB");
	ASSERT_CONTAINS(out, "1.0 GiB"); /* the pool's max_bytes in the test config */

	/* JSON, chosen by --socket-dir this time. */
	snprintf(cmd, sizeof(cmd), "'%s' --socket-dir '%s' status --json", ctl, d.dir);
	out = run(cmd, &st);
	ASSERT_EQ(st, 0);
	doc = cJSON_Parse(out);
	ASSERT_TRUE(doc != NULL);
	ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItem(doc, "cpu_s")));
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *name = cJSON_GetObjectItem(s, "name");
		if (cJSON_IsString(name) && !strcmp(name->valuestring, "ctl/0")) {
			found = 1;
			ASSERT_EQ(cJSON_GetObjectItem(s, "tensors")->valuedouble, 1);
			ASSERT_EQ(cJSON_GetObjectItem(s, "pages_pinned")->valuedouble, 1);
		}
	}
	ASSERT_TRUE(found);
	cJSON_Delete(doc);

	/* No daemon there: a sentence that names the socket. */
	snprintf(cmd, sizeof(cmd), "'%s' --socket-dir /nonexistent/spw status 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 1);
	ASSERT_CONTAINS(out, "/nonexistent/spw/status.sock");
	snprintf(cmd, sizeof(cmd), "'%s' frobnicate 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 2);

	c = spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
