// Package handoff passes a listening TCP socket between two processes of
// one pod over a unix socket, as SCM_RIGHTS ancillary data, so that the
// socket outlives either process: `fanout hold` keeps it open while fanout
// restarts (connection attempts wait in the kernel's accept backlog
// instead of being refused), and fanout keeps its own copy while the
// holder restarts.
//
// Each side serves the copy it holds on a unix socket of its own in a
// directory both mount (an emptyDir): HolderSocket for the holder,
// FanoutSocket for fanout. A peer gets a duplicate of the listening
// socket's descriptor and nothing else: the server reads nothing from it,
// and hands out only to a peer of its own user ID (SO_PEERCRED), on a
// socket file of mode 0600.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The socket files in the shared directory.
const (
	// HolderSocket is where `fanout hold` hands out the socket it holds.
	HolderSocket = "hold.sock"
	// FanoutSocket is where fanout hands out the socket it serves on, for
	// a holder that restarted.
	FanoutSocket = "fanout.sock"
)

// writeTimeout bounds one hand-out, so that a peer that never reads
// cannot hold the server up.
const writeTimeout = time.Second

// Socket gives access to the descriptor to hand out, as syscall.RawConn
// does (a *net.TCPListener's SyscallConn) and as FD does for a descriptor
// the poller does not know.
type Socket interface {
	Control(f func(fd uintptr)) error
}

// FD is a raw descriptor as a Socket. `fanout hold` keeps its socket as
// one, out of Go's poller: a poller-registered listener would wake the
// holder for every client connection that arrives.
type FD int

// Control calls f with the descriptor.
func (d FD) Control(f func(fd uintptr)) error {
	f(uintptr(d))
	return nil
}

// Server hands out duplicates of a listening socket on a unix socket.
type Server struct {
	ln   *net.UnixListener
	sock Socket
	log  *slog.Logger
	done chan struct{}
}

// Serve listens on the unix socket path (replacing a stale file a dead
// process left) and hands a duplicate of sock's descriptor to each peer of
// this process's user ID until Close. A nil log discards.
func Serve(path string, sock Socket, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale socket file %s: %w", path, err)
	}
	uln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w; is the directory writable (an emptyDir both containers mount)?", path, err)
	}
	// Peers are checked by user ID anyway; the mode keeps other users
	// from even connecting.
	if err := os.Chmod(path, 0o600); err != nil {
		_ = uln.Close()
		return nil, err
	}
	s := &Server{ln: uln, sock: sock, log: log, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

func (s *Server) serve() {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		if err := s.handOut(c); err != nil {
			s.log.Warn("listening socket not handed out", "socket", s.ln.Addr().String(), "error", err)
		}
		_ = c.Close()
	}
}

// handOut sends one duplicate of the socket to c's peer, if it is ours.
func (s *Server) handOut(c *net.UnixConn) error {
	if err := samePeer(c, "peer runs as"); err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	var werr error
	if err := s.sock.Control(func(fd uintptr) {
		// The kernel duplicates fd into the peer as it receives it.
		_, _, werr = c.WriteMsgUnix([]byte{'L'}, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return fmt.Errorf("the listening socket is closed: %w", err)
	}
	return werr
}

// Close stops handing out and removes the socket file; the listening
// socket itself is the caller's.
func (s *Server) Close() error {
	err := s.ln.Close()
	<-s.done
	return err
}

// Fetch asks the server on the unix socket path for its listening socket,
// retrying while nobody listens there yet, until ctx is done. It checks
// that the server runs as this process's user and that what it got is a
// listening TCP socket, and returns the descriptor (close-on-exec), which
// is the caller's to close; Listener makes it a *net.TCPListener.
func Fetch(ctx context.Context, path string) (FD, error) {
	for {
		fd, err := fetchOnce(ctx, path)
		if err == nil || !(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return fd, err
		}
		afterFailedAttempt()
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w (%v)", err, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// afterFailedAttempt is called after each attempt of Fetch that found
// nobody serving; tests replace it to serve only then.
var afterFailedAttempt = func() {}

func fetchOnce(ctx context.Context, path string) (FD, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	c := conn.(*net.UnixConn)
	if err := samePeer(c, path+" is served by"); err != nil {
		return -1, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob) // Go sets MSG_CMSG_CLOEXEC
	if err != nil {
		return -1, fmt.Errorf("reading from %s: %w", path, err)
	}
	fds, err := parseRights(oob[:oobn])
	if err != nil {
		return -1, fmt.Errorf("reading from %s: %w", path, err)
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return -1, fmt.Errorf("%s sent %d descriptors, want 1", path, len(fds))
	}
	if err := checkListening(fds[0]); err != nil {
		_ = unix.Close(fds[0])
		return -1, fmt.Errorf("%s: %w", path, err)
	}
	return FD(fds[0]), nil
}

// Listener makes fd a *net.TCPListener and closes fd (the listener holds
// a duplicate).
func Listener(fd FD) (*net.TCPListener, error) {
	f := os.NewFile(uintptr(fd), "inherited listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		_ = ln.Close()
		return nil, fmt.Errorf("got a %T, want a TCP listener", ln)
	}
	return tl, nil
}

// Bind opens a listening TCP socket on addr (host:port, the host an IP
// address or a name that resolves to one) as net.Listen would
// (SO_REUSEADDR, the backlog net.core.somaxconn allows), but as a raw
// descriptor kept out of Go's poller: the holder never accepts on it.
func Bind(addr string) (FD, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return -1, err
	}
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip4 := ta.IP.To4(); ip4 != nil || ta.IP == nil {
		a := &unix.SockaddrInet4{Port: ta.Port}
		copy(a.Addr[:], ip4)
		sa = a
	} else {
		family = unix.AF_INET6
		a := &unix.SockaddrInet6{Port: ta.Port}
		copy(a.Addr[:], ta.IP.To16())
		sa = a
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		_ = unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Close(fd)
		return -1, &net.OpError{Op: "listen", Net: "tcp", Addr: ta, Err: os.NewSyscallError("bind", err)}
	}
	// The kernel caps the backlog at net.core.somaxconn (4096 by default
	// since Linux 5.4): that many connections can wait for fanout.
	if err := unix.Listen(fd, 1<<16-1); err != nil {
		_ = unix.Close(fd)
		return -1, os.NewSyscallError("listen", err)
	}
	return FD(fd), nil
}

// Backlog reads a listening socket's accept queue from the kernel
// (TCP_INFO): how many connections wait in it to be accepted, and how many
// it takes (the backlog listen asked for, capped at net.core.somaxconn of
// the network namespace at that time). Beyond the limit the kernel drops
// a new connection's handshake and the client sends it again, 1 s later
// and then at doubling intervals: late, not refused.
func Backlog(sock Socket) (queued, limit int, err error) {
	var info *unix.TCPInfo
	var ierr error
	if err := sock.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return 0, 0, err
	}
	if ierr != nil {
		return 0, 0, os.NewSyscallError("getsockopt TCP_INFO", ierr)
	}
	const tcpListen = 10 // TCP_LISTEN, include/net/tcp_states.h
	if info.State != tcpListen {
		return 0, 0, fmt.Errorf("the socket is in TCP state %d, not listening", info.State)
	}
	// For a listening socket the kernel reports the accept queue in
	// these two fields.
	return int(info.Unacked), int(info.Sacked), nil
}

// Addr is the address fd is bound to.
func Addr(fd FD) (*net.TCPAddr, error) {
	sa, err := unix.Getsockname(int(fd))
	if err != nil {
		return nil, os.NewSyscallError("getsockname", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}, nil
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}, nil
	}
	return nil, fmt.Errorf("bound to a %T, want an internet address", sa)
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// checkListening refuses a descriptor that is not a listening stream
// socket of the internet families.
func checkListening(fd int) error {
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("not a socket: %w", err)
	}
	typ, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	acc, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if (domain != unix.AF_INET && domain != unix.AF_INET6) || typ != unix.SOCK_STREAM || acc != 1 {
		return fmt.Errorf("got a socket of domain %d, type %d, listening %d; want a listening TCP socket", domain, typ, acc)
	}
	return nil
}

// getuid is os.Getuid; a test makes the peer another user with it.
var getuid = os.Getuid

// samePeer refuses c's peer unless it runs as this process's user (by
// SO_PEERCRED, which the kernel fills in: the peer cannot lie). Both sides
// of a hand-over check; who names the peer in the error.
func samePeer(c *net.UnixConn, who string) error {
	uid, err := peerUID(c)
	if err != nil {
		return err
	}
	if own := getuid(); uid != uint32(own) {
		return fmt.Errorf("%s user %d, not %d: refused", who, uid, own)
	}
	return nil
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	return cred.Uid, nil
}

// SameAddress tells whether a listener bound to got serves want, an
// address as --listen-address gives it (port 0: any port).
func SameAddress(got net.Addr, want string) bool {
	ta, ok := got.(*net.TCPAddr)
	if !ok {
		return false
	}
	w, err := net.ResolveTCPAddr("tcp", want)
	if err != nil {
		return false
	}
	if w.Port != 0 && w.Port != ta.Port {
		return false
	}
	if w.IP == nil || w.IP.IsUnspecified() {
		return ta.IP == nil || ta.IP.IsUnspecified()
	}
	return w.IP.Equal(ta.IP)
}
