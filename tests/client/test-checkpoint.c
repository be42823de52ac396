/* SPDX-License-Identifier: MIT */
/*
 * test-checkpoint: the daemon's checkpoint and restore of a session,
 * byte for byte, without an optimizer (issue 11). A persistent session
 * with a resident tensor (a partial last page) and a swappable one bigger
 * than the region's free slots (pages on disk) is marked committed by
 * hand (SPW_OP_MARK). A checkpoint asked for from a second client while a
 * step is open waits for its COMMIT and holds the bytes written in that
 * step; the data files equal what was written. A DETACH while a
 * checkpoint copies waits for it. A restore gives a session whose
 * takeover pins the same bytes back (resident from the region, swappable
 * read from disk through the pager's CRC check). Refused: a session not
 * persistent, or without a committed step; hostile manifests (another
 * version, version 2 without its opened_step, a CRC list one short, a bad file name, a page size that is
 * none), a truncated data file, a symlink for a data file, a changed byte
 * of a page on disk; none leaves a session or a pool byte behind.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "client-private.h"
#include "harness.h"
#include "child-io.h"
#include "test.h"
#include "test-client.h"
#include "util/command.h"

#define MiB (1024u * 1024u)
#define PAGE MiB
#define REGION (64ull * MiB)
#define R_BYTES (24ull * MiB + 100) /* 25 pages, the last of 100 bytes */
#define S_PAGES 60u                 /* more than the 39 slots left */
#define S_BYTES ((uint64_t)S_PAGES * MiB)

static struct spw_test_daemon d;

static uint8_t pattern(uint32_t tensor, uint32_t page, uint32_t i, uint8_t version)
{
	return (uint8_t)(tensor * 131u + page * 31u + i * 7u + (i >> 12) + version * 101u);
}

static void attach(spw_client *c, const char *name, bool persistent)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = REGION, .page_size = PAGE,
				     .persistent = persistent, .lease_s = 60 };

	ASSERT_OK(spw_client_attach(c, &a));
}

static void fill(spw_client *c, uint32_t t, uint32_t tensor, uint32_t page, uint8_t version)
{
	uint8_t *p;

	ASSERT_OK(spw_pin(c, t, page, (void **)&p));
	for (uint32_t i = 0; i < PAGE; i++)
		p[i] = pattern(tensor, page, i, version);
	ASSERT_OK(spw_unpin(c, t, page, SPW_DIRTY));
}

static void check_page(spw_client *c, uint32_t t, uint32_t tensor, uint32_t page, uint32_t len, uint8_t version)
{
	uint8_t *p;

	ASSERT_OK(spw_pin(c, t, page, (void **)&p));
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != pattern(tensor, page, i, version))
			TEST_FAIL("tensor %u page %u byte %u: %u, expected %u", tensor, page, i, p[i],
				  pattern(tensor, page, i, version));
	ASSERT_OK(spw_unpin(c, t, page, SPW_CLEAN));
}

/* The data file of tensor `tensor` (t0000N.bin) holds bytes pages of the
 * pattern; page 0 of version v0, the others of version 0. */
/* Pages of the daemon's swap files in dir that the page cache holds. */
static size_t swap_pages_cached(const char *dir)
{
	long ps = sysconf(_SC_PAGESIZE);
	DIR *dd = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd))) {
		size_t len = strlen(e->d_name), pages;
		char path[4096];
		struct stat st;
		unsigned char *vec;
		void *m;
		int fd;

		if (strncmp(e->d_name, "spillway-", 9) || len < 14 || strcmp(e->d_name + len - 5, ".swap"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		ASSERT_TRUE(fd >= 0 && fstat(fd, &st) == 0);
		if (st.st_size > 0) {
			pages = ((size_t)st.st_size + (size_t)ps - 1) / (size_t)ps;
			m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
			vec = malloc(pages);
			ASSERT_TRUE(m != MAP_FAILED && vec != NULL && mincore(m, (size_t)st.st_size, vec) == 0);
			for (size_t i = 0; i < pages; i++)
				n += vec[i] & 1;
			free(vec);
			munmap(m, (size_t)st.st_size);
		}
		close(fd);
	}
	closedir(dd);
	return n;
}

static void check_file(const char *dir, uint32_t tensor, uint64_t bytes, uint8_t v0)
{
	char path[512];
	uint8_t *b;
	size_t n;

	snprintf(path, sizeof(path), "%s/t%05u.bin", dir, tensor);
	b = file_load(path, &n);
	ASSERT_UEQ(n, bytes);
	for (size_t k = 0; k < n; k++) {
		uint32_t page = (uint32_t)(k / PAGE), i = (uint32_t)(k % PAGE);

		if (b[k] != pattern(tensor, page, i, page == 0 ? v0 : 0))
			TEST_FAIL("%s byte %zu (page %u): %u, expected %u", path, k, page, b[k],
				  pattern(tensor, page, i, page == 0 ? v0 : 0));
	}
	free(b);
}

/* The session's "checkpoint" field in the status document. */
static void checkpoint_field(const char *name, char *out, size_t len)
{
	char *json = NULL;
	cJSON *doc, *s;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	out[0] = '\0';
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions"))
		if (!strcmp(cJSON_GetObjectItem(s, "name")->valuestring, name))
			snprintf(out, len, "%s", cJSON_GetObjectItem(s, "checkpoint")->valuestring);
	cJSON_Delete(doc);
}

/* Waits (up to 10 s) for the session's checkpoint state to be want. */
static void wait_checkpoint(const char *name, const char *want)
{
	char field[32];

	for (int i = 0; i < 1000; i++) {
		checkpoint_field(name, field, sizeof(field));
		if (!strcmp(field, want))
			return;
		usleep(10 * 1000);
	}
	TEST_FAIL("session %s: its checkpoint never showed \"%s\" (last: \"%s\")", name, want, field);
}

static double pool_used(int *sessions)
{
	char *json = NULL;
	cJSON *doc;
	double v;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	v = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "pool"), "used_bytes")->valuedouble;
	*sessions = cJSON_GetArraySize(cJSON_GetObjectItem(doc, "sessions"));
	cJSON_Delete(doc);
	return v;
}

struct ask {
	const char *session, *dir;
	struct spw_checkpoint_result res;
	int r;
	volatile int done;
	char err[1024];
};

static void *ask_thread(void *arg)
{
	struct ask *a = arg;
	spw_client *c = test_client(d.control);

	a->res.size = sizeof(a->res);
	a->r = spw_client_checkpoint(c, a->session, a->dir, &a->res);
	snprintf(a->err, sizeof(a->err), "%s", spw_client_last_error(c));
	spw_client_free(c);
	a->done = 1;
	return NULL;
}

static void copy_dir(const char *src, const char *dst)
{
	char a[1024], b[1024];
	struct dirent *e;
	DIR *dd = opendir(src);

	ASSERT_TRUE(dd != NULL);
	ASSERT_OK(mkdir(dst, 0700));
	while ((e = readdir(dd))) {
		size_t n;
		void *buf;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(a, sizeof(a), "%s/%s", src, e->d_name);
		snprintf(b, sizeof(b), "%s/%s", dst, e->d_name);
		buf = file_load(a, &n);
		f = fopen(b, "wb");
		ASSERT_TRUE(f != NULL);
		ASSERT_EQ(fwrite(buf, 1, n, f), n);
		fclose(f);
		free(buf);
	}
	closedir(dd);
}

/* spillwayctl restore and checkpoint: the same bytes through the command
 * line; its refusal on stderr with a nonzero status. */
static void through_ctl(spw_client *b, const char *ck1)
{
	const char *ctl = getenv("SPILLWAYCTL");
	char cmd[2048], out[4096], ck4[512];
	int st;

	if (!ctl) {
		printf("# SPILLWAYCTL unset: spillwayctl checkpoint/restore not exercised\n");
		return;
	}
	snprintf(ck4, sizeof(ck4), "%s/ck4", d.dir);
	snprintf(cmd, sizeof(cmd), "%s --socket-dir %s restore raw/ctl %s 2>&1", ctl, d.dir, ck1);
	st = command_output(cmd, out, sizeof(out));
	printf("# %s", out);
	ASSERT_EQ(st, 0);
	ASSERT_CONTAINS(out, "restored raw/ctl at step 2: 2 tensors");
	snprintf(cmd, sizeof(cmd), "%s --socket-dir %s checkpoint raw/ctl %s 2>&1", ctl, d.dir, ck4);
	st = command_output(cmd, out, sizeof(out));
	printf("# %s", out);
	ASSERT_EQ(st, 0);
	ASSERT_CONTAINS(out, "checkpoint of raw/ctl at step 2: 2 tensors");
	check_file(ck4, 0, R_BYTES, 2);
	check_file(ck4, 1, S_BYTES, 2);
	st = command_output(cmd, out, sizeof(out));
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	ASSERT_CONTAINS(out, "already exists");
	ASSERT_OK(spw_client_drop(b, "raw/ctl"));
}

/* A trainer killed inside a step's updates while a checkpoint waits for
 * that step's commit: the checkpoint is answered -ESTALE, nothing is
 * written, and the orphan can be dropped. */
static void killed_inside_step(spw_client *b, const char *dir)
{
	struct ask ask = { .session = "raw/dies", .dir = dir };
	int pfd[2], st;
	pthread_t th;
	char ch;
	pid_t pid;

	ASSERT_OK(pipe(pfd));
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		spw_client *c = test_client(d.control);
		uint32_t t;

		attach(c, "raw/dies", true);
		if (spw_tensor_register(c, "r", MiB, SPW_TENSOR_RESIDENT, &t, NULL) < 0 ||
		    spw__mark_sync(c, SPW_MARK_OPEN, 1) < 0 || spw__mark_sync(c, SPW_MARK_COMMIT, 1) < 0 ||
		    spw__mark_sync(c, SPW_MARK_OPEN, 2) < 0)
			_exit(1);
		if (write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	ASSERT_EQ(read(pfd[0], &ch, 1), 1);
	close(pfd[0]);
	ASSERT_OK(pthread_create(&th, NULL, ask_thread, &ask));
	/* The kill must come while the checkpoint waits for COMMIT 2: for
	 * as long as the request takes to get there. */
	wait_checkpoint("raw/dies", "waiting");
	ASSERT_EQ(ask.done, 0);
	kill(pid, SIGKILL);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	pthread_join(th, NULL);
	printf("# %s\n", ask.err);
	ASSERT_EQ(ask.r, -ESTALE);
	ASSERT_CONTAINS(ask.err, "died inside");
	ASSERT_NE(access(dir, F_OK), 0);
	ASSERT_OK(spw_client_drop(b, "raw/dies"));
}

enum hostile { H_VERSION, H_OPEN, H_CRC_SHORT, H_FILE_NAME, H_PAGE_SIZE, H_HUGE, H_TRUNCATE, H_SYMLINK, H_DISK_BYTE };

/* A copy of good, made hostile one way; a restore of it is refused with
 * err, the message naming what, and nothing is left. */
static void hostile(spw_client *c, const char *good, enum hostile how, int err, const char *what)
{
	char dir[512], path[1024], target[1024];
	int sessions, fd;
	double used = pool_used(&sessions);
	cJSON *m, *t1;
	size_t n;
	char *text;
	int r;

	snprintf(dir, sizeof(dir), "%s/hostile", d.dir);
	copy_dir(good, dir);
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	text = file_load(path, &n);
	m = cJSON_ParseWithLength(text, n);
	free(text);
	ASSERT_TRUE(m != NULL);
	t1 = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tensors"), 1);
	switch (how) {
	case H_VERSION:
		cJSON_ReplaceItemInObject(m, "version", cJSON_CreateNumber(3));
		break;
	case H_OPEN:
		/* Version 2 is the save of an orphan inside a step's
		 * updates: it must name the step it left open. */
		cJSON_ReplaceItemInObject(m, "version", cJSON_CreateNumber(2));
		break;
	case H_CRC_SHORT:
		cJSON_DeleteItemFromArray(cJSON_GetObjectItem(t1, "crc32c"), 3);
		break;
	case H_FILE_NAME:
		cJSON_ReplaceItemInObject(t1, "file", cJSON_CreateString("../t00001.bin"));
		break;
	case H_PAGE_SIZE:
		cJSON_ReplaceItemInObject(m, "page_size", cJSON_CreateNumber(3000));
		break;
	case H_HUGE:
		cJSON_ReplaceItemInObject(t1, "bytes", cJSON_CreateNumber((double)(1ull << 40)));
		break;
	case H_TRUNCATE:
		snprintf(target, sizeof(target), "%s/t00001.bin", dir);
		ASSERT_OK(truncate(target, (off_t)S_BYTES - 1));
		break;
	case H_SYMLINK:
		snprintf(target, sizeof(target), "%s/t00001.bin", dir);
		unlink(target);
		snprintf(path, sizeof(path), "%s/t00001.bin", good);
		ASSERT_OK(symlink(path, target));
		break;
	case H_DISK_BYTE:
		snprintf(target, sizeof(target), "%s/t00001.bin", dir);
		fd = open(target, O_RDWR);
		ASSERT_TRUE(fd >= 0);
		ASSERT_EQ(pwrite(fd, "\x5a", 1, 37 * (off_t)MiB + 4321), 1);
		close(fd);
		break;
	}
	text = cJSON_Print(m);
	cJSON_Delete(m);
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	{
		FILE *f = fopen(path, "wb");

		ASSERT_TRUE(f != NULL);
		fputs(text, f);
		fclose(f);
	}
	free(text);
	r = spw_client_restore(c, "raw/hostile", dir, 0, NULL);
	printf("# hostile %d: %s\n", how, spw_client_last_error(c));
	ASSERT_EQ(r, err);
	ASSERT_CONTAINS(spw_client_last_error(c), what);
	ASSERT_EQ(pool_used(&r), used);
	ASSERT_EQ(r, sessions);
	dir_remove(dir);
}

int main(void)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char ck1[512], ck2[512], ck3[512], field[32];
	struct ask ask = { 0 };
	spw_client *a, *b, *np;
	uint32_t r_id, s_id, id;
	pthread_t th;
	int sessions;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	/* A copy of 85 pages takes at least 0.4 s (a fault-injection build's
	 * nap after each page): long enough to be seen copying. */
	setenv("SPILLWAY_CHECKPOINT_STALL_MS", "5", 1);
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"512MiB\", \"session_max_bytes\": \"128MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"2GiB\"}], \"session_bytes\": \"256MiB\"},"
		" \"log\": {\"level\": \"warn\"}}"));
	unsetenv("SPILLWAY_CHECKPOINT_STALL_MS");
	snprintf(ck1, sizeof(ck1), "%s/ck1", d.dir);
	snprintf(ck2, sizeof(ck2), "%s/ck2", d.dir);
	snprintf(ck3, sizeof(ck3), "%s/ck3", d.dir);

	a = test_client(d.control);
	attach(a, "raw/a", true);
	ASSERT_OK(spw_tensor_register(a, "r", R_BYTES, SPW_TENSOR_RESIDENT, &r_id, NULL));
	ASSERT_OK(spw_tensor_register(a, "s", S_BYTES, SPW_TENSOR_SWAPPABLE, &s_id, NULL));
	/* Scratch: left out of checkpoints (the counts below say 2 tensors). */
	ASSERT_OK(spw_tensor_register(a, "u", PAGE, SPW_TENSOR_RESIDENT | SPW_TENSOR_SCRATCH, &id, NULL));
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_OPEN, 1));
	for (uint32_t p = 0; p < 25; p++)
		fill(a, r_id, 0, p, 0);
	for (uint32_t p = 0; p < S_PAGES; p++)
		fill(a, s_id, 1, p, 0);

	b = test_client(d.control);
	/* No committed step yet; not persistent. */
	ASSERT_EQ(spw_client_checkpoint(b, "raw/a", ck1, NULL), -EAGAIN);
	np = test_client(d.control);
	attach(np, "raw/np", false);
	ASSERT_EQ(spw_client_checkpoint(b, "raw/np", ck1, NULL), -EINVAL);
	ASSERT_OK(spw_client_detach(np));
	spw_client_free(np);
	ASSERT_NE(access(ck1, F_OK), 0);

	/* Step 1 committed; step 2 open when the checkpoint is asked for:
	 * it waits for COMMIT 2 and holds what step 2 wrote. */
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_COMMIT, 1));
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_OPEN, 2));
	ask = (struct ask){ .session = "raw/a", .dir = ck1 };
	ASSERT_OK(pthread_create(&th, NULL, ask_thread, &ask));
	wait_checkpoint("raw/a", "waiting");
	usleep(200 * 1000);
	ASSERT_EQ(ask.done, 0);
	checkpoint_field("raw/a", field, sizeof(field));
	ASSERT_STREQ(field, "waiting");
	fill(a, r_id, 0, 0, 2);
	fill(a, s_id, 1, 0, 2);
	ASSERT_OK(spw__mark_sync(a, SPW_MARK_COMMIT, 2));
	pthread_join(th, NULL);
	if (ask.r < 0)
		TEST_FAIL("checkpoint: %s", ask.err);
	ASSERT_UEQ(ask.res.committed_step, 2);
	ASSERT_EQ(ask.res.tensors, 2u);
	ASSERT_UEQ(ask.res.bytes, R_BYTES + S_BYTES);
	ASSERT_UEQ(ask.res.bytes_total, ask.res.bytes); /* the result says what the copy reached */
	printf("# %llu bytes in %.3f s, %llu reflinked, %.3f s waiting for the commit\n",
	       (unsigned long long)ask.res.bytes, ask.res.seconds, (unsigned long long)ask.res.copied_bytes,
	       ask.res.wait_seconds);
	ASSERT_UEQ(ask.res.copied_bytes + ask.res.direct_bytes + ask.res.buffered_bytes, ask.res.bytes);
	/* Pages only on disk: reflinked where the filesystem can; else read
	 * past the page cache, which keeps none of the swap files' pages
	 * (the pager writes them with O_DIRECT). */
	if (spw_test_dir_reflinks(d.dir)) {
		ASSERT_GT(ask.res.copied_bytes, 0ull);
	} else {
		ASSERT_UEQ(ask.res.copied_bytes, 0ull);
		ASSERT_UEQ(swap_pages_cached(d.dir), 0);
	}
	check_file(ck1, 0, R_BYTES, 2);
	check_file(ck1, 1, S_BYTES, 2);
	checkpoint_field("raw/a", field, sizeof(field));
	ASSERT_STREQ(field, "none");

	/* The session goes on after the checkpoint. */
	check_page(a, s_id, 1, 5, PAGE, 0);

	/* A DETACH while a checkpoint copies waits for it. */
	ask = (struct ask){ .session = "raw/a", .dir = ck2 };
	ASSERT_OK(pthread_create(&th, NULL, ask_thread, &ask));
	for (int i = 0; i < 500; i++) {
		checkpoint_field("raw/a", field, sizeof(field));
		if (!strcmp(field, "copying"))
			break;
		usleep(2 * 1000);
	}
	ASSERT_STREQ(field, "copying");
	ASSERT_OK(spw_client_detach(a));
	pthread_join(th, NULL);
	if (ask.r < 0)
		TEST_FAIL("checkpoint beside a detach: %s", ask.err);
	check_file(ck2, 0, R_BYTES, 2);
	check_file(ck2, 1, S_BYTES, 2);
	spw_client_free(a);

	/* Restored, taken over, the same bytes pinned back. */
	ASSERT_OK(spw_client_restore(b, "raw/b", ck1, 60, &res));
	ASSERT_UEQ(res.committed_step, 2);
	ASSERT_EQ(spw_client_restore(b, "raw/b", ck1, 60, NULL), -EEXIST);
	a = test_client(d.control);
	attach(a, "raw/b", true);
	ASSERT_EQ(spw_tensor_adopt(a, "u", PAGE, SPW_TENSOR_RESIDENT | SPW_TENSOR_SCRATCH, &id, NULL), -ENOENT);
	ASSERT_OK(spw_tensor_adopt(a, "r", R_BYTES, SPW_TENSOR_RESIDENT, &id, NULL));
	ASSERT_EQ(id, r_id);
	ASSERT_OK(spw_tensor_adopt(a, "s", S_BYTES, SPW_TENSOR_SWAPPABLE, &id, NULL));
	ASSERT_EQ(id, s_id);
	for (uint32_t p = 0; p < 25; p++)
		check_page(a, r_id, 0, p, p == 24 ? 100 : PAGE, p == 0 ? 2 : 0);
	for (uint32_t p = 0; p < S_PAGES; p++)
		check_page(a, s_id, 1, p, PAGE, p == 0 ? 2 : 0);
	ASSERT_OK(spw_client_detach(a));
	spw_client_free(a);

	killed_inside_step(b, ck3);
	through_ctl(b, ck1);

	/* Hostile checkpoints. */
	ASSERT_EQ(pool_used(&sessions), 0.0);
	hostile(b, ck1, H_VERSION, -EPROTONOSUPPORT, "format version 3");
	hostile(b, ck1, H_OPEN, -EINVAL, "version 2 names no opened_step past its committed_step");
	hostile(b, ck1, H_CRC_SHORT, -EINVAL, "59 CRCs for its 60 pages");
	hostile(b, ck1, H_FILE_NAME, -EINVAL, "no valid name, kind, file");
	hostile(b, ck1, H_PAGE_SIZE, -EINVAL, "page_size");
	hostile(b, ck1, H_HUGE, -EINVAL, "the session's region and swap hold");
	hostile(b, ck1, H_TRUNCATE, -EINVAL, "is not a file of 62914560 bytes");
	hostile(b, ck1, H_SYMLINK, -ELOOP, "t00001.bin");
	hostile(b, ck1, H_DISK_BYTE, -EBADMSG, "tensor s page 37 (file");
	ASSERT_EQ(pool_used(&sessions), 0.0);
	ASSERT_EQ(sessions, 0);
	spw_client_free(b);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
