#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the API reference and the man pages (ctest labels "docs"; see
# docs/api/CMakeLists.txt).
#
# Usage: check.sh doxygen <doxygen> <source-dir> <work-dir>
#          Runs Doxygen on docs/api/Doxyfile (warnings are errors) into
#          work-dir and fails on: any output of Doxygen; a header of
#          include/chime/ without a @file block (Doxygen says nothing about
#          a file that has none); a public (CHIME_EXPORT) function without
#          its man page (so: not documented); a page that groff renders
#          with a warning, or a .so link to a missing page.
#        check.sh install <build-dir> <source-dir>
#          Installs the man pages of a built tree (component chime_man)
#          into a temporary prefix and checks them there: chime(3), a page
#          per group and per public function, nothing not named chime*, and
#          `man -l` renders chime(3) without a warning.
set -euo pipefail

fail() {
    echo "docs: $*" >&2
    exit 1
}

# The public functions declared by the headers, one per line.
public_functions() {
    local src=$1
    # clang-format keeps "CHIME_EXPORT <type> <name>(" on one line.
    grep -ho '^CHIME_EXPORT[^(;]*(' "$src"/include/chime/*.h |
        sed -E 's/.*[ *]([A-Za-z_][A-Za-z0-9_]*)\($/\1/' | sort -u
}

# render_clean <man-dir> <page>: groff (and man -l, when present) render
# the page without a diagnostic. Run in <man-dir>, so ".so man3/x.3" links
# resolve.
render_clean() {
    local mandir=$1 page=$2 out
    if command -v groff >/dev/null 2>&1; then
        out=$(cd "$mandir" && LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z \
            "$page" 2>&1) || fail "groff failed on $page: $out"
        [ -z "$out" ] || fail "groff warns on $page: $out"
    fi
    if command -v man >/dev/null 2>&1; then
        out=$(cd "$mandir" && MANWIDTH=80 LC_ALL=C.UTF-8 man -l "$page" \
            2>&1 >/dev/null) || fail "man -l failed on $page: $out"
        [ -z "$out" ] || fail "man -l warns on $page: $out"
    fi
}

check_pages() {
    local mandir=$1 src=$2 page target n=0
    [ -f "$mandir/man3/chime.3" ] || fail "no chime(3) in $mandir"
    for g in chime-util chime-options chime-pool chime-submit chime-task \
        chime-loop; do
        [ -f "$mandir/man3/$g.3" ] || fail "no $g(3) in $mandir"
    done
    if grep -q 'chime_event_attach' "$src"/include/chime/*.h; then
        [ -f "$mandir/man3/chime-event.3" ] || fail "no chime-event(3)"
    fi
    if grep -q 'chime_glib_source_new' "$src"/include/chime/*.h; then
        [ -f "$mandir/man3/chime-glib.3" ] || fail "no chime-glib(3)"
    fi
    if grep -q 'chime_uv_attach' "$src"/include/chime/*.h; then
        [ -f "$mandir/man3/chime-uv.3" ] || fail "no chime-uv(3)"
    fi
    if grep -q 'chime_ev_attach' "$src"/include/chime/*.h; then
        [ -f "$mandir/man3/chime-ev.3" ] || fail "no chime-ev(3)"
    fi
    while read -r fn; do
        [ -f "$mandir/man3/$fn.3" ] ||
            fail "$fn has no man page: document it in its header"
        n=$((n + 1))
    done < <(public_functions "$src")
    [ "$n" -gt 50 ] || fail "only $n public functions found in the headers"
    for page in "$mandir"/man3/chime*.3 "$mandir"/man3/CHIME_*.3; do
        page=${page#"$mandir"/}
        if head -n 1 "$mandir/$page" | grep -q '^\.so '; then
            target=$(head -n 1 "$mandir/$page" | sed 's/^\.so //')
            [ -f "$mandir/$target" ] ||
                fail "$page links to the missing $target"
        else
            render_clean "$mandir" "$page"
        fi
    done
    echo "docs: $n public functions, each with its page; pages render"
}

case ${1:-} in
doxygen)
    [ $# -eq 4 ] || fail "usage: $0 doxygen <doxygen> <source-dir> <work-dir>"
    doxygen=$2
    src=$(cd "$3" && pwd)
    work=$4
    rm -rf "$work"
    mkdir -p "$work"
    work=$(cd "$work" && pwd)
    for h in "$src"/include/chime/*.h; do
        grep -q '@file' "$h" ||
            fail "$h has no /** @file ... */ block (Doxygen skips it)"
    done
    status=0
    (cd "$src" && CHIME_DOCS_OUT="$work" "$doxygen" docs/api/Doxyfile) \
        >"$work/doxygen.log" 2>&1 || status=$?
    if [ "$status" -ne 0 ] || [ -s "$work/doxygen.log" ]; then
        cat "$work/doxygen.log" >&2
        fail "doxygen exited with $status and printed the above"
    fi
    check_pages "$work/man" "$src"
    ;;
install)
    [ $# -eq 3 ] || fail "usage: $0 install <build-dir> <source-dir>"
    build=$(cd "$2" && pwd)
    src=$(cd "$3" && pwd)
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-man.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    cmake --install "$build" --component chime_man --prefix "$tmp" \
        >"$tmp/install.log" || {
        cat "$tmp/install.log" >&2
        fail "cmake --install --component chime_man failed"
    }
    mandir="$tmp/share/man"
    [ -d "$mandir/man3" ] || fail "nothing installed under share/man/man3"
    stray=$(find "$mandir/man3" -type f ! -name 'chime*' ! -name 'CHIME_*')
    [ -z "$stray" ] || fail "pages not named chime* installed: $stray"
    check_pages "$mandir" "$src"
    ;;
*)
    fail "usage: $0 doxygen|install ..."
    ;;
esac
