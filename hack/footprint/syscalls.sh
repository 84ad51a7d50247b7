#!/bin/bash
# usage: hack/footprint/syscalls.sh /abs/path/BIN   (/tmp/fanout-bench built from e2e/cmd/bench first)
# One saturation phase of fanout, then HAProxy; `perf stat` counts each proxy's system calls for 8 s
# in the middle of its phase. Calls per request = count / (req/s of the "saturation" line x 8).
bin=$1
cd "$(dirname "$0")/../../e2e"
/tmp/fanout-bench -sections overhead -targets fanout,haproxy -rates '' -phase 15s -runs 1 -warmup 3s -fanout "$bin" -out /tmp/syscalls.md > /tmp/syscalls.log 2>&1 &
bench=$!
ev=raw_syscalls:sys_enter
for c in write read futex epoll_pwait epoll_wait epoll_ctl sendto recvfrom nanosleep sched_yield writev sendmsg recvmsg accept4 close; do
  ev=$ev,syscalls:sys_enter_$c
done
for name in $(basename "$bin") haproxy; do
  comm=${name:0:15}
  until pid=$(pgrep -n -x "$comm"); do sleep 0.2; done
  sleep 7 # 3 s warm-up, then 4 s into the phase
  echo "== $name"
  perf stat -e "$ev" -p "$pid" -- sleep 8 2>&1 | grep -E '^ +[0-9]' | grep -v '^ *0 '
done
wait $bench
grep 'saturation' /tmp/syscalls.log
