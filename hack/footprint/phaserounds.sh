#!/bin/bash
# usage: hack/footprint/phaserounds.sh ROUNDS name=/abs/path/BIN ...  (/tmp/fanout-bench built from e2e/cmd/bench first)
# The overhead section's 1k, 5k and saturation phases, in one process as in `make bench`: HAProxy once per
# round, then each binary; prints per round the proxy CPU and p99 at 1k, the requests failed at 5k and the
# requests per CPU-second at saturation with the ratio to HAProxy's in the same round. Logs: /tmp/phaserounds-NAME-R.log
rounds=$1; shift
cd "$(dirname "$0")/../../e2e" || exit 1
first=${1#*=}
for r in $(seq 1 "$rounds"); do
  /tmp/fanout-bench -sections overhead -targets haproxy -rates 1000,5000 -phase 15s -runs 1 -warmup 3s -fanout "$first" -out /tmp/phaserounds.md > /tmp/phaserounds-haproxy-$r.log 2>&1
  for spec in "$@"; do
    /tmp/fanout-bench -sections overhead -targets fanout -rates 1000,5000 -phase 15s -runs 1 -warmup 3s -fanout "${spec#*=}" -out /tmp/phaserounds.md > /tmp/phaserounds-${spec%%=*}-$r.log 2>&1
  done
  python3 - "$r" haproxy "$@" <<'PY'
import re, sys
r, names = sys.argv[1], [sys.argv[2]] + [s.split('=', 1)[0] for s in sys.argv[3:]]
res = {}
for name in names:
    d = {'5k failed': 0}
    for l in open('/tmp/phaserounds-%s-%s.log' % (name, r)):
        m = re.search(r'overhead: \S+ 5k: (\d+) of \d+ requests failed', l)
        if m:
            d['5k failed'] = int(m.group(1))
        m = re.search(r'overhead: \S+ (1k|saturation): ([0-9.]+) req/s, p50 \S+ p99 (\S+), proxy cpu ([0-9.]+)s', l)
        if m:
            d[m.group(1)] = (float(m.group(2)), m.group(3), float(m.group(4)))
    res[name] = d
h = res['haproxy'].get('saturation')
for name in names:
    d = res[name]
    k, s = d.get('1k'), d.get('saturation')
    if not (k and s and h):
        print('r%s %-8s failed: see /tmp/phaserounds-%s-%s.log' % (r, name, name, r))
        continue
    per = s[0] * 15 / s[2]
    print('r%s %-8s 1k: cpu %.2f s p99 %s | 5k: %d failed | saturation: %.0f req/s, %.0f req/CPU-s, ratio %.2f'
          % (r, name, k[2], k[1], d['5k failed'], s[0], per, per / (h[0] * 15 / h[2])))
PY
done
