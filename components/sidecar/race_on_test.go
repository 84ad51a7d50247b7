//go:build race

package sidecar

// raceEnabled: the race detector's instrumentation deepens stack frames.
const raceEnabled = true
