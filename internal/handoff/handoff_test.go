package handoff

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func bind(t *testing.T) FD {
	t.Helper()
	fd, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(int(fd)) })
	return fd
}

func serve(t *testing.T, path string, sock Socket) {
	t.Helper()
	s, err := Serve(path, sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
}

// TestHandOver: what Fetch gets is the held socket itself: a connection
// made to the holder's address is accepted on it, and the socket stays
// open in the holder when the fetcher closes its copy.
func TestHandOver(t *testing.T) {
	held := bind(t)
	addr, err := Addr(held)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), HolderSocket)
	serve(t, path, held)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file %v, %v: want mode 0600", fi, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fd, err := Fetch(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listener(fd)
	if err != nil {
		t.Fatal(err)
	}
	if ln.Addr().String() != addr.String() {
		t.Fatalf("fetched a listener on %s, want the held %s", ln.Addr(), addr)
	}
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	ln.Close()
	// The fetcher's copy is gone; the holder's still takes connections
	// into its backlog.
	c2, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("after the fetcher closed its copy: %v, want the connection queued on the holder's", err)
	}
	c2.Close()
}

// TestFetchWaitsForTheServer: at a pod's start the holder may bind just
// after fanout asks; Fetch retries until its context ends.
func TestFetchWaitsForTheServer(t *testing.T) {
	held := bind(t)
	path := filepath.Join(t.TempDir(), HolderSocket)
	failed := make(chan struct{})
	var once sync.Once
	afterFailedAttempt = func() { once.Do(func() { close(failed) }) }
	t.Cleanup(func() { afterFailedAttempt = func() {} })
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fd, err := Fetch(ctx, path)
		if err == nil {
			_ = unix.Close(int(fd))
		}
		got <- err
	}()
	select {
	case <-failed:
	case err := <-got:
		t.Fatalf("Fetch returned %v before anybody served, want it to retry", err)
	}
	serve(t, path, held)
	if err := <-got; err != nil {
		t.Fatalf("Fetch before the server listened: %v, want the socket once it does", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	missing := filepath.Join(t.TempDir(), HolderSocket)
	if _, err := Fetch(ctx, missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Fetch with nobody serving: %v, want an error naming the socket once the context ends", err)
	}
}

// TestFetchRefusesWhatIsNotAListener: a descriptor that is not a
// listening TCP socket is refused, not served on.
func TestFetchRefusesWhatIsNotAListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), HolderSocket)
	serve(t, path, raw)
	fetchRefused(t, path, "want a listening TCP socket")
}

// fetchRefused checks that Fetch from path fails, saying want.
func fetchRefused(t *testing.T, path, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fd, err := Fetch(ctx, path)
	if err == nil {
		_ = unix.Close(int(fd))
		t.Fatalf("Fetch from %s took a socket, want a refusal saying %q", path, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Fetch: %v, want it to say %q", err, want)
	}
}

// TestServeReplacesAStaleFile: a process killed while serving leaves its
// socket file behind; the next one serves in its place.
func TestServeReplacesAStaleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FanoutSocket)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	serve(t, path, bind(t))
	fetchOK(t, path)
}

// fetchOK checks that Fetch from path gets a socket, and closes it.
func fetchOK(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fd, err := Fetch(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(int(fd))
}

func TestSameAddress(t *testing.T) {
	got := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7080}
	for _, c := range []struct {
		want string
		same bool
	}{
		{"127.0.0.1:7080", true},
		{"127.0.0.1:0", true},
		{"127.0.0.1:7081", false},
		{"127.0.0.2:7080", false},
		{"[::1]:7080", false},
		{"nonsense", false},
	} {
		if SameAddress(got, c.want) != c.same {
			t.Errorf("SameAddress(%s, %q) = %v, want %v", got, c.want, !c.same, c.same)
		}
	}
}

// asOtherUser makes this process check its peers as if it ran as another
// user, so that every peer is of a foreign user ID, until t ends. Call it
// before starting a server: its goroutine reads getuid.
func asOtherUser(t *testing.T) {
	t.Helper()
	getuid = func() int { return os.Getuid() + 1 }
	t.Cleanup(func() { getuid = os.Getuid })
}

// TestOtherUserRefused: the server hands nothing to a peer of another user
// ID (it reads the peer's credentials, closes, and logs why), and Fetch
// takes nothing from a server of another user ID.
func TestOtherUserRefused(t *testing.T) {
	start := func(t *testing.T) (string, *testkit.Buffer) {
		path := filepath.Join(t.TempDir(), HolderSocket)
		logged := &testkit.Buffer{}
		s, err := Serve(path, bind(t), slog.New(slog.NewTextHandler(logged, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() }) // before asOtherUser's cleanup
		return path, logged
	}
	t.Run("server refuses the peer", func(t *testing.T) {
		asOtherUser(t)
		path, logged := start(t)
		// A plain client, without Fetch's own check of the server.
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		oob := make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := c.ReadMsgUnix(make([]byte, 1), oob)
		if n != 0 || oobn != 0 {
			t.Fatalf("a peer of another user got %d bytes and %d of control data (%v), want the connection closed with nothing", n, oobn, err)
		}
		testkit.WaitFor(t, "the refusal in the server's log", func() bool {
			return strings.Contains(logged.String(), "peer runs as user")
		})
	})
	t.Run("Fetch refuses the server", func(t *testing.T) {
		asOtherUser(t)
		path, _ := start(t)
		fetchRefused(t, path, "is served by user")
	})
	t.Run("same user", func(t *testing.T) {
		path, _ := start(t)
		fetchOK(t, path)
	})
}

// TestBacklog: a bound socket takes as many connections as
// net.core.somaxconn allows (Bind asks for more), and those made while
// nobody accepts wait in its queue.
func TestBacklog(t *testing.T) {
	held := bind(t)
	raw, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		t.Skip(err)
	}
	somaxconn, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	queued, limit, err := Backlog(held)
	if err != nil {
		t.Fatal(err)
	}
	if want := min(somaxconn, 1<<16-1); queued != 0 || limit != want {
		t.Errorf("Backlog: %d queued, limit %d; want 0 and %d (net.core.somaxconn)", queued, limit, want)
	}
	addr, err := Addr(held)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if queued, _, err := Backlog(held); err != nil || queued != 3 {
		t.Errorf("after 3 connections nobody accepted: %d queued (%v), want 3", queued, err)
	}
	if _, _, err := Backlog(FD(-1)); err == nil {
		t.Error("Backlog of no socket: no error")
	}
}
