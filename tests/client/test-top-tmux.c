/* SPDX-License-Identifier: MIT */
/*
 * test-top-tmux: spillwayctl top on a real terminal, driven through tmux
 * (send-keys, capture-pane): the full-screen view shows the session, 's'
 * changes the sort key, and after each way out (q, Ctrl-C, SIGTERM) the
 * shell in the pane gets the right exit status back with its terminal in
 * canonical mode with echo again (stty prints icanon and echo, not
 * -icanon/-echo); when the daemon goes away top says so and keeps
 * running. Skips without tmux (Debian: tmux).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "test.h"
#include "util/command.h"

static char tmux[128];  /* "tmux -L <private server> -f /dev/null" */

static const char *sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *sh(const char *fmt, ...)
{
	static char out[65536];
	char cmd[2048];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = command_output(cmd, out, sizeof(out));
	if (st != 0)
		TEST_FAIL("%s: exit status %d, output: %s", cmd, st, out);
	return out;
}

static const char *pane(void)
{
	return sh("%s capture-pane -p -t t", tmux);
}

/* Waits (10 s at most) for the pane to show needle; returns the pane. */
static const char *wait_for(const char *needle)
{
	const char *p = NULL;

	for (int waited = 0; waited < 10000; waited += 50) {
		p = pane();
		if (strstr(p, needle))
			return p;
		usleep(50000);
	}
	TEST_FAIL("the pane never showed \"%s\"; it shows:\n%s", needle, p ? p : "");
	return NULL;
}

static void keys(const char *k)
{
	sh("%s send-keys -t t %s", tmux, k);
}

/* The shell in the pane runs top, then prints its exit status and the
 * terminal's canonical/echo flags, one per line. The shell ignores SIGINT
 * meanwhile: Ctrl-C goes to the whole foreground group, and a shell that
 * takes it drops the rest of the line (top sets its own handler, so the
 * ignored disposition it inherits does not matter to it). */
static void start_top(const char *ctl, const char *status, int round)
{
	keys("clear Enter");
	sh("%s send-keys -t t \"trap '' INT; '%s' --status '%s' top; echo EXIT$((0+%d))=\\$?; stty -a | tr -s ' ;' '\\n\\n' | "
	   "grep -x -e icanon -e -icanon -e echo -e -echo | sed s/^/FLAG:/\" Enter", tmux, ctl, status, round);
}

static void check_restored(int round, int code)
{
	char want[32];
	const char *p;

	snprintf(want, sizeof(want), "EXIT%d=%d", round, code);
	p = wait_for(want);
	p = wait_for("FLAG:echo");
	ASSERT_CONTAINS(p, "FLAG:icanon");
	ASSERT_TRUE(!strstr(p, "FLAG:-icanon") && !strstr(p, "FLAG:-echo"));
	/* The alternate screen is gone: the view's header is not on it. */
	ASSERT_TRUE(!strstr(p, "PF HIT"));
}

/* The pid of the pane shell's one child (top). */
static pid_t top_pid(void)
{
	pid_t shell = (pid_t)atoi(sh("%s display -p -t t '#{pane_pid}'", tmux));

	ASSERT_GT(shell, 0);
	return (pid_t)atoi(sh("pgrep -P %d", (int)shell));
}

int main(void)
{
	const char *ctl = getenv("SPILLWAYCTL");
	struct spw_test_daemon d;
	struct spw_attach_opts a = { .size = sizeof(a), .session = "tmux/0", .region_bytes = 32u << 20 };
	struct spw_attach_opts a2 = { .size = sizeof(a2), .session = "tmux/1", .region_bytes = 64u << 20 };
	spw_client *c = NULL, *c2 = NULL;
	const char *p;

	if (!getenv("SPILLWAYD") || !ctl)
		SKIP("spillwayd or spillwayctl is not built yet");
	if (system("command -v tmux >/dev/null 2>&1") != 0)
		SKIP("tmux is not installed (Debian: tmux)");
	snprintf(tmux, sizeof(tmux), "tmux -L spw-top-%d -f /dev/null", (int)getpid());
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_client_new(NULL, &c2));
	ASSERT_OK(spw_client_connect(c2, d.control));
	ASSERT_OK(spw_client_attach(c2, &a2));

	sh("%s new-session -d -s t -x 132 -y 30 'env -i PATH=/usr/bin:/bin TERM=screen sh'", tmux);

	/* q */
	start_top(ctl, d.status, 1);
	p = wait_for("tmux/1");
	ASSERT_CONTAINS(p, "tmux/0");
	ASSERT_CONTAINS(p, "sort: name");
	ASSERT_TRUE(strstr(p, "tmux/0") < strstr(p, "tmux/1"));
	keys("s");
	p = wait_for("sort: region");
	ASSERT_TRUE(strstr(p, "tmux/1") < strstr(p, "tmux/0")); /* 64 MiB first */
	keys("q");
	check_restored(1, 0);

	/* Ctrl-C: the shell sees a death by SIGINT */
	start_top(ctl, d.status, 2);
	wait_for("tmux/1");
	keys("C-c");
	check_restored(2, 128 + SIGINT);

	/* SIGTERM */
	start_top(ctl, d.status, 3);
	wait_for("tmux/1");
	ASSERT_EQ(kill(top_pid(), SIGTERM), 0);
	check_restored(3, 128 + SIGTERM);

	/* The daemon goes away: top says so, keeps trying, q still works. */
	start_top(ctl, d.status, 4);
	wait_for("tmux/1");
	spw_client_free(c);
	spw_client_free(c2);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	wait_for("no spillwayd answering");
	ASSERT_GT(top_pid(), 0);
	keys("q");
	check_restored(4, 0);

	sh("%s kill-server", tmux);
	printf("ok\n");
	return 0;
}
