#!/usr/bin/env python3
"""Sums a flat perf profile into kernel, Go code and the Go runtime's parts.

usage: perf report -i perf.data --no-children --sort sym --stdio -g none | python3 hack/footprint/perfclasses.py
       perf script -i perf.data | python3 hack/footprint/perfclasses.py --map-callers

The first form prints the share of all samples per class: kernel, Go code
outside the runtime (with the vDSO), and the runtime split by what its
symbols do (maps, malloc, scheduler, channels, GC, memmove). The classes
come from symbol names only, so they are approximate. The second form
counts, for samples whose leaf is in the runtime's maps, the first caller
outside the runtime: who uses the maps.
"""
import collections
import re
import sys

from perfgroups import samples  # the `perf script` parser, beside this file

RUNTIME = re.compile(r'^(runtime\.|internal/runtime/|type:\.hash)')
CLASSES = [
    ('maps', r'internal/runtime/maps|runtime\.map|memHash|aeshash|strhash|type:\.hash'),
    ('GC', r'gcDrain|scanobject|markroot|scanstack|greyobject|scanblock|gcBgMark|findObject|'
           r'wbBuf|bulkBarrier|typePointers|sweep|scanframe|tryDeferToSpanScan|spanSet|'
           r'moveInlineMarks|gcAssist|scanSpan|pcvalue|funcInfo|findfunc|unwinder'),
    ('malloc', r'malloc|nextFree|memclr|newobject|makeslice|growslice|newarray|fixalloc|mcache|'
               r'mcentral|refill|allocSpan|heapSetType|deductAssist'),
    ('scheduler, timers, locks', r'schedule|findRunnable|runq|steal|park|execute|gopark|goready|ready|'
                                 r'wakep|startm|stopm|notesleep|notewakeup|futex|casgstatus|handoff|'
                                 r'acquirep|releasep|spinning|imers|netpoll|gogo|mcall|goexit|newproc|'
                                 r'gfget|gfput|injectglist|lock2|unlock2|sema|procyield|osyield|usleep|'
                                 r'nanotime|sysmon'),
    ('channels, select', r'select|chan|sellock|selunlock|Sudog|send|recv'),
    ('memmove, compare', r'memmove|memequal|cmpbody|indexbyte'),
]


def classes():
    total = collections.Counter()
    for line in sys.stdin:
        m = re.match(r'\s*([0-9.]+)%\s+\[(.)\]\s+(\S+)', line)
        if not m:
            continue
        share, kind, sym = float(m.group(1)), m.group(2), m.group(3)
        if kind == 'k':
            total['kernel'] += share
        elif not RUNTIME.search(sym):
            total['Go code outside the runtime, vDSO'] += share
        else:
            for name, pat in CLASSES:
                if re.search(pat, sym):
                    total['runtime: ' + name] += share
                    break
            else:
                total['runtime: other'] += share
    print('| class | share of all samples |\n| --- | --- |')
    for name, share in total.most_common():
        print('| %s | %.1f %% |' % (name, share))


def map_callers():
    callers, n = collections.Counter(), 0
    for stack in samples(sys.stdin):
        if not re.search(CLASSES[0][1], stack[0]):
            continue
        n += 1
        caller = next((f for f in stack[1:] if not RUNTIME.search(f)), '(runtime only)')
        callers[caller] += 1
    print('%d samples with the leaf in the runtime\'s maps; first caller outside the runtime:' % n)
    for name, count in callers.most_common(25):
        print('%5d %s' % (count, name))


if __name__ == '__main__':
    map_callers() if '--map-callers' in sys.argv[1:] else classes()
