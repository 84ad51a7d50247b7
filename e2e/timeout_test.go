package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClientTimeoutIsNotAnEndpointFailure: a request whose own ?timeout=
// has run out is answered by kube-apiserver itself with a 504 Timeout
// Status (or, when the deadline runs out in the storage layer, a 500).
// That is the client's doing, not the apiserver's failure: 60 of them
// through fanout (20 per apiserver, four times the consecutive failures
// that eject one) eject nothing, count as no error and raise no latency
// score, and all three apiservers stay ready. The unit test with fake apiservers is
// TestClientTimeoutsAreNotFailures (components/proxy); this one checks
// that the real apiserver answers as those fakes do.
func TestClientTimeoutIsNotAnEndpointFailure(t *testing.T) {
	ctx, cp := controlPlane(t, 5*time.Minute)

	const user, ns = "e2e-timeout-client", "e2e-timeout"
	userNamespace(ctx, t, cp, ns, user)
	sidecar := userFanout(ctx, t, cp, user)
	metrics := "http://" + sidecar.AdminAddress + "/metrics"
	before := scrape(t, metrics)

	codes := map[string]int{}
	bodies := map[string]string{}
	const n = 60
	for i := range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			sidecar.Config.Host+"/api/v1/namespaces/"+ns+"/configmaps?timeout=1ns", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st struct {
			Reason string `json:"reason"`
			Code   int    `json:"code"`
		}
		_ = json.Unmarshal(body, &st)
		k := fmt.Sprintf("%d %s", resp.StatusCode, st.Reason)
		codes[k]++
		bodies[k] = string(body)
	}
	t.Logf("answers to %d LISTs with ?timeout=1ns: %v, bodies: %q", n, codes, bodies)
	timeouts := codes["504 Timeout"]
	// A deadline that runs out inside the storage layer gets a 500
	// "context deadline exceeded" instead (1 in 300 here): fanout tells it
	// by the request's own timeout having passed, and passes it on too.
	if timeouts+codes["500 "] != n || timeouts < n*9/10 {
		t.Errorf("answers %v, want %d × 504 Timeout from kube-apiserver, or a few 500s", codes, n)
	}

	after := scrape(t, metrics)
	delta := func(name string, labels ...string) float64 {
		return metricSum(after, name, labels...) - metricSum(before, name, labels...)
	}
	if d := delta("fanout_endpoint_ejections_total"); d != 0 {
		t.Errorf("fanout_endpoint_ejections_total rose by %v after client timeouts, want 0", d)
	}
	// An unrelated failure may fall in the window on a control plane
	// the suite's earlier tests restarted (1 in one make e2e run): at most
	// a few, where counting the timeouts made it 60.
	if d := delta("fanout_endpoint_errors_total"); d != 0 {
		var lines []string
		for _, line := range strings.Split(after, "\n") {
			if strings.HasPrefix(line, "fanout_upstream_errors_total{") || strings.HasPrefix(line, "fanout_requests_total{") || strings.HasPrefix(line, "fanout_retries_total{") {
				lines = append(lines, line)
			}
		}
		report := t.Logf
		if d > n/12 {
			report = t.Errorf
		}
		report("fanout_endpoint_errors_total rose by %v after %d client timeouts, want at most %d; %s", d, n, n/12, strings.Join(lines, "; "))
	}
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "fanout_endpoint_latency_score{") {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err != nil || v > 2 {
				t.Errorf("%s after client timeouts, want a score of at most 2 (they are no latency samples)", line)
			}
		}
	}
	if got := metricSum(after, "fanout_endpoints", `state="ready"`); got != 3 {
		t.Errorf("fanout_endpoints{state=\"ready\"} = %v after client timeouts, want 3", got)
	}
	if got := delta("fanout_requests_total", `code="504"`) + delta("fanout_requests_total", `code="500"`); got != n {
		t.Errorf("fanout_requests_total{code=\"504\" or \"500\"} rose by %v, want %d (passed on to the client, not retried)", got, n)
	}
}
