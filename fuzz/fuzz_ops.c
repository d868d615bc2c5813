/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the input bytes are an operation sequence (pool and
 * binding configuration, then operations; see part 2 of tests/model.c)
 * run against a one-worker pool on a virtual clock, with 0-2 loop
 * bindings dispatched by the fuzzing thread, and against the reference
 * model of tests/model.c, the same pair test_model drives. Any divergence
 * prints the operations so far and aborts, which libFuzzer records as a
 * crash; ASan, UBSan and LeakSanitizer (each input creates and destroys
 * its own pool) report the rest.
 *
 * Each input is bounded: at most M_FUZZ_OPS operations, M_MAX_RUNS
 * callback runs, virtual time only (no real sleeping; a lost wake-up is
 * reported after M_HANG_NS of real time).
 *
 * Build and run: scripts/fuzz.sh [seconds]. Replay one input:
 *   CHIME_MODEL_TRACE=1 build-fuzz/fuzz_ops crash-<sha1>
 */
#include "model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef NDEBUG
#error "fuzz_ops needs CHIME_ASSERT and assert(): build without NDEBUG"
#endif

#define M_FUZZ_OPS 256
#define M_FUZZ_MAX_LEN 4096 /* longer inputs add nothing: ops are capped */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int trace = -1;
    if (trace < 0) {
        const char *v = getenv("CHIME_MODEL_TRACE");
        trace = v && *v && *v != '0';
    }
    if (size > M_FUZZ_MAX_LEN)
        size = M_FUZZ_MAX_LEN;
    m_src src = {.buf = data, .len = size};
    m_sequence(&src, M_FUZZ_OPS, "fuzz_ops", NULL, NULL, trace, NULL, NULL);
    return 0;
}
