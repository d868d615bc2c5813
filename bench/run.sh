#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# chime benchmarks: W1-W8 of ../shared/bench/WORKLOADS.md (method v2) for
# chime and its peers, and the machine's unit costs, interleaved
# (A B C A B C ...), in one run.
#
# Usage: bash bench/run.sh [options]
#   --runs N        runs per system and workload (default 10: fewer cannot
#                   separate the two regimes these VMs switch between; see
#                   ../shared/bench/WORKLOADS.md, method v2)
#   --quick         tiny sizes, results in bench/results/quick/, no plots in
#                   docs/ (the CI smoke test: bench/smoke.sh)
#   --out DIR       results and plots in DIR instead of bench/results/ and
#                   docs/ (a trial run that must not replace the published
#                   figures)
#   --only LIST     comma-separated workloads to run
#                   (units,w1,w2,w3,w4,w5,w6,w7,w8,w8m,scaling; w8m is
#                   W8's memcached-shaped row)
#   --no-install    do not try to install missing Debian packages
#   --wait-quiet[=S] before each measurement, wait (up to S seconds,
#                   default 30) until the machine's CPUs are at least 90%
#                   idle over half a second: on a shared machine this keeps
#                   other jobs out of the figures (the busy percentage seen
#                   before each run is recorded in the CSV either way)
# Environment: CHIME_BENCH_BUILD=DIR builds in DIR instead of bench/build/;
# CHIME_BENCH_ROOT=DIR measures the chime sources of another checkout.
#
# What it does:
#   1. installs missing Debian packages with apt (sudo if not root);
#   2. builds bench/ (its own CMake project, chime compiled from src/ at
#      -O2) into bench/build/, the Java peers into bench/build/java/ and
#      the Tokio peer (bench/tokio/, Debian's cargo, offline) into
#      bench/build/tokio/;
#   3. runs every workload for every system, round-robin, N runs each;
#      each program checks its invariants and a broken one stops the run;
#   4. writes raw results (bench/results/results.csv: workload, size,
#      system, run, metric, value), prints the table (also in
#      bench/results/table.md) with median, min, max, CPU time per item
#      and chime's ratio to each peer, the goal table, the W7 scaling table
#      and the live-set scaling table (bench/results/scaling.md);
#   5. draws docs/bench-w3-lateness.png, docs/bench-w2-scaling.png and
#      docs/bench-w7-scaling.png with gnuplot.
# What a given chime can run is asked of the build: the chime-touch
# systems need chime_task_touch (w_loop_scale features), the W7 lock counts
# the lock-count build (bench/build/w_loop_scale_locks), the W8 chime-slack
# systems the slack windows (w_coalesce features); without them those
# rows are left out and the goal table says "not measured".
# Dependencies: bash, awk, coreutils, cmake, a C compiler, JDK 17,
# libevent, libuv, Netty (libnetty-java), gnuplot. No python. Optional
# peers, skipped (with a note under the table) when they cannot be built:
# libev (libev-dev), and Tokio (Debian's cargo and rustc with the packaged
# crates librust-tokio-dev and librust-tokio-util-dev, built offline
# against /usr/share/cargo/registry: bench/tokio/.cargo/config.toml).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
# The chime tree measured (its src/, include/, integrations/): this one, or
# CHIME_BENCH_ROOT=/other/checkout to measure work in progress elsewhere.
CHIME_SRC=$(cd "${CHIME_BENCH_ROOT:-$ROOT}" && pwd)
BUILD=${CHIME_BENCH_BUILD:-$HERE/build}
NETTY_JAR=/usr/share/java/netty-common.jar

ARGS=$*
runs=10
quick=0
out_dir=
only="units,w1,w2,w3,w4,w5,w6,w7,w8,w8m,scaling"
install=1
wait_quiet=0
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --runs=*) runs=${1#--runs=}; shift ;;
    --quick) quick=1; shift ;;
    --out) out_dir=$2; shift 2 ;;
    --out=*) out_dir=${1#--out=}; shift ;;
    --only) only=$2; shift 2 ;;
    --only=*) only=${1#--only=}; shift ;;
    --no-install) install=0; shift ;;
    --wait-quiet) wait_quiet=30; shift ;;
    --wait-quiet=*) wait_quiet=${1#--wait-quiet=}; shift ;;
    -h|--help) sed -n '2,53p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 1 ;;
    esac
done
case "$runs" in ''|*[!0-9]*|0) echo "run.sh: --runs needs N >= 1" >&2; exit 1 ;; esac

if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir"
    OUT=$(cd "$out_dir" && pwd)
    PLOTS=$OUT
elif [ "$quick" = 1 ]; then
    OUT=$HERE/results/quick
    PLOTS=$OUT
else
    OUT=$HERE/results
    PLOTS=$ROOT/docs
fi
mkdir -p "$OUT"
CSV=$OUT/results.csv
LOGDIR=$OUT/logs
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"

wants() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }

# ---- 1. packages -----------------------------------------------------------
install_packages() {
    local pkgs=(gcc libc6-dev make cmake pkg-config libevent-dev libuv1-dev
                libnetty-java gnuplot-nox)
    local missing=() p st
    for p in "${pkgs[@]}"; do
        st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$st" = installed ] || missing+=("$p")
    done
    # Any JDK 17 will do; Debian 12's default-jdk-headless is 17.
    if ! javac -version 2>&1 | grep -q ' 17\.'; then
        missing+=(openjdk-17-jdk-headless)
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "run.sh: missing ${missing[*]} and no apt-get" >&2
        exit 1
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "run.sh: need root or sudo to install ${missing[*]}" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "run.sh: installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
}
# The optional peers' packages: a failed install only leaves those peers
# out (noted under the table).
install_optional() {
    local pkgs=(libev-dev cargo rustc librust-tokio-dev librust-tokio-util-dev)
    local missing=() p st sudo=()
    for p in "${pkgs[@]}"; do
        st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$st" = installed ] || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || return 0
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || return 0
        sudo=(sudo)
    fi
    echo "run.sh: installing ${missing[*]} (optional peers)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        </dev/null >"$LOGDIR/apt-optional.log" 2>&1 ||
        echo "run.sh: could not install ${missing[*]}: those peers are skipped" >&2
}
if [ "$install" = 1 ]; then
    install_packages
    install_optional
fi

# ---- 2. build ---------------------------------------------------------------
echo "run.sh: building into $BUILD"
# The lock-count binary exists only if this configuration builds it: a
# stale one from an older configuration must not be run.
rm -f "$BUILD/w_loop_scale_locks" "$BUILD/w_libev"
cmake -S "$HERE" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCHIME_ROOT="$CHIME_SRC" \
    >"$LOGDIR/cmake.log" 2>&1 ||
    { cat "$LOGDIR/cmake.log" >&2; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >>"$LOGDIR/cmake.log" 2>&1 ||
    { cat "$LOGDIR/cmake.log" >&2; exit 1; }
# The Java peers (STPE, Netty) run in W1-W4 only: a run without those
# (--only w8, say) needs no JDK build and no Netty.
if wants w1 || wants w2 || wants w3 || wants w4 || wants scaling; then
    mkdir -p "$BUILD/java"
    javac -nowarn -d "$BUILD/java" -cp "$NETTY_JAR" \
        "$HERE/java/Stpe.java" "$HERE/java/Wheel.java"
fi
JAVA=(java -cp "$BUILD/java:$NETTY_JAR")

# Optional peers: what cannot be built is left out, with a note under the
# table (PEER_NOTES, written to $OUT/notes.md for tables.sh).
PEER_NOTES=()
LIBEV=""
if [ -x "$BUILD/w_libev" ]; then
    LIBEV=1
else
    PEER_NOTES+=("libev: not measured (ev.h or libev not found: Debian package libev-dev)")
fi
# Tokio: Debian's cargo and rustc (not a rustup toolchain earlier on PATH),
# offline, against the packaged crates (bench/tokio/.cargo/config.toml).
TOKIO=""
TOKIO_BIN=$BUILD/tokio/release/w_tokio
DEB_REGISTRY=/usr/share/cargo/registry
build_tokio() {
    rm -f "$TOKIO_BIN"
    if [ ! -x /usr/bin/cargo ] || [ ! -x /usr/bin/rustc ]; then
        PEER_NOTES+=("Tokio: not measured (no Debian cargo and rustc: packages cargo, rustc)")
        return
    fi
    if ! compgen -G "$DEB_REGISTRY/tokio-1.*" >/dev/null ||
        ! compgen -G "$DEB_REGISTRY/tokio-util-0.7.*" >/dev/null; then
        PEER_NOTES+=("Tokio: not measured (no tokio / tokio-util in $DEB_REGISTRY: packages librust-tokio-dev, librust-tokio-util-dev)")
        return
    fi
    echo "run.sh: building bench/tokio (offline, Debian's cargo) into $BUILD/tokio"
    # Resolved afresh against the registry as it is now (the lock file is
    # not kept: its checksums are the local registry's).
    rm -f "$HERE/tokio/Cargo.lock"
    if ! (cd "$HERE/tokio" && CARGO_TARGET_DIR="$BUILD/tokio" \
        RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc \
        /usr/bin/cargo build --release --offline) >"$LOGDIR/cargo.log" 2>&1 ||
        [ ! -x "$TOKIO_BIN" ]; then
        PEER_NOTES+=("Tokio: not measured (the offline cargo build failed: logs/cargo.log)")
        return
    fi
    TOKIO=1
}
build_tokio
# The version of a crate the Tokio build resolved (bench/tokio/Cargo.lock).
crate_version() {
    awk -v n="$1" '$1 == "name" && $3 == "\"" n "\"" { getline; gsub(/"/, "", $3); print $3; exit }' \
        "$HERE/tokio/Cargo.lock" 2>/dev/null
}

# ---- machine ----------------------------------------------------------------
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpus: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "kernel: $(uname -sr)"
    echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "chime: $([ "$CHIME_SRC" = "$ROOT" ] && echo "this checkout" || echo "$CHIME_SRC") at $(git -C "$CHIME_SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
        git -C "$CHIME_SRC" status --porcelain -- src include integrations 2>/dev/null |
            grep -q . && echo ' + uncommitted changes in src/ include/ integrations/')"
    echo "cc: $(cc --version | head -1)"
    echo "java: $(java -version 2>&1 | sed -n 2p)"
    echo "libevent: $(pkg-config --modversion libevent_core)"
    echo "libuv: $(pkg-config --modversion libuv)"
    echo "libev: $([ -n "$LIBEV" ] && dpkg-query -W -f='${Version}' libev-dev 2>/dev/null || echo "not measured")"
    if [ -n "$TOKIO" ]; then
        echo "tokio: $(crate_version tokio), tokio-util $(crate_version tokio-util) (Debian registry), $(/usr/bin/rustc --version)"
    else
        echo "tokio: not measured"
    fi
    echo "timer slack (this shell): $(cat /proc/self/timerslack_ns 2>/dev/null || echo unknown) ns"
    echo "netty: $(dpkg-query -W -f='${Version}' libnetty-java 2>/dev/null || echo unknown)"
    echo "command: bash bench/run.sh${ARGS:+ $ARGS} ($runs runs)"
    # The vCPUs one by one (pinned): a VM's vCPUs need not be alike (on
    # the AMD EPYC VM of issue 11, memory-bound rounds ran 2-2.5x slower on
    # vCPU 1), and a single-threaded run lands on either. One w_floor at
    # half its counts per vCPU, before any run.
    if command -v taskset >/dev/null 2>&1; then
        for ((c = 0; c < $(nproc) && c < 8; c++)); do
            taskset -c "$c" "$BUILD/w_floor" units scale_pct=50 2>/dev/null |
                awk -v c="$c" '$1 == "RESULT" && ($4 == "clock_ns" || $4 == "w2_floor_ns_L100000" || $4 == "w2_cs_floor_ns_L100000") { v = v sprintf(" %s %.1f", $4, $5) }
                    END { print "vcpu " c " (pinned, one w_floor units at half counts):" v }'
        done
    fi
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"
echo "run.sh: load average now: $(cut -d' ' -f1-3 /proc/loadavg) (the figures" \
    "assume an otherwise idle machine)"

# ---- sizes ------------------------------------------------------------------
if [ "$quick" = 1 ]; then
    UNITS="scale_pct=5"
    W1_N=20000
    W2_L=1000; W2_R=20000
    W3_TASKS=100
    W3="warm_ms=100 measure_ms=300"
    W4_P=20000
    W5_M=20000
    W6_C=10000
    W6="run_ms=2500 warm_ms=1200"
    # W8: 2 s runs (W8m 3 s: its first expiries come after 2 s). The
    # late-run check gets 50 ms of scheduling latency instead of 1 ms, so
    # that a busy machine does not fail the smoke test (early runs are
    # still checked exactly).
    W8_C=10000
    W8="run_ms=2000 warm_ms=1000 floor_us=50000"
    W8M_C=4000
    W8M="run_ms=3000 warm_ms=2000 floor_us=50000"
    W7_L=1000; W7_R=100000
    SWEEP_L="10000:20000"
    SWEEP_P="1000"
else
    UNITS="scale_pct=100"
    W1_N=1000000
    W2_L=100000; W2_R=1000000
    W3_TASKS=1000
    W3="period_ms=10 warm_ms=1000 measure_ms=5000"
    W4_P=1000000
    W5_M=1000000
    W6_C=10000
    W6="run_ms=10000 warm_ms=2000"
    # W8: 30 s as the workload says (3 s of it warm-up); W8m 15 s (5 s:
    # its 2 s timeouts and the touch requeues settle later). The late-run
    # check allows 1 ms past a window's end (w_coalesce floor_us).
    W8_C=10000
    W8="run_ms=30000 warm_ms=3000"
    W8M_C=4000
    W8M="run_ms=15000 warm_ms=5000"
    W7_L=10000; W7_R=2000000
    # live set : rounds. 100k is the main W2 run; 1M uses fewer rounds.
    SWEEP_L="1000:1000000 10000:1000000 1000000:300000"
    SWEEP_P="1000 10000 100000"
fi
# W7: K = 1 and 2 loop threads, and 4, 8, ... as far as the machine has
# cores.
W7_KS="1 2"
for k in 4 8 16 32 64; do
    [ "$k" -le "$(nproc)" ] && W7_KS="$W7_KS $k"
done

# ---- 3. runs ----------------------------------------------------------------
# Percentage of all CPUs busy (not idle, not iowait) over half a second
# (a tenth of a second in --quick, which measures nothing worth reading).
BUSY_SAMPLE=0.5
[ "$quick" = 1 ] && BUSY_SAMPLE=0.1
cpu_busy() {
    local a b
    a=$(head -1 /proc/stat)
    sleep "$BUSY_SAMPLE"
    b=$(head -1 /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN {
        n = split(a, x, " "); split(b, y, " ")
        for (i = 2; i <= n; i++) { d = y[i] - x[i]; tot += d; if (i == 5 || i == 6) idle += d }
        printf "%d\n", (tot > 0 ? 100 * (tot - idle) / tot + 0.5 : 0) }'
}

# run_one WORKLOAD SIZE SYSTEM RUN -- command...
# Runs one measurement, appends its RESULT lines to the CSV, and stops the
# whole harness if the program fails (a broken invariant exits 2). The
# system column of a figure is the name the program printed in its RESULT
# line (a program may report under a name other than SYSTEM: the W7
# lock-count build reports its counts under the system it counted); the
# load seen before the run is recorded under SYSTEM.
echo "workload,size,system,run,metric,value" >"$CSV"
run_one() {
    local w=$1 size=$2 sys=$3 run=$4
    shift 5
    local log="$LOGDIR/$w-$size-$sys-$run"
    printf 'run.sh: %-3s size %-8s %-18s run %s ... ' "$w" "$size" "$sys" "$run"
    local t0=$SECONDS load busy waited=0
    busy=$(cpu_busy)
    if [ "$wait_quiet" -gt 0 ]; then
        while [ "$busy" -gt 10 ] && [ $waited -lt "$wait_quiet" ]; do
            sleep 2
            waited=$((waited + 2))
            busy=$(cpu_busy)
        done
    fi
    # What else ran just before: the 1-minute load average and the busy
    # percentage of all CPUs over the last half second.
    load=$(cut -d' ' -f1 /proc/loadavg)
    if ! timeout 600 "$@" >"$log.out" 2>"$log.err"; then
        echo "FAILED"
        echo "run.sh: $* failed:" >&2
        cat "$log.err" "$log.out" >&2
        exit 1
    fi
    if ! grep -q '^RESULT ' "$log.out"; then
        echo "FAILED (no RESULT line)"
        cat "$log.err" >&2
        exit 1
    fi
    awk -v w="$w" -v size="$size" -v run="$run" \
        '$1 == "RESULT" { printf "%s,%s,%s,%s,%s,%s\n", w, size, $3, run, $4, $5 }' \
        "$log.out" >>"$CSV"
    echo "$w,$size,$sys,$run,loadavg1,$load" >>"$CSV"
    echo "$w,$size,$sys,$run,busy_before_pct,$busy" >>"$CSV"
    echo "ok ($((SECONDS - t0)) s; before: load $load, CPUs ${busy}% busy)"
}

# system_cmd SYSTEM WORKLOAD -> the command line (array SYSCMD)
system_cmd() {
    local sys=$1 w=$2
    case "$w" in
    w6)
        case "$sys" in
        libevent-precise) SYSCMD=("$BUILD/w_loop_load" w6 mode=libevent precise=1) ;;
        *) SYSCMD=("$BUILD/w_loop_load" w6 mode="$sys") ;;
        esac
        return ;;
    w8 | w8m)
        case "$sys" in
        # Windows alone: no chime_loop_poll() in the read callback.
        chime-slack-nopoll) SYSCMD=("$BUILD/w_coalesce" "$w" mode=chime-slack poll=0) ;;
        *) SYSCMD=("$BUILD/w_coalesce" "$w" mode="$sys") ;;
        esac
        return ;;
    w7)
        case "$sys" in
        # The lock-count build reports under the system it counted.
        *-locks) SYSCMD=("$BUILD/w_loop_scale_locks" w7 mode="${sys%-locks}") ;;
        *) SYSCMD=("$BUILD/w_loop_scale" w7 mode="$sys") ;;
        esac
        return ;;
    esac
    case "$sys" in
    chime) SYSCMD=("$BUILD/w_chime" "$w") ;;
    chime-rearm) SYSCMD=("$BUILD/w_chime" "$w" mode=rearm) ;;
    # W2 with a timer slack of two coarse-clock ticks: its 60 s timeouts
    # count from CLOCK_MONOTONIC_COARSE, as libevent-common's do.
    chime-coarse) SYSCMD=("$BUILD/w_chime" "$w" timer_slack=auto) ;;
    chime-rearm-coarse) SYSCMD=("$BUILD/w_chime" "$w" mode=rearm timer_slack=auto) ;;
    chime-post) SYSCMD=("$BUILD/w_chime" "$w" mode=post) ;;
    chime-sched0) SYSCMD=("$BUILD/w_chime" "$w" mode=sched) ;;
    stpe) SYSCMD=("${JAVA[@]}" Stpe "$w") ;;
    # W3 with every JVM thread at 1 ns of timer slack, as chime's workers.
    stpe-slack) SYSCMD=("$BUILD/timerslack" 1 "${JAVA[@]}" Stpe "$w" slack_ns=1) ;;
    netty) SYSCMD=("${JAVA[@]}" Wheel "$w") ;;
    libevent-fresh) SYSCMD=("$BUILD/w_libevent" "$w" mode=fresh) ;;
    libevent-prealloc) SYSCMD=("$BUILD/w_libevent" "$w" mode=prealloc) ;;
    libevent-common) SYSCMD=("$BUILD/w_libevent" "$w" mode=common) ;;
    libevent-common-precise) SYSCMD=("$BUILD/w_libevent" "$w" mode=common precise=1) ;;
    libevent-once) SYSCMD=("$BUILD/w_libevent" "$w" mode=once) ;;
    libevent-active) SYSCMD=("$BUILD/w_libevent" "$w" mode=active) ;;
    libuv-async) SYSCMD=("$BUILD/w_libuv" "$w") ;;
    libev-stopstart) SYSCMD=("$BUILD/w_libev" "$w" mode=stopstart) ;;
    libev-again) SYSCMD=("$BUILD/w_libev" "$w" mode=again) ;;
    libev-lazy) SYSCMD=("$BUILD/w_libev" "$w" mode=lazy) ;;
    libev | libev-async) SYSCMD=("$BUILD/w_libev" "$w") ;;
    tokio) SYSCMD=("$TOKIO_BIN" "$w") ;;
    tokio-dq | tokio-dq-reset | tokio-sleep | tokio-sleep-reset)
        SYSCMD=("$TOKIO_BIN" "$w" mode="${sys#tokio-}") ;;
    tokio-mpsc) SYSCMD=("$TOKIO_BIN" "$w") ;;
    os-floor) SYSCMD=("$BUILD/w_floor" "$w") ;;
    os) SYSCMD=("$BUILD/w_floor" units) ;;
    # Diagnostics for W3: timer slack 1 ns (prctl) on chime's workers (set
    # from the on_thread_start hook) and on the floor's thread.
    chime-slack) SYSCMD=("$BUILD/w_chime" "$w" slack_ns=1) ;;
    os-floor-slack) SYSCMD=("$BUILD/w_floor" "$w" slack_ns=1) ;;
    *) echo "run.sh: unknown system $sys" >&2; exit 1 ;;
    esac
}

FEATURES=" $("$BUILD/w_loop_scale" features) "
TOUCH=""
case "$FEATURES" in *" touch "*) TOUCH=chime-touch ;; esac
LOCKS=""
if [ -x "$BUILD/w_loop_scale_locks" ]; then
    LOCKS="chime-rearm-locks ${TOUCH:+chime-touch-locks }chime-cancel-locks"
fi
# W8: the slack windows (chime_task_set_slack, chime_loop_poll), when the
# chime measured has them (w_coalesce features).
SLACK=""
case " $("$BUILD/w_coalesce" features) " in *" slack "*) SLACK=1 ;; esac
[ -n "$SLACK" ] || PEER_NOTES+=("W8: chime-slack not measured (this chime has no chime_task_set_slack and chime_loop_poll)")
echo "run.sh: this chime: ${TOUCH:-no chime_task_touch}; ${SLACK:+slack windows; }$([ -n "$LOCKS" ] &&
    echo "lock counts (w_loop_scale_locks)" || echo "no lock-count build")"

# The optional peers of each workload, when built.
EV_W2=""; EV_W4=""; EV_W5=""
if [ -n "$LIBEV" ]; then
    EV_W2="libev-stopstart libev-again libev-lazy"; EV_W4="libev"; EV_W5="libev-async"
fi
TK_W1=""; TK_W2=""; TK_W4=""; TK_W5=""
if [ -n "$TOKIO" ]; then
    TK_W1="tokio"; TK_W2="tokio-dq tokio-dq-reset tokio-sleep tokio-sleep-reset"
    TK_W4="tokio-dq tokio-sleep"; TK_W5="tokio-mpsc"
fi
SYS_UNITS="os"
SYS_W1="chime stpe $TK_W1"
SYS_W2="chime chime-rearm chime-coarse chime-rearm-coarse stpe netty libevent-fresh libevent-prealloc libevent-common libevent-common-precise $EV_W2 $TK_W2"
SYS_W3="chime stpe stpe-slack os-floor chime-slack os-floor-slack"
SYS_W4="chime stpe netty libevent-fresh libevent-prealloc libevent-common libevent-common-precise $EV_W4 $TK_W4"
SYS_W5="chime-post chime-sched0 libevent-once libevent-active libuv-async $EV_W5 $TK_W5"
SYS_W6="chime-rearm $TOUCH libevent libevent-precise"
SYS_W7="chime-rearm $TOUCH ${TOUCH:+chime-touch-at }chime-cancel libevent-readd libevent-deladd libevent-common $LOCKS"
# W8: exact deadlines, the windows with chime_loop_poll() in the read
# callback, the windows alone (no poll), and the peers' own timers.
SYS_W8="chime-exact ${SLACK:+chime-slack chime-slack-nopoll }libevent libuv"
SYS_W8M="chime-exact ${SLACK:+chime-slack }libevent libuv"

# interleave WORKLOAD SIZE "SYSTEMS" args...: runs 1..N, each system once
# per run, in the same order.
interleave() {
    local w=$1 size=$2 systems=$3 run sys
    shift 3
    for run in $(seq 1 "$runs"); do
        for sys in $systems; do
            system_cmd "$sys" "$w"
            local extra=()
            [ "$w" = w3 ] && extra=(dump="$OUT/w3-$sys-$run.cdf")
            run_one "$w" "$size" "$sys" "$run" -- "${SYSCMD[@]}" "$@" "${extra[@]}"
        done
    done
}

# W7: every K of a run before the next run (K=1 K=2 ... K=1 K=2 ...), so
# that the scaling ratio compares runs taken side by side.
interleave_w7() {
    local run k sys
    for run in $(seq 1 "$runs"); do
        for k in $W7_KS; do
            for sys in $SYS_W7; do
                system_cmd "$sys" w7
                run_one w7 "$k" "$sys" "$run" -- "${SYSCMD[@]}" \
                    K="$k" L="$W7_L" R="$W7_R"
            done
        done
    done
}

start=$SECONDS
if wants units; then interleave units 1 "$SYS_UNITS" $UNITS; fi
if wants w1; then interleave w1 "$W1_N" "$SYS_W1" N=$W1_N; fi
if wants w2; then
    interleave w2 "$W2_L" "$SYS_W2" L=$W2_L R=$W2_R
fi
if wants w3; then interleave w3 "$W3_TASKS" "$SYS_W3" tasks=$W3_TASKS $W3; fi
if wants w4; then interleave w4 "$W4_P" "$SYS_W4" P=$W4_P; fi
if wants w5; then interleave w5 "$W5_M" "$SYS_W5" M=$W5_M; fi
if wants w6; then interleave w6 "$W6_C" "$SYS_W6" C=$W6_C $W6; fi
if wants w7; then interleave_w7; fi
if wants w8; then interleave w8 "$W8_C" "$SYS_W8" C=$W8_C $W8; fi
if wants w8m; then interleave w8m "$W8M_C" "$SYS_W8M" C=$W8M_C $W8M; fi
if wants scaling; then
    for lr in $SWEEP_L; do
        interleave w2 "${lr%%:*}" "$SYS_W2" L="${lr%%:*}" R="${lr##*:}"
    done
    for p in $SWEEP_P; do
        interleave w4 "$p" "$SYS_W4" P="$p"
    done
fi
echo "run.sh: measurements took $((SECONDS - start)) s"

# ---- 4. tables ----------------------------------------------------------------
# Sizes of the main table, per workload.
MAIN_SIZES="units=1 w1=$W1_N w2=$W2_L w3=$W3_TASKS w4=$W4_P w5=$W5_M w6=$W6_C w8=$W8_C w8m=$W8M_C"
# Peers that could not be built: a note under the table (tables.sh).
rm -f "$OUT/notes.md"
if [ ${#PEER_NOTES[@]} -gt 0 ]; then
    printf 'Peer skipped: %s.\n' "${PEER_NOTES[@]}" >"$OUT/notes.md"
fi
bash "$HERE/tables.sh" "$CSV" "$MAIN_SIZES" "$OUT"

# ---- 5. plots ---------------------------------------------------------------
if wants w3 || wants scaling || wants w7; then
    bash "$HERE/plots.sh" "$OUT" "$PLOTS" "$W2_L" || {
        echo "run.sh: plotting failed" >&2
        exit 1
    }
fi
echo "run.sh: raw results in $CSV"
