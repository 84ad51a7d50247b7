package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fanout-dev/fanout/internal/handoff"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// restartRig runs the fanout binary (and `fanout hold`) on fixed ports in
// front of a TLS upstream, so that it can be killed and started again on
// the same address, as the kubelet restarts a container.
type restartRig struct {
	t                   *testing.T
	bin, kubeconfig     string
	dir                 string // --listen-from / --socket-dir
	listen, admin       string // host:port
	written             string
	fanout, holder      *exec.Cmd
	fanoutLog, holdLogs *testkit.Buffer
}

func newRestartRig(t *testing.T, bin string, h http.Handler) *restartRig {
	t.Helper()
	ca := testkit.NewCA(t)
	upstream := tlsUpstream(t, ca, h)
	dir := t.TempDir()
	r := &restartRig{t: t, bin: bin, dir: t.TempDir(),
		kubeconfig: clientKubeconfig(t, dir, ca, "restart", upstream.URL),
		listen:     freePort(t), admin: freePort(t),
		written: filepath.Join(dir, "client.kubeconfig"), fanoutLog: &testkit.Buffer{}, holdLogs: &testkit.Buffer{}}
	t.Cleanup(func() {
		for _, c := range []*exec.Cmd{r.fanout, r.holder} {
			if c != nil && c.ProcessState == nil {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}
		if t.Failed() {
			t.Logf("fanout logged:\n%s\nfanout hold logged:\n%s", r.fanoutLog, r.holdLogs)
		}
	})
	return r
}

// freePort is a loopback address nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startFanout starts fanout (with --listen-from when holder) and returns
// once it has written the client's kubeconfig: its listener is serving.
func (r *restartRig) startFanout(withHolder bool) {
	r.t.Helper()
	_ = os.Remove(r.written)
	args := []string{"--kubeconfig", r.kubeconfig, "--listen-address", r.listen, "--admin-address", r.admin,
		"--write-kubeconfig", r.written, "--allow-shared-loopback", "--probe-interval", "0"}
	if withHolder {
		args = append(args, "--listen-from", r.dir)
	}
	r.fanout = exec.Command(r.bin, args...)
	if cg := os.Getenv("FANOUT_RESTART_GAP_CGROUP"); cg != "" {
		// A CPU-starved fanout, as in a pod with a CPU limit on a busy
		// node: the shell joins the cgroup and becomes fanout.
		r.fanout = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg, r.bin}, args...)...)
	}
	r.fanout.Stderr = r.fanoutLog
	if err := r.fanout.Start(); err != nil {
		r.t.Fatal(err)
	}
	testkit.WaitFor(r.t, "fanout to write its kubeconfig", func() bool {
		_, err := os.Stat(r.written)
		return err == nil
	})
}

// startHolder starts `fanout hold` and returns once it hands out.
func (r *restartRig) startHolder() {
	r.t.Helper()
	sock := filepath.Join(r.dir, handoff.HolderSocket)
	_ = os.Remove(sock)
	r.holder = exec.Command(r.bin, "hold", "--socket-dir", r.dir, "--listen-address", r.listen)
	r.holder.Stderr = r.holdLogs
	if err := r.holder.Start(); err != nil {
		r.t.Fatal(err)
	}
	testkit.WaitFor(r.t, "fanout hold to serve "+sock, func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
}

// kill SIGKILLs c and waits until it is gone: its sockets are closed.
func (r *restartRig) kill(c *exec.Cmd) {
	r.t.Helper()
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		r.t.Fatal(err)
	}
	_ = c.Wait()
}

// sendGet writes a GET on a new connection to addr and returns the
// connection, or the dial's error.
func sendGet(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func readAnswer(t *testing.T, c net.Conn) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"kind":"ConfigMapList","apiVersion":"v1","items":[]}`)
	})
}

// TestRestartWithoutHolderRefuses is the gap issue 33 is about: while a
// SIGKILLed fanout is down, a connection to its address is refused.
func TestRestartWithoutHolderRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	r := newRestartRig(t, buildFanout(t), okHandler())
	r.startFanout(false)
	if m := scrape(t, "http://"+r.admin); !strings.Contains(m, "fanout_listener_inherited 0") {
		t.Errorf("/metrics lacks fanout_listener_inherited 0 without --listen-from")
	}
	r.kill(r.fanout)
	if c, err := sendGet(r.listen); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("connecting while fanout is down: %v, want connection refused", err)
	}
}

// TestHolderKeepsConnectionsAcrossRestart: with `fanout hold`, a request
// sent while fanout is dead waits in the backlog and is answered by the
// restarted fanout; and a restarted holder takes the socket back from the
// running fanout, so that the next fanout restart is covered too.
func TestHolderKeepsConnectionsAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	r := newRestartRig(t, buildFanout(t), okHandler())
	r.startHolder()
	r.startFanout(true)
	if m := scrape(t, "http://"+r.admin); !strings.Contains(m, "fanout_listener_inherited 1") {
		t.Fatalf("/metrics lacks fanout_listener_inherited 1 with a holder; fanout logged:\n%s", r.fanoutLog)
	}
	if !strings.Contains(r.fanoutLog.String(), `socket="fanout hold"`) {
		t.Errorf("fanout did not log that its socket came from fanout hold")
	}

	cycle := func(what string) {
		t.Helper()
		r.kill(r.fanout)
		c, err := sendGet(r.listen)
		if err != nil {
			t.Fatalf("%s: sending a request while fanout is down: %v, want it queued", what, err)
		}
		defer c.Close()
		r.startFanout(true)
		if code := readAnswer(t, c); code != http.StatusOK {
			t.Fatalf("%s: the request queued while fanout was down got %d, want 200", what, code)
		}
	}
	cycle("first fanout restart")

	// The holder restarts: it takes the socket from fanout.
	r.kill(r.holder)
	r.startHolder()
	testkit.WaitFor(t, "the restarted holder to log where its socket came from", func() bool {
		return strings.Contains(r.holdLogs.String(), "from=fanout")
	})
	cycle("fanout restart after a holder restart")
}
