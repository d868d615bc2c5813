/* SPDX-License-Identifier: MIT */
/* Operations from bytes: the byte source, the decoder that turns bytes into
 * a pool configuration and top-level steps (an operation, and for a new task
 * its script: the run that fails, the run whose callback does one more
 * operation), and their printed form. Used by tests/model_run.h; the
 * committed fuzz corpus (fuzz/make_corpus.py) is written in this encoding.
 *
 * Design notes
 * - Every decision is one or a few bytes, so libFuzzer's mutations map to
 *   small changes of the sequence; a dry source reads as zeros and ends the
 *   sequence (m_src.eof).
 * - Delays, periods and clock steps come from small tables in whole
 *   milliseconds, so equal deadlines (FIFO order) and exact-deadline
 *   boundaries are frequent; the tables also hold the extremes (negative,
 *   INT64_MIN, INT64_MAX, INT64_MAX - 1, invalid periods).
 * - Targets prefer tasks that are still pending (3 in 4), or the task
 *   itself for a callback's operation, so cancel and re-arm mostly act.
 */
#ifndef CHIME_TEST_MODEL_GEN_H
#define CHIME_TEST_MODEL_GEN_H

#include "model.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M_U CHIME_MSEC

/* ---- the byte source ----------------------------------------------------- */

typedef struct m_src {
    const uint8_t *buf; /* NULL: PRNG */
    size_t len, pos;
    uint64_t rng;
    bool eof;
    uint8_t *rec; /* consumed bytes, when recording */
    size_t nrec, caprec;
    bool record;
} m_src;

static inline uint8_t
m_byte(m_src *s)
{
    uint8_t b;
    if (s->buf) {
        if (s->pos < s->len) {
            b = s->buf[s->pos++];
        } else {
            s->eof = true;
            b = 0;
        }
    } else {
        uint64_t x = s->rng; /* xorshift64* */
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s->rng = x;
        b = (uint8_t)((x * UINT64_C(2685821657736338717)) >> 56);
    }
    if (s->record) {
        if (s->nrec == s->caprec) {
            s->caprec = s->caprec ? 2 * s->caprec : 4096;
            s->rec = realloc(s->rec, s->caprec);
            if (s->rec == NULL)
                abort();
        }
        s->rec[s->nrec++] = b;
    }
    return b;
}

/* With CHIME_MODEL_DUMP=path, a recorded sequence's bytes go to path: an
 * input for the fuzz target (replay, -minimize_crash=1). */
static void
m_dump(const m_src *s)
{
    const char *path = getenv("CHIME_MODEL_DUMP");
    if (path == NULL || !s->record)
        return;
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return;
    fwrite(s->rec, 1, s->nrec, f);
    fclose(f);
    fprintf(stderr, "model: %zu bytes written to %s\n", s->nrec, path);
}

static const char *
m_ns(int64_t ns, char *buf, size_t n)
{
    if (ns == INT64_MAX)
        snprintf(buf, n, "MAX");
    else if (ns == INT64_MIN)
        snprintf(buf, n, "MIN");
    else if (ns == INT64_MAX - 1)
        snprintf(buf, n, "MAX-1");
    else if (ns != 0 && ns % M_U == 0)
        snprintf(buf, n, "%" PRId64 "ms", ns / M_U);
    else
        snprintf(buf, n, "%" PRId64 "ns", ns);
    return buf;
}

static const char *m_kind_name[] = {"oneshot", "rate", "delay"};
static const char *m_op_name[] = {"schedule", "execute",      "cancel", "rearm",
                                  "advance",  "release",      "remove", "purge",
                                  "shutdown", "shutdown_now", "policy", "wait"};

static const char *
m_op_str(const m_op *op, char *buf, size_t n)
{
    char a[32], b[32], tg[16];
    if (op->target == M_SELF)
        snprintf(tg, sizeof(tg), "self");
    else
        snprintf(tg, sizeof(tg), "#%d", op->target);
    switch (op->kind) {
    case MO_SCHEDULE:
        if (op->sched_kind == M_ONESHOT)
            snprintf(b, sizeof(b), "%s", "");
        else
            m_ns(op->period, b + 8, sizeof(b) - 8), memcpy(b, " period=", 8);
        snprintf(buf, n, "schedule %s delay=%s%s%s fail@%d(%d)",
                 m_kind_name[op->sched_kind], m_ns(op->delay, a, sizeof(a)), b,
                 op->handle ? " handle" : "", op->fail_on, op->fail_cause);
        break;
    case MO_EXECUTE:
        snprintf(buf, n, "execute fail@%d(%d)", op->fail_on, op->fail_cause);
        break;
    case MO_CANCEL:
        snprintf(buf, n, "cancel %s flags=%u", tg, op->flags);
        break;
    case MO_REARM:
        snprintf(buf, n, "rearm %s %s", tg, m_ns(op->delay, a, sizeof(a)));
        break;
    case MO_ADVANCE:
        snprintf(buf, n, "advance %s", m_ns(op->delay, a, sizeof(a)));
        break;
    case MO_POLICY:
        snprintf(buf, n, "policy %s=%d",
                 op->which == 0   ? "execute_delayed"
                 : op->which == 1 ? "continue_periodic"
                                  : "remove_on_cancel",
                 op->on);
        break;
    case MO_SHUTDOWN_NOW:
        snprintf(buf, n, "shutdown_now%s", op->with_list ? " list" : "");
        break;
    case MO_RELEASE:
    case MO_REMOVE:
    case MO_WAIT:
        snprintf(buf, n, "%s %s", m_op_name[op->kind], tg);
        break;
    default:
        snprintf(buf, n, "%s", m_op_name[op->kind]);
        break;
    }
    return buf;
}

/* ---- the decoder -------------------------------------------------------- */

typedef struct m_gen {
    m_src src;
    const m_model *m;     /* targets are chosen among its tasks */
    bool shutdown_heavy;  /* profile: callbacks shut down often */
    int ids[M_MAX_TASKS]; /* scratch */
} m_gen;

static const int64_t m_delays[16] = {
    0,       0,         1,         M_U / 2,      M_U,     M_U,
    2 * M_U, 3 * M_U,   4 * M_U,   5 * M_U,      8 * M_U, 13 * M_U,
    -1,      INT64_MIN, INT64_MAX, INT64_MAX - 1};
static const int64_t m_periods[16] = {
    M_U,     M_U,     2 * M_U, 3 * M_U,  4 * M_U,  5 * M_U,   6 * M_U, 7 * M_U,
    8 * M_U, 9 * M_U, M_U / 2, 10 * M_U, 30 * M_U, INT64_MAX, 0,       -M_U};
static const int64_t m_advances[16] = {
    0,       1,       M_U - 1, M_U / 2, M_U,     M_U,      2 * M_U,  2 * M_U,
    3 * M_U, 4 * M_U, 5 * M_U, 6 * M_U, 8 * M_U, 10 * M_U, 15 * M_U, 25 * M_U};

static const int64_t m_starts[8] = {1000 * CHIME_SEC,
                                    1000 * CHIME_SEC,
                                    1000 * CHIME_SEC,
                                    1000 * CHIME_SEC + 1,
                                    1000 * CHIME_SEC,
                                    0,
                                    INT64_MAX - 1000 * CHIME_SEC,
                                    INT64_MIN + 1000 * CHIME_SEC};

/* The pool configuration: three bytes. */
static void
m_gen_config(m_gen *g, m_model *m)
{
    uint8_t c1 = m_byte(&g->src), c2 = m_byte(&g->src);
    uint8_t c3 = m_byte(&g->src);
    m->remove_on_cancel = (c1 & 3) != 0;
    m->exec_delayed = !(c1 & 4);
    m->cont_periodic = (c1 & 8) != 0;
    m->policy = (c1 >> 4) & 3; /* ABORT, DISCARD, DISCARD_OLDEST, CALLER_RUNS */
    m->max_pending = (c2 & 3) == 0 ? 1 + ((c2 >> 2) & 7) : 0;
    if (!m->remove_on_cancel)
        m->max_pending = 0; /* ghosts make the count timing-dependent */
    m->now = m_starts[(c2 >> 5) & 7];
    /* A quarter of the sequences shut down from callbacks, where tasks due
     * at the very same instant are still queued: "not yet due" is tested
     * at its boundary there. */
    g->shutdown_heavy = (c3 & 3) == 0;
}

/* Collects into g->ids the tasks with a held handle (live ones only, or
 * all); returns how many. */
static int
m_held(m_gen *g, bool live_only)
{
    int n = 0;
    for (int i = 0; i < g->m->ntasks; i++)
        if (g->m->t[i].handle && (!live_only || !m_final(g->m->t[i].state)))
            g->ids[n++] = i;
    return n;
}

/* A target for a callback's operation: M_SELF, a task still pending (3 in
 * 4), or any earlier id (released, completed or never accepted). */
static int
m_gen_target(m_gen *g, bool allow_self)
{
    uint8_t b = m_byte(&g->src);
    if ((allow_self && b < 96) || g->m->ntasks == 0)
        return M_SELF;
    uint8_t c = m_byte(&g->src);
    int n = (c & 3) ? m_held(g, true) : 0;
    return n ? g->ids[(c >> 2) % n] : (c >> 2) % g->m->ntasks;
}

/* A task id whose handle the test holds (a live one 3 times in 4), or -1. */
static int
m_gen_held(m_gen *g)
{
    uint8_t b = m_byte(&g->src);
    int n = (b & 3) ? m_held(g, true) : 0;
    if (n == 0)
        n = m_held(g, false);
    return n ? g->ids[(b >> 2) % n] : -1;
}

static void
m_gen_fail(m_gen *g, int *fail_on, int *cause)
{
    uint8_t b = m_byte(&g->src);
    *fail_on = (b & 7) == 0 ? 1 + ((b >> 3) & 3) : 0;
    *cause = (b & 0x20) ? -EIO : 1000 + (b >> 6);
}

static void
m_gen_schedule(m_gen *g, m_op *op)
{
    uint8_t b = m_byte(&g->src);
    op->kind = MO_SCHEDULE;
    op->delay = m_delays[b & 15];
    op->handle = (b >> 4) != 0; /* 15/16 keep a handle */
    b = m_byte(&g->src);
    op->period = m_periods[b & 15];
    m_gen_fail(g, &op->fail_on, &op->fail_cause);
}

/* The operation a callback performs on its scripted run. */
static void
m_gen_action(m_gen *g, m_op *op)
{
    uint8_t b = m_byte(&g->src);
    uint8_t hi = b >> 4;
    memset(op, 0, sizeof(*op));
    switch (b & 15) {
    case 0:
    case 1:
    case 2:
    case 3:
        op->kind = MO_REARM;
        op->target = m_gen_target(g, true);
        op->delay = m_delays[m_byte(&g->src) & 15];
        break;
    case 4:
    case 5:
    case 6:
        op->kind = MO_CANCEL;
        op->target = m_gen_target(g, true);
        op->flags = hi & 1;
        break;
    case 7:
    case 8:
    case 9:
        m_gen_schedule(g, op);
        op->sched_kind = hi % 3;
        break;
    case 10:
        op->kind = MO_EXECUTE;
        m_gen_fail(g, &op->fail_on, &op->fail_cause);
        break;
    case 11:
        op->kind = MO_ADVANCE;
        op->delay = m_advances[hi];
        if (g->shutdown_heavy)
            op->kind = MO_SHUTDOWN;
        break;
    case 12:
        op->kind = MO_WAIT;
        op->target = m_gen_target(g, true);
        break;
    case 13:
        op->kind = MO_REMOVE;
        op->target = m_gen_target(g, true);
        break;
    case 14:
        if (hi & 1) {
            op->kind = MO_PURGE;
        } else {
            op->kind = MO_POLICY;
            op->which = (hi >> 1) % 3;
            op->on = hi >> 3;
            if (op->which == 2 && g->m->max_pending)
                op->which = 0; /* ghosts and max_pending do not mix */
        }
        break;
    default:
        /* From a callback, shutdown meets tasks due at the same instant
         * that have not run yet: the only way to test "not yet due". */
        if (hi == 3) {
            op->kind = MO_SHUTDOWN_NOW;
            op->with_list = true;
        } else if (hi < 3 || g->shutdown_heavy) {
            op->kind = MO_SHUTDOWN;
        } else {
            op->kind = MO_ADVANCE;
            op->delay = m_advances[hi];
        }
        break;
    }
}

/* One top-level step: an operation and, for MO_SCHEDULE, the new task's
 * script. */
typedef struct m_step {
    m_op op;
    m_script script;
} m_step;

static void
m_gen_step(m_gen *g, m_step *st)
{
    memset(st, 0, sizeof(*st));
    m_op *op = &st->op;
    uint8_t b = m_byte(&g->src);
    if (b < 96) {
        m_gen_schedule(g, op);
        op->sched_kind = b < 56 ? M_ONESHOT : b < 76 ? M_RATE : M_DELAY;
        st->script.fail_on = op->fail_on;
        st->script.fail_cause = op->fail_cause;
        uint8_t c = m_byte(&g->src);
        if (c & 1) {
            st->script.act_on = 1 + ((c >> 1) & 3);
            m_gen_action(g, &st->script.act);
        }
    } else if (b < 100) {
        op->kind = MO_EXECUTE;
        m_gen_fail(g, &op->fail_on, &op->fail_cause);
    } else if (b < 130 || (b >= 140 && b < 160) || (b >= 212 && b < 236)) {
        op->kind = b < 130   ? MO_CANCEL
                   : b < 160 ? MO_REARM
                   : b < 226 ? MO_RELEASE
                             : MO_REMOVE;
        op->target = m_gen_held(g);
        uint8_t c = m_byte(&g->src);
        op->delay = m_delays[c & 15];
        op->flags = (c >> 4) == 15 ? 2 : (c >> 4) & 1; /* 2: -EINVAL */
        if (op->target < 0) {
            op->kind = MO_ADVANCE; /* no handle: a no-op step */
            op->delay = 0;
        }
    } else if (b < 140) {
        /* Re-arm the head-most held task to the same deadline as another:
         * equal deadlines, fresh sequence number. */
        op->kind = MO_REARM;
        op->target = m_gen_held(g);
        op->delay = m_delays[4 + (m_byte(&g->src) & 7)];
        if (op->target < 0) {
            op->kind = MO_ADVANCE;
            op->delay = 0;
        }
    } else if (b < 212 || (b >= 248 && b < 254)) {
        op->kind = MO_ADVANCE;
        op->delay = m_advances[m_byte(&g->src) & 15];
    } else if (b >= 254 && (m_byte(&g->src) & 1)) {
        /* shutdowns are rare (1 op in 512 each): most of a sequence runs
         * on a live pool */
        op->kind = MO_ADVANCE;
        op->delay = m_advances[m_byte(&g->src) & 15];
    } else if (b < 239) {
        op->kind = MO_PURGE;
    } else if (b < 248) {
        op->kind = MO_POLICY;
        uint8_t c = m_byte(&g->src);
        op->which = c % 3;
        op->on = (c >> 2) & 1;
        if (op->which == 2 && g->m->max_pending)
            op->which = 0;
    } else if (b == 254) {
        op->kind = MO_SHUTDOWN;
    } else {
        op->kind = MO_SHUTDOWN_NOW;
        op->with_list = m_byte(&g->src) & 1;
    }
}

#endif
