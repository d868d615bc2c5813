#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Model-checks chime's wake-up protocols with SPIN (docs/model.md):
#   docs/model/leader.pml   leader-follower take, offers, cancel / re-arm
#   docs/model/binding.pml  a loop binding's signalled flag + eventfd
#   docs/model/batch.pml    claiming batched loop tasks vs cancel / re-arm
#   docs/model/timers.pml   a binding's eventfd + timerfd (loop-owned timers)
#   docs/model/terminate.pml termination with per-binding loop task counts
#   docs/model/due.pml      the pool's due ring: lock-free claims and completion
#   docs/model/post.pml     the post list, the quiet token, seal, shutdown
#   docs/model/inbox.pml    the pool's submission inbox: iwake, drains, close
#
# Runs every check of the real models (each must pass), then every check
# of every mutation (each mutation must be caught by at least one check).
# For each run prints: states stored, transitions, depth, memory, time and
# the error pan found, if any. One pan at a time; each is bounded in memory
# (SPIN_MEMLIM MB, default 2048) and depth (SPIN_MAXDEPTH, default 1000000),
# which fix what a run explores whatever the machine is doing, and in time
# (SPIN_TIME_LIMIT seconds, default 1800) only against a runaway: the
# largest check takes about 65 s on a quiet 2-core machine and 191 s with
# two busy loops beside it, so a tight wall-clock bound (it was 300 s) would
# fail a correct model on a busy machine. A run that hits a bound is
# "incomplete", which fails a real check and never counts as catching a
# mutation.
#
# Installs spin (and a C compiler) through scripts/deps.sh if missing.
#
# Usage: scripts/spin.sh [-k DIR] [PATTERN]
#   PATTERN  only run checks whose name matches this grep -E pattern
#   -k DIR   keep every run's directory (pan output, .trail files and, for
#            runs that found an error, the replayed counterexample in
#            trail.txt) under DIR
# Exits 0 only if every real check passed and every mutation was caught.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

keep=""
if [ "${1:-}" = "-k" ]; then
    keep=${2:?"-k needs a directory"}
    shift 2
fi
pattern=${1:-}

bash scripts/deps.sh || exit 1
for tool in spin gcc; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "spin.sh: $tool not found after scripts/deps.sh" >&2
        exit 1
    fi
done

time_limit=${SPIN_TIME_LIMIT:-1800}
memlim=${SPIN_MEMLIM:-2048}
maxdepth=${SPIN_MAXDEPTH:-1000000}

if [ -n "$keep" ]; then
    mkdir -p "$keep"
    work=$(cd "$keep" && pwd)
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/chime-spin.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi

models=$root/docs/model
real_pass=0
real_fail=0
failed_checks=()

# gcc optimisation of the next pan builds. -O2 by default; the small
# searches (the mutations of timers.pml and terminate.pml, the smallest
# real checks) use -O0: gcc takes about 3 s on an -O2 pan and 0.7 s on an
# -O0 one, more than those searches take either way.
opt=-O2

# Results of the last run (set by run_pan).
r_status="" r_error="" r_states="" r_trans="" r_depth="" r_mem="" r_time=""

# run_pan NAME MODEL MODE "SPIN DEFINES" [CLAIM]
#   MODE: safety  assertions + invalid end states (no never claim)
#         ltlf    never claim CLAIM, acceptance cycles, weak fairness
#         ltl     never claim CLAIM, acceptance cycles, no fairness
#         np      non-progress cycles (no never claim)
# Sets r_status to pass, error or incomplete.
run_pan() {
    local name=$1 model=$2 mode=$3 defs=$4 claim=${5:-}
    local dir=$work/$name
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$models/$model" "$dir/"
    local cflags=("$opt" -w "-DMEMLIM=$memlim")
    local args=("-m$maxdepth")
    case $mode in
    safety) cflags+=(-DSAFETY -DNOCLAIM) ;;
    ltlf) cflags+=(-DNFAIR=3); args+=(-a -f -N "$claim") ;;
    ltl) args+=(-a -N "$claim") ;;
    np) cflags+=(-DNP -DNOCLAIM); args+=(-l) ;;
    esac
    r_status=incomplete r_error="" r_states="-" r_trans="-" r_depth="-"
    r_mem="-" r_time="-"
    # One pan per (model, defines, compile flags): the LTL properties of a
    # configuration share it (-N picks the claim at run time).
    local key bin
    key=$(printf '%s|%s|%s' "$model" "$defs" "${cflags[*]}" | md5sum | cut -c1-16)
    bin=$work/.bin/$key
    if [ ! -x "$bin/pan" ]; then
        rm -rf "$bin"
        mkdir -p "$bin"
        cp "$models/$model" "$bin/"
        # shellcheck disable=SC2086
        if ! (cd "$bin" && spin $defs -a "$model" >spin.out 2>&1 </dev/null); then
            r_error="spin -a failed: $(grep -m1 -i error "$bin/spin.out")"
            return
        fi
        if ! (cd "$bin" && gcc "${cflags[@]}" -o pan.tmp pan.c >gcc.out 2>&1 </dev/null &&
            mv pan.tmp pan); then
            r_error="gcc failed: $(head -c 200 "$bin/gcc.out")"
            return
        fi
    fi
    local t0 t1 rc
    t0=$(date +%s.%N)
    (cd "$dir" && timeout "$time_limit" "$bin/pan" "${args[@]}" >pan.out 2>&1 </dev/null)
    rc=$?
    t1=$(date +%s.%N)
    r_time=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    local out=$dir/pan.out
    r_states=$(awk '/states, stored/ { print $1; exit }' "$out")
    r_trans=$(awk '/transitions \(=/ { print $1; exit }' "$out")
    r_depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | head -1)
    r_mem=$(awk '/total actual memory usage/ { print $1; exit }' "$out")
    local errors
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -1)
    : "${r_states:=-}" "${r_trans:=-}" "${r_depth:=-}" "${r_mem:=-}"
    if [ "$rc" -eq 124 ]; then
        r_error="time limit (${time_limit}s)"
        return
    fi
    if grep -qiE "out of memory|memory limit|max search depth too small" "$out"; then
        r_error=$(grep -m1 -iE "out of memory|memory limit|max search depth too small" "$out")
        return
    fi
    if [ -z "$errors" ]; then
        r_error="pan exited $rc without a summary"
        return
    fi
    if [ "$errors" -gt 0 ]; then
        r_status=error
        r_error=$(grep -m1 '^pan:1: ' "$out" | sed 's/^pan:1: //; s/ (at depth.*//' |
            cut -c1-60)
        [ -n "$r_error" ] || r_error="$errors error(s)"
        if [ -n "$keep" ]; then
            # shellcheck disable=SC2086
            (cd "$dir" && spin -t -p -g -l $defs "$model" >trail.txt 2>&1 </dev/null)
        fi
        return
    fi
    # A search that reached the depth bound did not cover the state space
    # (SPIN 6.5 does not always say so, e.g. with -f on a deadlock).
    if [ -n "$r_depth" ] && [ "$r_depth" != "-" ] &&
        [ "$r_depth" -ge $((maxdepth - 1)) ]; then
        r_error="depth bound ($maxdepth) reached: search truncated"
        return
    fi
    r_status=pass
}

row() {
    printf '%-40s %-10s %10s %11s %6s %8s %7s  %s\n' "$@"
}

header() {
    echo
    echo "== $1"
    row check result states transitions depth "mem(MB)" "time(s)" "error found"
}

selected() {
    [ -z "$pattern" ] || grep -qE -- "$pattern" <<<"$1"
}

# check NAME MODEL MODE "DEFS" [CLAIM]: a check of a real model (must pass)
check() {
    local name=$1
    selected "$name" || return 0
    run_pan "$@"
    local verdict=FAIL
    if [ "$r_status" = pass ]; then
        verdict=ok
        real_pass=$((real_pass + 1))
    else
        real_fail=$((real_fail + 1))
        failed_checks+=("$name")
        [ "$r_status" = incomplete ] && verdict=INCOMPLETE
    fi
    row "$name" "$verdict" "$r_states" "$r_trans" "$r_depth" "$r_mem" "$r_time" "$r_error"
}

# mutation NAME MODEL "BUGDEFS", then lines SUFFIX|MODE|DEFS|CLAIM on
# stdin; the mutation is caught if any of its runs finds an error.
mut_caught=0
mut_missed=0
missed_mutations=()
mutation() {
    local mname=$1 model=$2 bug=$3
    local any=0 ran=0 catchers=()
    local suffix mode defs claim
    while IFS='|' read -r suffix mode defs claim; do
        [ -n "$suffix" ] || continue
        local name="$mname/$suffix"
        selected "$name" || continue
        ran=1
        run_pan "$name" "$model" "$mode" "$bug $defs" "$claim"
        local verdict
        case $r_status in
        error) verdict=caught; any=1; catchers+=("$suffix") ;;
        pass) verdict="-" ;;
        *) verdict=INCOMPLETE ;;
        esac
        row "$name" "$verdict" "$r_states" "$r_trans" "$r_depth" "$r_mem" "$r_time" "$r_error"
    done
    [ "$ran" -eq 1 ] || return 0
    if [ "$any" -eq 1 ]; then
        mut_caught=$((mut_caught + 1))
        echo "   => $mname caught by: ${catchers[*]}"
    else
        mut_missed=$((mut_missed + 1))
        missed_mutations+=("$mname")
        echo "   => $mname NOT CAUGHT"
    fi
}

echo "spin: $(spin -V 2>&1 | head -1); gcc $(gcc -dumpfullversion)"
echo "bounds per run: ${time_limit}s, ${memlim} MB, depth $maxdepth"

# ---- the real models ---------------------------------------------------------
# W = workers, T = tasks (task 2 is a loop task), MAXT = last clock tick,
# SPUR = spurious wake-ups. Defaults: W2 T3 MAXT2 SPUR1, 2 cancel/re-arms,
# 1 compaction, task 0's callback waits for task 1 (DEPEND).

header "leader.pml: safety (invariants, quiescence, invalid end states)"
check leader/safety-w2t3 leader.pml safety ""
check leader/safety-w3t3 leader.pml safety "-DNW=3"
check leader/safety-w3t2 leader.pml safety "-DNW=3 -DNT=2"
check leader/safety-w2t3-customclock leader.pml safety "-DCUSTOM_CLOCK"
check leader/safety-w3t2-customclock leader.pml safety "-DNW=3 -DNT=2 -DCUSTOM_CLOCK"
check leader/safety-w2t3-retain leader.pml safety "-DRETAIN_CANCELLED"
check leader/safety-w2t3-nolooptask leader.pml safety "-DLOOPTASK=0"
check leader/safety-w2t3-maxt3-spur2 leader.pml safety "-DMAXT=3 -DSPUR=2"
check leader/safety-w2t3-nodepend leader.pml safety "-DDEPEND=0"

header "leader.pml: liveness (LTL, acceptance cycles, weak fairness)"
for claim in all_done due_taken no_idle_while_due; do
    check "leader/ltl-$claim-w2t3" leader.pml ltlf "" "$claim"
done
for claim in all_done due_taken no_idle_while_due; do
    check "leader/ltl-$claim-w3t2" leader.pml ltlf "-DNW=3 -DNT=2" "$claim"
done
for claim in all_done due_taken no_idle_while_due; do
    check "leader/ltl-$claim-w2t3-customclock" leader.pml ltlf "-DCUSTOM_CLOCK" "$claim"
done
check leader/ltl-all_done-w3t2-retain leader.pml ltlf "-DNW=3 -DNT=2 -DRETAIN_CANCELLED" all_done
check leader/np-w2t3 leader.pml np ""

header "binding.pml: safety (invariants, quiescence, invalid end states)"
check binding/safety binding.pml safety ""
check binding/safety-batch1 binding.pml safety "-DBATCH=1 -DNPOST=3"
check binding/safety-large binding.pml safety \
    "-DNPOST=3 -DSELFPOST=2 -DNCANCEL=2 -DSPURDISP=2"
check binding/safety-close binding.pml safety "-DCLOSE=1"

header "binding.pml: liveness (LTL, acceptance cycles, weak fairness)"
for claim in drained quiet; do
    check "binding/ltl-$claim" binding.pml ltlf "" "$claim"
    check "binding/ltl-$claim-large" binding.pml ltlf \
        "-DNPOST=3 -DSELFPOST=2 -DNCANCEL=2 -DSPURDISP=2" "$claim"
done
check binding/np binding.pml np ""

header "batch.pml: safety (exactness, quiescence, invalid end states)"
check batch/safety batch.pml safety ""
check batch/safety-nops3 batch.pml safety "-DNOPS=3"
check batch/safety-nt1-nops3 batch.pml safety "-DNT=1 -DNOPS=3"
check batch/safety-no-shutdown-now batch.pml safety "-DSHUTDOWN_NOW=0"

# ---- timers.pml and terminate.pml (the planned loop-owned timers) --------------
# timers: defaults TMAX 2, 1 producer x 2 schedules, 1 re-arm / cancel,
# 1 schedule from a callback, batch_limit 2 (1 per section), 1 spurious
# dispatch. terminate: 2 bindings with 1 task each, 1 producer x 1
# schedule or post, 1 schedule from a callback, 1 periodic requeue,
# 1 cancel, 1 failed push.

header "timers.pml: safety (invariants, quiescence, invalid end states)"
opt=-O0
check timers/safety timers.pml safety ""
opt=-O2
check timers/safety-batch1-p2 timers.pml safety "-DBATCH=1 -DNPROD=2"
check timers/safety-p2-tmax3 timers.pml safety "-DNPROD=2 -DTMAX=3"
check timers/safety-tmax3-ns3-lb2-spur2 timers.pml safety \
    "-DTMAX=3 -DNS=3 -DLB=2 -DSPURDISP=2"

header "timers.pml: liveness (LTL, acceptance cycles, weak fairness; non-progress)"
for claim in done quiet; do
    check "timers/ltl-$claim" timers.pml ltlf "" "$claim"
done
check timers/np-batch1-ns3 timers.pml np "-DBATCH=1 -DNS=3"

# Variants that turned out harmless: each must pass like the real model.
# One non-progress run each: it checks the invariants and the quiescence
# assertion too (not the invalid end states).
header "timers.pml: harmless variants (invariants, quiescence, non-progress)"
opt=-O0
while IFS='|' read -r tag alt; do
    check "timers/$tag-np-batch1-ns3" timers.pml np "$alt -DBATCH=1 -DNS=3"
done <<'EOF'
alt-read-always|-DALT_READ_ALWAYS
alt-move-first-read-always|-DALT_MOVE_FIRST -DALT_READ_ALWAYS
alt-arm-past|-DALT_ARM_PAST
alt-move-signals|-DALT_MOVE_SIGNALS -DBUG_MOVE_NO_SIGNAL
EOF
opt=-O2

# terminate.pml: no LTL run. Its state graph has no cycle (np), so every
# run ends in a state where nothing can move, and the quiescence assertion
# requires TERMINATED there: together they are "the pool terminates".
header "terminate.pml: safety (monitor, quiescence, invalid end states; non-progress)"
check terminate/safety terminate.pml safety ""
check terminate/safety-p2 terminate.pml safety \
    "-DNPROD=2 -DNCANCEL=0 -DNFAIL=0 -DSELFSCHED=0"
check terminate/np terminate.pml np ""

header "due.pml: safety (claims, exactness, no use after free, quiescence)"
check due/safety due.pml safety ""
check due/safety-nops2-no-shutdown-now due.pml safety "-DNOPS=2 -DSHUTDOWN_NOW=0"
header "post.pml: safety (invariants, quiescence, invalid end states)"
check post/safety post.pml safety ""
check post/safety-close post.pml safety "-DCLOSE=1"
check post/safety-shutdown post.pml safety "-DSHUTDOWN=1"
check post/safety-close-shutdown post.pml safety "-DCLOSE=1 -DSHUTDOWN=1"
check post/safety-n3-b3-shutdown post.pml safety "-DNPOST=3 -DBATCH=3 -DSHUTDOWN=1"
header "post.pml: liveness (LTL, acceptance cycles, weak fairness)"
check post/ltl-drained post.pml ltlf "" drained
check post/ltl-drained-shutdown post.pml ltlf "-DSHUTDOWN=1" drained

# inbox.pml: defaults 1 worker, 2 producers x 2 pushes, 1 push without
# room (the locked path), MAXT 1, 1 spurious wake-up. w2 = 2 workers
# (leader and follower), split = the arm and the wait as two steps (the
# reduction of the real model checked), p1-n4 = 1 producer x 4 pushes.
header "inbox.pml: safety (exactly once, FIFO, closed inbox, timer, watched, quiescence, invalid end states)"
check inbox/safety-w1 inbox.pml safety ""
check inbox/safety-w1-shutdown inbox.pml safety "-DSHUTDOWN=1"
check inbox/safety-w1-maxt2-spur2 inbox.pml safety "-DMAXT=2 -DSPUR=2"
check inbox/safety-w1-split inbox.pml safety "-DSPLIT_ARM_WAIT"
check inbox/safety-p1-n4-noroom2-shutdown inbox.pml safety \
    "-DNPROD=1 -DNPUSH=4 -DNOROOM=2 -DSHUTDOWN=1"
check inbox/safety-w2 inbox.pml safety "-DNW=2"
check inbox/safety-w2-noroom0-shutdown inbox.pml safety "-DNW=2 -DNOROOM=0 -DSHUTDOWN=1"
check inbox/safety-w2-noroom0-split inbox.pml safety "-DNW=2 -DNOROOM=0 -DSPLIT_ARM_WAIT"
header "inbox.pml: liveness (LTL, acceptance cycles, weak fairness; non-progress)"
for claim in all_done no_idle_while_pending; do
    check "inbox/ltl-$claim-w1" inbox.pml ltlf "" "$claim"
    check "inbox/ltl-$claim-w1-shutdown" inbox.pml ltlf "-DSHUTDOWN=1" "$claim"
    check "inbox/ltl-$claim-w2" inbox.pml ltlf "-DNW=2" "$claim"
done
check inbox/np-w1 inbox.pml np ""
check inbox/np-w2-noroom0 inbox.pml np "-DNW=2 -DNOROOM=0"
# Not the code: the fix proposed for the finding below (docs/model.md,
# Findings), checked like the real model with a callback that waits for
# another task (DEPEND) and leader.pml's stricter watched_ok.
header "inbox.pml: the proposed fix FIX_ARM_BEFORE_RUN (not the code yet)"
check inbox/fix-safety-w2-depend-strict inbox.pml safety \
    "-DFIX_ARM_BEFORE_RUN -DNW=2 -DDEPEND=1 -DSTRICT_WATCHED"
check inbox/fix-safety-w2-depend-strict-noroom0-shutdown inbox.pml safety \
    "-DFIX_ARM_BEFORE_RUN -DNW=2 -DDEPEND=1 -DSTRICT_WATCHED -DNOROOM=0 -DSHUTDOWN=1"
check inbox/fix-ltl-all_done-w2-depend inbox.pml ltlf \
    "-DFIX_ARM_BEFORE_RUN -DNW=2 -DDEPEND=1" all_done

# ---- mutations -----------------------------------------------------------------
# Each mutation runs: the safety check with every invariant; the quiescence
# check alone (NO_INVARIANTS); each LTL property alone (NO_INVARIANTS,
# NO_WATCHDOG). The LTL runs of mutations use no fairness: their state
# graphs have no cycles besides the final stutter (the np checks above),
# and SPIN 6.5.2 with -f does not report a claim stuttering in a deadlock.

leader_mutation_runs() {
    local clk tag
    for clk in "" -DCUSTOM_CLOCK; do
        tag=${clk:+-customclock}
        echo "safety$tag|safety|$clk|"
        echo "quiescence$tag|safety|-DNO_INVARIANTS $clk|"
        for claim in all_done due_taken no_idle_while_due; do
            echo "ltl-$claim$tag|ltl|-DNO_INVARIANTS -DNO_WATCHDOG $clk|$claim"
        done
    done
}

for bug in BUG_NO_HANDOVER BUG_SIGNAL_FOLLOWER_ONLY BUG_WAIT_WITHOUT_RECHECK; do
    selected "$bug/" || continue
    header "mutation $bug (leader.pml)"
    mutation "$bug" leader.pml "-D$bug" < <(leader_mutation_runs)
done

for bug in BUG_CLEAR_SIGNALLED_BEFORE_EMPTY BUG_DRAIN_UNLOCKED BUG_EDGE_TRIGGERED; do
    selected "$bug/" || continue
    header "mutation $bug (binding.pml)"
    mutation "$bug" binding.pml "-D$bug" <<'EOF'
safety|safety||
quiescence|safety|-DNO_INVARIANTS|
ltl-drained|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|drained
ltl-quiet|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|quiet
EOF
done

for bug in BUG_START_WITHOUT_CAS BUG_STOLEN_IGNORES_RUN_STATE; do
    selected "$bug/" || continue
    header "mutation $bug (batch.pml)"
    mutation "$bug" batch.pml "-D$bug" <<'EOF'
safety|safety||
safety-nops3|safety|-DNOPS=3|
EOF
done

# timers.pml and terminate.pml mutations, named MODEL/BUG/RUN (so that a
# pattern such as 'timers' selects them too): small searches, built -O0.
# Two runs each, to keep the builds few: the safety run (every invariant
# and the quiescence assertion) and the LTL properties alone.
# timers: batch_limit 1, so that one dispatch can leave moved timers in
# the ring (BUG_MOVE_NO_SIGNAL).
opt=-O0
for bug in BUG_NO_ARM_ON_PUSH BUG_ARM_ONLY_WHEN_EMPTY BUG_NO_REARM_AT_END \
    BUG_REARM_FUTURE_ONLY BUG_CLEAR_ARMED_WITHOUT_READ BUG_READ_KEEPS_ARMED \
    BUG_DUE_NO_SIGNAL BUG_EAGAIN_DISARMS BUG_MOVE_NO_SIGNAL; do
    selected "timers/$bug/" || continue
    header "mutation $bug (timers.pml)"
    mutation "timers/$bug" timers.pml "-D$bug -DBATCH=1" <<'EOF'
safety|safety||
ltl-done|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|done
ltl-quiet|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|quiet
EOF
done

# An early termination is visible only to the monitor (the pool does
# terminate in the end), so those mutations run the safety check alone.
for bug in BUG_CHECK_ACCEPTING_BEFORE_LOCK BUG_POST_COUNT_AFTER_CHECK \
    BUG_TERMINATE_READS_UNLOCKED BUG_TERMINATE_TASKS_FIRST; do
    selected "terminate/$bug/" || continue
    header "mutation $bug (terminate.pml)"
    mutation "terminate/$bug" terminate.pml "-D$bug" <<'EOF'
safety|safety||
EOF
done
for bug in BUG_COMPLETE_NO_TERMINATE BUG_COMPLETE_READS_ACCEPTING_FIRST \
    BUG_POST_NO_RECHECK BUG_RECHECK_ONLY_ON_FAILURE; do
    selected "terminate/$bug/" || continue
    header "mutation $bug (terminate.pml)"
    mutation "terminate/$bug" terminate.pml "-D$bug" <<'EOF'
safety|safety||
ltl-terminates|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|terminates
EOF
done
# post.pml: each mutation with close and shutdown off (a lost wake-up is
# then a final state) and on (the fd's lifetime, termination).
for bug in BUG_NO_RECHECK BUG_QUIET_BEFORE_READ BUG_KEEP_NO_WRITE \
    BUG_WAKE_EVERY_POST BUG_WAKE_OUTSIDE_PLOCK BUG_ACCEPT_OUTSIDE_PLOCK \
    BUG_SHUTDOWN_NO_COLLECT; do
    selected "post/$bug/" || continue
    header "mutation $bug (post.pml)"
    mutation "post/$bug" post.pml "-D$bug" <<'EOF'
safety|safety||
safety-close-shutdown|safety|-DCLOSE=1 -DSHUTDOWN=1|
EOF
done
# inbox.pml: each mutation with every invariant, the quiescence check
# alone, with shutdown (the closed inbox), and each LTL property alone.
for bug in BUG_IWAKE_BEFORE_LINK BUG_ARM_WITHOUT_EMPTY_CHECK \
    BUG_ARM_AFTER_UNLOCK BUG_WAKE_SIGNAL_ONLY BUG_IDLE_KEEPS_IWAKE \
    BUG_LOCKED_NO_DRAIN BUG_OPEN_OUTSIDE_ILOCK; do
    selected "inbox/$bug/" || continue
    header "mutation $bug (inbox.pml)"
    mutation "inbox/$bug" inbox.pml "-D$bug" <<'EOF'
safety|safety||
quiescence|safety|-DNO_INVARIANTS|
safety-shutdown|safety|-DSHUTDOWN=1|
ltl-all_done|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|all_done
ltl-no_idle_while_pending|ltl|-DNO_INVARIANTS -DNO_WATCHDOG|no_idle_while_pending
EOF
done
# A finding in the code as it is (docs/model.md, Findings): with two
# workers, a submission made while the other worker runs a callback wakes
# nobody. Registered as a mutation of the real model, so that the script
# shows it (caught) and passes while the bug is there; once the code is
# fixed these runs pass (NOT CAUGHT): then make FIX_ARM_BEFORE_RUN (or
# whatever the fix is) the model, and these real checks.
if selected "inbox/FINDING_NO_WAKE_WHILE_BUSY/"; then
    header "finding FINDING_NO_WAKE_WHILE_BUSY (inbox.pml, the code as it is)"
    mutation "inbox/FINDING_NO_WAKE_WHILE_BUSY" inbox.pml "-DNW=2" <<'EOF'
depend|safety|-DDEPEND=1|
strict-watched|safety|-DSTRICT_WATCHED|
ltl-all_done-depend|ltl|-DDEPEND=1 -DNO_INVARIANTS -DNO_WATCHDOG|all_done
EOF
fi
opt=-O2

for bug in BUG_CLAIM_READ_THEN_WRITE BUG_START_WITHOUT_CAS BUG_CANCEL_STORES \
    BUG_DROP_AT_COMPLETION BUG_GRAB_READS_UNLOCKED; do
    selected "due/$bug/" || continue
    header "mutation $bug (due.pml)"
    mutation "due/$bug" due.pml "-D$bug" <<'EOF'
safety|safety||
EOF
done

echo
echo "real model: $real_pass checks passed, $real_fail failed${failed_checks[*]:+ (${failed_checks[*]})}"
echo "mutations: $mut_caught caught, $mut_missed missed${missed_mutations[*]:+ (${missed_mutations[*]})}"
[ -n "$keep" ] && echo "runs kept in $work"
echo "spin: $((real_pass + mut_caught)) passed, $((real_fail + mut_missed)) failed"
[ "$real_fail" -eq 0 ] && [ "$mut_missed" -eq 0 ]
