package components

import (
	"bytes"
	"encoding/base64"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"k8s.io/klog/v2"

	"github.com/fanout-dev/fanout/components/admin"
)

// lockedBuffer is a log sink safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecretsStayOut sends requests that carry secrets through a sidecar
// that holds secrets of its own, makes some of them fail, and then reads
// everything fanout says to anyone: its log at debug level, /metrics,
// /debug/endpoints, /readyz, every response body and header, and the
// kubeconfig it writes for the client. None may contain a token, a key, or
// an Authorization header value.
func TestSecretsStayOut(t *testing.T) {
	const (
		sidecarToken = "sidecar-token-5ecret-a1b2c3"
		clientToken  = "client-token-5ecret-d4e5f6"
		wsToken      = "ws-token-5ecret-g7h8i9"
	)
	logs := &lockedBuffer{}
	// klog's verbose lines reach fanout's logger at slog level -V (see
	// routeKlog): level -10 lets every one of them through, and so does
	// klog's own -v=10, which gates the callers that do not use a
	// contextual logger. UpgradeAwareHandler logs the request headers it
	// sends at V(6).
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.Level(-10)}))
	klogVerbosity(t, "10", logs)
	// The reverse proxy's error log goes through slog's default.
	prev := slog.Default()
	slog.SetDefault(debug)
	t.Cleanup(func() { slog.SetDefault(prev) })

	var adminSrv *admin.Server
	f := startSidecar(t, sidecarToken, "round-robin",
		fx.Decorate(func(*slog.Logger) *slog.Logger { return debug }),
		fx.Populate(&adminSrv))
	// One apiserver gone: requests to it fail and are retried, and the
	// failures are logged and counted.
	f.servers[2].srv.Close()

	var seen strings.Builder
	record := func(resp *http.Response) {
		for k, vs := range resp.Header {
			seen.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen.Write(b)
	}
	base := "http://" + f.proxy.Addr().String()
	requests := []struct {
		path   string
		header http.Header
	}{
		{"/api/v1/namespaces/default/configmaps/x", nil},
		{"/api/v1/namespaces/default/configmaps/x", http.Header{"Authorization": {"Bearer " + clientToken}}},
		{"/api/v1/namespaces/default/configmaps/x?watch=true&timeoutSeconds=1", http.Header{"Authorization": {"Bearer " + clientToken}}},
		{"/api/v1/namespaces/default/pods/p/exec?command=sh", http.Header{
			"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
			"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(wsToken))},
		}},
		{"/api/v1/namespaces/default/pods/p/exec?command=sh", http.Header{
			"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}, "Authorization": {"Bearer " + clientToken},
		}},
		{"/api/v1/namespaces/default/pods/p/attach", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}},
		{"/api/v1/namespaces/default/secrets?fieldSelector=%3D%3D%3D", http.Header{"Authorization": {"Bearer " + clientToken}}},
	}
	for range 10 {
		for _, r := range requests {
			req, err := http.NewRequest(http.MethodGet, base+r.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range r.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				// A malformed request may be refused outright: what the
				// client saw is still searched.
				seen.WriteString(err.Error() + "\n")
				continue
			}
			record(resp)
		}
	}
	adminBase := "http://" + adminSrv.Addr().String()
	for _, p := range []string{"/metrics", "/debug/endpoints", "/readyz", "/healthz"} {
		resp, err := http.Get(adminBase + p)
		if err != nil {
			t.Fatal(err)
		}
		record(resp)
	}
	written, err := os.ReadFile(f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The closed apiserver fails its probe: proof that the log is caught.
	for i := 0; i < 100 && !strings.Contains(logs.String(), "endpoint not ready"); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	f.app.RequireStop() // shutdown logs too
	outputs := map[string]string{
		"log":                logs.String(),
		"responses":          seen.String(),
		"written kubeconfig": string(written),
	}
	for _, want := range []string{"endpoint not ready", "Couldn't parse request", "Connecting to backend proxy"} {
		// The prober's line shows fanout's log is caught; the request
		// parser's that klog is routed into it too; UpgradeAwareHandler's
		// V(6) line with the headers it sends that verbose klog is.
		if !strings.Contains(outputs["log"], want) {
			t.Fatalf("the log lacks %q; the test would prove nothing:\n%s", want, outputs["log"])
		}
	}
	keyBody := string(f.clientKey)
	keyBody = keyBody[strings.Index(keyBody, "\n")+1:][:40] // a line of the key's base64
	secrets := map[string]string{
		"sidecar token":           sidecarToken,
		"client token":            clientToken,
		"WebSocket bearer token":  wsToken,
		"encoded WebSocket token": base64.RawURLEncoding.EncodeToString([]byte(wsToken)),
		"client key":              keyBody,
		"Authorization value":     "Bearer ",
	}
	for where, out := range outputs {
		for what, s := range secrets {
			if strings.Contains(out, s) {
				i := strings.Index(out, s)
				t.Errorf("the %s contains the %s: ...%s...", where, what, out[max(0, i-80):min(len(out), i+len(s)+20)])
			}
		}
	}
	// The headers UpgradeAwareHandler logged carried credentials, which
	// show redacted: the search above had something to find.
	for _, want := range []string{"Authorization:[[redacted]]", wsBearerPrefix + "[redacted]"} {
		if !strings.Contains(outputs["log"], want) {
			t.Errorf("the log lacks %q: the upgrade requests' credentials were not logged, so the search proves nothing about them", want)
		}
	}
}

// klogVerbosity sets klog's -v for the duration of the test, and sends
// what klog writes itself (before the sidecar routes it to fanout's
// logger) to w.
func klogVerbosity(t *testing.T, v string, w io.Writer) {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	prev := fs.Lookup("v").Value.String()
	prevStderr := fs.Lookup("logtostderr").Value.String()
	if err := fs.Set("v", v); err != nil {
		t.Fatal(err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(w)
	t.Cleanup(func() {
		klog.ClearLogger()
		klog.SetOutput(os.Stderr)
		fs.Set("logtostderr", prevStderr)
		fs.Set("v", prev)
	})
}
