/* SPDX-License-Identifier: MIT */
/* Model-based test: random operation sequences on a one-worker pool with a
 * virtual clock and 0-2 loop bindings (dispatched by the test thread, their
 * loop thread), compared step by step with the reference model of
 * tests/model.c (run order and times, return codes, outcomes, remaining
 * times, queue and ready-queue order, stats, loop stats, hook calls, the
 * readiness fd). See part 3 of tests/model.c for how the two are driven
 * and compared.
 *
 * Each sequence has its own seed, derived from a base seed that is printed.
 * Replay one sequence: CHIME_SEED=<sequence seed> ./test_model
 * (CHIME_MODEL_TRACE=1 prints every operation; CHIME_MODEL_DUMP=file writes
 * the sequence's bytes, an input for fuzz/fuzz_ops). CHIME_MODEL_SEQS and
 * CHIME_MODEL_OPS change the number of sequences (default 200) and of
 * operations per sequence (default 200); CHIME_MODEL_STATS=1 prints what
 * the sequences exercised.
 *
 * Where the library is known to differ from chime.h (M_DEV_* in
 * tests/model.c) the model follows the library and the summary line counts
 * the cases met; CHIME_MODEL_STRICT=1 (or a list of M_DEV_* names) makes
 * it follow the header there, and those sequences fail. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"

#include "chime/chime.h"
#include "model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* 200 sequences take about a second plain and 5-10 s under TSan; a hang
 * (a lost wake-up) is reported from inside after 5 s of waiting. */
TestSuite(model, .timeout = T_TIMEOUT(60));

static uint64_t
splitmix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static int
env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void
fail_criterion(const char *msg, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "%s\n", msg);
    cr_assert_fail("%s", msg);
}

/* Runs `seqs` sequences; with CHIME_SEED set, that one sequence. */
static void
run_sequences(const char *name, uint64_t salt, int seqs)
{
    const char *env = getenv("CHIME_SEED");
    bool replay = env && *env;
    uint64_t base = replay ? strtoull(env, NULL, 0)
                           : ((uint64_t)time(NULL) << 20) ^
                                 ((uint64_t)getpid() << 40) ^
                                 (uint64_t)chime_now_ns();
    base ^= replay ? 0 : salt;
    seqs = env_int("CHIME_MODEL_SEQS", replay ? 1 : seqs);
    int ops_per = env_int("CHIME_MODEL_OPS", 200);
    bool trace = env_int("CHIME_MODEL_TRACE", 0) != 0;
    bool dump = getenv("CHIME_MODEL_DUMP") != NULL;
    fprintf(stderr,
            "model::%s: base seed %" PRIu64 ", %d sequences of %d ops "
            "(CHIME_SEED=<sequence seed> replays one)\n",
            name, base, seqs, ops_per);
    cr_log_info("%s: base seed %" PRIu64, name, base);

    static m_tally tally;
    long ops = 0;
    uint64_t runs = 0;
    int64_t t0 = chime_now_ns();
    for (int i = 0; i < seqs; i++) {
        /* A replayed seed is the sequence's own seed. */
        uint64_t seed = replay && i == 0 ? base : splitmix64(base + i);
        if (seed == 0)
            seed = 1; /* xorshift needs a non-zero state */
        char label[160];
        snprintf(label, sizeof(label), "model::%s seed %" PRIu64, name, seed);
        m_src src = {.rng = seed, .record = dump};
        uint64_t r = 0;
        ops += m_sequence(&src, ops_per, label, fail_criterion, NULL, trace, &r,
                          &tally);
        runs += r;
        if (replay && dump)
            m_dump(&src);
        free(src.rec);
    }
    fprintf(stderr,
            "model::%s: %d sequences (%" PRIu64 " with loop bindings), %ld "
            "ops, %" PRIu64 " callback runs (%" PRIu64 " on a loop), all as "
            "the model says (%.2f s); %" PRIu64
            " cases of a known library deviation (M_DEV_* in tests/model.c)\n",
            name, seqs, tally.loop_seqs, ops, runs, tally.loop_runs,
            (double)(chime_now_ns() - t0) / 1e9, tally.known_deviations);
    if (env_int("CHIME_MODEL_STATS", 0))
        m_tally_print(&tally, stderr);
}

/* Every configuration: remove_on_cancel, both shutdown policies, the four
 * rejection policies, bounded and unbounded queues, clock origins at 0,
 * near INT64_MAX and near INT64_MIN, no binding, one or two with various
 * batch limits; all drawn from the sequence's bytes. */
Test(model, random_sequences_match_the_model)
{
    run_sequences("random_sequences_match_the_model", 0, 200);
}
