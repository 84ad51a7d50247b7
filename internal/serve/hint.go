package serve

import (
	"errors"
	"syscall"
)

// ListenHint says what to do about err, an error of listening on the
// address that flag set: the port is taken, or the host is not one of
// this machine's addresses. flag may be empty.
func ListenHint(err error, flag string) string {
	to := ""
	if flag != "" {
		to = " to " + flag
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "another process (another fanout?) is listening on that port: stop it or pass a free port" + to
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no network interface here has that address: pass an address of this host" + to
	case errors.Is(err, syscall.EACCES):
		return "ports below 1024 need CAP_NET_BIND_SERVICE: pass a port from 1024 up" + to
	}
	return "pass another address" + to
}
