#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Before / after: chime at another commit against this tree, interleaved
# run by run (A B A B ...), medians of each. Peers are not run:
# bench/run.sh gives the ratios to them; this says what a change moved.
# The workloads (SET):
#   core  W1, W2 (cancel+schedule and re-arm), W4, W5 (post and delay-0
#         schedule): the default
#   loop  W3 (lateness), W6 (loop timers under load: re-arm and touch) and
#         W7 (re-arms and touches from K = 1 and 2 loop threads): the exact
#         timers' figures (issue 37: windows must not cost exact tasks)
#   all   both
#
# Usage: bash bench/ab.sh OLD_COMMIT [RUNS] [SET]    (default 10 runs, core)
# Builds OLD_COMMIT's sources with this harness into a temporary directory
# (a git worktree) and this tree into bench/build (bench/run.sh's build).
# Wants a quiet machine; prints one line per figure:
#   workload/system/metric  old MEDIAN  new MEDIAN  new/old RATIO  [old min-max | new min-max]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
old=${1:?usage: bench/ab.sh OLD_COMMIT [RUNS]}
runs=${2:-10}
set=${3:-core}
case $set in
core) works=("w_chime w1" "w_chime w2" "w_chime w2 mode=rearm" "w_chime w4"
    "w_chime w5" "w_chime w5 mode=sched") ;;
loop) works=() ;;
all) works=("w_chime w1" "w_chime w2" "w_chime w2 mode=rearm" "w_chime w4"
    "w_chime w5" "w_chime w5 mode=sched") ;;
*) echo "ab.sh: SET is core, loop or all" >&2; exit 2 ;;
esac
if [ "$set" != core ]; then
    works+=("w_chime w3 tasks=1000 period_ms=10 warm_ms=1000 measure_ms=5000"
        "w_loop_load w6 mode=chime-rearm C=10000 run_ms=10000 warm_ms=2000"
        "w_loop_load w6 mode=chime-touch C=10000 run_ms=10000 warm_ms=2000"
        "w_loop_scale w7 mode=chime-rearm K=1 L=10000 R=2000000"
        "w_loop_scale w7 mode=chime-rearm K=2 L=10000 R=2000000"
        "w_loop_scale w7 mode=chime-touch K=1 L=10000 R=2000000"
        "w_loop_scale w7 mode=chime-touch K=2 L=10000 R=2000000")
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-ab.XXXXXX")
cleanup() {
    git -C "$ROOT" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$ROOT" worktree add --detach "$tmp/src" "$old" >/dev/null
for side in old new; do
    src=$ROOT build=$ROOT/bench/build
    [ "$side" = old ] && src=$tmp/src build=$tmp/build
    cmake -S "$HERE" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHIME_ROOT="$src" \
        >"$tmp/cmake-$side.log" 2>&1
    cmake --build "$build" -j"$(nproc)" --target w_chime w_loop_load \
        w_loop_scale >>"$tmp/cmake-$side.log" 2>&1
done

out=$tmp/results.txt
for r in $(seq 1 "$runs"); do
    for side in old new; do
        dir=$ROOT/bench/build
        [ "$side" = old ] && dir=$tmp/build
        for w in "${works[@]}"; do
            # shellcheck disable=SC2086
            set -- $w
            prog=$1
            shift
            # W7 names its figures by K: the key keeps it.
            k=$(printf '%s\n' "$@" | sed -n 's/^K=//p')
            "$dir/$prog" "$@" 2>/dev/null |
                awk -v s="$side" -v k="${k:+k$k}" \
                    '/^RESULT/ {print s, $2 "/" $3 (k ? "-" k : "") "/" $4, $5}' >>"$out"
        done
    done
    echo "ab.sh: run $r of $runs done" >&2
done

awk '
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) {            # insertion sort, n is small
        t = a[i] + 0
        for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
        a[j + 1] = t
    }
    lo = a[1]; hi = a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ v[$1 " " $2] = v[$1 " " $2] " " $3; keys[$2] = 1 }
END {
    for (k in keys) {
        if (!(("old " k) in v) || !(("new " k) in v)) continue
        mo = median(v["old " k]); olo = lo; ohi = hi
        mn = median(v["new " k]); nlo = lo; nhi = hi
        printf "%-38s old %11.4g  new %11.4g  new/old %5.2f  [%.4g-%.4g | %.4g-%.4g]\n",
            k, mo, mn, (mo != 0 ? mn / mo : 0), olo, ohi, nlo, nhi
    }
}' "$out" | sort
