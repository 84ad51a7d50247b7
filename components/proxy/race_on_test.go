//go:build race

package proxy

// raceEnabled: the race detector changes allocation counts (sync.Pool
// drops a share of what it is given, for one).
const raceEnabled = true
