package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// Fanout is a running fanout sidecar.
type Fanout struct {
	Name string
	// ListenAddress serves the client (plain HTTP on loopback);
	// AdminAddress serves /readyz, /metrics and /debug/endpoints.
	ListenAddress string
	AdminAddress  string
	// Kubeconfig is the kubeconfig fanout wrote for its client, and Config
	// the same loaded.
	Kubeconfig string
	Config     *rest.Config
	LogPath    string
	proc       *process
}

// Stop SIGTERMs fanout and waits for it to exit.
func (f *Fanout) Stop() error { return f.proc.stop(30 * time.Second) }

// Running reports whether the process is alive.
func (f *Fanout) Running() bool { return !f.proc.exited() }

// StartFanout runs fanout as a sidecar for the user of userKubeconfig (which
// points at one apiserver, as a user's kubeconfig does), spreading over every
// apiserver of the control plane. It waits for the kubeconfig fanout writes
// for its client and for /readyz on the admin port. name labels the log file.
func (cp *ControlPlane) StartFanout(ctx context.Context, tb testing.TB, name, userKubeconfig string, extraArgs ...string) (*Fanout, error) {
	bin, err := FanoutBinary(ctx, logWriter(cp.logf))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cp.Dir, "fanout-"+fileSafe(name)+"-")
	if err != nil {
		return nil, err
	}
	lo := net.ParseIP("127.0.0.1")
	listenPort, err := freePort(lo)
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort(lo)
	if err != nil {
		return nil, err
	}
	f := &Fanout{
		Name:          name,
		ListenAddress: fmt.Sprintf("127.0.0.1:%d", listenPort),
		AdminAddress:  fmt.Sprintf("127.0.0.1:%d", adminPort),
		Kubeconfig:    filepath.Join(dir, "kubeconfig"),
		LogPath:       filepath.Join(dir, "fanout.log"),
	}
	argv := append([]string{
		bin,
		"--kubeconfig", userKubeconfig,
		"--endpoints", strings.Join(cp.Endpoints(), ","),
		"--listen-address", f.ListenAddress,
		"--admin-address", f.AdminAddress,
		"--write-kubeconfig", f.Kubeconfig,
		// The test host's network namespace stands in for a pod's.
		"--allow-shared-loopback",
	}, extraArgs...)
	proc, err := startProcess("fanout "+name, f.LogPath, argv, nil)
	if err != nil {
		return nil, err
	}
	f.proc = proc
	onCleanup(tb, func() { _ = proc.stop(10 * time.Second) })

	if err := f.waitReady(ctx); err != nil {
		_ = proc.kill()
		return nil, err
	}
	return f, nil
}

func (f *Fanout) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	readyz := "http://" + f.AdminAddress + "/readyz"
	var last string
	for {
		if f.proc.exited() {
			return f.proc.exitError()
		}
		last = f.probe(client, readyz)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fanout %s not ready after a minute: %s; last lines of %s:\n%s", f.Name, last, f.LogPath, tail(f.LogPath, 25))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probe returns "" when the written kubeconfig loads and /readyz is 200, or
// what is still missing.
func (f *Fanout) probe(client *http.Client, readyz string) string {
	if _, err := os.Stat(f.Kubeconfig); err != nil {
		return "kubeconfig not written yet"
	}
	cfg, err := RESTConfig(f.Kubeconfig)
	if err != nil {
		return err.Error()
	}
	resp, err := client.Get(readyz)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("GET %s: %s", readyz, resp.Status)
	}
	f.Config = cfg
	return ""
}
