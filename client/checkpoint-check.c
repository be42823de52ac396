/* SPDX-License-Identifier: MIT */
/*
 * spw_optimizer_checkpoint_check(): whether a checkpoint would load into
 * this optimizer, found out before anything is released. A load replaces
 * the session (release, restore, take over); what the daemon's restore
 * and the takeover would refuse after the release (a damaged page, the
 * checkpoint of another model or other settings) is refused here while
 * the optimizer still holds its state.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "optimizer-private.h"
#include "util/crc32c.h"
#include "util/fdio.h"

#define MANIFEST "manifest.json"
#define MANIFEST_MAX (512u << 20) /* a CRC a page: 100 GiB of 64 KiB pages is ~20 MB */
#define LAYOUT_MAX (64u << 20)

/* dir's manifest, parsed; NULL with why in o's error. */
static cJSON *manifest_of(spw_optimizer *o, int dir, const char *path, int *err)
{
	int fd = openat(dir, MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	char *text;
	cJSON *m;

	if (fd < 0) {
		*err = spw__opt_error(o, -errno, "checkpoint_check: %s/%s: %s", path, MANIFEST, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MANIFEST_MAX) {
		close(fd);
		*err = spw__opt_error(o, -EINVAL, "checkpoint_check: %s/%s is not a manifest (not a file, or over %u "
				      "MiB)", path, MANIFEST, MANIFEST_MAX >> 20);
		return NULL;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		*err = spw__opt_error(o, -ENOMEM, "checkpoint_check: out of memory for %s/%s", path, MANIFEST);
		return NULL;
	}
	*err = fd_pread_all(fd, text, (size_t)st.st_size, 0);
	close(fd);
	text[*err == 0 ? st.st_size : 0] = '\0';
	m = *err == 0 ? cJSON_Parse(text) : NULL;
	free(text);
	if (!cJSON_IsObject(m)) {
		cJSON_Delete(m);
		*err = spw__opt_error(o, *err ? *err : -EINVAL, "checkpoint_check: %s/%s: %s", path, MANIFEST,
				      *err ? strerror(-*err) : "not a JSON object");
		return NULL;
	}
	return m;
}

/* A data file name of the manifest's: a plain name in the directory. */
static const char *file_of(const cJSON *t)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "file");

	if (!cJSON_IsString(f) || !f->valuestring[0] || strchr(f->valuestring, '/') || f->valuestring[0] == '.')
		return NULL;
	return f->valuestring;
}

/* Tensor t's file: its size the manifest's, every page's CRC-32C the
 * manifest's. For the layout record, its bytes compared with ours too. */
static int check_tensor(spw_optimizer *o, int dir, const char *path, const cJSON *t, unsigned char *buf)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"), *bytes = cJSON_GetObjectItemCaseSensitive(t, "bytes");
	const cJSON *crcs = cJSON_GetObjectItemCaseSensitive(t, "crc32c");
	const char *file = file_of(t), *tn = cJSON_IsString(name) ? name->valuestring : "?";
	uint64_t n, pages;
	struct stat st;
	int fd, r = 0;

	if (!cJSON_IsString(name) || !file || !cJSON_IsNumber(bytes) || bytes->valuedouble < 0 || !cJSON_IsArray(crcs))
		return spw__opt_error(o, -EINVAL, "checkpoint_check: %s/%s: tensor %s lacks its name, file, bytes or "
				      "crc32c", path, MANIFEST, tn);
	n = (uint64_t)bytes->valuedouble;
	pages = (n + o->page_size - 1) / o->page_size;
	if ((uint64_t)cJSON_GetArraySize(crcs) != pages)
		return spw__opt_error(o, -EINVAL, "checkpoint_check: %s/%s: tensor %s has %d CRCs for %llu pages", path,
				      MANIFEST, tn, cJSON_GetArraySize(crcs), (unsigned long long)pages);
	fd = openat(dir, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return spw__opt_error(o, -errno, "checkpoint_check: tensor %s: %s/%s: %s", tn, path, file,
				      strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != n) {
		close(fd);
		return spw__opt_error(o, -EINVAL, "checkpoint_check: tensor %s: %s/%s is not a file of %llu bytes (cut "
				      "short, or not this checkpoint's)", tn, path, file, (unsigned long long)n);
	}
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (uint64_t k = 0; r == 0 && k < pages; k++) {
		size_t len = n - k * o->page_size < o->page_size ? (size_t)(n - k * o->page_size) : o->page_size;
		const cJSON *want = cJSON_GetArrayItem(crcs, (int)k);
		uint32_t got;

		r = fd_pread_all(fd, buf, len, k * o->page_size);
		if (r < 0) {
			r = spw__opt_error(o, r, "checkpoint_check: tensor %s page %llu: reading %s/%s: %s", tn,
					   (unsigned long long)k, path, file, strerror(-r));
			break;
		}
		got = spw_crc32c(0, buf, len);
		if (!cJSON_IsNumber(want) || (double)got != want->valuedouble)
			r = spw__opt_error(o, -EBADMSG, "checkpoint_check: tensor %s page %llu (bytes %llu..%llu of %s/%s): "
					   "CRC-32C 0x%08x, the manifest says %.0f: the checkpoint is damaged; nothing "
					   "was changed", tn, (unsigned long long)k,
					   (unsigned long long)(k * o->page_size), (unsigned long long)(k * o->page_size + len),
					   path, file, got, cJSON_IsNumber(want) ? want->valuedouble : -1.0);
	}
	close(fd);
	return r;
}

/* The checkpoint's layout record against ours: the same model and
 * settings, or the first difference. */
static int check_layout(spw_optimizer *o, int dir, const char *path, const cJSON *t)
{
	const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(t, "bytes");
	const char *file = file_of(t);
	size_t want_n = spw__persist_layout_record(o, NULL), n;
	unsigned char *want, *have;
	char why[512];
	int fd, r;

	if (!file || !cJSON_IsNumber(bytes) || bytes->valuedouble < 0 || bytes->valuedouble > LAYOUT_MAX)
		return spw__opt_error(o, -EINVAL, "checkpoint_check: %s/%s: its layout record's entry is malformed", path,
				      MANIFEST);
	n = (size_t)bytes->valuedouble;
	if (n != want_n)
		return spw__opt_error(o, -ESTALE, "checkpoint_check: %s is of another model or other settings: its "
				      "layout record has %zu bytes, this optimizer's %zu (tensors, names, groups, mode, "
				      "tier or state dtype differ); nothing was changed", path, n, want_n);
	want = malloc(n);
	have = malloc(n);
	fd = openat(dir, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	r = !want || !have ? -ENOMEM : fd < 0 ? -errno : fd_pread_all(fd, have, n, 0);
	if (fd >= 0)
		close(fd);
	if (r < 0) {
		r = spw__opt_error(o, r, "checkpoint_check: the layout record %s/%s: %s", path, file, strerror(-r));
	} else {
		spw__persist_layout_record(o, want);
		if (memcmp(want, have, n)) {
			spw__persist_layout_diff(o, want, have, why, sizeof(why));
			r = spw__opt_error(o, -ESTALE, "checkpoint_check: %s is of another model or other settings: %s; "
					   "nothing was changed", path, why);
		}
	}
	free(want);
	free(have);
	return r;
}

SPW_EXPORT int spw_optimizer_checkpoint_check(spw_optimizer *o, const char *path)
{
	const cJSON *ps, *ts, *t, *ver, *layout = NULL;
	unsigned char *buf;
	cJSON *m;
	int dir, r = 0;

	if (!o)
		return -EINVAL;
	if (!path)
		return spw__opt_error(o, -EINVAL, "checkpoint_check: no directory given");
	dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return spw__opt_error(o, -errno, "checkpoint_check: %s: %s", path, strerror(errno));
	if (!(m = manifest_of(o, dir, path, &r))) {
		close(dir);
		return r;
	}
	ps = cJSON_GetObjectItemCaseSensitive(m, "page_size");
	ts = cJSON_GetObjectItemCaseSensitive(m, "tensors");
	ver = cJSON_GetObjectItemCaseSensitive(m, "version");
	if (cJSON_IsNumber(ver) && ver->valuedouble == 3) {
		/* Its swap pages are in the daemon's linked swap files. */
		r = spw__opt_error(o, -EINVAL, "checkpoint_check: %s is a stopping spillwayd's save from its "
				   "persist.state_dir (format version 3), not a checkpoint: spillwayd restores it at "
				   "start; take a checkpoint of that session; nothing was changed", path);
	} else if (!cJSON_IsNumber(ps) || ps->valuedouble != (double)o->page_size) {
		r = spw__opt_error(o, -EINVAL, "checkpoint_check: %s holds pages of %.0f bytes, this optimizer's session "
				   "%u: saved with other settings (page size, tier, state dtype) or of another model; "
				   "nothing was changed", path, cJSON_IsNumber(ps) ? ps->valuedouble : -1.0, o->page_size);
	} else if (!cJSON_IsArray(ts)) {
		r = spw__opt_error(o, -EINVAL, "checkpoint_check: %s/%s lists no tensors", path, MANIFEST);
	}
	if (r == 0) {
		cJSON_ArrayForEach(t, ts) {
			const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");

			if (cJSON_IsString(name) && !strcmp(name->valuestring, SPW__LAYOUT_NAME))
				layout = t;
		}
	}
	if (r == 0 && !layout)
		r = spw__opt_error(o, -ESTALE, "checkpoint_check: %s has no optimizer layout record (%s): not the "
				   "checkpoint of an optimizer's session; nothing was changed", path, SPW__LAYOUT_NAME);
	if (r == 0)
		r = check_layout(o, dir, path, layout);
	/* Then every byte, as the restore would read it. */
	buf = r == 0 ? malloc(o->page_size) : NULL;
	if (r == 0 && !buf)
		r = spw__opt_error(o, -ENOMEM, "checkpoint_check: out of memory");
	if (r == 0) {
		cJSON_ArrayForEach(t, ts) {
			if ((r = check_tensor(o, dir, path, t, buf)) < 0)
				break;
		}
	}
	free(buf);
	cJSON_Delete(m);
	close(dir);
	return r;
}
