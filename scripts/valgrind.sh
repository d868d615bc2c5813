#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every unit test executable (and the libevent integration tests) under
# valgrind: memcheck (leaks and memory errors) and helgrind (data races and
# lock-order problems). Complements the ASan/TSan builds of scripts/test.sh:
# valgrind needs no recompilation, sees the uninstrumented library, and
# checks leaks with the process's exact allocation count.
#
#   build-valgrind  Debug, no sanitizer, examples off
#
# Criterion runs each test in a worker process it re-executes from the test
# binary ("boxfort-worker"), so valgrind follows children
# (--trace-children=yes) and every process writes its own log under
# build-valgrind/valgrind/<tool>/. --jobs 1: one worker at a time. The
# executables (for both tools) run CHIME_VALGRIND_JOBS at a time (default:
# the CPU count), each in its own valgrind.
#
# Prints one line per executable and one summary line per tool; exits
# non-zero if any test failed or valgrind reported any error in any process.
#
# Usage: scripts/valgrind.sh [memcheck] [helgrind]   (default: both)
# Environment:
#   CHIME_VALGRIND_DIR   build directory (default build-valgrind)
#   CHIME_VALGRIND_TESTS space-separated executable names to run (default:
#                        every tests/test_* and tests/integration_test_*)
#   CHIME_VALGRIND_OPTS  extra valgrind options, e.g. --gen-suppressions=all
#   CHIME_VALGRIND_JOBS  executables run at once (default: the CPU count)
#   The test-size knobs below can be overridden the same way.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/deps.sh valgrind || exit 1

tools=("$@")
if [ ${#tools[@]} -eq 0 ]; then
    tools=(memcheck helgrind)
fi
for t in "${tools[@]}"; do
    case $t in
    memcheck | helgrind) ;;
    *)
        echo "valgrind.sh: unknown tool '$t' (memcheck or helgrind)" >&2
        exit 2
        ;;
    esac
done

dir=${CHIME_VALGRIND_DIR:-build-valgrind}
echo "=================== $dir: configure and build ==================="
# CHIME_HELGRIND: chime's own happens-before edges (release stores and
# acquire loads) are annotated for helgrind, so it sees every order chime
# relies on instead of reporting what the atomics publish as races.
if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCHIME_SANITIZER= \
    -DCHIME_BUILD_EXAMPLES=OFF -DCHIME_HELGRIND=ON \
    -DCHIME_TEST_TIMEOUT_SCALE=30 >/dev/null ||
    ! cmake --build "$dir" -j2 >"$dir.build.log" 2>&1; then
    cat "$dir.build.log" >&2
    echo "valgrind: FAILED to configure or build" >&2
    exit 1
fi

# Sizes for the heavy tests: valgrind runs code 20-50x slower (helgrind
# more), and these tests are about volume, which the native, ASan and TSan
# runs already have. Each knob is read by the test named beside it.
export CHIME_TEST_RACE_ATTEMPTS=${CHIME_TEST_RACE_ATTEMPTS:-500} # test_loop_cancel
export CHIME_TEST_POSTS=${CHIME_TEST_POSTS:-5000}                # test_loop_dispatch
export CHIME_TEST_CLOSE_ROUNDS=${CHIME_TEST_CLOSE_ROUNDS:-20}     # test_loop_cancel
export CHIME_MODEL_SEQS=${CHIME_MODEL_SEQS:-4}                   # test_model
export CHIME_TEST_GROUP_ROUNDS=${CHIME_TEST_GROUP_ROUNDS:-2}      # test_group
# test_faults: fail each allocation site once per call that reaches it
# instead of every allocation in turn.
export CHIME_TEST_FAULT_PER_SITE=${CHIME_TEST_FAULT_PER_SITE:-1}

# Tests that cannot pass under valgrind, as "tool executable suite/test
# reason" (tool: memcheck, helgrind or any). Keep this list short and every
# reason concrete.
exclusions=(
    "helgrind test_heap heap/grows_from_zero_to_100k_and_pops_in_order single-threaded (helgrind has nothing to check) and fixed at 100k pushes: over its 10 s suite timeout under helgrind; memcheck runs it"
    "any test_loop_cancel loop/cancel_and_rearm_from_other_threads_racing_with_close_are_safe its hammer threads spin on the pool lock without ever blocking, and valgrind's one-thread-at-a-time scheduler starves the closing thread past the 20 s suite timeout even at 20 rounds (0.07 s natively); it is a use-after-free race test, which the native, ASan and TSan builds run in full"
)

filter_for() { # tool exe -> a Criterion --filter excluding its tests, or ""
    local tool=$1 exe=$2 e t x name pats=()
    for e in "${exclusions[@]}"; do
        read -r t x name _ <<<"$e"
        if [ "$x" = "$exe" ] && { [ "$t" = any ] || [ "$t" = "$tool" ]; }; then
            pats+=("$name")
        fi
    done
    if [ ${#pats[@]} -gt 0 ]; then
        local IFS='|'
        echo "!(${pats[*]})"
    fi
}

if [ -n "${CHIME_VALGRIND_TESTS:-}" ]; then
    read -r -a exes <<<"$CHIME_VALGRIND_TESTS"
else
    exes=()
    for f in "$dir"/tests/test_* "$dir"/tests/integration_test_*; do
        [ -x "$f" ] && exes+=("$(basename "$f")")
    done
fi

summaries=()
failed_any=0

# Each executable runs in its own valgrind process, which runs one thread at
# a time: CHIME_VALGRIND_JOBS of them (default: one per CPU) run at once.
jobs=${CHIME_VALGRIND_JOBS:-$(nproc 2>/dev/null || echo 2)}

opts_for() { # tool -> valgrind options, one per line
    local tool=$1
    printf '%s\n' --tool="$tool" --error-exitcode=99 --trace-children=yes \
        '--trace-children-skip=*/sh,*/dash,*/bash,*/addr2line' \
        --num-callers=30
    # shellcheck disable=SC2086 # split on purpose
    [ -n "${CHIME_VALGRIND_OPTS:-}" ] && printf '%s\n' ${CHIME_VALGRIND_OPTS}
    case $tool in
    memcheck)
        printf '%s\n' --leak-check=full \
            --errors-for-leak-kinds=definite,indirect \
            --show-leak-kinds=definite,indirect
        ;;
    helgrind)
        printf '%s\n' --suppressions="$root/tests/valgrind/helgrind.supp"
        ;;
    esac
}

# One executable under one tool; writes "<tests> <errors> <status line>" to
# $logdir/$exe.result.
run_one() {
    local tool=$1 exe=$2 logdir="$dir/valgrind/$1"
    local t0=$SECONDS filter rc line n errs opts=()
    mapfile -t opts < <(opts_for "$tool")
    filter=$(filter_for "$tool" "$exe")
    # --verbose: each test's duration in the .out file, to see which ones
    # come near their Criterion timeout under valgrind.
    local args=(--jobs 1 --verbose)
    [ -n "$filter" ] && args+=(--filter "$filter")
    valgrind "${opts[@]}" --log-file="$logdir/$exe.%p.log" \
        "$dir/tests/$exe" "${args[@]}" >"$logdir/$exe.out" 2>&1
    rc=$?
    # Every process's own verdict: "ERROR SUMMARY: 3 errors from ..."
    errs=$(cat "$logdir/$exe".*.log 2>/dev/null |
        sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' |
        awk '{s += $1} END {print s + 0}')
    line=$(grep -a 'Synthesis:' "$logdir/$exe.out" | tail -n 1)
    n=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$line")
    {
        printf '%s %s ' "${n:-0}" "$errs"
        if [ "$rc" -eq 0 ] && [ "$errs" -eq 0 ] && [ -n "$line" ]; then
            printf '  %-36s OK    %3s tests %5d s\n' "$exe" "${n:-?}" \
                $((SECONDS - t0))
        else
            printf '  %-36s FAILED (exit %d, %d valgrind errors) %5d s: %s\n' \
                "$exe" "$rc" "$errs" $((SECONDS - t0)) "${line#*Synthesis: }"
            grep -a -E '^\[(FAIL|----)\]' "$logdir/$exe.out" | head -n 20
            grep -l 'ERROR SUMMARY: [1-9]' "$logdir/$exe".*.log 2>/dev/null |
                head -n 3 | sed 's/^/    see /'
        fi
    } >"$logdir/$exe.result"
}

start=$SECONDS
for tool in "${tools[@]}"; do
    rm -rf "$dir/valgrind/$tool"
    mkdir -p "$dir/valgrind/$tool"
    for e in "${exclusions[@]}"; do
        read -r t x name reason <<<"$e"
        if [ "$t" = any ] || [ "$t" = "$tool" ]; then
            echo "excluded ($tool): $x $name: $reason"
        fi
    done
done
echo "running ${#tools[@]} tool(s) x ${#exes[@]} executables, $jobs at a time"
running=0
for tool in "${tools[@]}"; do
    for exe in "${exes[@]}"; do
        if [ "$running" -ge "$jobs" ]; then
            wait -n
            running=$((running - 1))
        fi
        run_one "$tool" "$exe" &
        running=$((running + 1))
    done
done
wait

for tool in "${tools[@]}"; do
    logdir="$dir/valgrind/$tool"
    echo
    echo "=================== valgrind --tool=$tool ==================="
    bad=0 tests=0 errors=0
    for exe in "${exes[@]}"; do
        res="$logdir/$exe.result"
        if [ ! -s "$res" ]; then
            echo "  $exe: no result (the run did not finish)"
            bad=$((bad + 1))
            continue
        fi
        read -r n errs first <"$res"
        tests=$((tests + n))
        errors=$((errors + errs))
        sed -e '1s/^[0-9]* [0-9]* //' "$res"
        case "$first" in *" OK "*) ;; *) bad=$((bad + 1)) ;; esac
    done
    if [ "$bad" -eq 0 ]; then
        s="$tool: OK, ${#exes[@]} executables, $tests tests, 0 errors"
    else
        s="$tool: FAILED, $bad of ${#exes[@]} executables ($tests tests, $errors valgrind errors); logs in $logdir"
        failed_any=1
    fi
    summaries+=("$s")
done
summaries+=("valgrind: ${#tools[@]} tool(s) in $((SECONDS - start)) s, $jobs jobs")

echo
echo "=================== summary ==================="
for s in "${summaries[@]}"; do
    echo "$s"
done
exit "$failed_any"
