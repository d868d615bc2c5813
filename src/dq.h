/* SPDX-License-Identifier: MIT */
/* The delay queue's internals that the tests reach (dq.c). Not API. */
#ifndef CHIME_DQ_INTERNAL_H
#define CHIME_DQ_INTERNAL_H

#include "chime/dq.h"

/* A node's index_ while it is in no queue. */
#define CHIME_DQ_NONE UINT32_MAX

/* Checks, under the queue's lock, the heap property, every node's index
 * and owner, and the copy of each deadline in its node. Returns 0 or -1. */
int chime__dq_check(chime_dq *dq);

#endif
