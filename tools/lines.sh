#!/usr/bin/env bash
# The non-test Go line count of the consolidation issues: every .go file
# git tracks at a commit, less tests (*_test.go) and the generated BPF
# bindings (*_bpfel.go). It is the count of
#   find . -name '*.go' ! -name '*_test.go' ! -name '*_bpfel.go' ! -path './.git/*' | xargs cat | wc -l
# on a clean checkout, read from git so that any commit can be counted.
#
#   tools/lines.sh                 the count at HEAD
#   tools/lines.sh REV             the count at REV
#   tools/lines.sh BASE REV        each first-parent commit from BASE to REV:
#                                  its lines added or removed and its subject,
#                                  then the counts at BASE and REV
set -euo pipefail
cd "$(dirname "$0")/.."

count() {
  git grep -c '' "$1" -- '*.go' ':!*_test.go' ':!*_bpfel.go' | awk -F: '{s += $NF} END {print s + 0}'
}

case $# in
0) count HEAD ;;
1) count "$1" ;;
2)
  for c in $(git rev-list --first-parent --reverse "$1..$2"); do
    d=$(($(count "$c") - $(count "$c^1")))
    printf '%+6d %s\n' "$d" "$(git log -1 --format='%h %s' "$c" | cut -c1-110)"
  done
  echo "$1: $(count "$1")"
  echo "$2: $(count "$2")"
  ;;
*) echo "usage: tools/lines.sh [[BASE] REV]" >&2; exit 2 ;;
esac
