/* SPDX-License-Identifier: MIT */
/* The model-based test's interface (tests/model.c): random or given
 * operation sequences run on a one-worker chime pool with a virtual clock,
 * and on 0-2 loop bindings dispatched by the driving thread, and on a
 * reference model side by side, compared step by step; the first
 * divergence is reported. Used by test_model.c (bytes from a seeded PRNG)
 * and fuzz/fuzz_ops.c (bytes from libFuzzer). */
#ifndef CHIME_TEST_MODEL_H
#define CHIME_TEST_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Operations, top-level or done by a callback (see m_apply). */
enum m_opkind {
    MO_SCHEDULE,     /* sched_kind, delay, period, handle, fail_on/cause */
    MO_EXECUTE,      /* chime_pool_execute */
    MO_CANCEL,       /* target, flags */
    MO_REARM,        /* target, delay */
    MO_ADVANCE,      /* delay: the clock moves by it */
    MO_RELEASE,      /* target (top-level only) */
    MO_REMOVE,       /* target: chime_pool_remove */
    MO_PURGE,        /* chime_pool_purge */
    MO_SHUTDOWN,     /* chime_pool_shutdown */
    MO_SHUTDOWN_NOW, /* with_list: ask for the removed tasks */
    MO_POLICY,       /* which (0 exec delayed, 1 continue periodic, 2 remove
                        on cancel), on */
    MO_WAIT,         /* target: chime_task_wait(target, 0) */
    /* Loop bindings (only in sequences that have some; `loop` names one) */
    MO_LSCHEDULE, /* chime_loop_schedule*: as MO_SCHEDULE, on binding loop */
    MO_POST,      /* chime_loop_post, fail_on/cause */
    MO_DISPATCH,  /* chime_loop_dispatch */
    MO_TOUCH,     /* target: chime_task_touch */
    MO_LCLOSE,    /* chime_loop_close */
    MO_COUNT
};

/* ---- the byte source ----------------------------------------------------- */

/* Where a sequence's bytes come from: buf[0..len) (then zeros, and eof
 * set), or with buf NULL the xorshift64* stream seeded by rng. With
 * `record`, the bytes consumed are kept in rec[0..nrec). */
typedef struct m_src {
    const uint8_t *buf; /* NULL: PRNG */
    size_t len, pos;
    uint64_t rng;
    bool eof;
    uint8_t *rec; /* consumed bytes, when recording */
    size_t nrec, caprec;
    bool record;
} m_src;

/* With CHIME_MODEL_DUMP=path, a recorded sequence's bytes go to path: an
 * input for the fuzz target (replay, -minimize_crash=1). */
void m_dump(const m_src *s);

/* ---- running sequences --------------------------------------------------- */

/* What a batch of sequences exercised (CHIME_MODEL_STATS=1 prints it): how
 * often each operation returned each code, top-level and from callbacks. */
#define M_RC_SLOTS 8
typedef struct m_tally {
    uint64_t top[MO_COUNT][M_RC_SLOTS];
    uint64_t cb[MO_COUNT][M_RC_SLOTS];
    uint64_t ops_running, ops_shutdown, ops_stop;
    uint64_t caller_runs, ghosts_seen, catchup_runs, max_queue;
    /* loop bindings */
    uint64_t loop_seqs, loop_runs, nested_dispatches, max_ready;
    uint64_t touch_requeues, limit_stops, loop_pool_syncs;
    uint64_t known_deviations; /* M_DEV_* cases met (see tests/model.c) */
} m_tally;

/* Runs one sequence: a pool (and its bindings) configured from the first
 * bytes of src, then up to max_ops operations (fewer if the source runs
 * dry), then every binding is closed and the pool destroyed.
 * With CHIME_MODEL_STRICT=1 in the environment the model follows chime.h
 * even where the library is known to differ (M_DEV_* in tests/model.c):
 * such sequences then fail, which is how those differences are shown.
 * A divergence calls fail(message, fail_ctx), which must not return (NULL:
 * print and abort). print_trace prints every operation; runs_out (if not
 * NULL) receives the number of callback runs, tally (if not NULL) adds what
 * the sequence exercised. src->rec receives the recording. Returns the
 * number of operations run. */
int m_sequence(m_src *src, int max_ops, const char *label,
               void (*fail)(const char *, void *), void *fail_ctx,
               bool print_trace, uint64_t *runs_out, m_tally *tally);

/* Prints a tally: each operation's return codes, top level and from
 * callbacks, and what the sequences reached. */
void m_tally_print(const m_tally *ty, FILE *f);

#endif
