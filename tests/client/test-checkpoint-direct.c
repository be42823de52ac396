/* SPDX-License-Identifier: MIT */
/*
 * test-checkpoint-direct: how a checkpoint writes the pages it holds in
 * memory (issue 11): with O_DIRECT through the copier's io_uring where
 * the filesystem takes it, through the page cache where it does not.
 *
 * A persistent session of four tensors in its region (so that every page
 * is written from memory and none copied from a swap file): one of whole
 * pages, one whose last page holds 5000 bytes, one of 100 bytes, and a
 * swappable one. Each checkpoint's files must hold exactly the tensors'
 * bytes (a tail is written padded to 4 KiB and the file cut back), and a
 * restore must accept every CRC and pin the same bytes back.
 *
 *   - on the test's directory (a local disk, ext4 or XFS): every byte is
 *     written direct (the result's direct_bytes), with two writes cut
 *     short by fault injection and continued;
 *   - on /dev/shm (tmpfs): every byte buffered (buffered_bytes);
 *   - an injected EIO from the 4th write of the second flush into
 *     persist.state_dir on: that flush fails naming tensor, page and
 *     file, the first flush stays whole in the state directory, no
 *     temporary is left; a checkpoint to a new directory fails the same
 *     way and leaves nothing; the session trains on;
 *   - a daemon whose filesystem refuses O_DIRECT (simulated:
 *     SPILLWAY_CHECKPOINT_NO_DIRECT, as an EINVAL at open): buffered,
 *     the same bytes.
 * The faults need a fault-injection build; without one only the first two
 * run. The daemon's directory and the state directory go to the first of
 * /tmp and /var/tmp that is not tmpfs (TMPDIR set for the daemon); with
 * neither on a disk the direct path cannot be shown here and the test
 * says so and fails, rather than pass on the buffered path alone.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "client-private.h"
#include "config.h"
#include "harness.h"
#include "session-figure.h"
#include "child-io.h"
#include "test.h"
#include "test-client.h"

#define PAGE (256u * 1024u)
#define REGION (8ull * 1024 * 1024)
#define NT 4

/* The tensors: 13 pages in all, each written by one request. */
static const struct {
	const char *name;
	uint64_t bytes;
	bool swappable;
} tensors[NT] = {
	{ "a", 5ull * PAGE, false },
	{ "tail", 2ull * PAGE + 5000, false },
	{ "small", 100, false },
	{ "s", 4ull * PAGE, true },
};
#define WRITES_PER_CHECKPOINT 13
#define TOTAL_BYTES (11ull * PAGE + 5000 + 100)

static struct spw_test_daemon d;
static uint32_t ids[NT];

static uint8_t pattern(uint32_t tensor, uint64_t byte, uint8_t version)
{
	return (uint8_t)(tensor * 131u + byte * 7u + (byte >> 12) + version * 101u);
}

static uint32_t npages(uint32_t t)
{
	return (uint32_t)((tensors[t].bytes + PAGE - 1) / PAGE);
}

static uint32_t page_len(uint32_t t, uint32_t page)
{
	uint64_t left = tensors[t].bytes - (uint64_t)page * PAGE;

	return left < PAGE ? (uint32_t)left : PAGE;
}

/* Every page of every tensor of version v, as step `step`. */
static void train_step(spw_client *c, uint64_t step, uint8_t v)
{
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_OPEN, step));
	for (uint32_t t = 0; t < NT; t++)
		for (uint32_t p = 0; p < npages(t); p++) {
			uint8_t *b;

			ASSERT_OK(spw_pin(c, ids[t], p, (void **)&b));
			for (uint32_t i = 0; i < page_len(t, p); i++)
				b[i] = pattern(t, (uint64_t)p * PAGE + i, v);
			ASSERT_OK(spw_unpin(c, ids[t], p, SPW_DIRTY));
		}
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_COMMIT, step));
}

/* dir's data files hold exactly the tensors' bytes of version v. */
static void check_files(const char *dir, uint8_t v)
{
	for (uint32_t t = 0; t < NT; t++) {
		char path[512];
		uint8_t *b;
		size_t n;

		snprintf(path, sizeof(path), "%s/t%05u.bin", dir, t);
		b = file_load(path, &n);
		ASSERT_UEQ(n, tensors[t].bytes);
		for (size_t k = 0; k < n; k++)
			if (b[k] != pattern(t, k, v))
				TEST_FAIL("%s byte %zu: %u, expected %u", path, k, b[k], pattern(t, k, v));
		free(b);
	}
}

/* A restore of dir gives a session whose pages are those of version v. */
static void check_restore(spw_client *c, const char *dir, uint8_t v)
{
	spw_client *r = test_client(d.control);
	struct spw_attach_opts a = { .size = sizeof(a), .session = "raw/back", .region_bytes = REGION,
				     .page_size = PAGE, .persistent = true, .lease_s = 60 };

	ASSERT_OK(spw_client_restore(c, "raw/back", dir, 60, NULL));
	ASSERT_OK(spw_client_attach(r, &a));
	for (uint32_t t = 0; t < NT; t++) {
		uint32_t id;

		ASSERT_OK(spw_tensor_adopt(r, tensors[t].name, tensors[t].bytes,
					   tensors[t].swappable ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT, &id, NULL));
		for (uint32_t p = 0; p < npages(t); p++) {
			uint8_t *b;

			ASSERT_OK(spw_pin(r, id, p, (void **)&b));
			for (uint32_t i = 0; i < page_len(t, p); i++)
				if (b[i] != pattern(t, (uint64_t)p * PAGE + i, v))
					TEST_FAIL("restored %s page %u byte %u", tensors[t].name, p, i);
			ASSERT_OK(spw_unpin(r, id, p, SPW_CLEAN));
		}
	}
	ASSERT_OK(spw_client_detach(r)); /* ends the restored session */
	spw_client_free(r);
}

static void attach_and_register(spw_client *c)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "raw/d", .region_bytes = REGION, .page_size = PAGE,
				     .persistent = true, .lease_s = 60 };

	ASSERT_OK(spw_client_attach(c, &a));
	for (uint32_t t = 0; t < NT; t++)
		ASSERT_OK(spw_tensor_register(c, tensors[t].name, tensors[t].bytes,
					      tensors[t].swappable ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT, &ids[t],
					      NULL));
}

static void print_res(const char *what, const struct spw_checkpoint_result *res)
{
	printf("# %s: %llu bytes: %llu direct, %llu buffered, %llu reflinked\n", what,
	       (unsigned long long)res->bytes, (unsigned long long)res->direct_bytes,
	       (unsigned long long)res->buffered_bytes, (unsigned long long)res->copied_bytes);
}

/* No "<base>.tmp-" entry in dir. */
static void no_temporary(const char *dir, const char *base)
{
	struct dirent *e;
	DIR *dd = opendir(dir);

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd)))
		if (!strncmp(e->d_name, base, strlen(base)) && strstr(e->d_name, ".tmp-"))
			TEST_FAIL("%s/%s left behind", dir, e->d_name);
	closedir(dd);
}

static const char *config(char *buf, size_t len, const char *state)
{
	snprintf(buf, len,
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		 " \"persist\": {\"state_dir\": \"%s\"}, \"log\": {\"level\": \"info\"}}", state);
	return buf;
}

/* The first of /tmp and /var/tmp on a filesystem that takes O_DIRECT
 * for real (not tmpfs or ramfs, whose "direct" I/O is the page cache). */
static const char *disk_tmp(void)
{
	static const char *const dirs[] = { "/tmp", "/var/tmp" };
	struct statfs f;

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (statfs(dirs[i], &f) == 0 && f.f_type != TMPFS_MAGIC && f.f_type != RAMFS_MAGIC &&
		    access(dirs[i], W_OK) == 0)
			return dirs[i];
	fprintf(stderr, "test-checkpoint-direct: neither /tmp nor /var/tmp is on a disk filesystem: the O_DIRECT "
			"path cannot be exercised here\n");
	ASSERT_TRUE(false);
	return NULL;
}

/* Direct on the local disk (two writes cut short on the way), buffered on
 * tmpfs, and an injected EIO failing a flush and a checkpoint cleanly. */
static void direct_tmpfs_and_faults(void)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char state[256], entry[300], ck1[512], ck2[512], shm[64], shm_ck[128], cfg[1024];
	spw_client *c, *b;
	uint8_t *p;

	/* Writes 2 and 7 of the first checkpoint cut in half (continued
	 * for the rest); from the 4th write of the third checkpoint (the
	 * second flush) on, every write fails with EIO. */
	if (SPW_FAULT_INJECTION)
		setenv("SPILLWAY_CHECKPOINT_FAULTS", "write:short@2,write:short@7,write:eio@30+", 1);
	snprintf(state, sizeof(state), "%s/spw-direct-state-%d", disk_tmp(), (int)getpid());
	ASSERT_OK(spw_test_daemon_start(&d, config(cfg, sizeof(cfg), state)));
	unsetenv("SPILLWAY_CHECKPOINT_FAULTS");
	snprintf(entry, sizeof(entry), "%s/raw+d", state);
	snprintf(ck1, sizeof(ck1), "%s/ck1", d.dir);
	snprintf(ck2, sizeof(ck2), "%s/ck2", d.dir);

	c = test_client(d.control);
	b = test_client(d.control);
	attach_and_register(c);
	train_step(c, 1, 1);

	/* The local disk: every byte from memory, with O_DIRECT. */
	ASSERT_OK(spw_client_checkpoint(b, "raw/d", ck1, &res));
	print_res("checkpoint on the test's directory", &res);
	ASSERT_UEQ(res.bytes, TOTAL_BYTES);
	ASSERT_UEQ(res.copied_bytes, 0);
	ASSERT_UEQ(res.direct_bytes, TOTAL_BYTES);
	ASSERT_UEQ(res.buffered_bytes, 0);
	check_files(ck1, 1);
	check_restore(b, ck1, 1);

	/* tmpfs: the same bytes through the page cache (no ring writes). */
	snprintf(shm, sizeof(shm), "/dev/shm/spw-direct-XXXXXX");
	ASSERT_TRUE(mkdtemp(shm) != NULL);
	snprintf(shm_ck, sizeof(shm_ck), "%s/ck", shm);
	ASSERT_OK(spw_client_checkpoint(b, "raw/d", shm_ck, &res));
	print_res("checkpoint on /dev/shm", &res);
	ASSERT_UEQ(res.direct_bytes, 0);
	ASSERT_UEQ(res.buffered_bytes, TOTAL_BYTES);
	check_files(shm_ck, 1);
	check_restore(b, shm_ck, 1);
	ASSERT_OK(dir_remove(shm_ck));
	ASSERT_OK(rmdir(shm));
	if (!SPW_FAULT_INJECTION) {
		printf("# built without fault_injection: no short writes, no failed flush\n");
		goto out;
	}

	/* The first flush (writes 14 to 26): whole, in the state directory. */
	ASSERT_OK(spw_client_flush(b, "raw/d", &res));
	ASSERT_UEQ(res.direct_bytes, TOTAL_BYTES);
	check_files(entry, 1);

	/* Step 2, and its flush fails at write 30: named, and the first
	 * flush is what the state directory holds, whole. */
	train_step(c, 2, 2);
	ASSERT_EQ(spw_client_flush(b, "raw/d", &res), -EIO);
	printf("# the second flush: %s\n", spw_client_last_error(b));
	ASSERT_CONTAINS(spw_client_last_error(b), "writing page ");
	ASSERT_CONTAINS(spw_client_last_error(b), " of tensor ");
	ASSERT_CONTAINS(spw_client_last_error(b), "/raw+d/t0000");
	ASSERT_CONTAINS(spw_client_last_error(b), "Input/output error");
	check_files(entry, 1);
	check_restore(b, entry, 1);
	no_temporary(state, "raw+d");

	/* A checkpoint into a new directory: refused the same way, nothing
	 * under its name nor a temporary beside it. */
	ASSERT_EQ(spw_client_checkpoint(b, "raw/d", ck2, &res), -EIO);
	ASSERT_CONTAINS(spw_client_last_error(b), "/ck2/t0000");
	ASSERT_NE(access(ck2, F_OK), 0);
	no_temporary(d.dir, "ck2");

	/* The session trains on, at step 2. */
	ASSERT_OK(spw_pin(c, ids[1], 2, (void **)&p));
	for (uint32_t i = 0; i < 5000; i++)
		if (p[i] != pattern(1, 2ull * PAGE + i, 2))
			TEST_FAIL("tail page 2 byte %u after the failed checkpoints", i);
	ASSERT_OK(spw_unpin(c, ids[1], 2, SPW_CLEAN));
out:
	ASSERT_OK(spw_client_detach(c)); /* ends the session and removes its flush */
	spw_client_free(c);
	spw_client_free(b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	ASSERT_OK(dir_remove(state));
}

/* A filesystem that refuses O_DIRECT (EINVAL at open, simulated): the
 * files are written through the page cache, the same bytes. */
static void refused(void)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char state[256], ck[512], cfg[1024];
	spw_client *c, *b;

	setenv("SPILLWAY_CHECKPOINT_NO_DIRECT", "1", 1);
	snprintf(state, sizeof(state), "%s/spw-direct-state-%d", disk_tmp(), (int)getpid());
	ASSERT_OK(spw_test_daemon_start(&d, config(cfg, sizeof(cfg), state)));
	unsetenv("SPILLWAY_CHECKPOINT_NO_DIRECT");
	snprintf(ck, sizeof(ck), "%s/ck", d.dir);
	c = test_client(d.control);
	b = test_client(d.control);
	attach_and_register(c);
	train_step(c, 1, 3);
	ASSERT_OK(spw_client_checkpoint(b, "raw/d", ck, &res));
	print_res("checkpoint, O_DIRECT refused", &res);
	ASSERT_UEQ(res.direct_bytes, 0);
	ASSERT_UEQ(res.buffered_bytes, TOTAL_BYTES);
	check_files(ck, 3);
	check_restore(b, ck, 3);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	spw_client_free(b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	dir_remove(state);
}

/* A swap page that reads back other than the pager wrote it (its first
 * read by the copier flipped by fault injection) fails the checkpoint,
 * naming the page and the swap file, and leaves nothing behind: the copy
 * checks every page it takes from disk against the CRC-32C the pager
 * wrote it with, where it used to record the CRC of whatever it read. The
 * next checkpoint, read cleanly, holds the right bytes. */
static void swap_page_corrupt(void)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "raw/flip", .region_bytes = 4ull * PAGE,
				     .page_size = PAGE, .persistent = true, .lease_s = 60 };
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char state[256], ck[512], cfg[1024], path[600];
	const uint32_t pages = 12;
	spw_client *c, *b;
	uint32_t id;
	uint8_t *p;
	size_t n;

	setenv("SPILLWAY_CHECKPOINT_FAULTS", "read:flip@1", 1);
	snprintf(state, sizeof(state), "%s/spw-flip-state-%d", disk_tmp(), (int)getpid());
	ASSERT_OK(spw_test_daemon_start(&d, config(cfg, sizeof(cfg), state)));
	unsetenv("SPILLWAY_CHECKPOINT_FAULTS");
	snprintf(ck, sizeof(ck), "%s/ck-flip", d.dir);
	c = test_client(d.control);
	b = test_client(d.control);
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_OK(spw_tensor_register(c, "s", (uint64_t)pages * PAGE, SPW_TENSOR_SWAPPABLE, &id, NULL));
	/* Three times the region: most pages end on disk. */
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_OPEN, 1));
	for (uint32_t k = 0; k < pages; k++) {
		ASSERT_OK(spw_pin(c, id, k, (void **)&p));
		for (uint32_t i = 0; i < PAGE; i++)
			p[i] = pattern(9, (uint64_t)k * PAGE + i, 1);
		ASSERT_OK(spw_unpin(c, id, k, SPW_DIRTY));
	}
	ASSERT_OK(spw__mark_sync(c, SPW_MARK_COMMIT, 1));

	ASSERT_EQ(spw_client_checkpoint(b, "raw/flip", ck, &res), -EBADMSG);
	if (!strstr(spw_client_last_error(b), "fails its checksum") || !strstr(spw_client_last_error(b), "swap file"))
		TEST_FAIL("the refusal names neither: %s", spw_client_last_error(b));
	printf("# %s\n", spw_client_last_error(b));
	ASSERT_NE(access(ck, F_OK), 0);
	no_temporary(d.dir, "ck-flip");

	ASSERT_OK(spw_client_checkpoint(b, "raw/flip", ck, &res));
	ASSERT_GT(res.direct_bytes, 0ull);
	snprintf(path, sizeof(path), "%s/t00000.bin", ck);
	p = file_load(path, &n);
	ASSERT_UEQ(n, (uint64_t)pages * PAGE);
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(9, i, 1))
			TEST_FAIL("%s byte %zu", path, i);
	free(p);
	ASSERT_OK(spw_client_detach(c));
	spw_client_free(c);
	spw_client_free(b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	dir_remove(state);
}

struct pin_ask {
	spw_client *c;
	uint32_t id;
	int r;
	uint8_t first;
};

static void *pin_thread(void *arg)
{
	struct pin_ask *a = arg;
	uint8_t *p;

	a->r = spw_pin(a->c, a->id, 0, (void **)&p); /* the slot, >= 0 */
	if (a->r >= 0) {
		a->first = p[0];
		a->r = spw_unpin(a->c, a->id, 0, 0);
	}
	return NULL;
}

/* checkpoint.priority: while a session waits on the disk (the daemon's
 * first read, a PIN of "raw/wait"'s, held 3 s by fault injection), the
 * copy of "raw/y" keeps one request in flight under "low" (the default:
 * the result counts the times it held back) and takes its full window
 * under "normal" (it never holds back); in both the checkpoint is whole
 * and the PIN gets its page. */
static void yields_to_waiting(const char *priority)
{
	struct spw_attach_opts w = { .size = sizeof(w), .session = "raw/wait", .region_bytes = 4ull * PAGE,
				     .page_size = PAGE };
	struct spw_attach_opts y = { .size = sizeof(y), .session = "raw/y", .region_bytes = 32ull * PAGE,
				     .page_size = PAGE, .persistent = true, .lease_s = 60 };
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char cfg[1024], ck[512], path[600];
	struct pin_ask ask = { 0 };
	spw_client *cw, *cy, *b;
	uint32_t id, yid;
	pthread_t th;
	uint8_t *p;
	size_t n;

	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		 " \"checkpoint\": {\"priority\": \"%s\"}, \"log\": {\"level\": \"info\"}}", priority);
	setenv("SPILLWAY_FAULTS", "read:stall=3000@1", 1);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	unsetenv("SPILLWAY_FAULTS");
	snprintf(ck, sizeof(ck), "%s/ck-yield", d.dir);
	cw = test_client(d.control);
	cy = test_client(d.control);
	b = test_client(d.control);

	/* raw/wait: twelve pages through four slots, page 0 on disk. */
	ASSERT_OK(spw_client_attach(cw, &w));
	ASSERT_OK(spw_tensor_register(cw, "s", 12ull * PAGE, SPW_TENSOR_SWAPPABLE, &id, NULL));
	for (uint32_t k = 0; k < 12; k++) {
		ASSERT_OK(spw_pin(cw, id, k, (void **)&p));
		memset(p, 40 + k, PAGE);
		ASSERT_OK(spw_unpin(cw, id, k, SPW_DIRTY));
	}
	/* raw/y: 32 pages in its region, committed. */
	ASSERT_OK(spw_client_attach(cy, &y));
	ASSERT_OK(spw_tensor_register(cy, "r", 32ull * PAGE, SPW_TENSOR_RESIDENT, &yid, NULL));
	ASSERT_OK(spw__mark_sync(cy, SPW_MARK_OPEN, 1));
	for (uint32_t k = 0; k < 32; k++) {
		ASSERT_OK(spw_pin(cy, yid, k, (void **)&p));
		for (uint32_t i = 0; i < PAGE; i++)
			p[i] = pattern(5, (uint64_t)k * PAGE + i, 1);
		ASSERT_OK(spw_unpin(cy, yid, k, SPW_DIRTY));
	}
	ASSERT_OK(spw__mark_sync(cy, SPW_MARK_COMMIT, 1));

	/* The PIN waits on the held read; then the checkpoint. */
	ask = (struct pin_ask){ .c = cw, .id = id };
	ASSERT_OK(pthread_create(&th, NULL, pin_thread, &ask));
	for (int i = 0; i < 2000 && session_figure(d.status, "raw/wait", "tier.reads_inflight") < 1; i++)
		usleep(1000);
	ASSERT_GE(session_figure(d.status, "raw/wait", "tier.reads_inflight"), 1.0);
	ASSERT_OK(spw_client_checkpoint(b, "raw/y", ck, &res));
	printf("# priority %s: %llu bytes in %.3f s, held back %llu times (%.3f s)\n", priority,
	       (unsigned long long)res.bytes, res.seconds, (unsigned long long)res.yields, res.yield_seconds);
	if (!strcmp(priority, "low"))
		ASSERT_GE(res.yields, 1ull);
	else
		ASSERT_UEQ(res.yields, 0);
	ASSERT_GT(res.direct_bytes, 0ull);
	snprintf(path, sizeof(path), "%s/t00000.bin", ck);
	p = file_load(path, &n);
	ASSERT_UEQ(n, 32ull * PAGE);
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(5, i, 1))
			TEST_FAIL("%s byte %zu", path, i);
	free(p);

	pthread_join(th, NULL);
	ASSERT_OK(ask.r);
	if (ask.first != 40)
		TEST_FAIL("priority %s: raw/wait's page 0 reads %u, not 40", priority, ask.first);
	ASSERT_OK(spw_client_detach(cw));
	ASSERT_OK(spw_client_detach(cy));
	spw_client_free(cw);
	spw_client_free(cy);
	spw_client_free(b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
}

int main(void)
{
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	/* The daemon's directory (the checkpoints' parent) on that disk too. */
	setenv("TMPDIR", disk_tmp(), 1);
	direct_tmpfs_and_faults();
	if (SPW_FAULT_INJECTION) {
		refused();
		swap_page_corrupt();
		yields_to_waiting("low");
		yields_to_waiting("normal");
	}
	printf("ok\n");
	return 0;
}
