#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that the README's first example is the marked region of
# examples/readme_timeout.c, so that the two cannot drift: the lines between
# "/* README: begin */" and "/* README: end */" in the file must equal the
# fenced ```c block that follows the line
# "<!-- examples/readme_timeout.c: README region -->" in README.md.
#
# Usage: scripts/readme_sync.sh [--fix] [repo-root]
#   (no option)  exit 0 when they are identical, else print a diff, exit 1
#   --fix        copy the file's region into the README instead
# ctest runs the check (test example_readme_sync).
set -euo pipefail

fix=0
if [ "${1:-}" = --fix ]; then
    fix=1
    shift
fi
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
src="$root/examples/readme_timeout.c"
readme="$root/README.md"
anchor='<!-- examples/readme_timeout.c: README region -->'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

awk '/^\/\* README: end \*\/$/ { inside = 0 }
     inside { print }
     /^\/\* README: begin \*\/$/ { inside = 1; found = 1 }
     END { if (!found) exit 3 }' "$src" >"$tmp/region" || {
    echo "readme_sync: no README markers in $src" >&2
    exit 2
}

# The block: from the first ```c after the anchor to the closing ```.
awk -v anchor="$anchor" '
     $0 == anchor { seen = 1; next }
     seen == 1 && /^```c$/ { seen = 2; next }
     seen == 2 && /^```$/ { seen = 3; exit }
     seen == 2 { print }
     END { if (seen != 3) exit 3 }' "$readme" >"$tmp/block" || {
    echo "readme_sync: no \`\`\`c block after '$anchor' in $readme" >&2
    exit 2
}

if cmp -s "$tmp/region" "$tmp/block"; then
    echo "readme_sync: README.md's first example is examples/readme_timeout.c's region"
    exit 0
fi

if [ "$fix" -eq 1 ]; then
    awk -v anchor="$anchor" -v region="$tmp/region" '
         $0 == anchor { seen = 1; print; next }
         seen == 1 && /^```c$/ {
             print
             while ((getline line < region) > 0) print line
             seen = 2; next
         }
         seen == 2 && /^```$/ { seen = 3 }
         seen == 2 { next }
         { print }' "$readme" >"$tmp/readme"
    cat "$tmp/readme" >"$readme"
    echo "readme_sync: copied examples/readme_timeout.c's region into README.md"
    exit 0
fi

echo "readme_sync: README.md's first example differs from the region of" \
    "examples/readme_timeout.c (run scripts/readme_sync.sh --fix):" >&2
diff -u --label README.md "$tmp/block" --label examples/readme_timeout.c \
    "$tmp/region" >&2 || true
exit 1
