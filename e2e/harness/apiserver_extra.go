package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

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
