#!/bin/bash
# usage: cp hack/footprint/bisect-stacks.sh /tmp/ and, in a worktree
# between git bisect start NEW OLD and reset, git bisect run
# /tmp/bisect-stacks.sh MODE KIB (a copy, as the checkouts change the
# worktree; fanout-bench built to /tmp/fanout-bench from e2e/cmd/bench at
# NEW first)
#
# A commit is bad when fanout-bench footprint, 300 watches of MODE (h1 or
# h2c), finds more than KIB KiB of goroutine stacks per watch; one that
# does not build, or that the footprint cannot measure, is skipped. How
# 0d4357b was found to have made every h2c watch keep 16 KiB of stack
# instead of 8 (docs/footprint.md, "A watch holds less while open").
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
mode=$1 limit=$2
tree=$(git rev-parse --show-toplevel)
rev=$(git rev-parse --short HEAD)
go build -o "/tmp/fanout-bisect-$rev" "$tree/cmd/fanout" 2>/dev/null || exit 125
log="/tmp/fanout-bisect-$rev.log"
(cd "$tree/e2e" && /tmp/fanout-bench footprint -fanout "/tmp/fanout-bisect-$rev" -watches 300 \
  -modes "$mode" -memprofilerate 524288 > "$log" 2>&1) || exit 125
# The table's columns: mode, VmRSS, peak, RSS, heap, stacks per watch, ...
stacks=$(grep -E "^\| fanout $mode " "$log" | awk -F'|' '{print $7}' | grep -o '[0-9.]*')
[ -n "$stacks" ] || exit 125
echo "$rev: $stacks KiB of stacks per $mode watch"
awk -v s="$stacks" -v l="$limit" 'BEGIN { exit (s > l) ? 1 : 0 }'
