#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that every source, build and script file names its licence in an
# SPDX-License-Identifier line within its first three lines. Data files
# (fuzz corpus, benchmark results, images) and Markdown are exempt.
# Usage: scripts/spdx.sh   (exit 1 and a list of the files that lack it)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files)
else
    files=$(find . -type f -not -path './.git/*' -not -path './build*' | sed 's|^\./||')
fi
missing=0
while IFS= read -r f; do
    case "$f" in
    fuzz/corpus/* | fuzz/corpus_cron/* | bench/results/* | *.md | *.png | *.svg | *.json | *.csv | \
        LICENSE | .gitignore | .clang-format | */.gitignore) continue ;;
    esac
    [ -f "$f" ] || continue
    if ! head -3 "$f" | grep -q 'SPDX-License-Identifier: MIT'; then
        echo "spdx: no SPDX-License-Identifier line: $f"
        missing=1
    fi
done <<<"$files"
[ "$missing" -eq 0 ] && echo "spdx: every file names its licence"
exit "$missing"
