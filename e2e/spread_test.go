package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// mixed is the workload of the spread tests: 3,000 short requests from 8
// goroutines with 20 watches open throughout.
var mixed = workload{requests: 3000, workers: 8, watches: 20}

// TestOneClientThroughFanout is the point of fanout: one client-go client,
// one rest.Config, and its requests spread evenly over every apiserver.
func TestOneClientThroughFanout(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)

	const user = "e2e-fanout-client"
	userNamespace(ctx, t, cp, "e2e-fanout", user)
	sidecar := userFanout(ctx, t, cp, user)

	w := mixed
	w.whileWatching = func() { checkOpenWatches(t, sidecar.AdminAddress, w.watches) }
	res := w.run(ctx, t, sidecar.Config, "e2e-fanout")
	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through fanout: %d requests + %d watches in %s (%d watch events, per watch %v); served: %s",
		res.requests, mixed.watches, res.elapsed.Round(time.Millisecond), res.events, res.perWatch, harness.FormatShares(counts))
	checkServedAll(t, counts, res.requests+int64(mixed.watches))
	mixed.checkWatches(t, res)
	for i, s := range harness.Shares(counts) {
		if s < 0.2833 || s > 0.3833 {
			t.Errorf("apiserver %d served %.1f%% of %s's requests, want 33.3%% ± 5 points (%s)", i+1, 100*s, user, harness.FormatShares(counts))
		}
	}
}

// TestOneClientThroughL4Proxy shows why fanout exists: the same workload
// through a round-robin TCP load balancer lands on one apiserver, because
// client-go multiplexes everything over a single HTTP/2 connection.
func TestOneClientThroughL4Proxy(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)

	const user = "e2e-l4-client"
	kubeconfig, err := cp.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	userNamespace(ctx, t, cp, "e2e-l4", user)
	proxy := startL4ProxyFor(t, cp)

	cfg, err := harness.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The serving certificate covers 127.0.0.1, so TLS verifies through
	// the proxy as it would through a real TCP load balancer's VIP.
	_, port, _ := net.SplitHostPort(proxy.Addr())
	cfg.Host = "https://127.0.0.1:" + port

	res := mixed.run(ctx, t, cfg, "e2e-l4")
	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through the L4 proxy: %d requests + %d watches in %s over %v TCP connections per backend; served: %s",
		res.requests, mixed.watches, res.elapsed.Round(time.Millisecond), proxy.Connections(), harness.FormatShares(counts))
	checkServedAll(t, counts, res.requests+int64(mixed.watches))
	mixed.checkWatches(t, res)
	top := 0.0
	for _, s := range harness.Shares(counts) {
		top = max(top, s)
	}
	if top < 0.9 {
		t.Errorf("busiest apiserver served %.1f%% of %s's requests, want ≥ 90%%: an L4 proxy should pin one HTTP/2 client to one apiserver (%s)",
			100*top, user, harness.FormatShares(counts))
	}
}

// checkServedAll makes sure the audit logs saw at least every request the
// client sent, so the shares describe the whole workload.
func checkServedAll(t *testing.T, counts []int, sent int64) {
	t.Helper()
	total := 0
	for _, c := range counts {
		total += c
	}
	if int64(total) < sent {
		t.Errorf("audit logs show %d requests served, but the client sent %d", total, sent)
	}
}

// checkOpenWatches reads fanout's /debug/endpoints while the client holds
// want watches open: fanout must count every one of them, and spread them
// by open count, at most one apart.
func checkOpenWatches(t *testing.T, admin string, want int) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/endpoints")
	if err != nil {
		t.Fatalf("GET /debug/endpoints: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Endpoints []struct {
			Address      string `json:"address"`
			InflightLong int    `json:"inflight_long"`
		} `json:"endpoints"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decoding /debug/endpoints: %v", err)
	}
	total, lo, hi := 0, want, 0
	var per []string
	for _, e := range body.Endpoints {
		total += e.InflightLong
		lo, hi = min(lo, e.InflightLong), max(hi, e.InflightLong)
		per = append(per, fmt.Sprintf("%s: %d", e.Address, e.InflightLong))
	}
	t.Logf("open watches per apiserver in fanout's /debug/endpoints: %v", per)
	if total != want || hi-lo > 1 || len(body.Endpoints) != 3 {
		t.Errorf("fanout reports open watches %v, want %d over 3 apiservers, at most 1 apart", per, want)
	}
}
