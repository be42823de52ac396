/* SPDX-License-Identifier: MIT */
/* util/command.h: output kept, cut to the buffer, exit status passed on. */
#include <sys/wait.h>

#include "test.h"
#include "util/command.h"

int main(void)
{
	char buf[64], tiny[4];
	int st;

	st = command_output("printf 'a\\nb'", buf, sizeof(buf));
	ASSERT_EQ(st, 0);
	ASSERT_STREQ(buf, "a\nb");

	/* More output than fits: cut, and the command still ends cleanly
	 * (it is drained, not killed by SIGPIPE). */
	st = command_output("seq 1 100000", tiny, sizeof(tiny));
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_STREQ(tiny, "1\n2");

	st = command_output("echo out; exit 3", buf, sizeof(buf));
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 3);
	ASSERT_STREQ(buf, "out\n");
	return 0;
}
