package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.uber.org/fx"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestListenTLS runs the sidecar with --listen-tls: client-go with the
// written kubeconfig gets through over HTTP/2 and is spread over the
// apiservers with the sidecar's own upstream identity; a client without
// the loopback client certificate, or with one from another CA, or
// speaking plaintext, is refused before any request reaches an apiserver;
// and the written file holds the loopback credentials only, never the
// upstream ones.
func TestListenTLS(t *testing.T) {
	const sidecarToken = "sidecar-token-5ecret-tls-1"
	logs := &testkit.Buffer{}
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := startSidecarWith(t, sidecarToken, "round-robin", func(o *Config) { o.ListenTLS = true },
		fx.Decorate(func(*slog.Logger) *slog.Logger { return debug }))

	raw, err := os.ReadFile(f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(f.kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("written kubeconfig mode = %v (%v), want 0600: it holds a client key", fi.Mode().Perm(), err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://" + f.proxy.Addr().String(); cfg.Host != want {
		t.Fatalf("written kubeconfig server = %q, want %q", cfg.Host, want)
	}
	if len(cfg.CAData) == 0 || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		t.Fatalf("written kubeconfig lacks the loopback CA, certificate or key:\n%s", raw)
	}

	t.Run("client-go with the written kubeconfig, over HTTP/2", func(t *testing.T) {
		listNamespaces(t, cfg, 30)
		for i, s := range f.servers {
			if n := s.Requests.Load(); n < 5 {
				t.Errorf("apiserver %d got %d of 30 requests; round-robin should give it 10", i, n)
			}
			// The loopback certificate opens fanout only; upstream,
			// requests carry the sidecar's own identity.
			if cn := s.last().CN; cn != "system:kube-scheduler" {
				t.Errorf("apiserver %d saw client %q, want the upstream kubeconfig's system:kube-scheduler", i, cn)
			}
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(cfg.Host + "/api/v1/namespaces")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Errorf("client-go's transport to fanout: %s %d, want HTTP/2.0 200", resp.Proto, resp.StatusCode)
		}
	})

	t.Run("refused without the loopback client certificate", func(t *testing.T) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(cfg.CAData)
		other := testkit.NewCA(t).Client("system:kube-scheduler")
		before := requestsSeen(f)
		for _, tc := range []struct {
			name  string
			certs []tls.Certificate
		}{
			{"no certificate", nil},
			{"certificate from another CA", []tls.Certificate{other.TLS}},
		} {
			// GetClientCertificate sends the certificate even though the
			// server names another CA as acceptable.
			certs := tc.certs
			getCert := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(certs) == 0 {
					return &tls.Certificate{}, nil
				}
				return &certs[0], nil
			}
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, GetClientCertificate: getCert}, ForceAttemptHTTP2: true}
			resp, err := (&http.Client{Transport: tr}).Get(cfg.Host + "/api/v1/namespaces")
			tr.CloseIdleConnections()
			if err == nil {
				resp.Body.Close()
				t.Errorf("%s: answered %d, want a refused TLS handshake", tc.name, resp.StatusCode)
				continue
			}
			// Which error the client reports depends on when it reads the
			// server's alert: the alert itself ("certificate required",
			// "unknown certificate authority"), its HTTP/2 layer's summary,
			// or a broken pipe. What counts is that no request got through,
			// which requestsSeen checks below.
			t.Logf("%s: refused: %v", tc.name, err)
		}
		resp, err := http.Get(strings.Replace(cfg.Host, "https://", "http://", 1) + "/api/v1/namespaces")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Errorf("plaintext HTTP to the TLS listener answered 200: %q", b)
			}
		}
		if after := requestsSeen(f); after != before {
			t.Errorf("refused clients reached the apiservers: %d requests before, %d after", before, after)
		}
	})

	t.Run("the written kubeconfig holds no upstream credential, the log no key", func(t *testing.T) {
		upstreamKey := string(f.clientKey)
		upstreamKey = upstreamKey[strings.Index(upstreamKey, "\n")+1:][:40]
		loopbackKey := string(cfg.KeyData)
		loopbackKey = loopbackKey[strings.Index(loopbackKey, "\n")+1:][:40]
		for what, s := range map[string]string{"sidecar token": sidecarToken, "upstream client key": upstreamKey} {
			if strings.Contains(string(raw), s) {
				t.Errorf("the written kubeconfig contains the %s", what)
			}
		}
		for what, s := range map[string]string{"sidecar token": sidecarToken, "upstream client key": upstreamKey, "loopback client key": loopbackKey} {
			if strings.Contains(logs.String(), s) {
				t.Errorf("the log contains the %s", what)
			}
		}
	})
}

func requestsSeen(f *fixture) int64 {
	var n int64
	for _, s := range f.servers {
		n += s.Requests.Load()
	}
	return n
}

// TestPprof: /debug/pprof/ is absent by default, served on the admin
// address with --enable-pprof, and never on the proxy listener, where the
// path goes to kube-apiserver like any other.
func TestPprof(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		var adminSrv *admin.Server
		f := startSidecarWith(t, "", "round-robin", func(o *Config) { o.Admin.EnablePprof = enabled }, fx.Populate(&adminSrv))
		get := func(url string) (int, string) {
			t.Helper()
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		const marker = "Types of profiles available"
		code, body := get("http://" + adminSrv.Addr().String() + "/debug/pprof/")
		switch {
		case enabled && (code != 200 || !strings.Contains(body, marker)):
			t.Errorf("--enable-pprof: admin /debug/pprof/ = %d %.100q, want the profile index", code, body)
		case !enabled && (code != 404 || strings.Contains(body, marker)):
			t.Errorf("pprof off: admin /debug/pprof/ = %d %.100q, want 404", code, body)
		}
		if enabled {
			if code, body := get("http://" + adminSrv.Addr().String() + "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
				t.Errorf("--enable-pprof: goroutine profile = %d %.100q", code, body)
			}
		}
		before := requestsSeen(f)
		code, body = get("http://" + f.proxy.Addr().String() + "/debug/pprof/")
		if strings.Contains(body, marker) || strings.Contains(body, "goroutine profile") {
			t.Errorf("enabled=%v: the proxy listener served fanout's own profiles: %d %.100q", enabled, code, body)
		}
		if requestsSeen(f) != before+1 {
			t.Errorf("enabled=%v: /debug/pprof/ on the proxy listener did not go to kube-apiserver", enabled)
		}
		http.DefaultClient.CloseIdleConnections()
	}
}
