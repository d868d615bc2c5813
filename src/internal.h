/* SPDX-License-Identifier: MIT */
/* Everything internal, for the tests and the fuzzer (the sources include
 * only what they use). Not API. */
#ifndef CHIME_INTERNAL_H
#define CHIME_INTERNAL_H

#include "cancel.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "due.h"
#include "handle.h"
#include "inbox.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "pool.h"
#include "post.h"
#include "shutdown.h"
#include "submit.h"
#include "worker.h"

#endif
