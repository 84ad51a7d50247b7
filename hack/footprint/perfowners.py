#!/usr/bin/env python3
"""Gives each user-space perf sample of fanout to the code it ran for.

Reads `perf script` output of `perf record -g` on fanout (as
perfgroups.py does) and prints, for the user-space samples only, the share
of each owner: the innermost frame on the stack that belongs to one of
OWNERS (Go's HTTP/2 client, TLS, fanout's HTTP/1.1 server, ReverseProxy,
...), with how much of it was in the allocator:

    perf script -i /tmp/f.data | python3 hack/footprint/perfowners.py

docs/footprint.md ("Where the goals stand") has what it showed.
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perfgroups  # noqa: E402

OWNERS = [
    ("crypto/tls+aes", ("crypto/",)),
    ("hpack", ("hpack.",)),
    ("Go's HTTP/2 client", ("net/http/internal/http2.",)),
    ("net/http.Transport", ("net/http.(*Transport)",)),
    ("x/net http2 wrapper", ("golang.org/x/net/http2.",)),
    ("fanout transport", ("fanout/components/transport.",)),
    ("balancer", ("fanout/components/balancer.",)),
    ("reqinfo", ("fanout/internal/reqinfo.",)),
    ("prometheus", ("prometheus",)),
    ("fanout's HTTP/1.1 server", ("proxy.(*h1",)),
    ("http.ReadRequest", ("net/http.ReadRequest", "net/http.readRequest")),
    ("httputil.ReverseProxy", ("httputil.",)),
    ("fanout handler, rest", ("fanout/components/proxy.",)),
    ("net/http, rest", ("net/http.",)),
    ("garbage collector", ("runtime.gcBgMarkWorker", "runtime.bgsweep")),
    ("scheduler", ("runtime.schedule", "runtime.park_m", "runtime.mcall", "runtime.findRunnable")),
]
ALLOC = ("runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice")


def owner(stack):
    for frame in stack:
        for name, prefixes in OWNERS:
            if any(p in frame for p in prefixes):
                return name
    return "other"


def main():
    total = user = 0
    share = collections.Counter()
    alloc = collections.Counter()
    for s in perfgroups.samples(sys.stdin):
        total += 1
        if not perfgroups.is_user(s[0]):
            continue
        user += 1
        name = owner(s)
        share[name] += 1
        if any(a in f for f in s for a in ALLOC):
            alloc[name] += 1
    if user == 0:
        sys.exit("no user-space samples on stdin: pipe `perf script` of a `perf record -g` into it")
    print("%d samples, %d in user space (%.0f %%)" % (total, user, 100.0 * user / total))
    print("| owner | share of user samples | of it in the allocator |")
    print("| --- | --- | --- |")
    for name, n in share.most_common():
        print("| %s | %.1f %% | %.1f %% |" % (name, 100.0 * n / user, 100.0 * alloc[name] / user))


if __name__ == "__main__":
    main()
