#!/usr/bin/env bash
# Installs what is missing, builds chime (Release, in build/; or in
# $CHIME_BUILD_DIR) and runs the demo.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/deps.sh
build=${CHIME_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j2 --target chime_demo
echo
exec "$build/examples/chime_demo"
