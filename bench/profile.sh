#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Profiles chime on one workload: where does its time go?
#
# Usage: bash bench/profile.sh WORKLOAD [key=value ...]
#   e.g. bash bench/profile.sh w2 L=100000 mode=rearm
#        bash bench/profile.sh w5 mode=post
# Builds bench/ with frame pointers (-O2 -g -fno-omit-frame-pointer) into
# bench/build-prof/, runs w_chime under `perf record -e cpu-clock` (a
# software clock: it works in VMs without hardware counters) and prints the
# hottest symbols per thread (w_chime = the producer or loop thread,
# chime-N = worker N) and the hottest call chains. Without a working perf
# it falls back to valgrind --tool=callgrind (slow: use small sizes).
# The data stays in bench/build-prof/perf-WORKLOAD.data for perf report /
# perf annotate.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$HERE/build-prof
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 1; }
w=$1
shift

cmake -S "$HERE" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="-fno-omit-frame-pointer" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target w_chime >/dev/null

data=$BUILD/perf-$w.data
if perf record -e cpu-clock -o /dev/null true >/dev/null 2>&1; then
    perf record -q -e cpu-clock -F 4000 --call-graph fp -o "$data" \
        "$BUILD/w_chime" "$w" "$@"
    echo "== time per thread"
    perf report -i "$data" --no-children --stdio --sort comm 2>/dev/null |
        grep -E '^ +[0-9]+\.[0-9]+%'
    echo "== hottest symbols (self time) per thread"
    perf report -i "$data" --no-children --stdio --sort comm,sym 2>/dev/null |
        grep -E '^ +[0-9]+\.[0-9]+%' | head -30
    echo "== inclusive time (children) by symbol"
    perf report -i "$data" --children --stdio --sort sym 2>/dev/null |
        grep -E '^ +[0-9]+\.[0-9]+% +[0-9]+\.[0-9]+%' | head -25
    echo "(perf report -i $data / perf annotate -i $data SYMBOL for more)"
else
    echo "profile.sh: perf unusable here, using callgrind" >&2
    valgrind --tool=callgrind --callgrind-out-file="$BUILD/callgrind-$w.out" \
        "$BUILD/w_chime" "$w" "$@"
    callgrind_annotate "$BUILD/callgrind-$w.out" | head -40
fi
