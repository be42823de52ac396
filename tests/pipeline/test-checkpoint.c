/* SPDX-License-Identifier: MIT */
/*
 * test-checkpoint: checkpoints of a persistent session (issue 11). A
 * trainer (persist-trainer) asks, from a second client after step K, for
 * a checkpoint while it trains on, and ends equal to an uninterrupted
 * run. The checkpoint restored under a new name, a new trainer takes it
 * over and resumes from its step: its end equals the uninterrupted run's
 * bit for bit. A restored session checkpointed again gives the same
 * bytes. Refused: an existing directory, another user's session or
 * checkpoint, a directory whose parent is not the caller's; a checkpoint
 * with one byte changed is refused on restore naming tensor, page and
 * file, and leaves no session behind.
 *
 * The copy is slowed (SPILLWAY_CHECKPOINT_STALL_MS, a fault-injection
 * build's nap after each page) so that the trainer certainly trains on
 * while it copies: the daemon counts the steps committed meanwhile, and
 * they must be some (copy-on-write; the trainer stalls at most for the
 * commit). With COW_BYTES 0 every page the trainer changes before the
 * copy reached it waits for the copy (the deferral path): still exact.
 *
 *   test-checkpoint TIER [FP16 [MODE [STATE [COW_BYTES]]]]  (FP16 1: fp16 gradients
 *                        with a dynamic loss scale, which the checkpoint carries; MODE
 *                        exact or overlapped; STATE the trainers' state dtype, fp32 bf16
 *                        or int8, passed on as PERSIST_STATE_DTYPE; COW_BYTES the
 *                        daemon's checkpoint.cow_bytes)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "child-io.h"
#include "test.h"
#include "test-client.h"

#define STEPS "40"
#define CKPT_AT "15"

static struct spw_test_daemon d;
static const char *tier, *fp16 = "0", *mode = "exact", *cow_bytes;

/* Runs the trainer to its end; returns what it printed. */
static char *train(const char *session, const char *persistent, const char *out, const char *ckpt_dir)
{
	static char buf[4096];
	char dir[512];
	struct trainer_args a = { .socket = d.control, .session = session, .mode = mode, .tier = tier, .fp16 = fp16,
				  .steps = STEPS, .persistent = persistent, .out = out };
	int fd, st;
	pid_t pid;

	if (ckpt_dir) {
		snprintf(dir, sizeof(dir), "PERSIST_CHECKPOINT_DIR=%s", ckpt_dir);
		a.env[0] = "PERSIST_CHECKPOINT_AT=" CKPT_AT;
		a.env[1] = dir;
	}
	pid = trainer_spawn(&a, &fd);
	st = child_reap(pid, fd, buf, sizeof(buf));
	if (st != 0)
		TEST_FAIL("the trainer of %s failed (exit %d); it printed: %s", session, st, buf);
	return buf;
}

static void same_state(const char *a_path, const char *b_path, const char *what)
{
	state_files_same(a_path, b_path, what);
}

static cJSON *status_doc(void)
{
	char *json = NULL;
	cJSON *doc;

	ASSERT_OK(spw_status_fetch(d.status, &json));
	doc = cJSON_Parse(json);
	free(json);
	ASSERT_TRUE(doc != NULL);
	return doc;
}

/* The session's state in the status document, or NULL when absent. */
static const char *session_state(const char *name)
{
	static char state[64];
	cJSON *doc = status_doc(), *s;
	const char *r = NULL;

	cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name"), *st = cJSON_GetObjectItem(s, "state");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) {
			snprintf(state, sizeof(state), "%s", cJSON_IsString(st) ? st->valuestring : "?");
			r = state;
		}
	}
	cJSON_Delete(doc);
	return r;
}

static double pool_used(void)
{
	cJSON *doc = status_doc();
	double v = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "pool"), "used_bytes")->valuedouble;

	cJSON_Delete(doc);
	return v;
}

static bool files_equal(const char *a_path, const char *b_path)
{
	size_t na, nb;
	void *a = file_load(a_path, &na), *b = file_load(b_path, &nb);
	bool eq = na == nb && !memcmp(a, b, na);

	free(a);
	free(b);
	return eq;
}

/* Every data file of checkpoint a equals b's, and so do the CRCs. */
static void same_checkpoint(const char *a, const char *b)
{
	char pa[1024], pb[1024];
	unsigned n = 0;

	for (;; n++) {
		snprintf(pa, sizeof(pa), "%s/t%05u.bin", a, n);
		snprintf(pb, sizeof(pb), "%s/t%05u.bin", b, n);
		if (access(pa, F_OK) < 0)
			break;
		if (!files_equal(pa, pb))
			TEST_FAIL("%s and %s differ", pa, pb);
	}
	ASSERT_GT(n, 1u);
	snprintf(pb, sizeof(pb), "%s/t%05u.bin", b, n);
	ASSERT_NE(access(pb, F_OK), 0);
}

static void other_uid(const char *session, const char *ckpt, const char *new_dir)
{
	pid_t pid;
	int st;

	if (geteuid() != 0) {
		printf("# not root: the other-uid refusals are not exercised\n");
		return;
	}
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		spw_client *c = NULL;

		if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(10);
		if (spw_client_new(NULL, &c) < 0 || spw_client_connect(c, d.control) < 0)
			_exit(11);
		/* Another user's session, another user's checkpoint. */
		if (spw_client_checkpoint(c, session, new_dir, NULL) != -EPERM)
			_exit(12);
		if (spw_client_restore(c, "ck/theirs", ckpt, 0, NULL) != -EPERM)
			_exit(13);
		spw_client_free(c);
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_TRUE(session_state("ck/theirs") == NULL);
	ASSERT_NE(access(new_dir, F_OK), 0);
}

static void corrupt(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

/* The first tensor of the manifest with more than one page of 64 KiB. */
static void pick_tensor(const char *dir, char *tname, size_t tlen, char *fname, size_t flen)
{
	char path[1024];
	size_t n;
	char *text;
	cJSON *m, *t;

	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	text = file_load(path, &n);
	m = cJSON_ParseWithLength(text, n);
	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(cJSON_GetObjectItem(m, "version")->valueint, 1);
	ASSERT_EQ(cJSON_GetObjectItem(m, "page_size")->valueint, 65536);
	/* The COMMIT's loss scale: 1024 (the trainer's initial one, not yet
	 * grown) as float bits with fp16; carried to the resumed run. */
	if (!strcmp(fp16, "1"))
		ASSERT_EQ(cJSON_GetObjectItem(m, "scale_bits")->valuedouble, (double)0x44800000);
	tname[0] = '\0';
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(m, "tensors")) {
		const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
		size_t len = strlen(name);

		/* No scratch tensors: an overlapped optimizer's undo copies of
		 * p matter only inside a step, and the checkpoint holds none. */
		if (len >= 11 && !strcmp(name + len - 11, ".param_undo"))
			TEST_FAIL("the checkpoint holds %s, an undo copy", name);
		if (cJSON_GetObjectItem(t, "bytes")->valuedouble > 2 * 65536 && !tname[0]) {
			ASSERT_TRUE(cJSON_GetArraySize(cJSON_GetObjectItem(t, "crc32c")) > 2);
			snprintf(tname, tlen, "%s", cJSON_GetObjectItem(t, "name")->valuestring);
			snprintf(fname, flen, "%s", cJSON_GetObjectItem(t, "file")->valuestring);
		}
	}
	ASSERT_TRUE(tname[0] != '\0');
	cJSON_Delete(m);
	free(text);
}

static unsigned entries(const char *dir)
{
	DIR *dd = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd)))
		n += strstr(e->d_name, ".tmp-") != NULL;
	closedir(dd);
	return n;
}

int main(int argc, char **argv)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char ref[512], run[512], rest[512], ck1[512], ck2[512], ck3[1024], page_name[256], tname[128], fname[64];
	unsigned long long step = 0, bytes = 0, during = 0, cow = 0, waits = 0;
	double secs = 0, stall = 0;
	char conf[1024];
	unsigned tensors = 0;
	const char *out;
	spw_client *c;
	int r;

	if (argc < 2 || argc > 6)
		TEST_FAIL("usage: test-checkpoint resident|swappable [FP16 [MODE [STATE [COW_BYTES]]]]");
	tier = argv[1];
	if (argc > 2)
		fp16 = argv[2];
	if (argc > 3)
		mode = argv[3];
	if (argc > 4)
		ASSERT_OK(setenv("PERSIST_STATE_DTYPE", argv[4], 1));
	if (argc > 5)
		cow_bytes = argv[5];
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	snprintf(conf, sizeof(conf),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		 "%s%s%s \"log\": {\"level\": \"info\"}}", cow_bytes ? " \"checkpoint\": {\"cow_bytes\": \"" : "",
		 cow_bytes ? cow_bytes : "", cow_bytes ? "\"}," : "");
	/* 20 ms after each page of 64 KiB: the copy takes about a second,
	 * many of the trainer's steps. */
	setenv("SPILLWAY_CHECKPOINT_STALL_MS", "20", 1);
	ASSERT_OK(spw_test_daemon_start(&d, conf));
	unsetenv("SPILLWAY_CHECKPOINT_STALL_MS");
	snprintf(ref, sizeof(ref), "%s/ref.bin", d.dir);
	snprintf(run, sizeof(run), "%s/run.bin", d.dir);
	snprintf(rest, sizeof(rest), "%s/rest.bin", d.dir);
	snprintf(ck1, sizeof(ck1), "%s/ck1", d.dir);
	snprintf(ck2, sizeof(ck2), "%s/ck2", d.dir);
	snprintf(ck3, sizeof(ck3), "%s/ck3", d.dir);

	/* The uninterrupted run, then one checkpointed after step K. */
	train("ck/ref", "0", ref, NULL);
	out = train("ck/run", "1", run, ck1);
	ASSERT_TRUE(strstr(out, "checkpoint ") != NULL);
	ASSERT_EQ(sscanf(strstr(out, "checkpoint "), "checkpoint %llu %u %llu %lf %llu %llu %llu %lf", &step, &tensors,
			 &bytes, &secs, &during, &cow, &waits, &stall), 8);
	printf("# checkpoint at step %llu: %u tensors, %llu bytes in %.3f s; meanwhile the trainer committed %llu "
	       "steps, %llu bytes were saved aside, %llu pages waited for the copy; the ring stalled %.6f s\n", step,
	       tensors, bytes, secs, during, cow, waits, stall);
	/* Copy-on-write: the trainer trained on while the copy ran (with
	 * the session paused for the copy this is 0). */
	ASSERT_GT(during, 0ull);
	if (cow_bytes && !strcmp(cow_bytes, "0")) {
		/* No side buffers: every change of a page not yet copied
		 * waited for the copy. */
		ASSERT_UEQ(cow, 0ull);
		ASSERT_GT(waits, 0ull);
	} else {
		ASSERT_GT(cow, 0ull);
	}
	/* Asked after step 15 ended: 15, or 14 when step 15's updates had
	 * not begun when the daemon looked. */
	ASSERT_TRUE(step == 14 || step == 15);
	ASSERT_GT(tensors, 6u); /* 6 trained tensors and the layout record */
	ASSERT_GT(bytes, 0ull);
	same_state(ref, run, "the checkpointed run");
	ASSERT_EQ(entries(d.dir), 0u);

	/* Restored under a new name, resumed by a new trainer. */
	c = test_client(d.control);
	ASSERT_OK(spw_client_restore(c, "ck/restored", ck1, 120, &res));
	ASSERT_UEQ(res.committed_step, step);
	ASSERT_EQ(res.tensors, tensors);
	ASSERT_UEQ(res.bytes, bytes);
	ASSERT_STREQ(session_state("ck/restored"), "orphaned");

	/* An orphan checkpointed again: the same bytes. */
	ASSERT_OK(spw_client_checkpoint(c, "ck/restored", ck2, &res));
	ASSERT_UEQ(res.committed_step, step);
	printf("# the orphan's checkpoint: %llu bytes, %llu reflinked from swap files\n",
	       (unsigned long long)res.bytes, (unsigned long long)res.copied_bytes);
	/* A restored orphan's swappable pages are all on disk: reflinked
	 * from the swap files where the filesystem can, else read past the
	 * page cache and written with O_DIRECT; resident ones from the
	 * region. */
	if (!strcmp(tier, "swappable") && spw_test_dir_reflinks(d.dir))
		ASSERT_GT(res.copied_bytes, 0ull);
	else
		ASSERT_UEQ(res.copied_bytes, 0ull);
	ASSERT_UEQ(res.copied_bytes + res.direct_bytes + res.buffered_bytes, res.bytes);
	same_checkpoint(ck1, ck2);
	/* Refusals: the directory exists; its parent is missing; a name
	 * already held; another user. */
	ASSERT_EQ(spw_client_checkpoint(c, "ck/restored", ck1, NULL), -EEXIST);
	ASSERT_CONTAINS(spw_client_last_error(c), "already exists");
	snprintf(ck3, sizeof(ck3), "%s/missing/ck", d.dir);
	ASSERT_EQ(spw_client_checkpoint(c, "ck/restored", ck3, NULL), -ENOENT);
	ASSERT_EQ(spw_client_restore(c, "ck/restored", ck2, 0, NULL), -EEXIST);
	ASSERT_EQ(spw_client_checkpoint(c, "ck/none", ck3, NULL), -ENOENT);
	snprintf(ck3, sizeof(ck3), "%s/ck3", d.dir);
	other_uid("ck/restored", ck1, ck3);

	out = train("ck/restored", "1", rest, NULL);
	ASSERT_TRUE(strstr(out, "resumed ") != NULL);
	ASSERT_EQ(strtoull(strstr(out, "resumed ") + 8, NULL, 10), step);
	same_state(ref, rest, "the run resumed from the checkpoint");
	ASSERT_TRUE(session_state("ck/restored") == NULL);

	/* One byte changed in page 1 of a tensor of several pages: refused
	 * naming tensor, page and file. */
	pick_tensor(ck2, tname, sizeof(tname), fname, sizeof(fname));
	snprintf(ck3, sizeof(ck3), "%s/%s", ck2, fname);
	corrupt(ck3, 65536 + 1234); /* page 1 in pages of 64 KiB */
	r = spw_client_restore(c, "ck/bad", ck2, 0, NULL);
	ASSERT_EQ(r, -EBADMSG);
	printf("# %s\n", spw_client_last_error(c));
	ASSERT_CONTAINS(spw_client_last_error(c), fname);
	snprintf(page_name, sizeof(page_name), "tensor %s page 1 ", tname);
	ASSERT_CONTAINS(spw_client_last_error(c), page_name);
	ASSERT_TRUE(session_state("ck/bad") == NULL);
	ASSERT_EQ(pool_used(), 0.0);
	/* The intact one still restores, and is dropped. */
	ASSERT_OK(spw_client_restore(c, "ck/again", ck1, 0, NULL));
	ASSERT_OK(spw_client_drop(c, "ck/again"));
	ASSERT_EQ(pool_used(), 0.0);
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
