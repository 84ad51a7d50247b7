package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"syscall"

	"github.com/fanout-dev/fanout/internal/handoff"
	"github.com/fanout-dev/fanout/internal/serve"
)

// open returns the client listener: the socket `fanout hold` holds, when
// ListenFrom names its directory and it answers within ListenFromWait,
// else one opened here. Whichever it is, the Server serves it the same
// way: the limits, TLS or plaintext, the Host check all sit above it.
func (s *Server) open(ctx context.Context) (ln *net.TCPListener, inherited bool, err error) {
	if s.cfg.ListenFrom != "" {
		path := filepath.Join(s.cfg.ListenFrom, handoff.HolderSocket)
		fctx, cancel := context.WithTimeout(ctx, s.cfg.ListenFromWait)
		fd, err := handoff.Fetch(fctx, path)
		cancel()
		var ln *net.TCPListener
		if err == nil {
			ln, err = handoff.Listener(fd)
		}
		switch {
		case err == nil && !handoff.SameAddress(ln.Addr(), s.cfg.ListenAddress):
			_ = ln.Close()
			return nil, false, fmt.Errorf("listener: the socket from %s is bound to %s, not --listen-address %s; give fanout hold the same --listen-address", path, ln.Addr(), s.cfg.ListenAddress)
		case err == nil:
			s.cfg.Log.Info("listening socket taken from fanout hold", "address", ln.Addr().String(), "from", path)
			return ln, true, nil
		default:
			s.cfg.Log.Warn("no socket holder answered: listening on a socket of fanout's own, which closes when fanout exits (client connections are refused until it is back)",
				"from", path, "waited", s.cfg.ListenFromWait, "error", err)
		}
	}
	lc := listenConfig(s.cfg.ListenAddress)
	l, err := lc.Listen(ctx, "tcp", s.cfg.ListenAddress)
	if err != nil {
		hint := serve.ListenHint(err, "--listen-address")
		if s.cfg.ListenFrom != "" && errors.Is(err, syscall.EADDRINUSE) {
			hint = "is a `fanout hold` holding it that did not answer on " + s.cfg.ListenFrom + "? " + hint
		}
		return nil, false, fmt.Errorf("listener: listen on --listen-address %s: %w; %s", s.cfg.ListenAddress, err, hint)
	}
	return l.(*net.TCPListener), false, nil
}

// handOut serves ln's socket to a holder that restarts, so that it holds
// the same socket again; a failure only costs that.
func (s *Server) handOut(ln *net.TCPListener) *handoff.Server {
	if s.cfg.ListenFrom == "" {
		return nil
	}
	path := filepath.Join(s.cfg.ListenFrom, handoff.FanoutSocket)
	sock, err := ln.SyscallConn()
	var h *handoff.Server
	if err == nil {
		h, err = handoff.Serve(path, sock, s.cfg.Log)
	}
	if err != nil {
		s.cfg.Log.Warn("cannot hand the listening socket to a restarted fanout hold", "error", err)
		return nil
	}
	return h
}

// acceptFrom is the listener Start serves: tl itself, or for an inherited
// loopback socket tl with TCP keep-alive turned off on each accepted
// connection, as listenConfig does for a listener opened here.
func acceptFrom(tl *net.TCPListener, inherited bool) net.Listener {
	if ap, err := netip.ParseAddrPort(tl.Addr().String()); inherited && err == nil && ap.Addr().Unmap().IsLoopback() {
		return noKeepAlive{tl}
	}
	return tl
}

// noKeepAlive turns TCP keep-alive off on accepted connections: an
// inherited listener (net.FileListener) has Go's default, on, as it
// cannot take a ListenConfig.
type noKeepAlive struct{ *net.TCPListener }

func (l noKeepAlive) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	_ = c.SetKeepAlive(false)
	return c, nil
}
