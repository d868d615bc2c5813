/* SPDX-License-Identifier: MIT */
/* Everything internal, for the tests (the sources include what they use:
 * pool.h and the headers it pulls in). Not API. */
#ifndef CHIME_INTERNAL_H
#define CHIME_INTERNAL_H

#include "due.h"
#include "inbox.h"
#include "pool.h"

#endif
