#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer target fuzz/fuzz_ops with clang (libFuzzer, ASan,
# UBSan; assertions on) and runs it for a bounded time on a copy of the seed
# corpus fuzz/corpus/ (the committed corpus never grows here).
#
# Prints the executions and the coverage libFuzzer reached (cov: edges,
# ft: features) and exits non-zero on any finding: a model divergence
# (fuzz_ops aborts with the operations so far), a sanitizer report, a leak,
# a timeout or an out-of-memory. The input that failed is kept in
# build-fuzz/artifacts/; replay it with
#   CHIME_MODEL_TRACE=1 build-fuzz/fuzz_ops build-fuzz/artifacts/<file>
# and shrink it with build-fuzz/fuzz_ops -minimize_crash=1 -runs=10000 <file>.
#
# Usage: scripts/fuzz.sh [seconds]   (default 60)
# CHIME_FUZZ_DIR (default build-fuzz) names the build directory;
# CHIME_FUZZ_ARGS adds libFuzzer flags (e.g. -len_control=0: full-length
# sequences from the start, fewer executions, more features).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

secs=${1:-60}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
    echo "usage: scripts/fuzz.sh [seconds]" >&2
    exit 2
fi

# clang 14 brings no libFuzzer runtime by itself on Debian 12: that is in
# libclang-rt-14-dev (a Recommends, which deps.sh does not install).
bash scripts/deps.sh clang libclang-rt-14-dev || exit 1

dir=${CHIME_FUZZ_DIR:-build-fuzz}
mkdir -p "$dir"
bin="$dir/fuzz_ops"

echo "=================== $bin: build ==================="
# Every chime source, the model (tests/model.c, the one test_model links)
# and the target, instrumented as one program. No -DNDEBUG: CHIME_ASSERT
# and assert() stay on (fuzz_ops.c refuses NDEBUG).
if ! clang -std=gnu11 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -UNDEBUG \
    -Iinclude -Isrc -Itests \
    src/*.c tests/model.c fuzz/fuzz_ops.c -o "$bin" -pthread; then
    echo "fuzz: FAILED to build"
    exit 1
fi

rm -rf "$dir/corpus" "$dir/artifacts"
mkdir -p "$dir/corpus" "$dir/artifacts"
cp fuzz/corpus/* "$dir/corpus/"
seeds=$(ls "$dir/corpus" | wc -l)

echo
echo "=================== $bin: ${secs} s on $seeds seed inputs ==================="
log="$dir/fuzz.log"
start=$SECONDS
ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "$bin" -max_total_time="$secs" -print_final_stats=1 \
    -timeout=60 -rss_limit_mb=2048 -max_len=2048 \
    -artifact_prefix="$dir/artifacts/" ${CHIME_FUZZ_ARGS:-} "$dir/corpus" \
    >"$log" 2>&1
rc=$?

# "#123456	DONE   cov: 1878 ft: 9349 corp: 811/77Kb lim: 1093 exec/s: 2057 rss: 500Mb"
last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -n 1)
cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
corp=$(sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$last")
stat() { sed -nE "s/^stat::$1: *([0-9]+).*/\1/p" "$log" | tail -n 1; }
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
added=$(stat new_units_added)
rss=$(stat peak_rss_mb)
findings=$(find "$dir/artifacts" -type f | wc -l)

echo "executions: ${execs:-?} (${rate:-?}/s), coverage: cov ${cov:-?} ft ${ft:-?}," \
    "corpus ${seeds} -> ${corp:-?} inputs (${added:-?} new), peak rss ${rss:-?} MB," \
    "$((SECONDS - start)) s"
if [ "$rc" -ne 0 ] || [ "$findings" -ne 0 ]; then
    echo
    tail -n 60 "$log"
    echo
    echo "fuzz: FAILED (exit $rc, $findings finding(s) in $dir/artifacts/; log $log)"
    exit 1
fi
echo "fuzz: OK, no findings (log $log)"

# ---- calendar time (issue 13): fuzz/fuzz_cron, the cron and TZ rule parsers --
# Built and run the same way, on fuzz/corpus_cron/, for CHIME_FUZZ_CRON_SECS
# (default: half of the seconds above, at least 10). Replay a finding with
# build-fuzz/fuzz_cron build-fuzz/artifacts-cron/<file>.
csecs=${CHIME_FUZZ_CRON_SECS:-$((secs / 2 < 10 ? 10 : secs / 2))}
cbin="$dir/fuzz_cron"
echo
echo "=================== $cbin: build ==================="
if ! clang -std=gnu11 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -UNDEBUG -DCHIME_STATIC_DEFINE \
    -Iinclude -Isrc src/lib.c src/tz.c src/cron.c fuzz/fuzz_cron.c \
    -o "$cbin"; then
    echo "fuzz_cron: FAILED to build"
    exit 1
fi
rm -rf "$dir/corpus-cron" "$dir/artifacts-cron"
mkdir -p "$dir/corpus-cron" "$dir/artifacts-cron"
cp fuzz/corpus_cron/* "$dir/corpus-cron/"
echo
echo "=================== $cbin: ${csecs} s ==================="
clog="$dir/fuzz_cron.log"
ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "$cbin" -max_total_time="$csecs" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -max_len=256 -artifact_prefix="$dir/artifacts-cron/" \
    "$dir/corpus-cron" >"$clog" 2>&1
rc=$?
last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$clog" | tail -n 1)
execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$clog")
echo "fuzz_cron: executions ${execs:-?}, $(sed -nE 's/.*(cov: [0-9]+ ft: [0-9]+).*/\1/p' <<<"$last")"
if [ "$rc" -ne 0 ] || [ "$(find "$dir/artifacts-cron" -type f | wc -l)" -ne 0 ]; then
    tail -n 60 "$clog"
    echo "fuzz_cron: FAILED (exit $rc; log $clog)"
    exit 1
fi
echo "fuzz_cron: OK, no findings (log $clog)"
# ---- end calendar time --------------------------------------------------------
