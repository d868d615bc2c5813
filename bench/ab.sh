#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Before / after: chime at another commit against this tree, on W1, W2
# (cancel+schedule and re-arm), W4 and W5 (post and delay-0 schedule),
# interleaved run by run (A B A B ...), medians of each. Peers are not run:
# bench/run.sh gives the ratios to them; this says what a change moved.
#
# Usage: bash bench/ab.sh OLD_COMMIT [RUNS]    (default 10 runs)
# Builds OLD_COMMIT's sources with this harness into a temporary directory
# (a git worktree) and this tree into bench/build (bench/run.sh's build).
# Wants a quiet machine; prints one line per figure:
#   workload/system/metric  old MEDIAN  new MEDIAN  new/old RATIO  [old min-max | new min-max]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
old=${1:?usage: bench/ab.sh OLD_COMMIT [RUNS]}
runs=${2:-10}
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
    cmake --build "$build" -j"$(nproc)" --target w_chime >>"$tmp/cmake-$side.log" 2>&1
done

out=$tmp/results.txt
for r in $(seq 1 "$runs"); do
    for side in old new; do
        bin=$ROOT/bench/build/w_chime
        [ "$side" = old ] && bin=$tmp/build/w_chime
        for w in "w1" "w2" "w2 mode=rearm" "w4" "w5" "w5 mode=sched"; do
            # shellcheck disable=SC2086
            "$bin" $w 2>/dev/null | awk -v s="$side" '/^RESULT/ {print s, $2 "/" $3 "/" $4, $5}' >>"$out"
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
