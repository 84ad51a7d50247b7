package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// amplified builds a labelled pod's raw JSON of about size bytes: pre
// (which goes on from inside metadata), elem repeated (N in it replaced by
// its index), then post. The finding's `{},{},…` in containers is
// amplified(`},"spec":{"containers":[`, "{}", "]}}", size).
func amplified(pre, elem, post string, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"metadata":{"name":"x","labels":{"fanout.dev/inject":"true"}`)
	b.WriteString(pre)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.ReplaceAll(elem, "N", fmt.Sprint(i)))
	}
	b.WriteString(post)
	return b.Bytes()
}

// repeated is amplified with a count instead of a size.
func repeated(pre, elem, post string, n int) string {
	return pre + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + post
}

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc:
// what the garbage collector had to find room for, whether or not it ran).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReviewMemoryBounded posts, to each webhook path, reviews of about
// 512 KiB and of the 3 MiB maximum whose pods repeat the cheapest element
// of a list (the finding: `{},` in containers), and checks that what the
// handler allocates for each grows with the bytes received and not with
// what they would decode to: at most 3× the body plus 2 MiB (the body
// read, io.ReadAll doubling its buffer, and copied once into the review).
// At 512 KiB it also decodes each pod directly, as the handler did before
// it scanned the body first, and checks that this costs at least 4× what
// the handler allocated, so that the inputs are hostile enough for the
// test to mean something. Then a pod at the bounds, which is decoded, and
// allocates at most 16 MiB. Under the race detector, which doubles what
// allocations cost, the bounds double.
func TestReviewMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 1.5 GiB to show what the bounds prevent")
	}
	lists := []struct {
		name, pre, elem, post string
	}{
		{"containers", `},"spec":{"containers":[`, `{}`, `]}}`},
		{"init containers", `},"spec":{"initContainers":[`, `{}`, `]}}`},
		{"null containers", `},"spec":{"containers":[`, `null`, `]}}`},
		{"volumes", `},"spec":{"volumes":[`, `{}`, `]}}`},
		{"env", `},"spec":{"containers":[{"name":"c","env":[`, `{}`, `]}]}}`},
		{"tolerations", `},"spec":{"tolerations":[`, `{}`, `]}}`},
		{"container statuses", `},"status":{"containerStatuses":[`, `{}`, `]}}`},
		{"managedFields", `,"managedFields":[`, `{}`, `]},"spec":{}}`},
		{"args", `},"spec":{"containers":[{"name":"c","args":[`, `""`, `]}]}}`},
		{"annotations", `,"annotations":{`, `"N":""`, `}},"spec":{}}`},
		{"escaped key", `},"spec":{"\u0063ontainers":[`, `{}`, `]}}`},
		{"folded key", `},"ſpec":{"CONTAINERS":[`, `{}`, `]}}`},
	}
	h, m := newTestHandler(t)
	paths := []string{"/mutate", "/mutate/namespace", "/mutate/hosted"}
	post := func(path string, body []byte) (*admissionv1.AdmissionResponse, uint64) {
		var rec *httptest.ResponseRecorder
		got := allocated(func() {
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		})
		var out admissionv1.AdmissionReview
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Response == nil || !out.Response.Allowed || out.Response.Patch != nil {
			t.Fatalf("%s: %d %.200s; want the pod allowed unmutated", path, rec.Code, rec.Body)
		}
		return out.Response, got
	}
	rejected := 0.0
	for _, size := range []int{512 << 10, MaxReviewBytes - 4<<10} {
		for _, l := range lists {
			raw := amplified(l.pre, l.elem, l.post, size)
			body := rawReview(t, "kube-system", raw)
			if len(body) > MaxReviewBytes {
				t.Fatalf("%s: test body of %d bytes above the limit", l.name, len(body))
			}
			bound := raceFactor * (3*uint64(len(body)) + 2<<20)
			var most uint64
			for _, path := range paths {
				resp, got := post(path, body)
				most = max(most, got)
				if got > bound {
					// Fatal: the next inputs would allocate GiBs.
					t.Fatalf("%s, %d bytes, %s: the handler allocated %.1f MiB, above %.1f MiB", l.name, len(body), path, float64(got)/(1<<20), float64(bound)/(1<<20))
				}
				if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "without reading it") {
					t.Errorf("%s, %s: warnings %q, want the pod left unread", l.name, path, resp.Warnings)
				}
				rejected++
			}
			if size > 512<<10 {
				t.Logf("%-18s %7d B body: %5.1f MiB through the handler", l.name, len(body), float64(most)/(1<<20))
				continue
			}
			direct := allocated(func() {
				var p corev1.Pod
				if err := json.Unmarshal(raw, &p); err != nil {
					t.Fatalf("%s: the pod does not decode: %v", l.name, err)
				}
			})
			t.Logf("%-18s %7d B body: %5.1f MiB through the handler, %6.1f MiB decoded directly", l.name, len(body), float64(most)/(1<<20), float64(direct)/(1<<20))
			if direct < 4*most/raceFactor {
				t.Errorf("%s: decoding the pod directly allocates %.1f MiB, less than 4× the handler's %.1f: not hostile enough to test the bound", l.name, float64(direct)/(1<<20), float64(most)/(1<<20))
			}
		}
	}
	if got := testutil.ToFloat64(m.Rejected.WithLabelValues(string(RejectTooComplex))); got != rejected {
		t.Errorf("rejected{too-complex} = %v, want %v", got, rejected)
	}

	// At the bounds: decoded and decided, and still a few MiB.
	spec := repeated(`},"spec":{"containers":[`, `{}`, `],`, MaxPodContainers) +
		repeated(`"volumes":[`, `{}`, `],`, MaxPodVolumes) +
		repeated(`"tolerations":[`, `{}`, `]},`, (MaxReviewValues-MaxPodContainers-MaxPodVolumes)/2-40) +
		repeated(`"status":{"containerStatuses":[`, `{}`, `]}}`, (MaxReviewValues-MaxPodContainers-MaxPodVolumes)/2-40)
	raw := []byte(`{"metadata":{"name":"x","labels":{"fanout.dev/inject":"true"}` + spec)
	var p corev1.Pod
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		resp, got := post(path, rawReview(t, "kube-system", raw))
		t.Logf("at the bounds (%d bytes), %s: %.1f MiB through the handler", len(raw), path, float64(got)/(1<<20))
		if len(resp.Warnings) == 1 && strings.Contains(resp.Warnings[0], "without reading it") {
			t.Fatalf("%s: a pod at the bounds was not read: %q", path, resp.Warnings)
		}
		if got > raceFactor*16<<20 {
			t.Errorf("%s: a pod at the bounds allocated %.1f MiB, above 16 MiB", path, float64(got)/(1<<20))
		}
	}
}

// TestBodyTooLarge: a body above MaxReviewBytes is refused with 413
// before it is decoded, and counted.
func TestBodyTooLarge(t *testing.T) {
	h, m := newTestHandler(t)
	body := rawReview(t, "kube-system", amplified(`},"spec":{"containers":[{"name":"c","args":[`, `"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`, `]}]}}`, MaxReviewBytes))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d-byte review: %d %s, want 413", len(body), rec.Code, rec.Body)
	}
	if got := testutil.ToFloat64(m.Rejected.WithLabelValues(string(RejectTooLarge))); got != 1 {
		t.Errorf("rejected{too-large} = %v, want 1", got)
	}
}

// blockingMutator holds every Patch until release is closed, counting the
// calls inside at once.
type blockingMutator struct {
	entered chan struct{}
	release chan struct{}
	inside  atomic.Int32
	most    atomic.Int32
}

func (b *blockingMutator) Patch(pod *corev1.Pod, scope Scope) ([]PatchOp, Decision) {
	n := b.inside.Add(1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	b.entered <- struct{}{}
	<-b.release
	b.inside.Add(-1)
	return nil, Decision{Reason: ReasonConflict}
}

// TestConcurrencyBounded: with two slots, two reviews in the mutator, a
// third with the apiserver's ?timeout= gets 429 with Retry-After after a
// third of it without entering, and a fourth without waits in the queue
// and is served once a slot frees.
func TestConcurrencyBounded(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	bm := &blockingMutator{entered: make(chan struct{}, 8), release: make(chan struct{})}
	h := NewHandler(bm, m, nil, Limits{MaxConcurrentReviews: 2, QueueWait: time.Minute})
	body := review(t, kcmPod())
	codes := make(chan int, 8)
	send := func(url string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body)))
		codes <- rec.Code
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { send("/mutate") })
	}
	<-bm.entered
	<-bm.entered

	var once sync.Once
	releaseAll := func() { once.Do(func() { close(bm.release) }) }
	t.Cleanup(func() { releaseAll(); wg.Wait() })
	third := make(chan *httptest.ResponseRecorder, 1)
	start := time.Now()
	wg.Go(func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate?timeout=300ms", bytes.NewReader(body)))
		third <- rec
	})
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-third:
	case <-bm.entered:
		t.Fatal("a third review entered the mutator with two slots taken")
	}
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("third review: %d, Retry-After %q; want 429 with Retry-After: 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	if waited := time.Since(start); waited < 100*time.Millisecond || waited > 30*time.Second {
		t.Errorf("third review answered after %s; want it to wait a third of its 300ms timeout", waited)
	}
	if got := bm.inside.Load(); got != 2 {
		t.Fatalf("%d reviews in the mutator after the refusal, want 2", got)
	}
	if got := testutil.ToFloat64(m.Rejected.WithLabelValues(string(RejectBusy))); got != 1 {
		t.Errorf("rejected{busy} = %v, want 1", got)
	}

	wg.Go(func() { send("/mutate/namespace") })
	testkit.WaitFor(t, "the fourth review queued", func() bool { return testutil.ToFloat64(m.Queued) == 1 })
	if got := testutil.ToFloat64(m.InFlight); got != 2 {
		t.Errorf("in flight %v, want 2", got)
	}
	bm.release <- struct{}{} // one of the first two leaves
	<-bm.entered             // and the fourth takes its slot
	releaseAll()
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a review got %d, want 200", c)
		}
	}
	if got := bm.most.Load(); got != 2 {
		t.Errorf("at most %d reviews were in the mutator at once, want 2", got)
	}
	if q, f := testutil.ToFloat64(m.Queued), testutil.ToFloat64(m.InFlight); q != 0 || f != 0 {
		t.Errorf("queued %v, in flight %v after all answered; want 0, 0", q, f)
	}
}

// TestQueuedReviewEndsWithItsRequest: a review waiting for a slot gives
// up when kube-apiserver gives up on it.
func TestQueuedReviewEndsWithItsRequest(t *testing.T) {
	m, _ := NewMetrics(prometheus.NewRegistry())
	bm := &blockingMutator{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := NewHandler(bm, m, nil, Limits{MaxConcurrentReviews: 1, QueueWait: time.Hour})
	body := review(t, kcmPod())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
	}()
	<-bm.entered
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)).WithContext(ctx))
		answered <- rec.Code
	}()
	testkit.WaitFor(t, "the second review queued", func() bool { return testutil.ToFloat64(m.Queued) == 1 })
	cancel()
	if code := <-answered; code != http.StatusTooManyRequests {
		t.Errorf("cancelled queued review: %d, want 429", code)
	}
	close(bm.release)
	<-done
}

// startServer runs the webhook server on loopback with cfg and returns
// its address and metrics.
func startServer(t *testing.T, cfg ServerConfig, ca *testkit.CA) (string, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	kp := ca.Serving("127.0.0.1")
	cfg.ListenAddress = "127.0.0.1:0"
	srv := NewServer(cfg, NewHandler(testConfig(), m, nil, DefaultLimits()), staticCert{&kp.TLS}, nil)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	return srv.Addr().String(), m
}

// TestClientCertificateRequired: with ClientCAs, a caller without a
// certificate, or with one another CA signed, gets no answer (the
// handshake fails) and is counted; one the CA signed gets its review. A
// new bundle written over the file (rename, as a secret volume's swap) is
// in force from the first handshake a second after the last look at the
// file, not before, resumed sessions included. The server runs on
// httptest's in-memory network in a synctest bubble, whose clock the
// test moves.
func TestClientCertificateRequired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca, other := testkit.NewCA(t), testkit.NewCA(t)
		dir := t.TempDir()
		file, err := NewClientCAFile(testkit.WriteFile(t, dir, "ca.crt", ca.CertPEM), nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		kp := ca.Serving("injector.svc")
		ts := httptest.NewTestServer(t, NewHandler(testConfig(), m, nil, DefaultLimits()))
		ts.EnableHTTP2 = true
		ts.TLS = tlsConfig(ServerConfig{ClientCAs: file}, staticCert{&kp.TLS}, m)
		inMemory := ts.Client().Transport.(*http.Transport)
		body := review(t, kcmPod())
		sessions := tls.NewLRUClientSessionCache(8)
		call := func(cert *testkit.KeyPair, resume bool) error {
			c := &tls.Config{RootCAs: ca.Pool, ServerName: "injector.svc", NextProtos: []string{"h2", "http/1.1"}}
			if cert != nil {
				c.Certificates = []tls.Certificate{cert.TLS}
			}
			if resume {
				c.ClientSessionCache = sessions
			}
			tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := inMemory.DialTLSContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				// The in-memory connection, with this caller's TLS
				// rather than httptest's.
				return tls.Client(conn.(*tls.Conn).NetConn(), c), nil
			}}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post("https://injector.svc/mutate", "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"patch"`)) {
				return fmt.Errorf("%d %s", resp.StatusCode, b)
			}
			return nil
		}
		good, bad := ca.Client("kube-apiserver"), other.Client("kube-apiserver")
		if err := call(nil, false); err == nil {
			t.Error("a caller without a client certificate got an answer")
		}
		if err := call(&bad, false); err == nil {
			t.Error("a caller with another CA's certificate got an answer")
		}
		if got := testutil.ToFloat64(m.Rejected.WithLabelValues(string(RejectClientCertificate))); got != 2 {
			t.Errorf("rejected{client-certificate} = %v, want 2", got)
		}
		if err := call(&good, true); err != nil {
			t.Fatalf("the CA's client: %v", err)
		}

		// Rotate: the other CA replaces the first.
		tmp := testkit.WriteFile(t, dir, ".ca.crt.tmp", other.CertPEM)
		if err := os.Rename(tmp, filepath.Join(dir, "ca.crt")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(clientCARecheck - time.Nanosecond)
		if err := call(&bad, false); err == nil {
			t.Error("the new CA's client got an answer before the file was looked at again")
		}
		time.Sleep(time.Nanosecond)
		if err := call(&bad, false); err != nil {
			t.Errorf("the new CA's client after the rotation: %v", err)
		}
		if err := call(&good, true); err == nil {
			t.Error("a resumed session of the old CA's client still got an answer after the rotation")
		}
		// A file that is no bundle keeps the last good one.
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(clientCARecheck)
		if err := call(&bad, false); err != nil {
			t.Errorf("after a broken bundle was written, the last good one's client: %v", err)
		}
	})
}

// TestClientCAFileUnusable: a file that is missing or holds no
// certificate fails at start, saying which flag.
func TestClientCAFileUnusable(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "missing"), testkit.WriteFile(t, dir, "empty", []byte("no PEM here"))} {
		if _, err := NewClientCAFile(path, nil); err == nil || !strings.Contains(err.Error(), "--client-ca-file") {
			t.Errorf("%s: %v, want an error naming --client-ca-file", path, err)
		}
	}
}

// TestConnectionsBounded: at MaxConnections, a new connection closes the
// one idle longest, and that is counted.
func TestConnectionsBounded(t *testing.T) {
	ca := testkit.NewCA(t)
	addr, m := startServer(t, ServerConfig{MaxConnections: 2}, ca)
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := dial()
	dial()
	dial()
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := first.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the connection idle longest: read %v; want it closed by the server", err)
	}
	if got := testutil.ToFloat64(m.ConnectionsEvicted); got != 1 {
		t.Errorf("connections evicted %v, want 1", got)
	}
}

// isTimeout says whether err is the read deadline rather than a close.
func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
