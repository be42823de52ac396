/* SPDX-License-Identifier: MIT */
/*
 * A checkpoint's directory on the copier's thread: its empty data files,
 * its manifest, and the temporaries a failed or killed copy leaves
 * ("<dir>.tmp-<pid>", removed on failure and, for a dead daemon's, by the
 * next checkpoint of that name).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint-private.h"
#include "checkpoint.h"

/* Every tensor's file, empty: pages the loop waits for may go into any. */
int ck_create_files(struct checkpoint *ck, int dir)
{
	for (uint32_t i = 0; i < ck->nt; i++) {
		const struct ck_tensor *t = &ck->t[i];
		int fd = openat(dir, t->file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

		if (fd < 0)
			return checkpoint_fail(ck, errno, "creating %s/%s: %s", ck->tmp, t->file, strerror(errno));
		if (geteuid() == 0 && !ck->state && fchown(fd, ck->uid, ck->gid) < 0) {
			close(fd);
			return checkpoint_fail(ck, errno, "chown of %s/%s: %s", ck->tmp, t->file, strerror(errno));
		}
		close(fd);
	}
	return 0;
}

/* t's pages left in linked swap files: "refs": [[page, link, offset], ...]. */
static int add_refs(const struct checkpoint *ck, const struct ck_tensor *t, cJSON *o)
{
	cJSON *refs = NULL, *r;

	for (uint32_t k = 0; k < t->npages; k++) {
		const struct ck_page *pg = &ck->pages[t->first + k];

		if (!pg->kept)
			continue;
		if (!refs && !(refs = cJSON_AddArrayToObject(o, "refs")))
			return -ENOMEM;
		if (!(r = cJSON_CreateArray()) || !cJSON_AddItemToArray(refs, r) ||
		    !cJSON_AddItemToArray(r, cJSON_CreateNumber(k)) ||
		    !cJSON_AddItemToArray(r, cJSON_CreateNumber(ck->link_as[pg->src])) ||
		    !cJSON_AddItemToArray(r, cJSON_CreateNumber((double)pg->off)))
			return -ENOMEM;
	}
	return 0;
}

int ck_link_swap_files(struct checkpoint *ck, int dir)
{
	for (unsigned k = 0; k < MAX_SRC; k++)
		ck->link_as[k] = -1;
	for (unsigned k = 0; ck->link && k < ck->nsrc; k++) {
		char proc[64], name[24];

		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", ck->srcfd[k]);
		snprintf(name, sizeof(name), CHECKPOINT_LINK_FMT, ck->nlinks);
		if (linkat(AT_FDCWD, proc, dir, name, AT_SYMLINK_FOLLOW) == 0) {
			ck->link_as[k] = (int8_t)ck->nlinks++;
			continue;
		}
		if (errno == ENOSPC || errno == EDQUOT || errno == EIO)
			return checkpoint_fail(ck, errno, "linking swap file %s into %s: %s", ck->srcpath[k], ck->tmp,
					       strerror(errno));
		/* Another filesystem (EXDEV), or one without hard links:
		 * that file's pages are copied as a flush copies them. */
		snprintf(ck->link_note, sizeof(ck->link_note), "swap file %s could not be linked into %s (%s): its pages were "
			 "copied; put persist.state_dir on the swap drive's filesystem for a save that writes only "
			 "what is in memory", ck->srcpath[k], ck->path, strerror(errno));
	}
	return 0;
}

char *ck_manifest_text(struct checkpoint *ck)
{
	cJSON *m = cJSON_CreateObject(), *ts, *o, *crcs;
	char *text = NULL;

	if (!m)
		return NULL;
	cJSON_AddStringToObject(m, "format", CHECKPOINT_FORMAT);
	cJSON_AddNumberToObject(m, "version",
				ck->kept ? CHECKPOINT_VERSION_LINKED
					 : ck->opened > ck->step ? CHECKPOINT_VERSION_OPEN : CHECKPOINT_VERSION);
	cJSON_AddStringToObject(m, "session", ck->session);
	cJSON_AddNumberToObject(m, "uid", ck->uid);
	cJSON_AddNumberToObject(m, "committed_step", (double)ck->step);
	/* An orphan saved inside a step's updates: the step its dead client
	 * opened, which the restore marks open again. */
	if (ck->opened > ck->step)
		cJSON_AddNumberToObject(m, "opened_step", (double)ck->opened);
	/* Opened by spw_optimizer_write: the restored orphan is released at
	 * its next attach, as the orphan itself would be (control.c). */
	if (ck->opened > ck->step && ck->opened_by_write)
		cJSON_AddBoolToObject(m, "opened_by_write", true);
	cJSON_AddNumberToObject(m, "scale_bits", ck->scale_bits);
	cJSON_AddNumberToObject(m, "good_steps", ck->good_steps);
	cJSON_AddNumberToObject(m, "page_size", ck->page_size);
	cJSON_AddNumberToObject(m, "region_bytes", (double)ck->region_bytes);
	cJSON_AddNumberToObject(m, "swap_bytes", (double)ck->swap_bytes);
	cJSON_AddNumberToObject(m, "lease_s", ck->lease_s);
	/* What the client attached (the optimizer's shapes and param-group
	 * hyperparameters, for the portable converter); restore ignores it. */
	if (ck->meta)
		cJSON_AddItemToObject(m, "client", cJSON_Duplicate(ck->meta, true));
	if (ck->kept) {
		cJSON *links = cJSON_AddArrayToObject(m, "links");
		char name[24];

		for (unsigned i = 0; links && i < ck->nlinks; i++) {
			snprintf(name, sizeof(name), CHECKPOINT_LINK_FMT, i);
			if (!cJSON_AddItemToArray(links, cJSON_CreateString(name)))
				goto out;
		}
	}
	ts = cJSON_AddArrayToObject(m, "tensors");
	for (uint32_t i = 0; ts && i < ck->nt; i++) {
		const struct ck_tensor *t = &ck->t[i];

		if (!(o = cJSON_CreateObject()) || !cJSON_AddItemToArray(ts, o))
			goto out;
		cJSON_AddStringToObject(o, "name", t->name);
		cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
		cJSON_AddStringToObject(o, "kind", t->swappable ? "swappable" : "resident");
		cJSON_AddStringToObject(o, "file", t->file);
		if (!(crcs = cJSON_AddArrayToObject(o, "crc32c")))
			goto out;
		for (uint32_t k = 0; k < t->npages; k++)
			if (!cJSON_AddItemToArray(crcs, cJSON_CreateNumber(ck->pages[t->first + k].crc)))
				goto out;
		if (ck->kept && add_refs(ck, t, o) < 0)
			goto out;
	}
	if (ts)
		text = cJSON_Print(m);
out:
	cJSON_Delete(m);
	return text;
}

void checkpoint_remove_dir(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *e;
	DIR *dir;

	if (fd >= 0 && (dir = fdopendir(fd))) {
		while ((e = readdir(dir)))
			if (e->d_name[0] != '.')
				unlinkat(fd, e->d_name, 0);
		closedir(dir);
	} else if (fd >= 0) {
		close(fd);
	}
	unlinkat(parent, name, AT_REMOVEDIR);
}

void ck_remove_tmp(struct checkpoint *ck)
{
	int dir = openat(ck->parent, ck->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (dir >= 0) {
		char name[24];

		for (uint32_t i = 0; i < ck->nt; i++)
			unlinkat(dir, ck->t[i].file, 0);
		for (unsigned i = 0; i < ck->nlinks; i++) {
			snprintf(name, sizeof(name), CHECKPOINT_LINK_FMT, i);
			unlinkat(dir, name, 0);
		}
		unlinkat(dir, CHECKPOINT_MANIFEST, 0);
		close(dir);
	}
	unlinkat(ck->parent, ck->tmp, AT_REMOVEDIR);
}

/* The pid in "<base>.tmp-<pid>", or 0 when name is not such a temporary. */
static pid_t tmp_pid(const char *name, const char *base)
{
	size_t n = strlen(base);
	char *end;
	long pid;

	if (strncmp(name, base, n) || strncmp(name + n, ".tmp-", 5) || !name[n + 5])
		return 0;
	pid = strtol(name + n + 5, &end, 10);
	return *end || pid <= 0 || pid > INT32_MAX ? 0 : (pid_t)pid;
}

/* A spillwayd killed while copying (kill -9, a power cut) leaves its
 * "<base>.tmp-<pid>" beside where the checkpoint would go; the next
 * attempt at that name removes it, unless its pid still runs (another
 * spillwayd's copy under way; EPERM too means it runs). Names go to
 * ck->stale for the log. */
void ck_remove_stale(struct checkpoint *ck)
{
	int fd = openat(ck->parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	size_t used = 0;
	DIR *dd;

	if (fd < 0)
		return;
	if (!(dd = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((e = readdir(dd))) {
		pid_t pid = tmp_pid(e->d_name, ck->base);

		if (!pid || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		checkpoint_remove_dir(ck->parent, e->d_name);
		if (used + strlen(e->d_name) + 3 < sizeof(ck->stale))
			used += (size_t)snprintf(ck->stale + used, sizeof(ck->stale) - used, "%s%s",
						 used ? ", " : "", e->d_name);
	}
	closedir(dd);
}
