package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RestartWith stops the apiserver gracefully and starts it again with
// extraArgs appended to its command line (later flags win), e.g. lowered
// --max-requests-inflight. The arguments stay for later Starts; call
// RestartWith with none to go back to the original command line.
func (a *APIServer) RestartWith(ctx context.Context, extraArgs ...string) error {
	if err := a.Stop(); err != nil {
		return err
	}
	a.mu.Lock()
	if a.baseArgv == nil {
		a.baseArgv = a.argv
	}
	a.argv = append(append([]string(nil), a.baseArgv...), extraArgs...)
	a.mu.Unlock()
	return a.Start(ctx)
}

// RestartFrom stops the apiserver gracefully and starts binary in its
// place, at the same address with the same flags, and waits until it is
// ready: one step of a rolling upgrade. Later Starts run binary too.
func (a *APIServer) RestartFrom(ctx context.Context, binary string) error {
	if err := a.Stop(); err != nil {
		return err
	}
	a.mu.Lock()
	a.argv = slices.Clone(a.argv)
	a.argv[a.binIndex] = binary
	if a.baseArgv != nil {
		a.baseArgv = slices.Clone(a.baseArgv)
		a.baseArgv[a.binIndex] = binary
	}
	a.mu.Unlock()
	return a.Start(ctx)
}

// Binary returns the kube-apiserver binary the apiserver runs.
func (a *APIServer) Binary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.argv[a.binIndex]
}

// Version returns what the running apiserver reports on /version, read
// with the admin credentials. Binaries built with plain go build (as the
// harness builds them) report gitVersion v0.0.0-master; EmulationMajor and
// EmulationMinor tell the release (its compatibility version by default).
func (a *APIServer) Version(ctx context.Context) (*version.Info, error) {
	cfg := rest.CopyConfig(a.admin)
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("apiserver %d /version: %w", a.Index+1, err)
	}
	return v, nil
}

// Metric returns the sum of the samples of the Prometheus metric name on
// the apiserver's /metrics whose labels include every one of labels
// (`key="value"` strings), read with the admin credentials.
func (a *APIServer) Metric(ctx context.Context, name string, labels ...string) (float64, error) {
	cfg := rest.CopyConfig(a.admin)
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	body, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("apiserver %d /metrics: %w", a.Index+1, err)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		series := line[:sp]
		for _, l := range labels {
			if !strings.Contains(series, l) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("apiserver %d /metrics: %q: %w", a.Index+1, line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}
