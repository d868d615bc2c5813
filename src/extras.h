/* SPDX-License-Identifier: MIT */
/* Task extras (extras.c): what a few tasks carry and the 40-byte task
 * has no room for (its label, the group it was last added to, its jitter,
 * its window),
 * kept in a side table keyed by the task's address. A task with a record
 * has CHIME_REF_EXTRA in its reference word; whoever frees the node drops
 * the record (chime__node_dispose, task.h). Not API. */
#ifndef CHIME_EXTRAS_H
#define CHIME_EXTRAS_H

#include "common.h"

struct chime_task;

/* A copy of what a task's record holds (chime__extra_read). */
struct chime_extra_view {
    const void *group;
    char label[CHIME_LABEL_MAX + 1];
};

/* The task's label and group into *v (empty and NULL without a record).
 * Any thread, any lock held (the table's locks are innermost). */
void chime__extra_read(const struct chime_task *t, struct chime_extra_view *v);
/* Records that t was added to group g (NULL: none). Returns 0 or -ENOMEM. */
int chime__extra_set_group(struct chime_task *t, const void *g);
/* Forgets group g on t if it is the one recorded. */
void chime__extra_clear_group(struct chime_task *t, const void *g);
/* Records in the table (tests: none may outlive its task). */
size_t chime__extra_count(void);
/* Drops t's record (the node is being freed). */
void chime__extra_drop(const struct chime_task *t);
/* Calls t's finalizer (chime_task_set_finalizer), if it has one, and
 * forgets it: t is about to be freed. No chime lock held. */
void chime__extra_finalize(const struct chime_task *t);
/* Sets t's finalizer (NULL: none) and the argument it is called with.
 * Returns 0 or -ENOMEM. */
int chime__extra_set_fin(struct chime_task *t, chime_finalize_fn fn, void *arg);

/* Jitter (chime_task_set_jitter). Called with the lock the task changes
 * under (its pool's, or its binding's) held, which guards the jitter
 * fields of its record. */
/* Sets the spread (max_ns, or ppm of the period when max_ns is 0; both 0:
 * off), seeding the record's generator from seed. -ENOMEM. */
int chime__jitter_set(struct chime_task *t, int64_t max_ns, uint32_t ppm,
                      uint64_t seed);
/* A random offset in [0, spread] for t's next run, remembered as the
 * offset of that run (its grid time is its deadline minus it). */
int64_t chime__jitter_draw(struct chime_task *t);
/* The offset of t's current run (0: none, or t was re-armed). */
int64_t chime__jitter_offset(const struct chime_task *t);
/* t was re-armed: its next run is on no grid (offset 0). */
void chime__jitter_rearmed(struct chime_task *t);

/* The window (chime_task_set_slack): set on t, and read back (false: t
 * has none of its own; *slack and *flags untouched). Any lock held. */
int chime__slack_set(struct chime_task *t, int64_t slack, unsigned flags);
bool chime__slack_get(const struct chime_task *t, int64_t *slack,
                      unsigned *flags);

#endif
