#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what is missing (scripts/deps.sh), builds chime with its libevent
# binding (Release, in build/; or in $CHIME_BUILD_DIR) and runs the server
# demo: an idle-timeout echo server under ~2,000 client connections for
# about 5 s (examples/server_demo.c). Arguments go to the demo, for example
#   bash scripts/demo.sh --seconds 10 --conns 5000 --idle-ms 500
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/deps.sh
build=${CHIME_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHIME_WITH_LIBEVENT=ON
cmake --build "$build" -j2 --target chime_server_demo
echo
exec "$build/examples/chime_server_demo" "$@"
