// Package runtimetune fits the Go runtime to a sidecar at start. By
// default that is Go's own runtime (GOMAXPROCS follows the container's
// CPU limit by itself since Go 1.25) plus the memory limit the garbage
// collector works to, from the container's cgroup with automemlimit
// (--memory-limit). One tuner stays, opt-in: --sysmon steady, which
// executes the binary again to keep the runtime's monitor thread from its
// deep sleep.
//
// Options holds the flags; Apply puts them into effect once, early in
// main, logs what is in effect and returns the collectors that export it.
// The measurements behind each choice are in docs/footprint.md.
package runtimetune
