#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that every relative Markdown link in README.md, CONTRIBUTING.md,
# CHANGELOG.md and docs/**/*.md resolves: [text](path), ![alt](path) and
# [text](path#anchor) must name a file or directory of the repository, and
# an anchor (also a bare #anchor) a heading of the Markdown file it points
# into (GitHub's slugs: lower case, punctuation dropped, spaces to '-').
# Links to other sites (scheme:...) are not fetched; fenced code is skipped.
#
# Usage: scripts/doc_links.sh [repo-root]
# Exits 0 when every link resolves, 1 (listing the broken ones) otherwise.
# ctest runs it (test doc_links, label docs).
set -euo pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root"

files=()
for f in README.md CONTRIBUTING.md CHANGELOG.md; do
    [ -f "$f" ] && files+=("$f")
done
while IFS= read -r f; do files+=("$f"); done < <(find docs -name '*.md' | sort)

# The anchors of a Markdown file, one per line.
anchors() {
    awk '/^```/ { fence = !fence; next }
         !fence && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
        tr '[:upper:]' '[:lower:]' |
        sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}

bad=0
nlinks=0
for f in "${files[@]}"; do
    dir=$(dirname "$f")
    # file<TAB>line<TAB>target for every inline link outside code fences.
    while IFS=$'\t' read -r line target; do
        nlinks=$((nlinks + 1))
        case $target in
        [a-zA-Z]*:*) continue ;; # http:, https:, mailto:
        esac
        path=${target%%#*}
        anchor=
        [ "$path" != "$target" ] && anchor=${target#*#}
        if [ -z "$path" ]; then
            dest=$f
        else
            case $path in
            /*) dest=.$path ;;
            *) dest=$dir/$path ;;
            esac
        fi
        if [ ! -e "$dest" ]; then
            echo "$f:$line: ($target): no such file: $dest"
            bad=$((bad + 1))
            continue
        fi
        if [ -n "$anchor" ] && [[ $dest == *.md ]] &&
            ! anchors "$dest" | grep -qxF -- "$anchor"; then
            echo "$f:$line: ($target): no heading for #$anchor in $dest"
            bad=$((bad + 1))
        fi
    done < <(awk '/^[ \t]*```/ { fence = !fence; next }
        fence { next }
        {
            s = $0
            gsub(/`[^`]*`/, "", s)  # inline code is not a link
            while (match(s, /\]\([^) \t]+( "[^"]*")?\)/)) {
                t = substr(s, RSTART + 2, RLENGTH - 3)
                sub(/ ".*/, "", t)
                print FNR "\t" t
                s = substr(s, RSTART + RLENGTH)
            }
        }' "$f")
done

if [ "$bad" -gt 0 ]; then
    echo "doc_links: $bad broken link(s) of $nlinks" >&2
    exit 1
fi
echo "doc_links: $nlinks links in ${#files[@]} files, every relative one resolves"
