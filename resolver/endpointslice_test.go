package resolver

import (
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ep is an endpoint of a test slice. cond is "" (conditions unset),
// "ready", "terminating" (serving and terminating), "unready" (serving,
// not ready) or "gone" (neither).
type ep struct {
	addr, cond, zone string
}

type port struct {
	name string
	port int32
}

func slice(name, service string, ports []port, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr(p.name), Port: ptr(p.port)})
	}
	for _, e := range eps {
		var c discoveryv1.EndpointConditions
		switch e.cond {
		case "ready":
			c = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
		case "terminating":
			c = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
		case "unready":
			c = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(false)}
		case "gone":
			c = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
		}
		d := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: c}
		if e.zone != "" {
			d.Zone = ptr(e.zone)
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

var https = []port{{"https", 6443}}

// show renders a snapshot as "addr" or "-addr" for draining, "@zone"
// appended when set.
func show(eps []Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		s := e.Address
		if e.Draining {
			s = "-" + s
		}
		if e.Zone != "" {
			s += "@" + e.Zone
		}
		out = append(out, s)
	}
	return out
}

func TestEndpointSlices(t *testing.T) {
	type step struct {
		do   func(f *fakeAPIServer)
		want []string // nil: no update expected
	}
	create := func(s *discoveryv1.EndpointSlice) func(*fakeAPIServer) { return func(f *fakeAPIServer) { f.create(s) } }
	update := func(s *discoveryv1.EndpointSlice) func(*fakeAPIServer) { return func(f *fakeAPIServer) { f.update(s) } }
	remove := func(name string) func(*fakeAPIServer) { return func(f *fakeAPIServer) { f.remove(name) } }
	tests := []struct {
		name       string
		objects    []*discoveryv1.EndpointSlice
		portName   string
		failLists  int // the first lists fail
		first      []string
		steps      []step
		wantErrors float64
	}{
		{
			name: "slices merged, conditions mapped, other services ignored",
			objects: []*discoveryv1.EndpointSlice{
				slice("k-1", "kubernetes", https, ep{"10.0.0.2", "ready", "z2"}, ep{"10.0.0.1", "", ""}),
				slice("k-2", "kubernetes", https, ep{"10.0.0.3", "terminating", ""}, ep{"10.0.0.4", "unready", ""}, ep{"10.0.0.5", "gone", ""}),
				slice("o-1", "other", https, ep{"10.9.9.9", "ready", ""}),
			},
			first: []string{"10.0.0.1:6443", "10.0.0.2:6443@z2", "-10.0.0.3:6443", "-10.0.0.4:6443"},
		},
		{
			name:    "add, update and remove slices",
			objects: []*discoveryv1.EndpointSlice{slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""})},
			first:   []string{"10.0.0.1:6443"},
			steps: []step{
				{create(slice("k-2", "kubernetes", https, ep{"10.0.0.2", "ready", ""})), []string{"10.0.0.1:6443", "10.0.0.2:6443"}},
				{update(slice("k-1", "kubernetes", https, ep{"10.0.0.1", "terminating", ""})), []string{"-10.0.0.1:6443", "10.0.0.2:6443"}},
				{update(slice("k-1", "kubernetes", https)), []string{"10.0.0.2:6443"}},
				{create(slice("o-1", "other", https, ep{"10.9.9.9", "ready", ""})), nil},
				{remove("k-2"), nil}, // nothing left: keep the last set
				{create(slice("k-3", "kubernetes", https, ep{"10.0.0.3", "ready", ""})), []string{"10.0.0.3:6443"}},
			},
			wantErrors: 1,
		},
		{
			name:     "port by name",
			objects:  []*discoveryv1.EndpointSlice{slice("k-1", "kubernetes", []port{{"metrics", 9090}, {"https", 6443}}, ep{"10.0.0.1", "ready", ""})},
			portName: "https",
			first:    []string{"10.0.0.1:6443"},
		},
		{
			name:    "first port without a name",
			objects: []*discoveryv1.EndpointSlice{slice("k-1", "kubernetes", []port{{"metrics", 9090}, {"https", 6443}}, ep{"10.0.0.1", "ready", ""})},
			first:   []string{"10.0.0.1:9090"},
		},
		{
			name:       "missing port name: fallback",
			objects:    []*discoveryv1.EndpointSlice{slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""})},
			portName:   "web",
			first:      []string{"kube.example:6443"},
			wantErrors: 1,
		},
		{
			name:  "nothing resolved: fallback, then the slices",
			first: []string{"kube.example:6443"},
			steps: []step{
				{create(slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""})), []string{"10.0.0.1:6443"}},
			},
			wantErrors: 1,
		},
		{
			name:       "list errors: fallback, then the slices",
			objects:    []*discoveryv1.EndpointSlice{slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""})},
			failLists:  1,
			first:      []string{"kube.example:6443"},
			steps:      []step{{nil, []string{"10.0.0.1:6443"}}},
			wantErrors: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeAPIServer(t, tt.objects...)
				f.failNextLists(tt.failLists, http.StatusServiceUnavailable)
				m := NewMetrics()
				r := &EndpointSlices{
					APIServer: f.apiServer(), Namespace: "default", Service: "kubernetes", PortName: tt.portName,
					Fallback: []Endpoint{{Address: "kube.example:6443"}},
					Metrics:  m,
				}
				updates, stop := runResolver(t, r)
				defer stop()
				if got := show(waitUpdate(t, updates)); !reflect.DeepEqual(got, tt.first) {
					t.Fatalf("first snapshot %v, want %v", got, tt.first)
				}
				for i, s := range tt.steps {
					if s.do != nil {
						expectWatching(t, f)
						s.do(f)
					}
					if s.want == nil {
						expectNone(t, updates)
						continue
					}
					if got := show(waitUpdate(t, updates)); !reflect.DeepEqual(got, s.want) {
						t.Fatalf("after step %d: %v, want %v", i, got, s.want)
					}
				}
				if got := testutil.ToFloat64(m.errors.WithLabelValues("endpointslice")); got != tt.wantErrors {
					t.Errorf("fanout_resolver_errors_total = %v, want %v", got, tt.wantErrors)
				}
			})
		})
	}
}

// TestEndpointSlicesDebounce checks that a change is published only once
// the debounce delay has passed, and a burst once.
func TestEndpointSlicesDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPIServer(t, slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""}))
		var events atomic.Int32
		r := &EndpointSlices{APIServer: f.apiServer(), Namespace: "default", Service: "kubernetes", Debounce: time.Second,
			onEvent: func() { events.Add(1) }}
		updates, stop := runResolver(t, r)
		defer stop()
		waitUpdate(t, updates)
		expectWatching(t, f)
		base := events.Load()

		f.create(slice("k-2", "kubernetes", https, ep{"10.0.0.2", "ready", ""}))
		synctest.Wait() // the event is applied and the delay runs
		time.Sleep(500 * time.Millisecond)
		f.create(slice("k-3", "kubernetes", https, ep{"10.0.0.3", "ready", ""}))
		synctest.Wait()
		if n := events.Load() - base; n != 2 {
			t.Fatalf("%d events applied, want 2 before the delay ends", n)
		}
		time.Sleep(499 * time.Millisecond)
		synctest.Wait()
		select {
		case u := <-updates:
			t.Fatalf("published %v before the debounce delay", show(u))
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		want := []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}
		select {
		case u := <-updates:
			if !reflect.DeepEqual(show(u), want) {
				t.Fatalf("published %v, want %v", show(u), want)
			}
		default:
			t.Fatal("nothing published when the debounce delay ended")
		}
		time.Sleep(r.Debounce)
		synctest.Wait()
		select {
		case u := <-updates:
			t.Fatalf("burst published twice: %v", show(u))
		default:
		}
	})
}

// waitUpdate lets the bubble's time run (a debounce delay, a backoff)
// until an update arrives, for at most a minute of it.
func waitUpdate(t *testing.T, updates <-chan []Endpoint) []Endpoint {
	t.Helper()
	select {
	case u := <-updates:
		return u
	case <-time.After(time.Minute):
		t.Fatal("no update within a minute")
	}
	return nil
}

// expectNone checks that the last change publishes nothing, once the
// debounce delay has passed and the resolver is idle.
func expectNone(t *testing.T, updates <-chan []Endpoint) {
	t.Helper()
	time.Sleep(DefaultDebounce)
	synctest.Wait()
	select {
	case u := <-updates:
		t.Fatalf("unexpected update %v", show(u))
	default:
	}
}

// expectWatching checks that, once the bubble is idle, the resolver
// follows one watch.
func expectWatching(t *testing.T, f *fakeAPIServer) {
	t.Helper()
	synctest.Wait()
	if n := f.watching(); n != 1 {
		t.Fatalf("%d watches open, want 1", n)
	}
}

// TestEndpointSlicesListWatch follows the requests the resolver sends
// through a watch's life: one list, then a watch from the list's
// resourceVersion; a watch the server ends is opened again from the last
// resourceVersion seen (a bookmark's included) without a list; 410 Gone
// and a broken stream lead to a new list after the backoff, which picks
// up what changed meanwhile, and count no error; a failing list is
// reported with what to do.
func TestEndpointSlicesListWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeAPIServer(t, slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""}))
		m := NewMetrics()
		r := &EndpointSlices{APIServer: f.apiServer(), Namespace: "default", Service: "kubernetes", Metrics: m}
		updates, stop := runResolver(t, r)
		defer stop()
		if got := show(waitUpdate(t, updates)); !reflect.DeepEqual(got, []string{"10.0.0.1:6443"}) {
			t.Fatalf("first snapshot %v", got)
		}
		calls := func(want ...string) {
			t.Helper()
			expectWatching(t, f)
			if got := f.calls(); !reflect.DeepEqual(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
		}
		calls("list", "watch@101")
		req, q := f.lastRequest()
		if got := q.Get("labelSelector"); got != "kubernetes.io/service-name=kubernetes" {
			t.Errorf("labelSelector %q", got)
		}
		if q.Get("allowWatchBookmarks") != "true" {
			t.Errorf("watch without allowWatchBookmarks: %s", req.URL)
		}
		if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err != nil || s < 300 || s >= 600 {
			t.Errorf("timeoutSeconds %q, want 300 to 599", q.Get("timeoutSeconds"))
		}
		if req.Header.Get("Accept") != "application/json" || req.Header.Get("User-Agent") != "fanout-discovery" {
			t.Errorf("headers %v", req.Header)
		}

		// The server's timeout ends the watch after a bookmark: watch again
		// from the bookmark.
		f.bookmark() // resourceVersion 102
		time.Sleep(minWatchRun)
		f.endWatches("clean")
		calls("list", "watch@101", "watch@102")

		// 410 Gone: list again after the backoff, and see what changed.
		f.endWatches("gone")
		f.create(slice("k-2", "kubernetes", https, ep{"10.0.0.2", "ready", ""}))
		if got := show(waitUpdate(t, updates)); !reflect.DeepEqual(got, []string{"10.0.0.1:6443", "10.0.0.2:6443"}) {
			t.Fatalf("after 410: %v", got)
		}
		calls("list", "watch@101", "watch@102", "list", "watch@103")

		// A broken stream: the same.
		f.endWatches("break")
		f.update(slice("k-2", "kubernetes", https, ep{"10.0.0.2", "terminating", ""}))
		if got := show(waitUpdate(t, updates)); !reflect.DeepEqual(got, []string{"10.0.0.1:6443", "-10.0.0.2:6443"}) {
			t.Fatalf("after a broken stream: %v", got)
		}
		calls("list", "watch@101", "watch@102", "list", "watch@103", "list", "watch@104")

		// A watch the server ends at once (it ran the debounce delay,
		// less than minWatchRun) is not opened again at once, but listed
		// again after the backoff.
		f.endWatches("clean")
		synctest.Wait()
		if n := len(f.calls()); n != 7 {
			t.Fatalf("%d requests right after a short watch ended, want 7 (none sent before the backoff)", n)
		}
		sleepUntil(t, "the list and watch after the backoff", func() bool { return len(f.calls()) == 9 })
		calls("list", "watch@101", "watch@102", "list", "watch@103", "list", "watch@104", "list", "watch@104")
		if got := testutil.ToFloat64(m.errors.WithLabelValues("endpointslice")); got != 0 {
			t.Fatalf("routine watch ends counted %v errors, want 0", got)
		}

		// A list the apiserver refuses is reported, with what to do.
		f.failNextLists(1, http.StatusForbidden)
		f.endWatches("gone")
		sleepUntil(t, "the 403 counted", func() bool { return testutil.ToFloat64(m.errors.WithLabelValues("endpointslice")) == 1 })
		if ok, detail := m.Status(); ok || !strings.Contains(detail, "answered 403") || !strings.Contains(detail, "grant list and watch") {
			t.Errorf("status after a 403: %v %q", ok, detail)
		}
		f.remove("k-1")
		if got := show(waitUpdate(t, updates)); !reflect.DeepEqual(got, []string{"-10.0.0.2:6443"}) {
			t.Fatalf("after the 403: %v", got)
		}
		if ok, detail := m.Status(); !ok {
			t.Errorf("status after recovery: %q", detail)
		}
	})
}

// sleepUntil lets the bubble's time run a second at a time until cond
// holds once the bubble is idle, for at most two minutes of it.
func sleepUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Second) {
		synctest.Wait()
		if cond() {
			return
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("%s: not within two minutes", what)
		}
	}
}
