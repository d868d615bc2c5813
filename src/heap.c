/* SPDX-License-Identifier: MIT */
/* Array 4-ary min-heap of tasks; see heap.h for the design notes. */
#include "heap.h"
#include "task.h"

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* 4-ary: the four children of slot i are 4i+1..4i+4 and its parent is
 * (i-1)/4. With 16-byte slots the four children fill one 64-byte cache
 * line when the array is placed so that slot 4k+1 starts a line: a sift
 * through a large heap takes half the levels of a binary heap and one
 * cache miss per level. */
#define ARITY 4
#define LINE 64
#define PAD 3 /* slots before logical slot 0, so children groups align */

#define HEAP_MIN_CAP 16u

/* The pool's heap: 16-byte slots. */
#define HEAP chime_heap
#define SLOT chime_heap_slot
#define FN(name) chime__heap_##name
#define MARKS 1
#include "heap_impl.h"

/* A binding's heap: the slot also holds the task's timeout (touch). */
#define HEAP chime_theap
#define SLOT chime_theap_slot
#define FN(name) chime__theap_##name
#define MARKS 0
#include "heap_impl.h"
