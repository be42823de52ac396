/* SPDX-License-Identifier: MIT */
/*
 * Swap files are made in the directory the daemon locked, through its
 * descriptor, never by path after the check (issue 9, item 7): a swap dir
 * swapped for a symlink to somewhere else while the daemon runs does not
 * redirect a new session's swap file there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

int main(void)
{
	char base[64], swapdir[96], moved[96], elsewhere[96], cfg[1024];
	struct spw_test_daemon d;
	struct raw_session s;

	snprintf(base, sizeof(base), "/var/tmp/spw-dirfd-XXXXXX");
	ASSERT_TRUE(mkdtemp(base) != NULL);
	snprintf(swapdir, sizeof(swapdir), "%s/swap", base);
	snprintf(moved, sizeof(moved), "%s/moved", base);
	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", base);
	ASSERT_EQ(mkdir(swapdir, 0700), 0);
	ASSERT_EQ(mkdir(elsewhere, 0700), 0);
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 16},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"8MiB\"},"
		 " \"log\": {\"level\": \"info\"}}",
		 swapdir);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	raw_guard(&d);

	/* The locked directory moves away; its path now leads elsewhere. */
	ASSERT_EQ(rename(swapdir, moved), 0);
	ASSERT_EQ(symlink(elsewhere, swapdir), 0);
	ASSERT_OK(raw_attach(d.control, "dirfd/0", 4 * MiB, 1 * MiB, &s));
	ASSERT_EQ(raw_swap_files(elsewhere), 0);
	ASSERT_EQ(raw_swap_files(moved), 1);
	raw_session_close(&s);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	/* Removed where it was made. */
	ASSERT_EQ(raw_swap_files(moved), 0);

	unlink(swapdir);
	rmdir(elsewhere);
	/* The lock file goes at a clean stop; anything else left fails here. */
	ASSERT_EQ(rmdir(moved), 0);
	ASSERT_EQ(rmdir(base), 0);
	printf("ok\n");
	return 0;
}
