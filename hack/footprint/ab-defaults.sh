#!/bin/bash
# usage: hack/footprint/ab-defaults.sh ROUNDS OLD_BIN NEW_BIN  (fanout-bench built
# to /tmp/fanout-bench from e2e/cmd/bench first)
#
# fanout's proxy CPU at 1k requests per second and its requests per CPU-second
# at saturation, for an old build with its own defaults, a new build with its
# defaults and with --sysmon steady, and HAProxy, round by round, so that a
# change of defaults can be weighed on one machine minutes apart. Each round
# writes /tmp/ab-defaults-{new,old}-ROUND.log; the figures are the lines
# "overhead: PATH 1k|saturation: ... proxy cpu Ns" (10k requests at 1k).
#
# OLD_VARIANTS, if set, is a -fanout-variants list for the old build too, to
# take its defaults apart: OLD_VARIANTS='nohead=--gc-headroom=0'.
set -e
rounds=$1 old=$2 new=$3
old_variants=()
[ -n "${OLD_VARIANTS:-}" ] && old_variants=(-fanout-variants "$OLD_VARIANTS")
cd "$(dirname "$0")/../../e2e"
for r in $(seq 1 "$rounds"); do
  /tmp/fanout-bench -sections overhead -targets fanout,haproxy -rates 1000 -phase 10s -runs 1 -warmup 2s \
    -fanout "$new" -fanout-variants 'steady=--sysmon=steady' -out "/tmp/ab-defaults-new-$r.report" > "/tmp/ab-defaults-new-$r.log" 2>&1
  /tmp/fanout-bench -sections overhead -targets fanout -rates 1000 -phase 10s -runs 1 -warmup 2s \
    -fanout "$old" "${old_variants[@]}" -out "/tmp/ab-defaults-old-$r.report" > "/tmp/ab-defaults-old-$r.log" 2>&1
  echo "round $r:"; grep -o 'overhead: [a-z+]* \(1k\|saturation\): [0-9]* req/s.*proxy cpu [0-9.]*s' "/tmp/ab-defaults-new-$r.log" "/tmp/ab-defaults-old-$r.log" | sed "s|^|  |"
done
