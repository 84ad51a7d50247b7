//go:build !linux

package proxy

import "net"

// hangups is Linux only (closewatch_linux.go); elsewhere each taken-over
// stream reads its connection with a goroutine of its own (watchClient).
type hangups struct{}

// hangupKey is empty: there is no watcher to key streams in.
type hangupKey struct{}

func (*hangups) watch(*h1Stream) bool { return false }

// available says no: fanout's own HTTP/1.1 server needs the watcher, so
// net/http serves every connection here.
func (*hangups) available() bool { return false }

func (*hangups) register(net.Conn, hangupTarget, uint32) (int32, bool) { return 0, false }

func (*hangups) unregister(net.Conn, int32) {}

// hangupTarget is told, once, that its client hung up.
type hangupTarget interface{ hangup() }

// forget has nothing to drop; clearing the empty key keeps the field in
// use on every OS.
func (*hangups) forget(s *h1Stream) { s.hangupKey = hangupKey{} }

func (*hangups) stop() {}
