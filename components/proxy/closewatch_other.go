//go:build !linux

package proxy

// hangups is Linux only (closewatch_linux.go); elsewhere each taken-over
// stream reads its connection with a goroutine of its own (watchClient).
type hangups struct{}

// hangupKey is empty: there is no watcher to key streams in.
type hangupKey struct{}

func (*hangups) watch(*h1Stream) bool { return false }

// forget has nothing to drop; clearing the empty key keeps the field in
// use on every OS.
func (*hangups) forget(s *h1Stream) { s.hangupKey = hangupKey{} }

func (*hangups) stop() {}
