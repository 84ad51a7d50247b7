package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var injectorBuild struct {
	once sync.Once
	path string
	err  error
}

// InjectorBinary builds cmd/fanout-injector from the repository root, once
// per process, as FanoutBinary does for fanout.
func InjectorBinary(ctx context.Context, progress io.Writer) (string, error) {
	injectorBuild.once.Do(func() {
		if progress == nil {
			progress = os.Stderr
		}
		modDir, err := ModuleDir()
		if err != nil {
			injectorBuild.err = err
			return
		}
		root := filepath.Dir(modDir)
		dir, err := os.MkdirTemp("", "fanout-e2e-"+runID()+"-")
		if err != nil {
			injectorBuild.err = err
			return
		}
		register(func() { os.RemoveAll(dir) })
		out := filepath.Join(dir, "fanout-injector")
		injectorBuild.err = runWithProgress(ctx, root, []string{"build", "-o", out, "./cmd/fanout-injector"}, progress, "building fanout-injector")
		injectorBuild.path = out
	})
	return injectorBuild.path, injectorBuild.err
}

// Injector is a running fanout-injector, reachable by every apiserver.
type Injector struct {
	// URL is the webhook's /mutate URL on the bridge address, and CABundle
	// the PEM CA that signed its serving certificate.
	URL      string
	CABundle []byte
	// MetricsURL serves /metrics on loopback.
	MetricsURL string
	LogPath    string
	proc       *process
}

// Stop SIGTERMs the injector and waits for it to exit.
func (i *Injector) Stop() error { return i.proc.stop(30 * time.Second) }

// StartInjector runs fanout-injector on the root-namespace side of the test
// network (the bridge address, which every apiserver's namespace routes to),
// with a serving certificate from the cluster CA whose IP SAN is that
// address. It waits until /healthz answers over TLS.
func (cp *ControlPlane) StartInjector(ctx context.Context, tb testing.TB, extraArgs ...string) (*Injector, error) {
	bin, err := InjectorBinary(ctx, logWriter(cp.logf))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cp.Dir, "fanout-injector-")
	if err != nil {
		return nil, err
	}
	ip := cp.Net.BridgeIP
	serving, err := issue(dir, "serving", cp.PKI.CA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "fanout-injector"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{ip},
	})
	if err != nil {
		return nil, err
	}
	port, err := freePort(ip)
	if err != nil {
		return nil, err
	}
	metricsPort, err := freePort(net.ParseIP("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(ip.String(), fmt.Sprint(port))
	inj := &Injector{
		URL:        "https://" + addr + "/mutate",
		CABundle:   cp.PKI.CA.CertPEM,
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		LogPath:    filepath.Join(dir, "fanout-injector.log"),
	}
	argv := append([]string{
		bin,
		"--listen-address", addr,
		"--metrics-address", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--tls-cert-file", serving.CertFile,
		"--tls-private-key-file", serving.KeyFile,
	}, extraArgs...)
	proc, err := startProcess("fanout-injector", inj.LogPath, argv, nil)
	if err != nil {
		return nil, err
	}
	inj.proc = proc
	onCleanup(tb, func() { _ = proc.stop(10 * time.Second) })

	pool := x509.NewCertPool()
	pool.AddCert(cp.PKI.CA.Cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		if proc.exited() {
			return nil, fmt.Errorf("fanout-injector exited: %v; last lines of %s:\n%s", proc.exitError(), inj.LogPath, tail(inj.LogPath, 25))
		}
		resp, err := client.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return inj, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = proc.kill()
			return nil, fmt.Errorf("fanout-injector /healthz not answering after a minute (%v); last lines of %s:\n%s", err, inj.LogPath, tail(inj.LogPath, 25))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RunFanout starts fanout with exactly args, e.g. the arguments of an
// injected sidecar with its paths and ports mapped to the test host. Unlike
// StartFanout it waits for nothing: the caller probes what it needs.
func (cp *ControlPlane) RunFanout(ctx context.Context, tb testing.TB, name string, args []string) (*Fanout, error) {
	bin, err := FanoutBinary(ctx, logWriter(cp.logf))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cp.Dir, "fanout-"+fileSafe(name)+"-")
	if err != nil {
		return nil, err
	}
	f := &Fanout{Name: name, LogPath: filepath.Join(dir, "fanout.log")}
	proc, err := startProcess("fanout "+name, f.LogPath, append([]string{bin}, args...), nil)
	if err != nil {
		return nil, err
	}
	f.proc = proc
	onCleanup(tb, func() { _ = proc.stop(10 * time.Second) })
	return f, nil
}

// FreeLoopbackPort returns a TCP port on 127.0.0.1 that nothing listens on
// right now.
func FreeLoopbackPort() (int, error) { return freePort(net.ParseIP("127.0.0.1")) }
