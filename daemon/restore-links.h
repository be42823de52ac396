/* SPDX-License-Identifier: MIT */
/*
 * restore-links.h: a save's manifest as the restore reads it, and what a
 * version 3 save (checkpoint.h, CHECKPOINT_VERSION_LINKED) adds for its
 * restore: the stopping daemon's swap files, hard links in the save's
 * directory ("links"), and for each swappable tensor the pages left in
 * them ("refs": [page, link, offset]).
 * Everything here is read from a file on disk: every number is checked
 * before it is used, and a page read from a link must match its CRC-32C
 * like any other (restore.c checks that).
 */
#ifndef SPW_DAEMON_RESTORE_LINKS_H
#define SPW_DAEMON_RESTORE_LINKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#define RS_LINKS_MAX 64
/* A tensor page's entry in rs_refs.link: not left in a link. */
#define RS_NO_LINK 0xff

struct rs_links {
	unsigned n;
	uint64_t size[RS_LINKS_MAX];
	int back[RS_LINKS_MAX];   /* its number among the session pager's backing files */
};

/* One tensor's pages in links: link[page] (RS_NO_LINK: in the data file)
 * and off[page]; both NULL when it has none. */
struct rs_refs {
	uint8_t *link;
	uint64_t *off;
};

/* dir's manifest, parsed (at most CHECKPOINT_MANIFEST_MAX bytes, a JSON
 * object); NULL with a sentence in err. */
cJSON *rs_manifest_read(int dir, char *err, size_t errlen);

/* The manifest's "links" into l (none is fine: l->n = 0). 0, or -EINVAL
 * with a sentence in err. */
int rs_links_parse(struct rs_links *l, const cJSON *m, char *err, size_t errlen);

/* tensor's "refs" (absent: none) into r, for a tensor of npages pages
 * (swappable: only those may have refs). 0, -EINVAL or -ENOMEM with a
 * sentence in err. */
int rs_refs_parse(const struct rs_links *l, const cJSON *tensor, bool swappable, uint32_t npages,
		  uint32_t page_size, struct rs_refs *r, char *err, size_t errlen);
void rs_refs_free(struct rs_refs *r);

/* Opens every link in dir (named path in messages): regular files of
 * uid owner, not symlinks; each becomes one of p's backing files
 * (l->back, the descriptor the pager's). 0 or -errno with a sentence in
 * err. */
struct pager;
int rs_links_attach(struct rs_links *l, int dir, const char *path, uid_t owner, struct pager *p, char *err,
		    size_t errlen);

/* Whether link (rs_links_attach() ran) holds a whole page of page_size
 * bytes at off. */
bool rs_links_holds(const struct rs_links *l, uint8_t link, uint64_t off, uint32_t page_size);

#endif
