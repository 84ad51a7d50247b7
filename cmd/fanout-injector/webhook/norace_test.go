//go:build !race

package webhook

// raceFactor: the race detector doubles what allocations cost.
const raceFactor = 1
