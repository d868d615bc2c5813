#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds chime four times and runs the tests in each build:
#   build-test  Debug, -Werror                    (unit, stress, example,
#                                                  install)
#   build-tsan  Debug, ThreadSanitizer            (unit, stress, example)
#   build-asan  Debug, AddressSanitizer + UBSan   (unit, stress, example)
#   build-pipe  Debug, -Werror, CHIME_READY_PIPE  (the binding and adapter
#               tests only, the readiness fd as a pipe: ctest -R
#               'loop|event|epoll|_uv|_ev|glib')
# then the reliability checks that are not ctest tests:
#   fuzz        scripts/fuzz.sh 60: the libFuzzer target for 60 s
#   spin        scripts/spin.sh: the Promela models (and their mutations)
#   valgrind    scripts/valgrind.sh: memcheck and helgrind over the unit tests
# Installs missing Debian packages first (scripts/deps.sh).
#
# Prints one summary line per step and, last, "N passed, M failed" with the
# ctest counts over all builds plus one per reliability check (a build that
# does not configure or compile counts as one failure). Exits non-zero if
# anything failed.
#
# Usage: scripts/test.sh [test|pipe|tsan|asan|fuzz|spin|valgrind ...]
#        (default: all of them, in that order)
# CHIME_BUILD_PREFIX (default "build-") names the build directories.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/deps.sh || exit 1

builds=("$@")
if [ ${#builds[@]} -eq 0 ]; then
    builds=(test pipe tsan asan fuzz spin valgrind)
fi

export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

total_passed=0
total_failed=0
summaries=()

# ThreadSanitizer (GCC 12) aborts with "FATAL: ThreadSanitizer: unexpected
# memory mapping" on kernels that randomise mmap with more entropy than it
# expects. Running without address-space randomisation avoids that; probe
# with a tiny TSan program and use setarch -R only when it is needed.
tsan_wrapper() {
    local dir=$1
    local probe="$dir/tsan-probe"
    mkdir -p "$dir"
    printf 'int main(void) { return 0; }\n' >"$probe.c"
    if ! cc -fsanitize=thread -o "$probe" "$probe.c" 2>"$probe.log"; then
        cat "$probe.log" >&2
        return 1
    fi
    if "$probe" >"$probe.log" 2>&1; then
        return 0
    fi
    if grep -q "unexpected memory mapping" "$probe.log" &&
        setarch "$(uname -m)" -R "$probe" >/dev/null 2>&1; then
        echo "setarch $(uname -m) -R"
        return 0
    fi
    cat "$probe.log" >&2
    return 1
}

run_build() {
    local name=$1
    local dir="${CHIME_BUILD_PREFIX:-build-}$name"
    local args=(-DCMAKE_BUILD_TYPE=Debug -DCHIME_WERROR=ON)
    local wrap=""
    local select=()
    case $name in
    test) args+=(-DCHIME_SANITIZER=) ;;
    pipe)
        args+=(-DCHIME_SANITIZER= -DCHIME_READY_PIPE=ON)
        select=(-R 'loop|event|epoll|_uv|_ev|glib')
        ;;
    tsan) args+=(-DCHIME_SANITIZER=thread) ;;
    asan) args+=(-DCHIME_SANITIZER=address,undefined) ;;
    *)
        echo "test.sh: unknown build '$name' (test, pipe, tsan or asan)" >&2
        return 2
        ;;
    esac

    local start=$SECONDS
    echo
    echo "=================== $dir: configure and build ==================="
    if [ "$name" = tsan ]; then
        if ! wrap=$(tsan_wrapper "$dir"); then
            summaries+=("$dir: FAILED (ThreadSanitizer cannot run here)")
            total_failed=$((total_failed + 1))
            return 1
        fi
        [ -n "$wrap" ] && echo "tsan: running tests under '$wrap'"
    fi
    if ! cmake -S . -B "$dir" "${args[@]}" ||
        ! cmake --build "$dir" -j2; then
        summaries+=("$dir: FAILED to configure or build ($((SECONDS - start)) s)")
        total_failed=$((total_failed + 1))
        return 1
    fi

    echo
    echo "=================== $dir: ctest ==================="
    local log="$dir/ctest.log"
    # From the build directory (ctest --test-dir is CMake 3.20).
    # shellcheck disable=SC2086 # $wrap is empty or a command and its args
    (cd "$dir" && $wrap ctest --output-on-failure --no-tests=error \
        ${select[@]+"${select[@]}"}) 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}

    # "100% tests passed, 0 tests failed out of 7"
    local line passed failed all
    line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' \
        "$log" | tail -n 1)
    if [ -z "$line" ]; then
        summaries+=("$dir: FAILED, ctest printed no summary (exit $rc, $((SECONDS - start)) s)")
        total_failed=$((total_failed + 1))
        return 1
    fi
    failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    all=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
    passed=$((all - failed))
    if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
        failed=1 # ctest failed without counting a test (e.g. no tests)
    fi
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    if [ "$failed" -eq 0 ]; then
        summaries+=("$dir: OK, $passed/$all tests passed in $((SECONDS - start)) s")
    else
        summaries+=("$dir: FAILED, $failed of $all tests failed ($((SECONDS - start)) s)")
        return 1
    fi
}

# A reliability check: one script, one pass or fail.
run_check() {
    local name=$1
    shift
    local start=$SECONDS
    echo
    echo "=================== $name: $* ==================="
    if "$@"; then
        summaries+=("$name: OK in $((SECONDS - start)) s")
        total_passed=$((total_passed + 1))
    else
        summaries+=("$name: FAILED ($((SECONDS - start)) s)")
        total_failed=$((total_failed + 1))
    fi
}

for b in "${builds[@]}"; do
    case $b in
    fuzz) run_check fuzz bash scripts/fuzz.sh 60 ;;
    spin) run_check spin bash scripts/spin.sh ;;
    valgrind) run_check valgrind bash scripts/valgrind.sh ;;
    *) run_build "$b" || true ;;
    esac
done

echo
echo "=================== summary ==================="
for s in "${summaries[@]}"; do
    echo "$s"
done
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
