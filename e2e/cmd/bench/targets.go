package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	fanoutclient "github.com/fanout-dev/fanout/client"
	"github.com/fanout-dev/fanout/e2e/harness"
)

// The two paths beside direct, fanout and HAProxy.
const (
	// targetLibrary is fanout linked into the client (package client,
	// issue 11): the load generator's own requests go through
	// client.New's RoundTripper, over HTTP/2 mTLS to all three backends.
	// There is no proxy process: its CPU is the load generator's beyond
	// direct's (see OverheadRow.CPUPer10k).
	targetLibrary = "library"
	// targetFanoutTLS is fanout with --listen-tls (issue 12): the client
	// speaks HTTP/2 over TLS to fanout with the loopback CA and client
	// certificate of the kubeconfig fanout writes, one connection for all
	// requests instead of one per concurrent request.
	targetFanoutTLS = "fanout-tls"
	// targetFanoutNoCost is fanout with its cost table off
	// (--cost-table-size=0, issue 34): beside fanout in one run it shows
	// what the table costs at saturation. Not measured unless -targets
	// names it.
	targetFanoutNoCost = "fanout-nocost"
)

// inProcess reports whether target has no proxy process of its own: its
// cost shows in the load generator's own CPU.
func inProcess(target string) bool { return target == targetDirect || target == targetLibrary }

// selfUsage reads the benchmark process's own CPU and memory.
func selfUsage() (ProcUsage, error) { return ReadProc(os.Getpid()) }

// startLibrary starts fanout's library for the fast backends with the
// bench's client certificate and CA, as a program would with
// client.New(restConfig, client.WithEndpoints(...)).
func (env *overheadEnv) startLibrary() (*fanoutclient.Balancer, error) {
	var eps []string
	for _, b := range env.backends {
		eps = append(eps, "https://"+b)
	}
	cfg := &rest.Config{
		Host: "https://" + env.backends[0],
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   env.pki.CA.CertFile,
			CertData: env.pki.Admin.CertPEM,
			KeyData:  env.pki.Admin.KeyPEM,
		},
	}
	return fanoutclient.New(cfg, fanoutclient.WithEndpoints(strings.Join(eps, ",")),
		fanoutclient.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

// wrapLibrary is the user's kubeconfig wrapped by the library, balancing
// over endpoints (https URLs); stop closes it.
func wrapLibrary(kubeconfig string, endpoints []string) (*rest.Config, func(), error) {
	cfg, err := harness.RESTConfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	wrapped, closer, err := fanoutclient.Wrap(cfg, fanoutclient.WithEndpoints(strings.Join(endpoints, ",")),
		fanoutclient.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nil, nil, fmt.Errorf("client.Wrap: %w", err)
	}
	return wrapped, func() { _ = closer.Close() }, nil
}

// settledRSSKiB is the process's VmRSS after a GC that returns freed
// memory to the OS, so that two readings differ by what is really held.
func settledRSSKiB() (uint64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	u, err := selfUsage()
	return u.RSSKiB, err
}

// libraryIdle starts the library and returns how much the process's settled RSS grew while the
// library started and idled for wait (probes running, no requests).
func (env *overheadEnv) libraryIdle(ctx context.Context, wait time.Duration) (_ *fanoutclient.Balancer, idleKiB float64, err error) {
	before, err := settledRSSKiB()
	if err != nil {
		return nil, 0, err
	}
	lib, err := env.startLibrary()
	if err != nil {
		return nil, 0, err
	}
	sleepCtx(ctx, wait)
	after, err := settledRSSKiB()
	if err != nil {
		_ = lib.Close()
		return nil, 0, err
	}
	return lib, float64(after) - float64(before), nil
}

// StartFanoutTLS runs fanout with --listen-tls and --write-kubeconfig and
// returns it with Proc.ClientTLS set from the kubeconfig it wrote: the
// loopback CA and the client certificate it requires.
func StartFanoutTLS(ctx context.Context, bin, dir, name, kubeconfig string, endpoints []string) (*Proc, error) {
	written := filepath.Join(dir, name+"-client-kubeconfig")
	p, err := startFanout(ctx, bin, dir, name, kubeconfig, endpoints, "https", "--listen-tls", "--write-kubeconfig", written)
	if err != nil {
		return nil, err
	}
	// fanout writes the file once its listener is ready; /readyz may
	// pass a moment earlier.
	var cfg *rest.Config
	deadline := time.Now().Add(30 * time.Second)
	for {
		if cfg, err = harness.RESTConfig(written); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil || p.exited() {
			p.Stop()
			return nil, fmt.Errorf("fanout --listen-tls wrote no usable kubeconfig at %s: %w", written, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p.ClientTLS, err = rest.TLSConfigFor(cfg); err != nil {
		p.Stop()
		return nil, fmt.Errorf("TLS config from %s: %w", written, err)
	}
	if want := strings.TrimPrefix(cfg.Host, "https://"); want != strings.TrimPrefix(p.URL, "https://") {
		p.Stop()
		return nil, fmt.Errorf("fanout wrote server %s, want %s", cfg.Host, p.URL)
	}
	return p, nil
}

// proxyClient is how the load generator talks to a proxy process: plain
// HTTP/1.1 with client-go's keep-alive pool, or, when the proxy serves TLS
// (fanout --listen-tls), HTTP/2 over it as client-go does to an https://
// server.
func proxyClient(p *Proc, idlePerHost int) *http.Client {
	if p.ClientTLS != nil {
		return newH2Client(p.ClientTLS)
	}
	return newH1Client(idlePerHost)
}

// connCount counts a client's connections: dialed ever and open now. Over
// HTTP/2, requests that start together before the first connection is up
// may each dial one, and net/http then closes the surplus: the open count
// is the one that says how many connections the client holds.
type connCount struct {
	dialed, open atomic.Int64
}

// countConns makes c's transport count its connections in n.
func countConns(c *http.Client, n *connCount) {
	tr := c.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		n.dialed.Add(1)
		n.open.Add(1)
		return &countedConn{Conn: conn, n: n}, nil
	}
}

type countedConn struct {
	net.Conn
	n      *connCount
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if !c.closed.Swap(true) {
		c.n.open.Add(-1)
	}
	return c.Conn.Close()
}
