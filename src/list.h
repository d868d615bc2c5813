/* SPDX-License-Identifier: MIT */
/* An intrusive circular doubly-linked list (libuv's queue.h idea): the
 * head is a node of its own, so insert and remove never test for the ends.
 * The one list code of chime: workers and bindings use it. */
#ifndef CHIME_LIST_H
#define CHIME_LIST_H

#include <stdbool.h>

struct chime_list {
    struct chime_list *prev, *next;
};

static inline void
chime__list_init(struct chime_list *h)
{
    h->prev = h->next = h;
}

static inline bool
chime__list_empty(const struct chime_list *h)
{
    return h->next == h;
}

/* Inserts n first. */
static inline void
chime__list_push(struct chime_list *h, struct chime_list *n)
{
    n->next = h->next;
    n->prev = h;
    h->next->prev = n;
    h->next = n;
}

/* Unlinks n; n becomes a list of its own (removing it again is harmless). */
static inline void
chime__list_remove(struct chime_list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

#define chime__list_for_each(pos, head)                                        \
    for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

#endif
