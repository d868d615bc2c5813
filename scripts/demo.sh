#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The chime demo. Installs what it needs and is missing (gcc, make, cmake,
# pkg-config, libevent: nothing for the tests), builds the examples quietly
# (Release, in build/, or in $CHIME_BUILD_DIR; the build log is shown only
# if the build fails) and runs examples/server_demo.c twice: an echo server
# whose idle timeouts are chime loop tasks, under ~2,000 client connections,
# with a session table of 2,000,000 records that maintenance scans every
# 250 ms,
#   1. with the scan on a chime worker, which posts the expired records
#      back to the loop (the loop only evicts them), then
#   2. with the same scan inline on the loop thread,
# and prints both side by side: what the loop pays for maintenance, and
# what that does to the idle timeouts and the echoes. About 15 s.
#
# Arguments go to both runs, for example
#   bash scripts/demo.sh --seconds 10 --conns 5000 --idle-ms 500 --table 4000000
# (`build/examples/chime_server_demo --help` lists them).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${CHIME_BUILD_DIR:-build}
mkdir -p "$build"
log="$build/demo-setup.log"

# Runs a step with its output in $log; shows the log if it fails.
quietly() {
    local what=$1
    shift
    printf '%s... ' "$what"
    if "$@" >>"$log" 2>&1; then
        echo done
    else
        echo FAILED
        echo "---- last lines of $log ----" >&2
        tail -n 60 "$log" >&2
        exit 1
    fi
}

: >"$log"
quietly "checking packages (gcc make cmake pkg-config libevent-dev)" \
    bash scripts/deps.sh --only gcc libc6-dev make cmake pkg-config \
    libevent-dev
quietly "configuring chime (Release, examples only, in $build/)" \
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCHIME_WITH_LIBEVENT=ON -DCHIME_BUILD_TESTS=OFF \
    -DCHIME_BUILD_EXAMPLES=ON
quietly "building the demo" \
    cmake --build "$build" -j2 --target chime_server_demo
demo="$build/examples/chime_server_demo"

cat <<'EOF'

== run 1 of 2: the maintenance scan on a chime worker ==
Every second the server prints one line:
  open       connections open on the server now
  served     connections accepted so far
  timeouts   idle timeouts fired so far: each one a chime loop task that ran
             on the loop thread and closed its connection there
  echoes/s   echo round trips in the last second; every read touched its
             connection's timeout (chime_task_touch: one store, no lock)
  sessions   records in the session table: open connections, and closed
             ones kept a while after (--table: 2,000,000 records)
  evicted    expired records removed by the maintenance so far
  maint      longest time the loop thread spent on maintenance in that
             second (here: evicting what the worker found, nothing more)

EOF
out1=$(mktemp)
out2=$(mktemp)
trap 'rm -f "$out1" "$out2"' EXIT
rc1=0
"$demo" "$@" | tee "$out1" || rc1=$?

cat <<'EOF'

== run 2 of 2: the same server, the scan inline on the loop thread ==
(a fixed-rate loop task scans the whole table and evicts, as a server
without a worker pool does; per-second lines left out)

EOF
rc2=0
"$demo" "$@" --scan-on loop --quiet | tee "$out2" || rc2=$?

# "result: key=value ..." -> the value of one key.
val() {
    sed -n 's/^result: .*\<'"$2"'=\([^ ]*\).*/\1/p' "$1"
}
row() {
    local label=$1 k1=$2 k2=$3 k3=$4 unit=$5
    local a b
    if [ -z "$k2" ]; then
        a=$(val "$out1" "$k1")
        b=$(val "$out2" "$k1")
    elif [ -n "$k3" ]; then
        a="$(val "$out1" "$k1") / $(val "$out1" "$k2") / $(val "$out1" "$k3")"
        b="$(val "$out2" "$k1") / $(val "$out2" "$k2") / $(val "$out2" "$k3")"
    else
        a="$(val "$out1" "$k1") / $(val "$out1" "$k2")"
        b="$(val "$out2" "$k1") / $(val "$out2" "$k2")"
    fi
    printf '  %-38s %24s %24s\n' "$label" "$a $unit" "$b $unit"
}

cat <<'EOF'

== side by side ==
EOF
printf '  %-38s %24s %24s\n' "" "scan on a worker" "scan on the loop"
row "loop time on maintenance: mean / max" \
    loop_maint_mean_ms loop_maint_max_ms "" ms
row "idle timeout lateness: p50 / p99 / max" \
    idle_late_p50_us idle_late_p99_us idle_late_max_us us
row "echo round trip: p50 / p99 / max" rtt_p50_us rtt_p99_us rtt_max_us us
row "timer wake-ups of the loop" timer_fires_per_s "" "" /s
cat <<'EOF'

  loop time on maintenance  how long the loop thread was busy with one
                            maintenance pass (mean over the passes, and the
                            longest): it serves no socket and runs no timer
                            meanwhile
  idle timeout lateness     when a timeout's callback ran, minus (last read
                            + idle timeout)
  echo round trip           from a client's send to its echo, seen by the
                            client
  timer wake-ups            timerfd expirations of the loop's binding per
                            second: the idle timeouts have a window of
                            idle-ms / 20 (--slack-ms), so one wake-up closes
                            every connection whose time has come
With a worker, the loop's share of the maintenance is the evictions alone;
inline, every pass stalls the loop for the whole scan, and the timeouts and
echoes that fall due meanwhile wait for it.
EOF

if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    echo "demo: a run failed its invariants (exit $rc1, $rc2)" >&2
    exit 1
fi
