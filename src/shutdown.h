/* SPDX-License-Identifier: MIT */
/* shutdown.c: shutdown, shutdown_now, termination wait, destroy. Not API. */
#ifndef CHIME_SHUTDOWN_H
#define CHIME_SHUTDOWN_H

#include "pool.h"

/* ---- shutdown.c ---------------------------------------------------------- */
/* Applies the shutdown policies to what is queued (Java's onShutdown). */
void chime__on_shutdown_locked(struct chime_pool *p,
                               struct chime_task **garbage);

#endif
