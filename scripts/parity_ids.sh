#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that every Java parity ID the tests cite (B1, B27, ... in tests/)
# is defined in docs/java-parity.md, as a table row that starts with the ID
# in bold ("| **B27** |"), so that a reader of a test can look it up.
#
# Usage: scripts/parity_ids.sh [repo-root]
# Exits 0 when every cited ID is defined, 1 (listing the missing ones)
# otherwise. ctest runs it (test parity_ids, label docs).
set -euo pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
doc=$root/docs/java-parity.md
[ -f "$doc" ] || {
    echo "parity_ids: $doc is missing" >&2
    exit 1
}

cited=$(grep -rhoE '\bB[0-9]+\b' "$root/tests" | sort -u)
defined=$(grep -oE '^\| \*\*B[0-9]+\*\* \|' "$doc" | grep -oE 'B[0-9]+' |
    sort -u)
missing=$(comm -23 <(printf '%s\n' "$cited") <(printf '%s\n' "$defined"))

ncited=$(printf '%s\n' "$cited" | grep -c . || true)
ndefined=$(printf '%s\n' "$defined" | grep -c . || true)
if [ -n "$missing" ]; then
    echo "parity_ids: cited in tests/ but not defined in docs/java-parity.md:" >&2
    for id in $missing; do
        printf '  %s:' "$id" >&2
        grep -rlwE "$id" "$root/tests" | sed "s|^$root/| |" | tr '\n' ' ' >&2
        echo >&2
    done
    exit 1
fi
echo "parity_ids: all $ncited IDs cited in tests/ are among the $ndefined defined in docs/java-parity.md"
