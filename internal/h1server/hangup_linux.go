//go:build linux

package h1server

import (
	"net"
	"sync"
	"syscall"
)

// hangups notices clients closing their connections with one goroutine
// for all of them, where net/http starts a reader goroutine per request
// (its "background read"): the connections being served, for their whole
// life, and the detached streams (stream.go), whose connections stay
// registered under the stream. It keeps an epoll set of its own that asks
// for the peer's hang-up only (EPOLLRDHUP: the client shut its side, as
// client-go does when it closes a watch; EPOLLHUP, EPOLLERR: reset), never
// for data, so it reads nothing and leaves the socket to its reader and
// Go's own poller. A connection is known by a token, not by its
// descriptor, so that an event racing with the descriptor's reuse finds
// nothing. Edge-triggered: a connection is told once.
type hangups struct {
	mu      sync.Mutex
	started bool
	epfd    int    // -1: unavailable or stopped
	wake    [2]int // a pipe whose read end (token 0) stops run
	next    int32
	streams map[int32]hangupTarget
}

// epollET is EPOLLET, which package syscall declares as a negative int.
const epollET = uint32(1) << 31

// start makes the epoll set and its goroutine, the first time a connection
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

// stop ends the goroutine and closes the epoll set; connections served
// afterwards are not watched, and streams read their connections
// themselves. Server.Shutdown calls it once everything ended.
func (w *hangups) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	if w.epfd >= 0 {
		_, _ = syscall.Write(w.wake[1], []byte{0})
		w.epfd = -1
	}
}

// register adds c to the epoll set for t and returns its token; false
// when it cannot (no descriptor to watch, or the watcher failed to start
// or stopped).
func (w *hangups) register(c net.Conn, t hangupTarget) (int32, bool) {
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
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | epollET, Fd: token}
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
// open under another owner (Hijack).
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

// retarget makes token's hang-up reach t instead, and says false when it
// no longer has one (the hang-up came already, or the watcher stopped).
func (w *hangups) retarget(token int32, t hangupTarget) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.streams[token]; !ok || w.epfd < 0 {
		return false
	}
	w.streams[token] = t
	return true
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
