#!/usr/bin/env python3
"""Groups the per-watch heap of fanout-bench footprint profiles by item.

Usage: hack/footprint/items.py WATCHES DIR [DIR...]
Each DIR holds MODE-before.heap.pb.gz and MODE-watches.heap.pb.gz (MODE h1,
h2c) as `fanout-bench footprint -profiles DIR` writes them. Prints a
Markdown table of in-use KiB per watch (pprof -top -diff_base, flat,
grouped by the allocating function), one column per DIR and mode. This is
the table in docs/footprint.md.
"""
import os
import subprocess
import sys

RULES = [
    (lambda f: "bufferPool" in f or "h1Stream).copy" in f, "copy buffer (httputil.ReverseProxy, BufferPool; a taken-over HTTP/1.1 watch's own)"),
    (lambda f: f.startswith("bufio.NewWriterSize"), "bufio.Writers of the net/http server"),
    (lambda f: f.startswith("bufio.NewReaderSize"), "bufio.Reader of the net/http server connection"),
    (lambda f: "internal/http2" in f or "x/net/http2" in f or "http2RoundTrip" in f, "HTTP/2 streams"),
    (lambda f: "fanout/components/" in f, "fanout's own"),
    (lambda f: f.startswith("context."), "contexts"),
    (lambda f: f.split(".")[0] in ("net/http", "net/textproto", "net/url", "net"), "net/http request, response, headers, connection"),
]


def items(watches, before, after):
    out = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=100000", "-sample_index=inuse_space",
                          "-unit=B", "-diff_base", before, after], capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) < 6 or not f[0].endswith("B"):
            continue
        try:
            v = float(f[0][:-1])
        except ValueError:
            continue
        name = next((n for match, n in RULES if match(f[5])), "other")
        got[name] = got.get(name, 0) + v / watches / 1024
    return got


def main():
    watches, dirs = int(sys.argv[1]), sys.argv[2:]
    cols = []
    for d in dirs:
        for mode in ("h1", "h2c"):
            b, w = os.path.join(d, mode + "-before.heap.pb.gz"), os.path.join(d, mode + "-watches.heap.pb.gz")
            if os.path.exists(b) and os.path.exists(w):
                cols.append((f"{d} {mode}", items(watches, b, w)))
    names = [n for _, n in RULES] + ["other"]
    print("| item | " + " | ".join(c for c, _ in cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    for n in names:
        print(f"| {n} | " + " | ".join(f"{g.get(n, 0):.2f}" for _, g in cols) + " |")
    print("| **total, KiB** | " + " | ".join(f"**{sum(g.values()):.2f}**" for _, g in cols) + " |")


if __name__ == "__main__":
    main()
