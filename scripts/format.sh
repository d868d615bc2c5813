#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang-format 14 over every C file git tracks, with the repository's
# .clang-format.
#
# Usage: scripts/format.sh          reformat the files in place
#        scripts/format.sh --check  change nothing; list the files that are
#                                   not formatted and exit 1 if there are any
#                                   (ctest `format`, run by scripts/test.sh)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
    echo "format: clang-format not found (Debian: clang-format; or bash scripts/deps.sh)" >&2
    exit 2
fi
mapfile -t files < <(git ls-files '*.c' '*.h')
if [ "${1:-}" != --check ]; then
    "$cf" -i "${files[@]}"
    exit 0
fi
bad=0
for f in "${files[@]}"; do
    if ! "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "format: $f is not formatted (bash scripts/format.sh)"
        bad=1
    fi
done
[ "$bad" -eq 0 ] && echo "format: OK, ${#files[@]} files formatted"
exit "$bad"
