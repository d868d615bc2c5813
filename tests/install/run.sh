#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install test: chime used the ways a server project uses it.
#   1. installed from a build tree into a temporary prefix, then the
#      consumer (tests/install/consumer) built through find_package(chime)
#      and through pkg-config; a missing component, and a component whose
#      dependency is missing, fail with a message naming it;
#   2. vendored, on a pkg-config path without Criterion: chime configured on
#      its own says how to build without its tests; the consumer builds
#      chime through add_subdirectory() and through FetchContent (from a
#      tarball of the source tree: no network), with no test of chime's.
# Every consumer source is compiled with -Wall -Wextra -pedantic -Werror,
# as C11 and as C++11. When the libevent binding is built, each way also
# builds the event consumer twice, linked with -levent_core and with
# -levent, and checks (ldd) that each process loads exactly the libevent it
# linked: chime's binding links none of its own. When the libuv, libev and
# GLib bindings are built, each way also builds their consumers (C and
# C++: one callback posted to the loop, run by uv_run, ev_run or a
# GMainContext iteration, on the loop's thread), through
# find_package(chime COMPONENTS uv ev glib) and through pkg-config
# (chime-uv, chime-ev, chime-glib); a missing libuv, libev or GLib makes
# find_package(chime COMPONENTS ...) fail with a message naming it.
#
# Usage: tests/install/run.sh <build-dir> <source-dir>
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 <build-dir> <source-dir>" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
consumer="$src/tests/install/consumer"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

# quiet <log> <command...>: runs the command, shows its output on failure.
quiet() {
    local log=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "install test: FAILED: $*" >&2
        exit 1
    fi
}

# expect_failure <log> <text> <command...>: the command must fail and print
# the text.
expect_failure() {
    local log=$1 text=$2
    shift 2
    if "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "install test: FAILED: succeeded, expected a failure: $*" >&2
        exit 1
    fi
    if ! grep -qF -- "$text" "$log"; then
        cat "$log" >&2
        echo "install test: FAILED: the failure does not say '$text'" >&2
        exit 1
    fi
    echo "failed as expected, saying: $text"
}

# check_libevent <executable> <libevent|libevent_core>: the process loads
# the libevent it linked and not the other one.
check_libevent() {
    local exe=$1 want=$2 other loaded
    case $want in
    libevent) other=libevent_core ;;
    *) other=libevent ;;
    esac
    loaded=$(ldd "$exe")
    if ! grep -qE "^[[:space:]]*$want-[0-9]" <<<"$loaded" ||
        grep -qE "^[[:space:]]*$other-[0-9]" <<<"$loaded"; then
        echo "$loaded" >&2
        echo "install test: FAILED: $exe should load $want only" >&2
        exit 1
    fi
    echo "$(basename "$exe"): loads $want only"
}

echo "== install into $prefix"
quiet "$tmp/install.log" cmake --install "$build" --prefix "$prefix"

# The library directory is whatever GNUInstallDirs chose (lib, lib64, ...).
pc=$(find "$prefix" -name chime.pc -path '*/pkgconfig/*' | head -n 1)
if [ -z "$pc" ]; then
    echo "install: no chime.pc under $prefix" >&2
    exit 1
fi
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
cmakedir="$libdir/cmake/chime"
test -f "$prefix/include/chime/chime.h"
test -f "$prefix/include/chime/dq.h" # the delay queue (issue 15)
test -f "$cmakedir/chimeConfig.cmake"
test -f "$cmakedir/chimeConfigVersion.cmake"
test -f "$cmakedir/chimeTargets.cmake"
shared=0
if ls "$libdir"/libchime.so* >/dev/null 2>&1; then
    shared=1
fi
event=0
if [ -f "$prefix/include/chime/event.h" ]; then
    event=1
    test -f "$pcdir/chime-event.pc"
    test -f "$cmakedir/chime-event-targets.cmake"
    test -f "$cmakedir/chime-event-deps.cmake"
    ls "$libdir"/libchime_event.* >/dev/null
    if [ "$shared" = 1 ] &&
        readelf -d "$libdir/libchime_event.so" | grep NEEDED | grep -q event; then
        readelf -d "$libdir/libchime_event.so" >&2
        echo "install test: FAILED: libchime_event.so links a libevent" >&2
        exit 1
    fi
fi
with_event=OFF
[ "$event" = 1 ] && with_event=ON

# The libuv, libev and GLib bindings: each a component like event.
loops=()
loop_flags=()
for c in uv ev glib; do
    flag=OFF
    if [ -f "$prefix/include/chime/$c.h" ]; then
        test -f "$pcdir/chime-$c.pc"
        test -f "$cmakedir/chime-$c-targets.cmake"
        test -f "$cmakedir/chime-$c-deps.cmake"
        ls "$libdir"/libchime_"$c".* >/dev/null
        loops+=("$c")
        flag=ON
    fi
    loop_flags+=("-DWITH_$(tr '[:lower:]' '[:upper:]' <<<"$c")=$flag")
done
bindings=${loops[*]:-}
[ "$event" = 1 ] && bindings="event $bindings"
echo "bindings installed: ${bindings:-none}"

# run_consumer <build dir>: runs what the consumer project built.
run_consumer() {
    local dir=$1
    "$dir/consumer"
    "$dir/consumer_cxx"
    if [ "$event" = 1 ]; then
        "$dir/event_consumer_core"
        check_libevent "$dir/event_consumer_core" libevent_core
        "$dir/event_consumer_full"
        check_libevent "$dir/event_consumer_full" libevent
        "$dir/event_consumer_cxx"
    fi
    for c in ${loops[@]+"${loops[@]}"}; do
        "$dir/${c}_consumer"
        "$dir/${c}_consumer_cxx"
    done
}

echo "== consumer via find_package(chime)"
quiet "$tmp/package-configure.log" cmake -S "$consumer" -B "$tmp/package" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCHIME_CONSUMER_MODE=package -DWITH_EVENT="$with_event" \
    "${loop_flags[@]}"
quiet "$tmp/package-build.log" cmake --build "$tmp/package" -j2
# CMake gives the consumer an RPATH to the installed library.
run_consumer "$tmp/package"

echo "== find_package(chime) with a component missing"
# A project of its own: asks for chime with the components given.
mkdir -p "$tmp/ask"
cat >"$tmp/ask/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.15)
project(ask LANGUAGES C)
find_package(chime REQUIRED COMPONENTS ${COMPONENTS})
EOF
expect_failure "$tmp/ask-nosuch.log" "chime::nosuch: not installed" \
    cmake -S "$tmp/ask" -B "$tmp/ask-nosuch" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCOMPONENTS=nosuch
if [ "$event" = 1 ]; then
    # No libevent on the pkg-config path.
    mkdir -p "$tmp/pc-empty"
    expect_failure "$tmp/ask-event.log" \
        "chime::event: pkg-config finds no libevent_core or libevent" \
        env PKG_CONFIG_LIBDIR="$tmp/pc-empty" PKG_CONFIG_PATH= \
        cmake -S "$tmp/ask" -B "$tmp/ask-event" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCOMPONENTS=event
fi
if [[ " ${loops[*]:-} " == *" uv "* ]]; then
    # No libuv on the pkg-config path (the lookup chimeConfig.cmake shares
    # with event and glib).
    mkdir -p "$tmp/pc-empty"
    expect_failure "$tmp/ask-uv.log" \
        "chime::uv: pkg-config finds no libuv (Debian: libuv1-dev)" \
        env PKG_CONFIG_LIBDIR="$tmp/pc-empty" PKG_CONFIG_PATH= \
        cmake -S "$tmp/ask" -B "$tmp/ask-uv" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCOMPONENTS=uv
fi
if [[ " ${loops[*]:-} " == *" ev "* ]]; then
    # No ev.h nor libev: chime-ev-deps.cmake looks them up with find_path
    # and find_library, here re-rooted into an empty directory (chime's
    # package itself is still found through CMAKE_PREFIX_PATH).
    mkdir -p "$tmp/root-empty"
    expect_failure "$tmp/ask-ev.log" \
        "chime::ev: ev.h or libev not found (Debian: libev-dev)" \
        cmake -S "$tmp/ask" -B "$tmp/ask-ev" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCOMPONENTS=ev \
        -DCMAKE_FIND_ROOT_PATH="$tmp/root-empty" \
        -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY \
        -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
        -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH
fi

echo "== consumer via pkg-config"
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "install: pkg-config not found (run scripts/deps.sh)" >&2
    exit 1
fi
# pc_consumer <modules> <source> <output> [<compiler flag>...]: build with
# pkg-config, then run.
pc_consumer() {
    local modules=$1 source=$2 out=$3 flags compiler
    shift 3
    if [ "$shared" = 1 ]; then
        flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs $modules)
    else
        flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --static --cflags --libs \
            $modules)
    fi
    echo "pkg-config $modules: $flags"
    case $source in
    *.cpp) compiler="${CXX:-c++} -std=c++11" ;;
    *) compiler="${CC:-cc} -std=c11" ;;
    esac
    # shellcheck disable=SC2086 # flags are a word list
    $compiler -Wall -Wextra -pedantic -Werror "$@" -o "$out" "$source" \
        $flags -pthread
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out"
}
pc_consumer chime "$consumer/consumer.c" "$tmp/consumer-pc"
pc_consumer chime "$consumer/consumer.cpp" "$tmp/consumer-pc-cxx"
if [ "$event" = 1 ]; then
    pc_consumer "chime-event libevent_core" "$consumer/event_consumer.c" \
        "$tmp/event-consumer-pc-core"
    LD_LIBRARY_PATH="$libdir" check_libevent "$tmp/event-consumer-pc-core" \
        libevent_core
    pc_consumer "chime-event libevent" "$consumer/event_consumer.c" \
        "$tmp/event-consumer-pc-full"
    LD_LIBRARY_PATH="$libdir" check_libevent "$tmp/event-consumer-pc-full" \
        libevent
fi
for c in ${loops[@]+"${loops[@]}"}; do
    pc_consumer "chime-$c" "$consumer/${c}_consumer.c" "$tmp/$c-consumer-pc"
    pc_consumer "chime-$c" "$consumer/consumer.cpp" "$tmp/$c-consumer-pc-cxx" \
        "-DCONSUMER_WITH_$(tr '[:lower:]' '[:upper:]' <<<"$c")=1"
done

# ---- vendored, without Criterion ------------------------------------------
# A pkg-config path with every module pkg-config finds (libevent, libuv,
# GLib and what they require...) but Criterion's: links to them, in the
# order pkg-config searches them.
nocrit="$tmp/pc-no-criterion"
mkdir -p "$nocrit"
IFS=: read -ra pcdirs <<<"${PKG_CONFIG_PATH:-}:$(pkg-config --variable \
    pc_path pkg-config)"
for d in ${pcdirs[@]+"${pcdirs[@]}"}; do
    for f in "$d"/*.pc; do
        [ -e "$f" ] || continue
        name=$(basename "$f")
        if [ "$name" != criterion.pc ] && [ ! -e "$nocrit/$name" ]; then
            ln -s "$f" "$nocrit/$name"
        fi
    done
done
export PKG_CONFIG_LIBDIR="$nocrit"
export PKG_CONFIG_PATH=
if pkg-config --exists criterion; then
    echo "install test: FAILED: Criterion still visible to pkg-config" >&2
    exit 1
fi

echo "== chime on its own, without Criterion"
expect_failure "$tmp/top-nocrit.log" "-DCHIME_BUILD_TESTS=OFF" \
    cmake -S "$src" -B "$tmp/top-nocrit"
quiet "$tmp/top-notests.log" cmake -S "$src" -B "$tmp/top-nocrit" \
    -DCHIME_BUILD_TESTS=OFF

# CMAKE_BUILD_TYPE is left empty: the consumer checks chime keeps it so.
echo "== consumer via add_subdirectory(chime), without Criterion"
quiet "$tmp/subdir-configure.log" cmake -S "$consumer" -B "$tmp/subdir" \
    -DCHIME_CONSUMER_MODE=subdirectory -DCHIME_SOURCE_DIR="$src" \
    -DWITH_EVENT="$with_event" "${loop_flags[@]}"
quiet "$tmp/subdir-build.log" cmake --build "$tmp/subdir" -j2
run_consumer "$tmp/subdir"

echo "== consumer via FetchContent(chime), without Criterion"
# The source tree as a release tarball would hold it: no build trees.
tar -C "$src" --exclude='./build*' --exclude=./.git -czf "$tmp/chime.tar.gz" .
quiet "$tmp/fetch-configure.log" cmake -S "$consumer" -B "$tmp/fetch" \
    -DCHIME_CONSUMER_MODE=fetchcontent -DCHIME_URL="$tmp/chime.tar.gz" \
    -DWITH_EVENT="$with_event" "${loop_flags[@]}"
quiet "$tmp/fetch-build.log" cmake --build "$tmp/fetch" -j2
run_consumer "$tmp/fetch"

echo "install test: OK"
