//go:build linux

package proxy

import (
	"net"
	"sync"
	"syscall"
)

// hangups notices clients closing HTTP/1.1 connections with one
// goroutine for all of them: taken-over streams (h1stream.go), where a
// reader goroutine per connection (watchClient) would park 2,000
// goroutines for 2,000 watches, and the connections of fanout's own
// HTTP/1.1 server (h1server.go), where net/http starts a reader goroutine
// per request. It keeps
// an epoll set of its own that asks for the peer's hang-up only
// (EPOLLRDHUP: the client shut its side, as client-go does when it closes
// a watch; EPOLLHUP, EPOLLERR: reset), never for data, so it reads
// nothing and leaves the socket to the copy goroutine and Go's own
// poller. A stream is known by a token, not by its descriptor, so that an
// event racing with the descriptor's reuse finds no stream.
type hangups struct {
	mu      sync.Mutex
	started bool
	epfd    int    // -1: unavailable or stopped; the streams use watchClient
	wake    [2]int // a pipe whose read end (token 0) stops run
	next    int32
	streams map[int32]hangupTarget
}

// hangupTarget is told, once, that its client hung up.
type hangupTarget interface{ hangup() }

// available reports whether connections can be watched: on Linux until
// the watcher failed to start or was stopped. It starts nothing; the
// first register does.
func (w *hangups) available() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.started || w.epfd >= 0
}

// hangupKey is a stream's key in hangups.streams.
type hangupKey struct{ token int32 }

// start makes the epoll set and its goroutine, the first time a stream
// needs them. w.mu is held.
func (w *hangups) start() {
	w.started, w.epfd = true, -1
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	if err := syscall.Pipe2(w.wake[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(epfd)
		return
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: 0}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, w.wake[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(w.wake[0])
		syscall.Close(w.wake[1])
		return
	}
	w.epfd = epfd
	w.streams = make(map[int32]hangupTarget)
	go w.run(epfd, w.wake)
}

// stop ends the goroutine and closes the epoll set; streams taken over
// afterwards read their connections themselves. Handler.WaitLongRunning
// calls it once the streams have ended.
func (w *hangups) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	if w.epfd >= 0 {
		_, _ = syscall.Write(w.wake[1], []byte{0})
		w.epfd = -1
	}
}

// watch registers s's connection for one hang-up, and says false when it
// cannot (no descriptor to watch, or stopped): then the caller reads the
// connection itself.
func (w *hangups) watch(s *h1Stream) bool {
	token, ok := w.register(s.conn, s, syscall.EPOLLONESHOT)
	s.token = token
	return ok
}

// forget drops s before its connection is closed. The kernel removes a
// closed descriptor from the epoll set by itself; forgetting the token is
// what keeps a late event from reaching s.
func (w *hangups) forget(s *h1Stream) { w.drop(s.token) }

// register adds c to the epoll set for t, with flags beside the hang-up
// events (EPOLLONESHOT for a stream; EPOLLET for a server connection,
// which stays registered across its requests), and returns its token.
func (w *hangups) register(c net.Conn, t hangupTarget, flags uint32) (int32, bool) {
	w.mu.Lock()
	if !w.started {
		w.start()
	}
	epfd := w.epfd
	w.mu.Unlock()
	if epfd < 0 {
		return 0, false
	}
	rc, ok := syscallConn(c)
	if !ok {
		return 0, false
	}
	w.mu.Lock()
	if w.epfd < 0 {
		w.mu.Unlock()
		return 0, false
	}
	w.next++
	if w.next <= 0 {
		w.next = 1 // 0 is the wake-up pipe
	}
	token := w.next
	w.streams[token] = t
	var cerr error
	// Under w.mu, so that stop cannot close the set meanwhile.
	err := rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | flags, Fd: token}
		cerr = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	w.mu.Unlock()
	if err != nil || cerr != nil {
		w.drop(token)
		return 0, false
	}
	return token, true
}

// unregister takes c out of the epoll set, for a connection that stays
// open under another owner (a server connection taken over: the stream
// registers it again).
func (w *hangups) unregister(c net.Conn, token int32) {
	w.drop(token)
	rc, ok := syscallConn(c)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epfd < 0 {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
}

func (w *hangups) drop(token int32) {
	w.mu.Lock()
	delete(w.streams, token)
	w.mu.Unlock()
}

func syscallConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

func (w *hangups) run(epfd int, wake [2]int) {
	defer func() {
		syscall.Close(epfd)
		syscall.Close(wake[0])
		syscall.Close(wake[1])
	}()
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd == 0 {
				return // stop
			}
			w.mu.Lock()
			s := w.streams[ev.Fd]
			delete(w.streams, ev.Fd)
			w.mu.Unlock()
			if s != nil {
				s.hangup()
			}
		}
	}
}

// rawConn is the TCP connection under net/http's: through TLS
// (--listen-tls with an HTTP/1.1 client) and the listener's limit.
func rawConn(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}
