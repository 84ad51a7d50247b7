package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	fwatch "github.com/fanout-dev/fanout/components/watch"
	"github.com/fanout-dev/fanout/internal/testkit"
)

const costUA = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/system:serviceaccount:kube-system:configmap-controller"

// TestCostTable: the handler reports each request to the cost table once,
// with the code, the class of error, the retries, the bytes each way and,
// for a watch, the open gauge and the events passed on.
func TestCostTable(t *testing.T) {
	release := make(chan struct{})
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			for range 3 {
				io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"5"}}}`+"\n")
			}
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case strings.HasSuffix(r.URL.Path, "/missing"):
			http.Error(w, "nope", http.StatusNotFound)
		case r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			w.Write(b)
		default:
			io.WriteString(w, "0123456789")
		}
	}), false)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	// The first endpoint is not there: every request is retried once, on
	// addr.
	p := proxytest.NewPicker("10.255.0.1:6443", addr)
	tab, err := cost.New(cost.Config{Size: 100, MetricsTop: 10})
	if err != nil {
		t.Fatal(err)
	}
	reb, err := fwatch.NewRebalancer(fwatch.RebalanceConfig{}, noLoads{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, base := startProxy(t, Config{Cost: tab, Rebalancer: reb}, p, u, nil)
	_, _, noneBase := startProxy(t, Config{Cost: tab}, proxytest.NewPicker(), proxytest.NewUpstream(), nil)

	do := func(method, url, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", costUA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	drain := func(resp *http.Response) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	drain(do("GET", base+"/api/v1/namespaces/ns/configmaps/x", ""))
	drain(do("GET", base+"/api/v1/namespaces/ns/configmaps/missing", ""))
	drain(do("POST", base+"/api/v1/namespaces/ns/configmaps", "abcde"))
	drain(do("GET", noneBase+"/api/v1/namespaces/ns/configmaps/x", ""))

	watch := do("GET", base+"/api/v1/configmaps?watch=true", "")
	buf := make([]byte, 1)
	if _, err := io.ReadFull(watch.Body, buf); err != nil {
		t.Fatal(err)
	}
	const component = "kube-controller-manager/configmap-controller"
	find := func(verb string) cost.RowSnapshot {
		t.Helper()
		for _, r := range tab.Snapshot().Rows {
			if r.Component == component && r.Verb == verb && r.Resource == "configmaps" {
				return r
			}
		}
		t.Fatalf("no %s configmaps row for %s in %+v", verb, component, tab.Snapshot().Rows)
		return cost.RowSnapshot{}
	}
	w := find("watch")
	if w.Requests != 1 || w.WatchesOpen != 1 || w.Retries != 1 || w.Scope != cost.ScopeCluster {
		t.Errorf("open watch: %+v; want 1 request, 1 open, 1 retry, cluster scope", w)
	}
	close(release)
	drain(watch)
	// The watch's end is reported once the handler is done with it, after
	// the client has read its last byte: wait for it.
	deadline := time.Now().Add(testkit.WaitLimit)
	for w = find("watch"); w.WatchesOpen != 0 && time.Now().Before(deadline); w = find("watch") {
		time.Sleep(time.Millisecond)
	}
	if w.WatchesOpen != 0 || w.WatchEvents != 3 || w.BytesReceived == 0 || w.Latency.Count != 0 {
		t.Errorf("ended watch: %+v; want none open, 3 events, its bytes, no latency", w)
	}

	g := find("get")
	if g.Requests != 3 || g.Errors != (cost.Errors{Status4xx: 1, Failed: 1}) || g.Retries != 2 ||
		g.BytesReceived != int64(len("0123456789")+len("nope\n")) || g.Latency.Count != 3 || g.Scope != cost.ScopeNamespaced {
		t.Errorf("gets: %+v; want 3 requests, one 404 and one failed, 2 retries, 15 bytes received, 3 latencies", g)
	}
	c := find("create")
	if c.Requests != 1 || c.BytesSent != 5 || c.BytesReceived != 5 || c.Retries != 1 {
		t.Errorf("create: %+v; want 1 request, 5 bytes each way, 1 retry", c)
	}
}

// TestShortRequestAllocationsWithCost: the cost table adds no allocation
// to a short request (allocsShortHandler, as without it).
func TestShortRequestAllocationsWithCost(t *testing.T) {
	tab, err := cost.New(cost.Config{Size: 100, MetricsTop: 10})
	if err != nil {
		t.Fatal(err)
	}
	testShortRequestAllocations(t, Config{Cost: tab})
	if rows := tab.Snapshot().Rows; len(rows) != 1 || rows[0].Requests < 200 {
		t.Errorf("the table has %+v, want one row counting every request", rows)
	}
}
