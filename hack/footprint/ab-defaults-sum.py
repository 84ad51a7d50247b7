#!/usr/bin/env python3
"""Sums hack/footprint/ab-defaults.sh's rounds.

usage: hack/footprint/ab-defaults-sum.py [LOGDIR] [A/B ...]

Each path is SIDE:PATH, e.g. new:fanout, new:fanout+steady, old:fanout+nohead.
Prints, over the rounds that have every path, the median and range of proxy
CPU seconds per 10k requests at 1k req/s and of requests per CPU-second at
saturation, then for each A/B the paired ratio A/B per round (median, range,
and in how many rounds A was worse).
"""
import glob, re, statistics, sys

args = sys.argv[1:]
logdir = args.pop(0) if args and ":" not in args[0] else "/tmp"
rx = re.compile(r"overhead: (\S+) (1k|saturation): (\d+) req/s.*proxy cpu ([0-9.]+)s")
rounds = {}
for f in glob.glob(f"{logdir}/ab-defaults-*-*.log"):
    m = re.search(r"ab-defaults-(new|old)-(\d+)\.log$", f)
    if not m:
        continue
    for line in open(f):
        mm = rx.search(line)
        if not mm:
            continue
        path, phase, rps, cpu = mm.group(1), mm.group(2), int(mm.group(3)), float(mm.group(4))
        # The phases last 10 s: at 1k that is 10k requests.
        v = cpu * 10000 / (rps * 10) if phase == "1k" else rps * 10 / cpu
        rounds.setdefault(int(m.group(2)), {})[(f"{m.group(1)}:{path}", phase)] = v
paths = sorted({p for r in rounds.values() for p, _ in r})
full = [r for r in sorted(rounds) if len(rounds[r]) == 2 * len(paths)]
print(f"{len(full)} complete rounds of {len(rounds)}")
print("| path | CPU s / 10k req at 1k req/s | req / CPU-s at saturation |\n| --- | --- | --- |")
for p in paths:
    a = [rounds[r][(p, "1k")] for r in full]
    b = [rounds[r][(p, "saturation")] for r in full]
    print(f"| {p} | {statistics.median(a):.2f} [{min(a):.2f}, {max(a):.2f}] "
          f"| {statistics.median(b):,.0f} [{min(b):,.0f}, {max(b):,.0f}] |")
for pair in args:
    a, b = pair.split("/")
    c = [rounds[r][(a, "1k")] / rounds[r][(b, "1k")] for r in full]
    s = [rounds[r][(a, "saturation")] / rounds[r][(b, "saturation")] for r in full]
    print(f"{a} / {b}: CPU at 1k {statistics.median(c):.2f} [{min(c):.2f}, {max(c):.2f}], "
          f"more in {sum(x > 1 for x in c)} of {len(c)}; req/CPU-s at saturation "
          f"{statistics.median(s):.2f} [{min(s):.2f}, {max(s):.2f}], fewer in {sum(x < 1 for x in s)} of {len(s)}")
