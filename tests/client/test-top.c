/* SPDX-License-Identifier: MIT */
/*
 * test-top: spillwayctl top when stdout is not a terminal: --iterations 2
 * prints two tables with the session this process attached and exits 0;
 * without a daemon it says so on every refresh (it keeps retrying) and
 * exits 1; bad arguments exit 2.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"
#include "util/command.h"

static const char *run(const char *cmd, int *status)
{
	static char out[65536];
	int st = command_output(cmd, out, sizeof(out));

	ASSERT_TRUE(st >= 0);
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	return out;
}

static unsigned count(const char *hay, const char *needle)
{
	unsigned n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

int main(void)
{
	const char *ctl = getenv("SPILLWAYCTL");
	struct spw_test_daemon d;
	struct spw_attach_opts a = { .size = sizeof(a), .session = "top/0", .region_bytes = 32u << 20 };
	struct spw_attach_opts a2 = { .size = sizeof(a2), .session = "top/1", .region_bytes = 16u << 20 };
	spw_client *c = NULL, *c2 = NULL;
	char cmd[1024];
	const char *out;
	uint32_t t;
	int st;

	if (!getenv("SPILLWAYD") || !ctl)
		SKIP("spillwayd or spillwayctl is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "w", 8u << 20, SPW_TENSOR_RESIDENT, &t, NULL));
	ASSERT_GE(spw_pin(c, t, 1, NULL), 0);
	ASSERT_OK(spw_client_new(NULL, &c2));
	ASSERT_OK(spw_client_connect(c2, d.control));
	ASSERT_OK(spw_client_attach(c2, &a2));

	/* Two tables, each with the pool, the header and both sessions. */
	snprintf(cmd, sizeof(cmd), "'%s' --status '%s' top --iterations 2 </dev/null", ctl, d.status);
	out = run(cmd, &st);
	fprintf(stderr, "%s", out);
	ASSERT_EQ(st, 0);
	ASSERT_UEQ(count(out, "\nSESSION "), 2);
	ASSERT_UEQ(count(out, "\ntop/0 "), 2);
	ASSERT_UEQ(count(out, "\ntop/1 "), 2);
	ASSERT_UEQ(count(out, "32.0 MiB"), 2);
	ASSERT_UEQ(count(out, "\npool  ["), 2);
	ASSERT_UEQ(count(out, "sort: name"), 2);
	ASSERT_TRUE(strchr(out, '\033') == NULL); /* no escapes off a terminal */
	/* Sorted by name: top/0 first; by region too (32 MiB > 16 MiB). */
	ASSERT_TRUE(strstr(out, "\ntop/0 ") < strstr(out, "\ntop/1 "));
	snprintf(cmd, sizeof(cmd), "'%s' --socket-dir '%s' top --iterations 1 --sort region </dev/null", ctl, d.dir);
	out = run(cmd, &st);
	ASSERT_EQ(st, 0);
	ASSERT_CONTAINS(out, "sort: region");
	ASSERT_TRUE(strstr(out, "\ntop/0 ") < strstr(out, "\ntop/1 "));
	/* top/0's row: attached, no step committed (no optimizer), 8 MiB of
	 * 4 MiB pages resident, one pinned. */
	{
		char name[64], state[16], unit[16], ms[16], adam[16];
		double region, resid, inslot, disk, pinned, step;

		ASSERT_EQ(sscanf(strstr(out, "\ntop/0 ") + 1, "%63s %15s %lf %15s %15s %lf %15s %lf %lf %lf %lf", name,
				 state, &step, ms, adam, &region, unit, &resid, &inslot, &disk, &pinned), 11);
		ASSERT_STREQ(state, "attached");
		ASSERT_TRUE(step == 0 && !strcmp(ms, "-") && !strcmp(adam, "-"));
		ASSERT_TRUE(region == 32.0 && !strcmp(unit, "MiB"));
		ASSERT_TRUE(resid == 2 && pinned == 1);
	}

	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	spw_client_free(c2);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);

	/* No daemon: a sentence on each refresh, exit 1. */
	snprintf(cmd, sizeof(cmd), "'%s' --status /nonexistent/status.sock top --iterations 2 </dev/null", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 1);
	ASSERT_UEQ(count(out, "no spillwayd answering at /nonexistent/status.sock"), 2);
	ASSERT_CONTAINS(out, "retrying");

	snprintf(cmd, sizeof(cmd), "'%s' top --iterations x 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 2);
	ASSERT_CONTAINS(out, "--iterations x");
	snprintf(cmd, sizeof(cmd), "'%s' top --sort size 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 2);
	snprintf(cmd, sizeof(cmd), "'%s' top extra 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 2);
	/* One command line for all commands: each refuses another's options. */
	snprintf(cmd, sizeof(cmd), "'%s' top --json 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 2);
	ASSERT_CONTAINS(out, "--json is an option of 'status'");
	snprintf(cmd, sizeof(cmd), "'%s' status --sort name 2>&1", ctl);
	out = run(cmd, &st);
	ASSERT_EQ(st, 2);
	ASSERT_CONTAINS(out, "--sort is an option of 'top'");
	printf("ok\n");
	return 0;
}
