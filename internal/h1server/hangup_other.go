//go:build !linux

package h1server

import "net"

// hangups is Linux only (hangup_linux.go). Elsewhere a client leaving
// mid-request is noticed when a write to it fails, and each detached
// stream reads its connection with a goroutine of its own (watchClient).
type hangups struct{}

func (*hangups) register(net.Conn, hangupTarget) (int32, bool) { return 0, false }

func (*hangups) retarget(int32, hangupTarget) bool { return false }

func (*hangups) unregister(net.Conn, int32) {}

func (*hangups) drop(int32) {}

func (*hangups) stop() {}
