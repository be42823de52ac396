/* SPDX-License-Identifier: MIT */
/*
 * pager-backing.c: backing files (pager.h), read-only sources of pages
 * that are not at their homes: a session restored from a stopping
 * daemon's save reads the pages left in the save's linked swap files from
 * there until their first write-back takes them home.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pager-private.h"

int pager_backing_add(struct pager *p, int fd, const char *path)
{
	struct pback *b = &p->backs[p->nbacks];

	if (p->nbacks == PAGER_BACKS_MAX) {
		close(fd);
		pager_set_msg(p, "session %s: more than %d backing files", p->session, PAGER_BACKS_MAX);
		return -EMFILE;
	}
	b->path = strdup(path);
	b->index = b->path ? uring_file_register(p->c.uring, fd) : -ENOMEM;
	if (b->index < 0) {
		int r = b->index;

		free(b->path);
		close(fd);
		pager_set_msg(p, "session %s: backing file %s: cannot register it with the ring: %s", p->session, path,
			      strerror(-r));
		return r;
	}
	b->fd = fd;
	b->npages = 0;
	return (int)p->nbacks++;
}

static void back_close(struct pager *p, struct pback *b)
{
	if (b->fd < 0)
		return;
	uring_file_unregister(p->c.uring, b->index);
	close(b->fd);
	b->fd = -1;
	b->index = -1;
}

void pager_back_drop(struct pager *p, struct ppage *pg)
{
	struct pback *b;

	if (!pg->back)
		return;
	b = &p->backs[pg->back - 1];
	pg->back = 0;
	if (--b->npages == 0)
		back_close(p, b);
}

void pager_backs_free(struct pager *p)
{
	for (unsigned i = 0; i < p->nbacks; i++) {
		back_close(p, &p->backs[i]);
		free(p->backs[i].path);
	}
	p->nbacks = 0;
}

int pager_page_backed(struct pager *p, uint32_t tensor, uint32_t page, unsigned back, uint64_t off, uint32_t crc)
{
	struct ppage *pg = pager_lookup(p, tensor, page);

	if (!pg || !p->tensors[tensor].swappable || pg->state != PAGER_ZERO || back >= p->nbacks ||
	    p->backs[back].fd < 0 || off % p->c.page_size)
		return -EINVAL;
	pg->back = (uint8_t)(back + 1);
	pg->back_off = off;
	p->backs[back].npages++;
	pager_page_loaded(p, tensor, page, crc);
	return 0;
}
