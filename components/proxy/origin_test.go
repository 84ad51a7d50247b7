package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// relayedPaths are requests whose answer may be another server's.
var relayedPaths = []struct{ name, path string }{
	{"service proxy", "/api/v1/namespaces/ns/services/x/proxy/hook"},
	{"pod proxy", "/api/v1/namespaces/ns/pods/p:8080/proxy/hook"},
	{"node proxy", "/api/v1/nodes/n/proxy/hook"},
	{"aggregated API", "/apis/example.dev/v1/namespaces/ns/widgets"},
}

// TestRelayedAnswersDriveNothing: a backend behind a proxy subresource or
// an aggregated API answers with kube-apiserver's own rejections. Each
// request reaches it once, the client gets the answer unchanged, and the
// endpoints stay ready, unpenalised, with no error counted.
func TestRelayedAnswersDriveNothing(t *testing.T) {
	answers := []struct {
		name string
		h    http.Handler
	}{
		{"shutdown 429", shutdown429()},
		{"shutdown 503", shutdown503()},
		{"APF 429", http.HandlerFunc(apf429)},
		{"throttled 429", jsonStatus(apierrors.NewTooManyRequests("storage is (re)initializing", 1))},
		{"500", jsonStatus(apierrors.NewInternalError(errors.New("boom")))},
	}
	const n = 2 * balancer.DefaultConsecutiveFailures
	for _, a := range answers {
		for _, p := range relayedPaths {
			for _, method := range []string{"POST", "GET"} {
				t.Run(a.name+" "+p.name+" "+method, func(t *testing.T) {
					rec := httptest.NewRecorder()
					a.h.ServeHTTP(rec, httptest.NewRequest(method, p.path, nil))
					wantBody := rec.Body.String()

					c := newRealCluster(t, Config{}, a.h, a.h)
					client := testkit.NewClient(t, false)
					for i := range n {
						req, _ := http.NewRequest(method, c.base+p.path, strings.NewReader("{}"))
						resp, err := client.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != rec.Code || string(b) != wantBody {
							t.Fatalf("request %d: %d %q, want the backend's %d %q unchanged", i, resp.StatusCode, b, rec.Code, wantBody)
						}
					}
					if got := c.hits[0].Load() + c.hits[1].Load(); got != n {
						t.Errorf("%d requests reached the backends %d times, want exactly %d", n, got, n)
					}
					c.waitReported(t, n)
					for _, addr := range c.addrs {
						s := c.state(t, addr)
						if s.State != balancer.StateReady || s.ShuttingDownUntil != "" || s.OverloadedUntil != "" ||
							s.ConsecutiveFailures != 0 || s.ErrorsTotal != 0 || s.EjectionsTotal != 0 {
							t.Errorf("%s after relayed answers: %+v, want ready, unpenalised, no errors", addr, s)
						}
					}
					for _, reason := range []string{reasonShutdown, reasonOverload, reasonThrottled} {
						if got := counterValue(t, c.m.retries.WithLabelValues(reason)); got != 0 {
							t.Errorf("fanout_retries_total{reason=%s} = %v, want 0", reason, got)
						}
					}
				})
			}
		}
	}
}

// waitReported waits until the balancer heard the end of n requests: the
// last Done runs as the proxy closes the response body, just after the
// client has it.
func (c *realCluster) waitReported(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(testkit.WaitLimit)
	for {
		var got uint64
		for _, s := range c.b.Endpoints() {
			got += s.RequestsTotal
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the balancer heard of %d requests ending, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOwnAnswersStillDrive is the converse of TestRelayedAnswersDriveNothing
// on the same cluster shape: kube-apiserver's own shutdown answer to a
// write still moves it and drains the endpoint.
func TestOwnAnswersStillDrive(t *testing.T) {
	c := newRealCluster(t, Config{}, shutdown503(), echo)
	client := testkit.NewClient(t, false)
	for i := range 10 {
		resp, err := client.Post(c.base+"/apis/apps/v1/namespaces/ns/deployments", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200 from the endpoint that is not shutting down", i, resp.StatusCode)
		}
	}
	if s := c.state(t, c.addrs[0]); c.hits[0].Load() != 1 || s.State != balancer.StateDraining {
		t.Errorf("shutting-down endpoint: %d requests, %+v; want 1 and draining", c.hits[0].Load(), s)
	}
}

// TestThrottled429DoesNotMoveWrites: a 429 that is neither a shutdown nor
// an APF or max-in-flight rejection may come after processing, so a write
// answered with it is not sent again; a read still is.
func TestThrottled429DoesNotMoveWrites(t *testing.T) {
	notReady := jsonStatus(apierrors.NewTooManyRequests("storage is (re)initializing", 1))
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			c := newRealCluster(t, Config{}, notReady, notReady)
			client := testkit.NewClient(t, false)
			for i := range 5 {
				req, _ := http.NewRequest(method, c.base+"/api/v1/namespaces/ns/configmaps/x", strings.NewReader("{}"))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 429 {
					t.Fatalf("request %d: %d, want the apiserver's 429", i, resp.StatusCode)
				}
			}
			if got := c.hits[0].Load() + c.hits[1].Load(); got != 5 {
				t.Errorf("5 %ss answered 429 reached the apiservers %d times, want 5", method, got)
			}
			if got := counterValue(t, c.m.retries.WithLabelValues(reasonThrottled)); got != 0 {
				t.Errorf("fanout_retries_total{reason=throttled} = %v, want 0", got)
			}
		})
	}
}

// TestRelayedBrokenConnection: a GET through a proxy subresource whose
// connection breaks after it was sent is not sent again (its backend may
// have acted on it), and the failure does not count against the endpoint.
// A GET to an aggregated API is a read by API convention and moves, as
// kube-apiserver's own reads do.
func TestRelayedBrokenConnection(t *testing.T) {
	const dead = "192.0.2.1:6443"
	processed := func(*http.Request) (*http.Response, error) {
		return nil, errors.New("http2: stream reset after the request was sent")
	}
	for _, tc := range []struct {
		path        string
		wantRetried bool
	}{
		{"/api/v1/namespaces/ns/services/x/proxy/", false},
		{"/api/v1/namespaces/ns/pods/p/proxy/do", false},
		{"/api/v1/nodes/n/proxy/do", false},
		{"/apis/example.dev/v1/widgets", true},
		{"/api/v1/namespaces/ns/pods/p/log", true},
	} {
		t.Run(tc.path, func(t *testing.T) {
			var hits atomic.Int32
			good, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				fmt.Fprint(w, "ok")
			}), false)
			p := proxytest.NewPicker(dead, good)
			u := proxytest.NewUpstream()
			u.Set(dead, testkit.RoundTripFunc(processed))
			u.Set(good, rt)
			_, _, base := startProxy(t, Config{}, p, u, nil)
			resp, err := testkit.NewClient(t, false).Get(base + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want, wantPicks := 502, 1
			if tc.wantRetried {
				want, wantPicks = 200, 2
			}
			if resp.StatusCode != want {
				t.Errorf("status %d, want %d", resp.StatusCode, want)
			}
			waitDone(t, p, wantPicks)
			picks := p.Records()
			if len(picks) != wantPicks || int(hits.Load()) != wantPicks-1 {
				t.Fatalf("%d picks, %d requests on the good endpoint; want %d and %d", len(picks), hits.Load(), wantPicks, wantPicks-1)
			}
			if d := picks[0].Dones[0]; !d.Relayed || d.Failed || d.Unavailable {
				t.Errorf("Done of the broken attempt = %+v, want Relayed and neither Failed nor Unavailable", d)
			}
		})
	}
}

// TestRelayedUpgradesDriveNothing: the status of an exec, attach,
// port-forward or proxy upgrade may be the kubelet's or the backend's, so
// its Done is Relayed; a WebSocket watch is kube-apiserver's own.
func TestRelayedUpgradesDriveNothing(t *testing.T) {
	ca := testkit.NewCA(t)
	b := newUpgradeBackend(t, ca, http.StatusInternalServerError)
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/api/v1/namespaces/ns/pods/p/exec?command=cat", true},
		{"/api/v1/namespaces/ns/pods/p/portforward", true},
		{"/api/v1/namespaces/ns/services/x/proxy/ws", true},
		{"/api/v1/namespaces/ns/configmaps?watch=1", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			rig := newUpgradeRig(t, ca, Config{}, b.addr)
			_, _, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "websocket", path: tc.path})
			resp.Body.Close()
			if resp.StatusCode != http.StatusInternalServerError {
				t.Fatalf("status %d, want the backend's 500", resp.StatusCode)
			}
			testkit.WaitFor(t, "Done", func() bool { return len(rig.picker.Records()[0].Dones) == 1 })
			if d := rig.picker.Records()[0].Dones[0]; d.Relayed != tc.want || d.StatusCode != 500 {
				t.Errorf("Done = %+v, want status 500 with Relayed %v", d, tc.want)
			}
		})
	}
}
