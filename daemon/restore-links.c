/* SPDX-License-Identifier: MIT */
/*
 * A version 3 save's links and refs (restore-links.h), for restore.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "restore-links.h"
#include "util/fdio.h"
#include "util/json.h"

int rs_links_parse(struct rs_links *l, const cJSON *m, char *err, size_t errlen)
{
	const cJSON *links = cJSON_GetObjectItemCaseSensitive(m, "links"), *v;
	char want[24];

	l->n = 0;
	for (unsigned i = 0; i < RS_LINKS_MAX; i++)
		l->fd[i] = -1;
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

int rs_links_open(struct rs_links *l, int dir, uid_t owner, char *err, size_t errlen)
{
	for (unsigned i = 0; i < l->n; i++) {
		char name[24];
		struct stat st;
		int fd;

		snprintf(name, sizeof(name), CHECKPOINT_LINK_FMT, i);
		/* Page-aligned reads of whole pages: past the page cache
		 * where the filesystem allows. */
		fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECT);
		if (fd < 0 && errno == EINVAL)
			fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			snprintf(err, errlen, "%s: %s", name, strerror(errno));
			return -errno;
		}
		l->fd[i] = fd;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != owner) {
			snprintf(err, errlen, "%s is not a file owned by uid %u", name, (unsigned)owner);
			return -EINVAL;
		}
		l->size[i] = (uint64_t)st.st_size;
	}
	return 0;
}

void rs_links_close(struct rs_links *l)
{
	for (unsigned i = 0; i < l->n; i++) {
		if (l->fd[i] >= 0)
			close(l->fd[i]);
		l->fd[i] = -1;
	}
}

int rs_links_read(const struct rs_links *l, uint8_t link, uint64_t off, uint8_t *buf, uint32_t page_size)
{
	if (link >= l->n || l->fd[link] < 0 || off + page_size > l->size[link])
		return -EIO;
	return fd_pread_all(l->fd[link], buf, page_size, off);
}
