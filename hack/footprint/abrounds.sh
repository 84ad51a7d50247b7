#!/bin/bash
# usage: hack/footprint/abrounds.sh ROUNDS name=/abs/path/BIN ...  (/tmp/fanout-bench built from e2e/cmd/bench first)
# The saturation phase with HAProxy in the same run, alternating the binaries; per request: user and system CPU.
# AB_TARGETS=fanout leaves HAProxy out: twice the rounds in the time, for comparing fanout binaries with each other.
rounds=$1; shift
cd "$(dirname "$0")/../../e2e"
for r in $(seq 1 $rounds); do
  for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}
    /tmp/fanout-bench -sections overhead -targets ${AB_TARGETS:-fanout,haproxy} -rates '' -phase 15s -runs 1 -warmup 3s -fanout $bin -out /tmp/abrounds.md > /tmp/abrounds-$name-$r.log 2>&1
    python3 - "$name" "$r" /tmp/abrounds-$name-$r.log <<'PY'
import sys,re
name,r,f=sys.argv[1:]
out={}
for l in open(f):
    m=re.search(r'overhead: (\S+) saturation: ([0-9.]+) req/s.*proxy cpu ([0-9.]+)s \(user ([0-9.]+)s\)',l)
    if m:
        t,rps,cpu,user=m.group(1),float(m.group(2)),float(m.group(3)),float(m.group(4))
        n=rps*15
        out[t]=(n/cpu, user/n*1e6, (cpu-user)/n*1e6)
if 'fanout' in out and 'haproxy' in out:
    f,h=out['fanout'],out['haproxy']
    print("%-6s r%s: fanout %6.0f req/CPU-s (user %5.1f, sys %5.1f us) | haproxy %6.0f (user %5.1f, sys %5.1f) | ratio %.2f" % (name,r,f[0],f[1],f[2],h[0],h[1],h[2],f[0]/h[0]))
elif 'fanout' in out:
    f=out['fanout']
    print("%-6s r%s: fanout %6.0f req/CPU-s (user %5.1f, sys %5.1f us)" % (name,r,f[0],f[1],f[2]))
else:
    print(name, r, "failed", out)
PY
  done
done
