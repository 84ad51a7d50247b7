package sidecar

import (
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/internal/testkit"
)

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
	logs := &testkit.Buffer{}
	// Level -10: every line fanout logs at any verbosity.
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.Level(-10)}))
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
	f.servers[2].Close()

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
	// The prober's line shows that fanout's log is caught.
	if !strings.Contains(outputs["log"], "endpoint not ready") {
		t.Fatalf("the log lacks the prober's line; the test would prove nothing:\n%s", outputs["log"])
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
}
