/* SPDX-License-Identifier: MIT */
/*
 * list.h: an intrusive doubly linked list (the daemon's clients, sessions,
 * sessions being polled). A node embeds struct list; list_entry() gets the
 * object back. An initialised node that is on no list points to itself, so
 * list_del() may be called twice.
 */
#ifndef SPW_DAEMON_LIST_H
#define SPW_DAEMON_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list {
	struct list *prev, *next;
};

static inline void list_init(struct list *l)
{
	l->prev = l->next = l;
}

static inline bool list_empty(const struct list *l)
{
	return l->next == l;
}

static inline void list_add_tail(struct list *head, struct list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static inline void list_del(struct list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}

#define list_entry(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))
#define list_for_each_safe(pos, tmp, head) \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
