#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the layering of src/: which file calls which, read from the
# compiled objects (nm: a file's undefined symbols, resolved to the file
# that defines them). Every call must go down the order below, bottom
# first; a call up (or sideways to a file listed later) is a cycle waiting
# to happen and fails the check. Prints the graph.
#
#   integration -> binding -> pool/worker -> queue -> heap/clock
#
# Usage: scripts/layers.sh <directory holding the objects of src/*.c>
#        (ctest runs it on the build's chime_objects directory)
set -euo pipefail

order=(lib clock annot tz cron arena heap dq slab ready context complete timers post inbox due worker task submit cancel
    shutdown pool settle loop wall group metrics dump)

dir=${1:?usage: scripts/layers.sh <objects directory>}
declare -A rank def
for i in "${!order[@]}"; do
    rank[${order[$i]}]=$i
done

shopt -s nullglob
objs=("$dir"/*.o "$dir"/*.obj)
[ ${#objs[@]} -gt 0 ] || { echo "layers: no objects in $dir" >&2; exit 2; }

for o in "${objs[@]}"; do
    f=$(basename "$o")
    f=${f%%.*}
    if [ -z "${rank[$f]+x}" ]; then
        echo "layers: src/$f.c is not in the order (scripts/layers.sh)" >&2
        exit 1
    fi
    while read -r sym; do
        def[$sym]=$f
    done < <(nm --defined-only -g "$o" | awk '{print $3}')
done

bad=0
edges=()
for o in "${objs[@]}"; do
    f=$(basename "$o")
    f=${f%%.*}
    declare -A seen=()
    while read -r sym; do
        t=${def[$sym]:-}
        [ -n "$t" ] && [ "$t" != "$f" ] || continue
        [ -z "${seen[$t]+x}" ] || continue
        seen[$t]=1
        edges+=("$f $t")
        if [ "${rank[$t]}" -ge "${rank[$f]}" ]; then
            echo "layers: src/$f.c calls up into src/$t.c ($sym)"
            bad=1
        fi
    done < <(nm --undefined-only "$o" | awk '{print $2}')
    unset seen
done

echo "calls between files of src/ (caller: callees), bottom layer first:"
for ((i = 0; i < ${#order[@]}; i++)); do
    f=${order[$i]}
    callees=$(printf '%s\n' "${edges[@]}" | awk -v f="$f" '$1 == f {print $2}' |
        sort | tr '\n' ' ')
    printf '  %-9s %s\n' "$f:" "${callees:-(none)}"
done
# tsort reports any cycle as well, whatever the order above says.
if printf '%s\n' "${edges[@]}" | tsort 2>&1 >/dev/null | grep -q cycle; then
    echo "layers: the call graph has a cycle"
    bad=1
fi
if [ "$bad" -eq 0 ]; then
    echo "layers: OK, no call goes up, no cycle"
fi
exit "$bad"
