// Package runtimetune fits the Go runtime to a sidecar at start: the
// memory limit the garbage collector works to (--memory-limit, from the
// container's cgroup with automemlimit), the heap headroom between
// collections (--gc-headroom, internal/gctune), how many threads run Go
// code (--max-procs, Go's own container-aware choice by default,
// internal/proctune on request) and how the runtime's monitor thread
// sleeps (--sysmon, which may execute the binary again).
//
// Options holds the flags; Apply puts them into effect once, early in
// main, logs what is in effect and returns the collectors that export it.
// The measurements behind each default are in docs/footprint.md.
package runtimetune
