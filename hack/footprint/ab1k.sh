#!/bin/bash
# usage: hack/footprint/ab1k.sh ROUNDS name=/abs/path/BIN ...  (/tmp/fanout-bench built from e2e/cmd/bench first)
# fanout's proxy CPU and latency at 1k requests per second, alternating the
# binaries round by round, so that a change can be compared with its parent
# on the same machine minutes apart. "proxy cpu" is per 15,000 requests.
rounds=$1; shift
cd "$(dirname "$0")/../../e2e"
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}
    /tmp/fanout-bench -sections overhead -targets fanout -rates 1000 -saturation=false -phase 15s -runs 1 -warmup 3s -fanout "$bin" -out /tmp/ab1k.md > "/tmp/ab1k-$name-$r.log" 2>&1
    echo "$name r$r: $(grep -o 'fanout 1k: .*' "/tmp/ab1k-$name-$r.log" | cut -c1-150)"
  done
done
