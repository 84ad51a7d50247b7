//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; fanout's client (components/transport) uses its Framer, hpack and error types, which net/http does not export.

package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fanout-dev/fanout/components/listener"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/filters"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/resolver"
)

// The rejections below come from kube-apiserver's own filters where they
// can be built without a whole server, so that a change in their format
// fails these tests.

// shutdown429 is filters.WithRetryAfter once the shutdown delay elapsed.
func shutdown429() http.Handler {
	elapsed := make(chan struct{})
	close(elapsed)
	return filters.WithRetryAfter(http.NotFoundHandler(), elapsed)
}

// closedWG is a RequestWaitGroup after Wait: Add fails.
type closedWG struct{}

func (closedWG) Add(int) error { return errors.New("waitgroup is closed") }
func (closedWG) Done()         {}

// shutdown503 is filters.WithWaitGroup once the server stopped accepting
// requests.
func shutdown503() http.Handler {
	h := filters.WithWaitGroup(http.NotFoundHandler(), func(*http.Request, *apirequest.RequestInfo) bool { return false }, closedWG{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(withRequestInfo(r)))
	})
}

// timeout504 is kube-apiserver's answer to a request whose deadline ran
// out before it was done (a client's ?timeout=, which
// WithRequestDeadline makes the context's deadline, here 1 ms):
// filters.WithTimeoutForNonLongRunningRequests answers 504 with the
// Timeout Status it encodes itself.
func timeout504() http.Handler {
	slow := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	h := filters.WithTimeoutForNonLongRunningRequests(slow, func(*http.Request, *apirequest.RequestInfo) bool { return false })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(withRequestInfo(r), time.Millisecond)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// negotiatedStatus writes err as a handler of kube-apiserver's does
// (responsewriters.ErrorNegotiated): JSON, or protobuf when the request
// accepts it.
func negotiatedStatus(err *apierrors.StatusError) http.HandlerFunc {
	sch := runtime.NewScheme()
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(sch).WithoutConversion()
	return func(w http.ResponseWriter, r *http.Request) {
		responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{Version: "v1"}, w, r)
	}
}

// protobufRequest asks for protobuf, as client-go does for built-in types.
func protobufRequest(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Accept", "application/vnd.kubernetes.protobuf, application/json")
		h.ServeHTTP(w, r)
	}
}

// withRequestInfo is r's context with the RequestInfo kube-apiserver's
// filters read.
func withRequestInfo(r *http.Request) context.Context {
	info, _ := (&apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}).NewRequestInfo(r)
	return apirequest.WithRequestInfo(r.Context(), info)
}

// apf429 is what filters.WithPriorityAndFairness writes for a rejected
// request (its tooManyRequests and setResponseHeaders).
func apf429(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set(headerPFPriorityLevel, "pl-uid")
	w.Header().Set(headerPFFlowSchema, "fs-uid")
	w.Header().Set("Retry-After", "1")
	http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
}

// jsonStatus writes err as kube-apiserver's JSON Status.
func jsonStatus(err *apierrors.StatusError) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		st := err.Status()
		st.Kind, st.APIVersion = "Status", "v1"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(st.Code))
		_ = json.NewEncoder(w).Encode(st)
	}
}

func TestInspect(t *testing.T) {
	tests := []struct {
		name    string
		h       http.Handler
		want    verdict
		wantAPF bool
	}{
		{"shutdown 429", shutdown429(), verdictShutdown, false},
		{"shutdown 503", shutdown503(), verdictShutdown, false},
		{"APF rejection", http.HandlerFunc(apf429), verdictOverload, true},
		{"max-in-flight rejection", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, overloadBody, http.StatusTooManyRequests)
		}), verdictOverload, false},
		{"watch cache not ready", jsonStatus(apierrors.NewTooManyRequests("storage is (re)initializing", 1)), verdictThrottled, false},
		{"resourceVersion too large", jsonStatus(apierrors.NewTooManyRequests("Too large resource version", 1)), verdictThrottled, false},
		{"other 503", jsonStatus(apierrors.NewServiceUnavailable("etcd is down")), verdictAnswer, false},
		{"PF headers on a success", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(headerPFFlowSchema, "fs-uid")
			fmt.Fprint(w, overloadBody)
		}), verdictAnswer, false},
		{"403", jsonStatus(apierrors.NewForbidden(schemaGR, "x", errors.New("no"))), verdictAnswer, false},
		{"timeout filter 504", timeout504(), verdictTimeout, false},
		{"handler's own timeout 504, JSON", negotiatedStatus(requestTimeout), verdictTimeout, false},
		{"handler's own timeout 504, protobuf", protobufRequest(negotiatedStatus(requestTimeout)), verdictTimeout, false},
		{"other 504", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
		}), verdictAnswer, false},
		{"504 with another reason", negotiatedStatus(apierrors.NewServerTimeout(schemaGR, "list", 1)), verdictAnswer, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/namespaces/ns/configmaps", nil))
			want := rec.Body.String()
			resp := rec.Result()
			v, apf := inspect(resp)
			if v != tt.want || apf != tt.wantAPF {
				t.Errorf("inspect = %v, %v; want %v, %v (status %d, body %q)", v, apf, tt.want, tt.wantAPF, rec.Code, want)
			}
			got, _ := io.ReadAll(resp.Body)
			if string(got) != want {
				t.Errorf("body after inspect = %q, want %q unchanged", got, want)
			}
		})
	}
}

func TestConnectFailed(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", &transport.UnprocessedError{Endpoint: "a", Err: errors.New("dial: connection refused")}, true},
		{"TLS handshake", &transport.UnprocessedError{Endpoint: "a", Err: errors.New("tls: handshake failure")}, true},
		// What transport's classification returns for HTTP/2 refusals
		// (its TestClassify checks that it sets Refused).
		{"graceful GOAWAY", &transport.UnprocessedError{Endpoint: "a", Err: errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), Refused: true}, false},
		{"refused stream", &transport.UnprocessedError{Endpoint: "a", Err: http2.StreamError{Code: http2.ErrCodeRefusedStream}, Refused: true}, false},
		{"wrapped refusal", fmt.Errorf("round trip: %w", &transport.UnprocessedError{Endpoint: "a", Err: errors.New("http2: client conn not usable"), Refused: true}), false},
		{"GOAWAY error", http2.GoAwayError{ErrCode: http2.ErrCodeNo}, false},
		{"processed reset", errors.New("stream reset"), false},
	}
	for _, tt := range tests {
		if got := connectFailed(tt.err); got != tt.want {
			t.Errorf("%s: connectFailed = %v, want %v", tt.name, got, tt.want)
		}
	}
	if failedErr(context.Background(), http2.GoAwayError{}) {
		t.Error("a GOAWAY counted as an endpoint failure")
	}
	if !failedErr(context.Background(), context.DeadlineExceeded) {
		t.Error("a timeout did not count as an endpoint failure")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if failedErr(ctx, context.Canceled) {
		t.Error("the client going away counted as an endpoint failure")
	}
}

func TestRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newRetryBudget(0.1, 2, 10*time.Second)
		spendAll := func() int {
			n := 0
			for b.allow() && n < 1000 {
				b.spend()
				n++
			}
			return n
		}
		if got := spendAll(); got != 2 {
			t.Errorf("with no requests: %d retries allowed, want the minimum 2", got)
		}
		for range 100 {
			b.request()
		}
		if got := spendAll(); got != 10 {
			t.Errorf("after 100 requests: %d more retries allowed, want 10", got)
		}
		// The window slides: 10 s later the old requests and retries are gone.
		time.Sleep(10 * time.Second)
		if got := spendAll(); got != 2 {
			t.Errorf("after the window: %d retries allowed, want 2", got)
		}
		// Within the window, older buckets still count.
		time.Sleep(3 * time.Second)
		for range 50 {
			b.request()
		}
		time.Sleep(5 * time.Second)
		if got := spendAll(); got != 5 {
			t.Errorf("50 requests 5 s ago: %d retries allowed, want 5", got)
		}
	})
}

// realCluster is a proxy in front of a real balancer over httptest
// apiservers, one handler each, in address order.
type realCluster struct {
	b     *balancer.Balancer
	m     *Metrics
	base  string
	addrs []string
	hits  []*atomic.Int32
}

func newRealCluster(t *testing.T, cfg Config, handlers ...http.Handler) *realCluster {
	t.Helper()
	b, err := balancer.New(balancer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	u := proxytest.NewUpstream()
	c := &realCluster{b: b}
	var eps []resolver.Endpoint
	for _, h := range handlers {
		hits := &atomic.Int32{}
		addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			h.ServeHTTP(w, r)
		}), false)
		u.Set(addr, rt)
		c.addrs = append(c.addrs, addr)
		c.hits = append(c.hits, hits)
		eps = append(eps, resolver.Endpoint{Address: addr})
	}
	b.Update(eps)
	c.m, _ = NewMetrics(nil)
	s := listener.New(listener.Config{ListenAddress: "127.0.0.1:0"}, New(cfg, b, u, c.m), nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
		defer cancel()
		_ = s.Stop(ctx)
	})
	c.base = "http://" + s.Addr().String()
	return c
}

func (c *realCluster) state(t *testing.T, addr string) balancer.EndpointStatus {
	t.Helper()
	for _, s := range c.b.Endpoints() {
		if s.Address == addr {
			return s
		}
	}
	t.Fatalf("no endpoint %s", addr)
	return balancer.EndpointStatus{}
}

// echo answers 200 with the method and body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s", r.Method, b)
})

func TestShutdownAnswersMoveRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"429", shutdown429()}, {"503", shutdown503()}} {
		for _, path := range []string{"/api/v1/namespaces/ns/configmaps", "/api/v1/namespaces/ns/configmaps?watch=1"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				// Every endpoint but one shuts down: each request must
				// still succeed, and the shutting-down ones be drained.
				c := newRealCluster(t, Config{}, tc.h, tc.h, echo)
				client := testkit.NewClient(t, false)
				for i := range 20 {
					resp, err := client.Post(c.base+path, "application/yaml", strings.NewReader("kind: ConfigMap"))
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || string(b) != "POST kind: ConfigMap" {
						t.Fatalf("request %d: %d %q, want 200 with the body replayed", i, resp.StatusCode, b)
					}
				}
				for i, a := range c.addrs[:2] {
					if n := c.hits[i].Load(); n > 1 {
						t.Errorf("shutting-down %s got %d requests, want at most 1: it is drained after the first", a, n)
					}
					if n := c.hits[i].Load(); n == 1 {
						if s := c.state(t, a); s.State != balancer.StateDraining {
							t.Errorf("%s after a shutdown answer: %+v, want draining", a, s)
						}
					}
				}
				if got := counterValue(t, c.m.retries.WithLabelValues(reasonShutdown)); got < 1 {
					t.Errorf("fanout_retries_total{reason=shutdown} = %v, want at least 1", got)
				}
			})
		}
	}
}

func TestOverloadMovesOnlyToUnloaded(t *testing.T) {
	c := newRealCluster(t, Config{}, http.HandlerFunc(apf429), echo)
	client := testkit.NewClient(t, false)
	for i := range 10 {
		if code := getStatus(t, client, c.base+"/api/v1/namespaces/ns/configmaps"); code != 200 {
			t.Fatalf("request %d: %d, want 200 from the endpoint that is not overloaded", i, code)
		}
	}
	if s := c.state(t, c.addrs[0]); s.OverloadedUntil == "" {
		t.Errorf("APF-rejecting endpoint not penalised: %+v", s)
	}
	if got := counterValue(t, c.m.retries.WithLabelValues(reasonOverload)); got < 1 {
		t.Errorf("fanout_retries_total{reason=overload} = %v, want at least 1", got)
	}

	// Every endpoint overloaded: the 429 reaches the client unchanged,
	// after at most one more attempt.
	all := newRealCluster(t, Config{}, http.HandlerFunc(apf429), http.HandlerFunc(apf429))
	for range 5 {
		resp, err := client.Get(all.base + "/api/v1/namespaces/ns/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 429 || strings.TrimSpace(string(b)) != overloadBody || resp.Header.Get("Retry-After") != "1" || resp.Header.Get(headerPFFlowSchema) != "fs-uid" {
			t.Errorf("all overloaded: got %d %q %v, want the apiserver's 429 unchanged", resp.StatusCode, b, resp.Header)
		}
	}
	if n := all.hits[0].Load() + all.hits[1].Load(); n > 6 {
		t.Errorf("5 requests to saturated apiservers made %d attempts, want at most 6: once both are penalised nothing moves", n)
	}
}

func TestThrottled429MovesOnce(t *testing.T) {
	notReady := jsonStatus(apierrors.NewTooManyRequests("storage is (re)initializing", 1))
	c := newRealCluster(t, Config{}, notReady, echo)
	client := testkit.NewClient(t, false)
	for i := range 10 {
		if code := getStatus(t, client, c.base+"/api/v1/namespaces/ns/configmaps"); code != 200 {
			t.Fatalf("request %d: %d, want 200 from the other endpoint", i, code)
		}
	}
	if got := counterValue(t, c.m.retries.WithLabelValues(reasonThrottled)); got < 1 {
		t.Errorf("fanout_retries_total{reason=throttled} = %v, want at least 1", got)
	}
}

func TestRetryBudgetCapsRetries(t *testing.T) {
	notReady := jsonStatus(apierrors.NewTooManyRequests("storage is (re)initializing", 1))
	c := newRealCluster(t, Config{RetryBudget: &RetryBudget{Ratio: 0, Min: 3, Window: DefaultRetryBudgetWindow}}, notReady, notReady)
	client := testkit.NewClient(t, false)
	for range 20 {
		if code := getStatus(t, client, c.base+"/api/v1/namespaces/ns/configmaps"); code != 429 {
			t.Fatalf("status %d, want the apiserver's 429", code)
		}
	}
	if n := c.hits[0].Load() + c.hits[1].Load(); n != 23 {
		t.Errorf("20 requests made %d attempts, want 23: 3 retries in the budget", n)
	}
	if got := counterValue(t, c.m.budgetOut.WithLabelValues(reasonThrottled)); got != 17 {
		t.Errorf("fanout_retry_budget_exhausted_total{reason=throttled} = %v, want 17", got)
	}
}

func TestAuthErrorsAreNotFailures(t *testing.T) {
	forbidden := jsonStatus(apierrors.NewForbidden(schemaGR, "x", errors.New("no")))
	c := newRealCluster(t, Config{}, forbidden)
	client := testkit.NewClient(t, false)
	for range 20 {
		getStatus(t, client, c.base+"/api/v1/namespaces/ns/configmaps/x")
	}
	if s := c.state(t, c.addrs[0]); s.State != balancer.StateReady || s.ConsecutiveFailures != 0 {
		t.Errorf("after 20 403s: %+v, want ready with no failures", s)
	}
	failing := newRealCluster(t, Config{}, jsonStatus(apierrors.NewInternalError(errors.New("boom"))))
	for range 5 {
		getStatus(t, client, failing.base+"/api/v1/namespaces/ns/configmaps/x")
	}
	// The last Done runs as the proxy closes the response body, just
	// after the client has it.
	var s balancer.EndpointStatus
	for deadline := time.Now().Add(testkit.WaitLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if s = failing.state(t, failing.addrs[0]); s.State == balancer.StateEjected {
			break
		}
	}
	if s.State != balancer.StateEjected {
		t.Errorf("after 5 500s: %+v, want ejected", s)
	}
}

var schemaGR = schema.GroupResource{Resource: "configmaps"}

// requestTimeout is what a kube-apiserver handler answers when the
// request's deadline ran out (finisher.FinishRequest).
var requestTimeout = apierrors.NewTimeoutError("request did not complete within requested timeout - context deadline exceeded", 0)

// TestClientTimeoutsAreNotFailures: kube-apiserver's 504 Timeout, its
// answer to a client whose own ?timeout= ran out, is passed on and never
// retried, and ejects no endpoint however often it comes; a 504 of
// another kind still counts towards ejection.
func TestClientTimeoutsAreNotFailures(t *testing.T) {
	c := newRealCluster(t, Config{}, timeout504(), negotiatedStatus(requestTimeout), protobufRequest(negotiatedStatus(requestTimeout)))
	client := testkit.NewClient(t, false)
	for i := range 60 {
		resp, err := client.Get(c.base + "/api/v1/namespaces/ns/configmaps?timeout=1ms")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("request %d: %d, want the apiserver's 504 passed on", i, resp.StatusCode)
		}
	}
	var hits int32
	for i, a := range c.addrs {
		hits += c.hits[i].Load()
		if s := c.state(t, a); s.State != balancer.StateReady || s.ConsecutiveFailures != 0 || s.ErrorsTotal != 0 || s.LatencyScore > 1 {
			t.Errorf("%s after 504 Timeouts: %+v, want ready with no failures, no errors and no latency penalty", a, s)
		}
	}
	if hits != 60 {
		t.Errorf("the apiservers got %d requests, want 60: a 504 Timeout is not retried", hits)
	}
	// A deadline that runs out in the storage layer: a 500 without a
	// reason, once the request's own ?timeout= is past.
	deadline500 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
		if err != nil {
			d = time.Hour
		}
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		<-ctx.Done()
		negotiatedStatus(&apierrors.StatusError{ErrStatus: apierrors.NewInternalError(ctx.Err()).ErrStatus})(w, r)
	})
	storage := newRealCluster(t, Config{}, deadline500)
	for range 10 {
		resp, err := client.Get(storage.base + "/api/v1/namespaces/ns/configmaps?timeout=1ms")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("%d, want the apiserver's 500 passed on", resp.StatusCode)
		}
	}
	if s := storage.state(t, storage.addrs[0]); s.State != balancer.StateReady || s.ErrorsTotal != 0 {
		t.Errorf("after 500s past the requests' own timeout: %+v, want ready with no errors", s)
	}
	other := newRealCluster(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
	}))
	for range 5 {
		getStatus(t, client, other.base+"/api/v1/namespaces/ns/configmaps")
	}
	testkit.WaitFor(t, "5 plain 504s to eject the endpoint", func() bool {
		return other.state(t, other.addrs[0]).State == balancer.StateEjected
	})
}
