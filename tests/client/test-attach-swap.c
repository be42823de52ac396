/* SPDX-License-Identifier: MIT */
/*
 * test-attach-swap: how much NVMe swap a session asks for (issue 9, item
 * 10). spw_attach_opts.swap_bytes with SPW_ATTACH_SWAP_BYTES is exact, 0
 * included (a resident-only session reserves no swap file); without the
 * flag, or from a caller built against the first version of the struct,
 * the daemon's swap.session_bytes applies. spw_client_info() and the
 * status document say what the session got.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "session-figure.h"
#include "test.h"

#define MiB (1024ull * 1024ull)

static struct spw_test_daemon d;

/* Attaches name with a (its size field as the caller set it); returns the
 * client or NULL with *err. */
static spw_client *attach(const char *name, const struct spw_attach_opts *a, int *err)
{
	struct spw_client_opts o = { .size = sizeof(o) };
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(&o, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	*err = spw_client_attach(c, a);
	if (*err < 0) {
		fprintf(stderr, "attach %s: %s\n", name, spw_client_last_error(c));
		spw_client_free(c);
		return NULL;
	}
	return c;
}

static uint64_t info_swap(spw_client *c)
{
	struct spw_session_info i = { .size = sizeof(i) };

	ASSERT_OK(spw_client_info(c, &i));
	return i.swap_bytes;
}

/* The session's swap as the daemon's status document states it. */
static double status_swap(const char *name)
{
	return session_figure(d.status, name, "tier.swap_bytes");
}

/* Swap files in the swap dir whose name mentions tag. */
static int swap_files(const char *dir, const char *tag)
{
	DIR *dd = opendir(dir);
	struct dirent *e;
	int n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd)))
		n += strstr(e->d_name, tag) != NULL;
	closedir(dd);
	return n;
}

int main(void)
{
	struct spw_attach_opts a;
	spw_client *c;
	char swapdir[400];
	int err;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		" \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		" \"log\": {\"level\": \"info\"}}"));
	snprintf(swapdir, sizeof(swapdir), "%s", d.dir);

	/* No flag: the daemon's swap.session_bytes. */
	a = (struct spw_attach_opts){ .size = sizeof(a), .session = "swap/default", .region_bytes = 8 * MiB };
	c = attach("swap/default", &a, &err);
	ASSERT_TRUE(c != NULL);
	ASSERT_UEQ(info_swap(c), 64 * MiB);
	ASSERT_EQ(status_swap("swap/default"), 64.0 * MiB);
	spw_client_free(c);

	/* Exactly 0: resident only, no swap file reserved. */
	a = (struct spw_attach_opts){ .size = sizeof(a), .session = "swap/none", .region_bytes = 8 * MiB,
				      .swap_bytes = 0, .flags = SPW_ATTACH_SWAP_BYTES };
	c = attach("swap/none", &a, &err);
	ASSERT_TRUE(c != NULL);
	ASSERT_UEQ(info_swap(c), 0);
	ASSERT_EQ(status_swap("swap/none"), 0.0);
	ASSERT_EQ(swap_files(swapdir, "none"), 0);
	spw_client_free(c);

	/* Exactly what was asked. */
	a = (struct spw_attach_opts){ .size = sizeof(a), .session = "swap/some", .region_bytes = 8 * MiB,
				      .swap_bytes = 16 * MiB, .flags = SPW_ATTACH_SWAP_BYTES };
	c = attach("swap/some", &a, &err);
	ASSERT_TRUE(c != NULL);
	ASSERT_UEQ(info_swap(c), 16 * MiB);
	ASSERT_EQ(status_swap("swap/some"), 16.0 * MiB);
	spw_client_free(c);

	/* A caller built against the first version: its struct ends before
	 * swap_bytes, whatever lies beyond is not read; the default applies. */
	a = (struct spw_attach_opts){ .size = offsetof(struct spw_attach_opts, swap_bytes), .session = "swap/old",
				      .region_bytes = 8 * MiB, .swap_bytes = 0, .flags = SPW_ATTACH_SWAP_BYTES };
	c = attach("swap/old", &a, &err);
	ASSERT_TRUE(c != NULL);
	ASSERT_UEQ(info_swap(c), 64 * MiB);
	spw_client_free(c);

	/* Flags this library does not know, and a size over the protocol's. */
	a = (struct spw_attach_opts){ .size = sizeof(a), .session = "swap/bad", .region_bytes = 8 * MiB,
				      .flags = 1u << 7 };
	ASSERT_TRUE(attach("swap/bad", &a, &err) == NULL);
	ASSERT_EQ(err, -EINVAL);
	a = (struct spw_attach_opts){ .size = sizeof(a), .session = "swap/bad", .region_bytes = 8 * MiB,
				      .swap_bytes = 1ull << 51, .flags = SPW_ATTACH_SWAP_BYTES };
	ASSERT_TRUE(attach("swap/bad", &a, &err) == NULL);
	ASSERT_EQ(err, -EINVAL);

	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
