#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install test: installs chime from a build tree into a temporary prefix,
# then builds and runs a small consumer against it twice, once through
# find_package(chime) and once through pkg-config. When the libevent binding
# was installed (include/chime/event.h), a second consumer uses it the same
# two ways: find_package(chime COMPONENTS event) and pkg-config chime-event.
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

echo "== install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
    cat "$tmp/install.log"
    exit 1
}

# The library directory is whatever GNUInstallDirs chose (lib, lib64, ...).
pc=$(find "$prefix" -name chime.pc -path '*/pkgconfig/*' | head -n 1)
if [ -z "$pc" ]; then
    echo "install: no chime.pc under $prefix" >&2
    exit 1
fi
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
test -f "$prefix/include/chime/chime.h"
test -f "$libdir/cmake/chime/chimeConfig.cmake"
test -f "$libdir/cmake/chime/chimeConfigVersion.cmake"
shared=0
if ls "$libdir"/libchime.so* >/dev/null 2>&1; then
    shared=1
fi
event=0
if [ -f "$prefix/include/chime/event.h" ]; then
    event=1
    test -f "$pcdir/chime-event.pc"
    ls "$libdir"/libchime_event.* >/dev/null
fi

echo "== consumer via find_package(chime)"
with_event=OFF
[ "$event" = 1 ] && with_event=ON
cmake -S "$consumer" -B "$tmp/consumer-build" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DWITH_EVENT="$with_event" \
    >"$tmp/consumer-configure.log" || {
    cat "$tmp/consumer-configure.log"
    exit 1
}
cmake --build "$tmp/consumer-build" >"$tmp/consumer-build.log" || {
    cat "$tmp/consumer-build.log"
    exit 1
}
# CMake gives the consumer an RPATH to the installed library.
"$tmp/consumer-build/consumer"
if [ "$event" = 1 ]; then
    "$tmp/consumer-build/event_consumer"
fi

echo "== consumer via pkg-config"
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "install: pkg-config not found (run scripts/deps.sh)" >&2
    exit 1
fi
# pc_consumer <module> <source> <output>: build with pkg-config, then run.
pc_consumer() {
    local module=$1 source=$2 out=$3 flags
    if [ "$shared" = 1 ]; then
        flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs "$module")
    else
        flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --static --cflags --libs \
            "$module")
    fi
    echo "pkg-config $module: $flags"
    # shellcheck disable=SC2086 # flags are a word list
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$out" "$source" $flags
    if [ "$shared" = 1 ]; then
        LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out"
    else
        "$out"
    fi
}
pc_consumer chime "$consumer/consumer.c" "$tmp/consumer-pc"
if [ "$event" = 1 ]; then
    pc_consumer chime-event "$consumer/event_consumer.c" \
        "$tmp/event-consumer-pc"
fi

echo "install test: OK"
