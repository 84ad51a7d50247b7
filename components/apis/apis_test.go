package apis

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/resolver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeAPIServer serves discovery with kube-apiserver's own aggregated
// discovery handlers (ETags and 304s included) and /version.
type fakeAPIServer struct {
	core, groups aggregated.ResourceManager
	version      string
	mu           sync.Mutex
	seen         []string // "path status"
}

func newFakeAPIServer(version string, groups map[string][]apidiscoveryv2.APIVersionDiscovery) *fakeAPIServer {
	s := &fakeAPIServer{core: aggregated.NewResourceManager("api"), groups: aggregated.NewResourceManager("apis"), version: version}
	s.core.AddGroupVersion("", apidiscoveryv2.APIVersionDiscovery{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace, Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status"}, {Subresource: "log"}}},
		{Resource: "namespaces", Scope: apidiscoveryv2.ScopeCluster},
	}})
	for g, vs := range groups {
		for _, v := range vs {
			s.groups.AddGroupVersion(g, v)
		}
	}
	return s
}

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	switch r.URL.Path {
	case "/api":
		s.core.ServeHTTP(rec, r)
	case "/apis":
		s.groups.ServeHTTP(rec, r)
	case "/version":
		rec.Header().Set("Content-Type", "application/json")
		_, _ = rec.WriteString(`{"major":"1","minor":"37","gitVersion":"` + s.version + `"}`)
	default:
		http.NotFound(rec, r)
	}
	s.mu.Lock()
	s.seen = append(s.seen, r.URL.Path+" "+http.StatusText(rec.Code))
	s.mu.Unlock()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (s *fakeAPIServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// handlers is an Upstream whose endpoints are http.Handlers.
type handlers map[string]http.Handler

func (h handlers) For(addr string, _ transport.AuthMode) http.RoundTripper {
	return testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h[addr].ServeHTTP(rec, r)
		return rec.Result(), nil
	})
}

// tables records what the discoverer publishes.
type tables struct {
	mu   sync.Mutex
	last balancer.APIs
	n    int
	ch   chan struct{}
}

func newTables() *tables { return &tables{ch: make(chan struct{}, 100)} }

func (t *tables) SetAPIs(a balancer.APIs) {
	t.mu.Lock()
	t.last, t.n = a, t.n+1
	t.mu.Unlock()
	t.ch <- struct{}{}
}

func (t *tables) get() (balancer.APIs, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.n
}

var (
	storageV1 = apidiscoveryv2.APIVersionDiscovery{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "storageclasses", Scope: apidiscoveryv2.ScopeCluster},
	}}
	storageV1alpha1 = apidiscoveryv2.APIVersionDiscovery{Version: "v1alpha1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "volumeattributesclasses", Scope: apidiscoveryv2.ScopeCluster},
	}}
	vacAlpha = balancer.API{Group: "storage.k8s.io", Version: "v1alpha1", Resource: "volumeattributesclasses"}
)

// waitFor waits until cond holds, on the discoverer's own events.
func waitFor(t *testing.T, ch <-chan struct{}, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("timed out")
		}
	}
}

// TestDiscovererSkew: two endpoints, one serving an alpha version more;
// the table says they differ and who serves what, the log says so once,
// and later reads are answered 304 from the ETags and publish nothing.
func TestDiscovererSkew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old := newFakeAPIServer("v1.36.4", map[string][]apidiscoveryv2.APIVersionDiscovery{"storage.k8s.io": {storageV1}})
		upgraded := newFakeAPIServer("v1.37.2", map[string][]apidiscoveryv2.APIVersionDiscovery{"storage.k8s.io": {storageV1, storageV1alpha1}})
		var logs testkit.Buffer
		sink := newTables()
		d, err := New(Config{}, handlers{"a:1": old, "b:1": upgraded}, sink, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		d.Update([]resolver.Endpoint{{Address: "a:1"}, {Address: "b:1"}})
		d.Start()
		defer d.Stop()
		known := func() bool {
			a, _ := sink.get()
			tb, _ := a.(*Table)
			return tb != nil && tb.Set("a:1") != nil && tb.Set("b:1") != nil
		}
		waitFor(t, sink.ch, known)
		a, published := sink.get()
		tb := a.(*Table)
		if !tb.Differ() {
			t.Fatal("Differ() = false, want true")
		}
		checks := []struct {
			addr string
			api  balancer.API
			want bool
		}{
			{"a:1", vacAlpha, false},
			{"b:1", vacAlpha, true},
			{"a:1", balancer.API{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}, true},
			{"a:1", balancer.API{Version: "v1", Resource: "pods", Subresource: "log"}, true},
			{"a:1", balancer.API{Version: "v1", Resource: "pods", Subresource: "eviction"}, false},
			{"a:1", balancer.API{Version: "v1", Resource: "secrets"}, false},
			{"c:1", vacAlpha, true}, // unknown: serves everything
		}
		for _, c := range checks {
			if got := tb.Serves(c.addr, c.api); got != c.want {
				t.Errorf("Serves(%s, %+v) = %v, want %v", c.addr, c.api, got, c.want)
			}
		}
		if v := tb.Set("b:1").Version; v != "v1.37.2" {
			t.Errorf("b's version %q, want v1.37.2", v)
		}
		if n := strings.Count(logs.String(), "endpoints serve different APIs"); n != 1 {
			t.Errorf("%d skew log lines, want 1:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), "storage.k8s.io/v1alpha1") || !strings.Contains(logs.String(), "a:1=v1.36.4") {
			t.Errorf("the log line does not name the partial group/version and the versions:\n%s", logs.String())
		}

		// The next round: two 304s per endpoint, nothing published.
		unchanged := func() float64 { return testutil.ToFloat64(d.reads.WithLabelValues(resultUnchanged)) }
		time.Sleep(DefaultInterval)
		synctest.Wait() // the tick's reads are done
		if got := unchanged(); got != 2 {
			t.Fatalf("unchanged reads %v, want 2", got)
		}
		if _, n := sink.get(); n != published {
			t.Errorf("published %d tables after unchanged reads, want still %d", n, published)
		}
		if userAgent != testkit.DiscoveryUserAgent {
			t.Errorf("User-Agent %q, but testkit's fake apiserver sets apart %q", userAgent, testkit.DiscoveryUserAgent)
		}
		want := []string{"/api OK", "/apis OK", "/version OK", "/api Not Modified", "/apis Not Modified"}
		if got := old.requests(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("requests to a: %v, want %v", got, want)
		}

		// a is upgraded: the next read finds the new ETag and the skew ends.
		old.groups.AddGroupVersion("storage.k8s.io", storageV1alpha1)
		old.version = "v1.37.2"
		d.Refresh("a:1")
		waitFor(t, sink.ch, func() bool { a, _ := sink.get(); return !a.(*Table).Differ() })
		if !strings.Contains(logs.String(), "endpoints serve the same APIs again") {
			t.Errorf("no log line for the end of the skew:\n%s", logs.String())
		}
		if got := testutil.ToFloat64(d.skew); got != 0 {
			t.Errorf("fanout_apis_differ = %v, want 0", got)
		}
	})
}

// TestDecodeMatchesAPITypes: a document encoded from the real
// apidiscovery.k8s.io/v2 types, by kube-apiserver's handler, decodes into
// the same group/versions, resources and subresources.
func TestDecodeMatchesAPITypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeAPIServer("v1.37.2", map[string][]apidiscoveryv2.APIVersionDiscovery{
			"storage.k8s.io": {storageV1, storageV1alpha1},
			"apps": {{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
				{Resource: "deployments", Scope: apidiscoveryv2.ScopeNamespace, Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "scale"}, {Subresource: "status"}}},
			}}},
		})
		b := newBuilder()
		for _, path := range []string{"/api", "/apis"} {
			r := httptest.NewRequest(http.MethodGet, path, nil)
			r.Header.Set("Accept", acceptAggregated)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			var typed apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(rec.Body.Bytes(), &typed); err != nil {
				t.Fatal(err)
			}
			ok, err := b.addAggregated(rec.Body.Bytes())
			if !ok || err != nil {
				t.Fatalf("%s: addAggregated = %v, %v; body %s", path, ok, err, rec.Body)
			}
			set := newBuilder()
			_, _ = set.addAggregated(rec.Body.Bytes())
			got := set.set("")
			want := 0
			for _, g := range typed.Items {
				for _, v := range g.Versions {
					for _, res := range v.Resources {
						want++
						if !got.Serves(balancer.API{Group: g.Name, Version: v.Version, Resource: res.Resource}) {
							t.Errorf("%s/%s %s not served", g.Name, v.Version, res.Resource)
						}
						for _, sub := range res.Subresources {
							want++
							if !got.Serves(balancer.API{Group: g.Name, Version: v.Version, Resource: res.Resource, Subresource: sub.Subresource}) {
								t.Errorf("%s/%s %s/%s not served", g.Name, v.Version, res.Resource, sub.Subresource)
							}
						}
					}
				}
			}
			if got.Resources() != want || want == 0 {
				t.Errorf("%s: %d resources and subresources decoded, the typed document has %d", path, got.Resources(), want)
			}
		}
		if gvs := strings.Join(b.set("").GroupVersions(), " "); gvs != "apps/v1 storage.k8s.io/v1 storage.k8s.io/v1alpha1 v1" {
			t.Errorf("group/versions %q", gvs)
		}
	})
}

// TestLegacyDiscovery: an apiserver that answers the legacy documents
// only is read through them.
func TestLegacyDiscovery(t *testing.T) {
	docs := map[string]string{
		"/api":          `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis":         `{"kind":"APIGroupList","groups":[{"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}]}]}`,
		"/api/v1":       `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods"},{"name":"pods/status"}]}`,
		"/apis/apps/v1": `{"kind":"APIResourceList","groupVersion":"apps/v1","resources":[{"name":"deployments"}]}`,
		"/version":      `{"gitVersion":"v1.26.0"}`,
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(w, bytes.NewReader([]byte(doc)))
	})
	sink := newTables()
	d, err := New(Config{}, handlers{"a:1": h}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Update([]resolver.Endpoint{{Address: "a:1"}})
	d.Start()
	defer d.Stop()
	waitFor(t, sink.ch, func() bool { a, _ := sink.get(); return a != nil && a.(*Table).Set("a:1") != nil })
	a, _ := sink.get()
	s := a.(*Table).Set("a:1")
	for _, api := range []balancer.API{{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "pods", Subresource: "status"}, {Group: "apps", Version: "v1", Resource: "deployments"}} {
		if !s.Serves(api) {
			t.Errorf("%+v not served", api)
		}
	}
	if s.Serves(balancer.API{Group: "apps", Version: "v1", Resource: "statefulsets"}) || s.Version != "v1.26.0" {
		t.Errorf("unexpected set: statefulsets served or version %q", s.Version)
	}
}

// failingOnce answers its first request for path with a 500.
type failingOnce struct {
	h      http.Handler
	path   string
	mu     sync.Mutex
	failed bool
}

func (f *failingOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fail := !f.failed && r.URL.Path == f.path
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		http.Error(w, "etcd is slow", http.StatusInternalServerError)
		return
	}
	f.h.ServeHTTP(w, r)
}

// TestReadAfterAHalfFailedRead: /api answered with its ETag, then /apis
// failed; the next read must not take /api's 304 for a document it never
// kept.
func TestReadAfterAHalfFailedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeAPIServer("v1.37.2", map[string][]apidiscoveryv2.APIVersionDiscovery{"storage.k8s.io": {storageV1}})
		sink := newTables()
		d, err := New(Config{}, handlers{"a:1": &failingOnce{h: s, path: "/apis"}}, sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Update([]resolver.Endpoint{{Address: "a:1"}})
		d.Start()
		defer d.Stop()
		failed := func() float64 { return testutil.ToFloat64(d.reads.WithLabelValues(resultFailed)) }
		synctest.Wait() // the first read is done
		if got := failed(); got != 1 {
			t.Fatalf("failed reads %v after the first read, want 1", got)
		}
		d.Refresh("a:1")
		waitFor(t, sink.ch, func() bool { a, _ := sink.get(); return a != nil && a.(*Table).Set("a:1") != nil })
		a, _ := sink.get()
		if !a.(*Table).Serves("a:1", balancer.API{Version: "v1", Resource: "pods"}) {
			t.Error("pods not served after the second read")
		}
	})
}

type readyLog struct{ n int }

func (r *readyLog) SetReady(string, bool) { r.n++ }

// TestRefreshOnReady: an endpoint whose probe turns ready again is read at
// once (a restarted apiserver may be the other release); probes that stay
// ready read nothing.
func TestRefreshOnReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeAPIServer("v1.36.4", nil)
		sink := newTables()
		d, err := New(Config{}, handlers{"a:1": s}, sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Update([]resolver.Endpoint{{Address: "a:1"}})
		d.Start()
		defer d.Stop()
		version := func() string {
			a, _ := sink.get()
			if a == nil || a.(*Table).Set("a:1") == nil {
				return ""
			}
			return a.(*Table).Set("a:1").Version
		}
		waitFor(t, sink.ch, func() bool { return version() == "v1.36.4" })
		next := &readyLog{}
		probes := d.RefreshOnReady(next)
		probes.SetReady("a:1", true)
		probes.SetReady("a:1", true)
		probes.SetReady("a:1", false)
		// Restarted as the next release.
		s.groups.AddGroupVersion("storage.k8s.io", storageV1alpha1)
		s.version = "v1.37.2"
		probes.SetReady("a:1", true)
		waitFor(t, sink.ch, func() bool { return version() == "v1.37.2" })
		if next.n != 4 {
			t.Errorf("the prober's sink got %d reports, want all 4", next.n)
		}
		if got := len(s.requests()); got != 6 {
			t.Errorf("%d discovery requests, want 6: the first read's 3 and the one after readiness came back", got)
		}
	})
}
