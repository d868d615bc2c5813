#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the layering of src/: which file calls which, read from the
# compiled objects (nm: a file's undefined symbols, resolved to the file
# that defines them), and which file includes which (#include "..."
# lines). Every call and every include must go down the order below,
# bottom first; one up (or sideways to a file listed later) is a cycle
# waiting to happen and fails the check, and so does any include cycle.
# Prints the call graph.
#
#   integration -> binding -> pool/worker -> queue -> heap/clock
#
# Usage: scripts/layers.sh <directory holding the objects of src/*.c>
#        (ctest runs it on the build's chime_objects directory)
set -euo pipefail

order=(lib clock task extras node tz cron arena slab heap_near heap_far heap
    timer_heap dq binding ready pool deadline window context lifetime complete
    loop_timers post inbox due worker spawn handle submit cancel touch
    shutdown pool_ops settle dispatch loop wall group metrics dump)

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

# ---- includes --------------------------------------------------------------
# The same order holds for #include "..." lines between the files of src/:
# a file of a module may include the header of its own module or of one
# below it, never above; and the include graph of src/ has no cycle.
# A header belongs to the module of the same name; header-only modules sit
# in `base` (below every module) unless the order names them; a few
# headers belong to another module (`owner`).
base=(common list spin)
enforce_includes=1
ibad=0
declare -A owner=([dq_heap]=dq [heap_tiers]=heap [heap_near]=heap [heap_far]=heap
    [internal]=dump)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../src" && pwd)
for b in "${base[@]}"; do
    rank[$b]=-1
done
module_of() {
    local m
    m=$(basename "$1")
    m=${m%.*}
    echo "${owner[$m]:-$m}"
}
incs=()
for file in "$src"/*.c "$src"/*.h; do
    m=$(module_of "$file")
    if [ -z "${rank[$m]+x}" ]; then
        echo "layers: src/$(basename "$file") belongs to no module of the order"
        ibad=1
        continue
    fi
    while read -r inc; do
        [ -f "$src/$inc" ] || continue # <chime/...>, system headers
        incs+=("$(basename "$file") $inc")
        n=$(module_of "$inc")
        [ "$n" != "$m" ] || continue
        if [ -z "${rank[$n]+x}" ]; then
            echo "layers: src/$inc belongs to no module of the order"
            ibad=1
        elif [ "${rank[$n]}" -gt "${rank[$m]}" ]; then
            echo "layers: src/$(basename "$file") includes $inc, up the order ($m below $n)"
            ibad=1
        fi
    done < <(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done
if printf '%s\n' "${incs[@]}" | tsort 2>&1 >/dev/null | grep -q cycle; then
    echo "layers: the include graph of src/ has a cycle"
    ibad=1
fi
if [ "$ibad" -ne 0 ] && [ "$enforce_includes" -eq 1 ]; then
    bad=1
elif [ "$ibad" -ne 0 ]; then
    echo "layers: (the include findings above are not enforced yet)"
fi

if [ "$bad" -eq 0 ]; then
    echo "layers: OK, no call or include goes up, no cycle"
fi
exit "$bad"
