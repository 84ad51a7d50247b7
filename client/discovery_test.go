package client

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
	"k8s.io/client-go/rest"
)

// TestDiscoveryAPIServer checks what the library gives the endpointslice
// resolver for a rest.Config: its server URL, and client-go's transport,
// which authenticates as the config does and names fanout-discovery in
// the User-Agent.
func TestDiscoveryAPIServer(t *testing.T) {
	var auth, ua string
	ca := testkit.NewCA(t)
	srv := testkit.NewAPIServer(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, ua = r.Header.Get("Authorization"), r.Header.Get("User-Agent")
	}))
	cfg := &rest.Config{Host: srv.URL, BearerToken: "tok", TLSClientConfig: rest.TLSClientConfig{ServerName: "kubernetes", CAData: ca.CertPEM}}
	api, err := discoveryAPIServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if api.URL != srv.URL {
		t.Errorf("URL %q, want %q", api.URL, srv.URL)
	}
	if !strings.HasSuffix(api.UserAgent, "/fanout-discovery") {
		t.Errorf("UserAgent %q, want one ending in /fanout-discovery", api.UserAgent)
	}
	req, _ := http.NewRequest(http.MethodGet, api.URL+"/apis", nil)
	req.Header.Set("User-Agent", api.UserAgent)
	resp, err := api.Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if auth != "Bearer tok" || ua != api.UserAgent {
		t.Errorf("the apiserver saw Authorization %q and User-Agent %q", auth, ua)
	}
	if cfg.UserAgent != "" {
		t.Error("discoveryAPIServer changed the caller's config")
	}

	// A host without a scheme is https with TLS settings, as for client-go.
	api, err = discoveryAPIServer(&rest.Config{Host: "kube.example:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil || api.URL != "https://kube.example:6443" {
		t.Errorf("host without scheme: %q, %v", api.URL, err)
	}
}
