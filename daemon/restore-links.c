/* SPDX-License-Identifier: MIT */
/*
 * A save's files as the restore reads them (restore-links.h): its
 * manifest, and a version 3 save's links and refs.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "pager.h"
#include "restore-links.h"
#include "util/fdio.h"
#include "util/json.h"

cJSON *rs_manifest_read(int dir, char *err, size_t errlen)
{
	int fd = openat(dir, CHECKPOINT_MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	cJSON *m = NULL;
	char *text = NULL;
	ssize_t got = 0;

	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", CHECKPOINT_MANIFEST, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > CHECKPOINT_MANIFEST_MAX) {
		snprintf(err, errlen, "%s is not a file of 1 byte to %u MiB", CHECKPOINT_MANIFEST,
			 CHECKPOINT_MANIFEST_MAX >> 20);
		goto out;
	}
	text = malloc((size_t)st.st_size);
	while (text && got < st.st_size) {
		ssize_t r = read(fd, text + got, (size_t)(st.st_size - got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += r;
	}
	if (!text || got != st.st_size) {
		snprintf(err, errlen, "reading %s: %s", CHECKPOINT_MANIFEST, text ? "short read" : "out of memory");
		goto out;
	}
	m = cJSON_ParseWithLength(text, (size_t)got);
	if (!m || !cJSON_IsObject(m)) {
		cJSON_Delete(m);
		m = NULL;
		snprintf(err, errlen, "%s is not a JSON object", CHECKPOINT_MANIFEST);
	}
out:
	free(text);
	close(fd);
	return m;
}

int rs_links_parse(struct rs_links *l, const cJSON *m, char *err, size_t errlen)
{
	const cJSON *links = cJSON_GetObjectItemCaseSensitive(m, "links"), *v;
	char want[24];

	l->n = 0;
	if (!links)
		return 0;
	if (!cJSON_IsArray(links) || cJSON_GetArraySize(links) > RS_LINKS_MAX) {
		snprintf(err, errlen, "%s: \"links\" is not a list of at most %d names", CHECKPOINT_MANIFEST,
			 RS_LINKS_MAX);
		return -EINVAL;
	}
	/* The names are the save's own, in order: nothing else is opened. */
	cJSON_ArrayForEach(v, links) {
		snprintf(want, sizeof(want), CHECKPOINT_LINK_FMT, l->n);
		if (!cJSON_IsString(v) || strcmp(v->valuestring, want)) {
			snprintf(err, errlen, "%s: link %u is not named %s", CHECKPOINT_MANIFEST, l->n, want);
			return -EINVAL;
		}
		l->n++;
	}
	return 0;
}

int rs_refs_parse(const struct rs_links *l, const cJSON *tensor, bool swappable, uint32_t npages,
		  uint32_t page_size, struct rs_refs *r, char *err, size_t errlen)
{
	const cJSON *refs = cJSON_GetObjectItemCaseSensitive(tensor, "refs"), *e;
	int64_t last = -1;

	r->link = NULL;
	r->off = NULL;
	if (!refs)
		return 0;
	if (!swappable || !l->n || !cJSON_IsArray(refs) || cJSON_GetArraySize(refs) > (int)npages) {
		snprintf(err, errlen, "%s: \"refs\" of a resident tensor, without \"links\", or not a list of at most "
			 "one entry per page", CHECKPOINT_MANIFEST);
		return -EINVAL;
	}
	r->link = malloc(npages);
	r->off = calloc(npages, sizeof(*r->off));
	if (!r->link || !r->off) {
		rs_refs_free(r);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	memset(r->link, RS_NO_LINK, npages);
	cJSON_ArrayForEach(e, refs) {
		uint64_t page, link, off;

		/* Pages in increasing order: one entry each. Offsets of
		 * whole pages, below what the file can hold (checked again
		 * against its size when read). */
		if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 3 ||
		    json_uint(cJSON_GetArrayItem(e, 0), npages - 1, &page) < 0 || (int64_t)page <= last ||
		    json_uint(cJSON_GetArrayItem(e, 1), l->n - 1, &link) < 0 ||
		    json_uint(cJSON_GetArrayItem(e, 2), 1ull << 50, &off) < 0 || off % page_size) {
			rs_refs_free(r);
			snprintf(err, errlen, "%s: a ref is not [page, link, offset] with pages in order, a link of "
				 "\"links\" and a page-aligned offset", CHECKPOINT_MANIFEST);
			return -EINVAL;
		}
		last = (int64_t)page;
		r->link[page] = (uint8_t)link;
		r->off[page] = off;
	}
	return 0;
}

void rs_refs_free(struct rs_refs *r)
{
	free(r->link);
	free(r->off);
	r->link = NULL;
	r->off = NULL;
}

int rs_links_attach(struct rs_links *l, int dir, const char *path, uid_t owner, struct pager *p, char *err,
		    size_t errlen)
{
	for (unsigned i = 0; i < l->n; i++) {
		char name[24], where[PATH_MAX];
		struct stat st;
		int fd, r;

		snprintf(name, sizeof(name), CHECKPOINT_LINK_FMT, i);
		/* Page-aligned reads of whole pages: past the page cache
		 * where the filesystem allows. */
		fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECT);
		if (fd < 0 && errno == EINVAL)
			fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			snprintf(err, errlen, "%s/%s: %s", path, name, strerror(errno));
			return -errno;
		}
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != owner) {
			close(fd);
			snprintf(err, errlen, "%s/%s is not a file owned by uid %u", path, name, (unsigned)owner);
			return -EINVAL;
		}
		l->size[i] = (uint64_t)st.st_size;
		snprintf(where, sizeof(where), "%s/%s", path, name);
		if ((r = pager_backing_add(p, fd, where)) < 0) {
			snprintf(err, errlen, "%s", pager_last_error(p));
			return r;
		}
		l->back[i] = r;
	}
	return 0;
}

bool rs_links_holds(const struct rs_links *l, uint8_t link, uint64_t off, uint32_t page_size)
{
	return link < l->n && off + page_size <= l->size[link];
}
