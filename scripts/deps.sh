#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages chime's build, tests and demo need, if any
# are missing. Idempotent and quick when everything is present.
#
# Usage: scripts/deps.sh [extra-package...]
#        scripts/deps.sh --only package...   (just these; scripts/demo.sh)
set -euo pipefail

# ---- issue 12: --only, for scripts/demo.sh (no Criterion, no spin) --------
if [ "${1:-}" = --only ]; then
    shift
    packages=("$@")
else
# ---- end issue 12 -----------------------------------------------------------
packages=(
    gcc             # compiler; on Debian 12 pulls in libasan8, libtsan2, libubsan1
    g++             # tests/install builds a C++ consumer of chime's headers
    libc6-dev
    make            # CMake's default generator
    cmake
    pkg-config      # finds Criterion and libevent; the pkg-config install test
    libcriterion-dev
    libevent-dev
    libglib2.0-dev  # the GLib binding chime::glib (integrations/glib)
    libuv1-dev      # the libuv adapter chime::uv (issue 12)
    libev-dev       # the libev adapter chime::ev (issue 12)
    spin            # model checker for docs/model (scripts/spin.sh)
    doxygen         # API reference and man pages (docs/api), the docs test
    groff-base      # renders the man pages in the docs test
    clang-format    # scripts/format.sh --check (ctest format)
    python3-croniter # issue 13: the cron differential test's oracle (/usr/bin/python3)
    "$@"
)
fi # issue 12: --only

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
