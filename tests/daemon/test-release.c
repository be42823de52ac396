/* SPDX-License-Identifier: MIT */
/*
 * Memory held past the cap (issue 9, item 2): a client that keeps its
 * region memfd and mapping after detach must not keep the pages. The daemon
 * punches the whole memfd at release (off its loop, soon after the
 * detach reply), so the kept file holds no blocks, the
 * kept mapping reads zeros (the data is gone too), and the pool's figures
 * (which count those bytes free again) are true.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)
#define CYCLES 6

static uint64_t blocks_of(int fd)
{
	struct stat st;

	ASSERT_EQ(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* The file's blocks once the daemon's release has run: polled for up to
 * 5 s, then whatever is left (the assertion shows it). */
static uint64_t blocks_after_release(int fd)
{
	uint64_t b = blocks_of(fd);

	for (int i = 0; i < 500 && b != 0; i++) {
		usleep(10 * 1000);
		b = blocks_of(fd);
	}
	return b;
}

int main(void)
{
	struct spw_test_daemon d;
	struct raw_session s[CYCLES];
	cJSON *st, *r;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	raw_guard(&d);
	for (int i = 0; i < CYCLES; i++) {
		char name[32];

		snprintf(name, sizeof(name), "keep/%d", i);
		ASSERT_OK(raw_attach(d.control, name, 16 * MiB, 1 * MiB, &s[i]));
		memset(s[i].region, 0xA5, s[i].region_bytes);
		ASSERT_UEQ(blocks_of(s[i].fds[SPW_ATTACH_FD_REGION]), s[i].region_bytes);
		ASSERT_TRUE(blocks_of(s[i].fds[SPW_ATTACH_FD_RINGS]) > 0);
		/* Detach, but keep every descriptor and both mappings. */
		r = raw_request(s[i].ctl, "{\"type\":\"detach\"}");
		ASSERT_TRUE(r != NULL);
		ASSERT_EQ(raw_reply_errno(r), 0);
		cJSON_Delete(r);
		/* The region is released off the loop (unmapping gigabytes
		 * takes time the loop owes others): wait for it, bounded. */
		ASSERT_UEQ(blocks_after_release(s[i].fds[SPW_ATTACH_FD_REGION]), 0);
		ASSERT_UEQ(blocks_of(s[i].fds[SPW_ATTACH_FD_RINGS]), 0);
	}
	st = raw_status(d.status);
	ASSERT_EQ(raw_num(st, "pool.used_bytes"), 0);
	cJSON_Delete(st);
	for (int i = 0; i < CYCLES; i++) {
		/* The data went with the pages: what the client can still read
		 * is zeros, never the old contents. */
		for (size_t o = 0; o < s[i].region_bytes; o += 4096)
			if (s[i].region[o] != 0 || s[i].region[o + 4095] != 0)
				TEST_FAIL("session %d: byte %zu of the kept region still holds data after detach", i, o);
		raw_session_close(&s[i]);
	}
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
