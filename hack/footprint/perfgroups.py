#!/usr/bin/env python3
"""Groups a Go proxy's perf samples by the goroutine they ran on.

Reads `perf script` output of `perf record -g` on fanout and prints, for
each group, its share of all samples and how much of that was user space
(Go code) and kernel (system calls, TCP, scheduling):

    perf record -F 999 -g -p PID -o /tmp/f.data -- sleep 8
    perf script -i /tmp/f.data | python3 hack/footprint/perfgroups.py

A sample belongs to the first group whose frame appears in its stack, in
the order of GROUPS (the garbage collector and the scheduler first: they
run on any goroutine's thread). docs/footprint.md ("Where the CPU per
request goes") has what the groups mean.
"""
import collections
import re
import sys

GROUPS = [
    ("garbage collector (background)", ("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge")),
    ("scheduler", ("runtime.mcall", "runtime.park_m", "runtime.schedule")),
    ("sysmon", ("runtime.sysmon",)),
    ("HTTP/1.1 server: background read", ("net/http.(*connReader).backgroundRead",)),
    ("HTTP/2 client: doRequest", ("http2.(*clientStream).doRequest",)),
    ("HTTP/2 client: readLoop", ("http2.(*ClientConn).readLoop", "http2.(*clientConnReadLoop).run")),
    ("fanout forwarder + transport", ("fanout/components/proxy.(*forwarder).RoundTrip",)),
    ("reverse proxy, rest", ("httputil.(*ReverseProxy).ServeHTTP",)),
    ("fanout handler chain, rest", ("fanout/components/proxy.",)),
    ("HTTP/1.1 server: finishRequest", ("net/http.(*response).finishRequest",)),
    ("HTTP/1.1 server: readRequest", ("net/http.(*conn).readRequest",)),
    ("HTTP/1.1 server, rest", ("net/http.(*conn).serve",)),
]

def samples(lines):
    cur = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if cur:
                yield cur
            cur = []
        elif line[0] in "\t ":
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                cur.append(re.sub(r"\+0x[0-9a-f]+$", "", re.sub(r" \(.*\)$", "", parts[1])))
        elif cur:
            yield cur
            cur = []
    if cur:
        yield cur


def is_user(sym):
    # Go symbols are package-qualified (a path with "/" or a standard
    # package's name before the dot); kernel ones are not, though some
    # have dots of their own (finish_task_switch.isra.0).
    return "." in sym and ("/" in sym or sym.split(".")[0] in (
        "runtime", "sync", "net", "time", "bufio", "crypto", "internal", "syscall", "strings",
        "strconv", "mime", "context", "bytes", "io", "fmt", "sort", "unicode", "math", "os",
        "log", "errors", "slices", "maps", "reflect", "encoding", "main"))


def main():
    total = 0
    share = collections.Counter()
    user = collections.Counter()
    for s in samples(sys.stdin):
        total += 1
        stack = " ".join(s)
        group = "other"
        for name, frames in GROUPS:
            if any(f in stack for f in frames):
                group = name
                break
        share[group] += 1
        if is_user(s[0]):
            user[group] += 1
    if total == 0:
        sys.exit("no samples on stdin: pipe `perf script` of a `perf record -g` into it")
    print("%d samples" % total)
    print("| group | all | user | kernel |")
    print("| --- | --- | --- | --- |")
    for name, n in share.most_common():
        print("| %s | %.1f %% | %.1f %% | %.1f %% |" % (
            name, 100.0 * n / total, 100.0 * user[name] / total, 100.0 * (n - user[name]) / total))
    print("| all | 100 %% | %.1f %% | %.1f %% |" % (
        100.0 * sum(user.values()) / total, 100.0 * (total - sum(user.values())) / total))


if __name__ == "__main__":
    main()
