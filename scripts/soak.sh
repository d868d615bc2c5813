#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Soak test (not part of CI): builds chime in Release and runs the stress
# program (tests/stress) in soak mode for N minutes: round after round, each
# with a new pool and bindings, a random workload, a shutdown at a random
# moment, destroy and the invariant check. While it runs, samples the
# process's resident size (VmRSS from /proc/<pid>/status) at start, every
# 30 s and at the end; a leak that survives destroy shows up as growth.
#
# Usage: scripts/soak.sh [minutes]            (default 10)
# Environment:
#   CHIME_SOAK_BUILD     build directory (default build-soak)
#   CHIME_SEED           seed to run (default: chosen and printed)
#   CHIME_SOAK_RSS_SLACK_KIB  growth from the 30 s sample to the end that
#                        still counts as flat (default 8192)
#
# Prints the operations done, RSS start/end and every invariant failure;
# exits 0 if the run passed and RSS stayed flat, 1 on an invariant failure
# or crash, 2 on a hang, 3 if RSS grew.
set -uo pipefail

minutes=${1:-10}
if ! [[ $minutes =~ ^[0-9]+$ ]] || [ "$minutes" -lt 1 ]; then
    echo "usage: $0 [minutes]" >&2
    exit 64
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${CHIME_SOAK_BUILD:-build-soak}
slack=${CHIME_SOAK_RSS_SLACK_KIB:-8192}

echo "soak: building $build (Release)"
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHIME_SANITIZER= \
    -DCHIME_BUILD_EXAMPLES=OFF >"$build.configure.log" 2>&1 ||
    ! cmake --build "$build" -j2 --target chime_stress \
        >"$build.build.log" 2>&1; then
    cat "$build.configure.log" "$build.build.log" 2>/dev/null | tail -30
    echo "soak: build FAILED"
    exit 1
fi
rm -f "$build.configure.log" "$build.build.log"

bin=$build/tests/stress/chime_stress
log=$build/soak.log
seconds=$((minutes * 60))
args=(--soak --seconds "$seconds")
[ -n "${CHIME_SEED:-}" ] && args+=(--seed "$CHIME_SEED")
"$bin" "${args[@]}" >"$log" 2>&1 &
pid=$!

rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null; }
ops_so_far() {
    sed -n 's/^stress: round [0-9]*: [0-9]* ops, total \([0-9]*\) ops.*/\1/p' \
        "$log" | tail -n 1
}

t0=$SECONDS
sleep 1
rss_start=$(rss)
echo "soak: pid $pid, $minutes min, $(head -n 1 "$log")"
echo "soak: t=1s RSS ${rss_start:-?} KiB"
rss_30=""
rss_end=$rss_start
next=30
# The program stops by itself after `seconds` (plus its last round); a
# hang it does not catch itself (one in destroy, say) is killed here.
deadline=$((seconds + 180))
hung=0
while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    r=$(rss)
    [ -n "$r" ] && rss_end=$r
    el=$((SECONDS - t0))
    if [ "$el" -ge "$next" ] && [ -n "$r" ]; then
        [ -z "$rss_30" ] && rss_30=$r
        echo "soak: t=${el}s RSS $r KiB, $(ops_so_far) ops," \
            "$(grep -c '^stress: round' "$log") rounds," \
            "$(grep -c VIOLATION "$log") violations"
        next=$((next + 30))
    fi
    if [ "$el" -ge "$deadline" ]; then
        echo "soak: no exit after ${el}s: HANG; stacks:"
        gdb -p "$pid" -batch -ex "thread apply all bt 12" 2>/dev/null |
            grep -E '^(Thread|#)' | head -80
        kill -9 "$pid"
        hung=1
        break
    fi
done
wait "$pid"
rc=$?

echo "soak: --- result ---"
grep -E 'VIOLATION|replay|ERROR|Assertion' "$log" | head -30
tail -n 3 "$log"
[ -z "$rss_30" ] && rss_30=$rss_start
growth=$(( ${rss_end:-0} - ${rss_30:-0} ))
echo "soak: RSS start ${rss_start:-?} KiB, at 30 s ${rss_30:-?} KiB," \
    "end ${rss_end:-?} KiB (growth after warm-up: $growth KiB)"
echo "soak: ops $(sed -n 's/^stress: \([0-9]*\) ops, seed.*/\1/p' "$log")," \
    "$(grep -c '^stress: round' "$log") rounds in $((SECONDS - t0)) s;" \
    "log: $log"
if [ "$hung" -ne 0 ]; then
    echo "soak: FAILED (hang)"
    exit 2
fi
if [ "$rc" -ne 0 ]; then
    echo "soak: FAILED (exit $rc)"
    exit 1
fi
if [ "$growth" -gt "$slack" ]; then
    echo "soak: FAILED (RSS grew by $growth KiB > $slack KiB)"
    exit 3
fi
echo "soak: OK"
