package sidecar

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiserver is testkit's stand-in for kube-apiserver (client certificates
// verified when presented, as kube-apiserver does; requests without one
// fall back to their bearer token) serving a ConfigMap, a namespace list
// and, when set, EndpointSlices.
type apiserver struct {
	*testkit.APIServer
	// slices, when set, is the EndpointSliceList JSON served for
	// default/kubernetes; see TestEndpointSliceDiscovery.
	slices atomic.Pointer[string]
}

const slicesPath = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"

func newAPIServer(t *testing.T, ca *testkit.CA, opts ...testkit.APIServerOption) *apiserver {
	t.Helper()
	a := &apiserver{}
	a.APIServer = testkit.NewAPIServer(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if list := a.slices.Load(); list != nil && r.URL.Path == slicesPath {
			serveSlices(w, r, *list)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/api/v1/namespaces" {
			fmt.Fprint(w, `{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"default"}}]}`)
			return
		}
		fmt.Fprintf(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"default"}}`)
	}), opts...)
	return a
}

// clientRequests are the requests the client sent through fanout: all
// but fanout's own probes and EndpointSlice lists.
func (a *apiserver) clientRequests() []testkit.Request {
	var out []testkit.Request
	for _, r := range a.Seen() {
		if r.Path != "/readyz" && r.Path != slicesPath {
			out = append(out, r)
		}
	}
	return out
}

func (a *apiserver) last() testkit.Request {
	seen := a.clientRequests()
	return seen[len(seen)-1]
}

type fixture struct {
	servers    []*apiserver
	proxy      *listener.Server
	kubeconfig string // the one fanout wrote for the client
	clientKey  []byte // PEM of the client key in the upstream kubeconfig
	app        *fxtest.App
}

// startSidecar runs the whole sidecar app against three test apiservers.
// The kubeconfig names the first one; --endpoints names all three, and
// their serving certificates are only valid for "kubernetes", so every
// connection must verify the kubeconfig's tls-server-name.
func startSidecar(t *testing.T, token string, policy string, extra ...fx.Option) *fixture {
	t.Helper()
	return startSidecarWith(t, token, policy, nil, extra...)
}

// startSidecarWith is startSidecar with flags changed by mutate.
func startSidecarWith(t *testing.T, token string, policy string, mutate func(*Config), extra ...fx.Option) *fixture {
	t.Helper()
	return startSidecarLogged(t, slog.New(slog.DiscardHandler), token, policy, mutate, extra...)
}

// startSidecarLogged is startSidecarWith logging to log.
func startSidecarLogged(t *testing.T, log *slog.Logger, token string, policy string, mutate func(*Config), extra ...fx.Option) *fixture {
	t.Helper()
	ca := testkit.NewCA(t)
	client := ca.Client("system:kube-scheduler")
	f := &fixture{clientKey: client.KeyPEM}
	var eps []string
	for range 3 {
		s := newAPIServer(t, ca)
		f.servers = append(f.servers, s)
		eps = append(eps, s.URL)
	}
	dir := t.TempDir()
	user := fmt.Sprintf("    client-certificate: %s\n    client-key: %s\n",
		testkit.WriteFile(t, dir, "client.crt", client.CertPEM),
		testkit.WriteFile(t, dir, "client.key", client.KeyPEM))
	if token != "" {
		user += "    token: " + token + "\n"
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    certificate-authority: %s
    tls-server-name: kubernetes
users:
- name: u
  user:
%scontexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`, eps[0], testkit.WriteFile(t, dir, "ca.crt", ca.CertPEM), user)
	o := NewConfig()
	o.Kubeconfig = testkit.WriteFile(t, dir, "upstream.kubeconfig", []byte(kc))
	o.Engine.Endpoints = strings.Join(eps, ",")
	o.Listener.ListenAddress = "127.0.0.1:0"
	o.Admin.ListenAddress = "127.0.0.1:0"
	o.WriteKubeconfig = filepath.Join(dir, "client.kubeconfig")
	o.Engine.Balancer.Policy = policy
	if mutate != nil {
		mutate(o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	f.kubeconfig = o.WriteKubeconfig
	f.app = fxtest.New(t, App(*o, log), fx.Populate(&f.proxy), fx.Options(extra...))
	f.app.RequireStart()
	t.Cleanup(f.app.RequireStop)
	return f
}

// TestEvenDistribution is the core promise: one HTTP/1.1 client with a
// single keep-alive connection, spread evenly over three apiservers.
func TestEvenDistribution(t *testing.T) {
	for _, policy := range []string{"least-request", "round-robin"} {
		t.Run(policy, func(t *testing.T) {
			f := startSidecar(t, "", policy)
			tr := &http.Transport{MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			const n = 3000
			for i := range n {
				resp, err := c.Get("http://" + f.proxy.Addr().String() + "/api/v1/namespaces/default/configmaps/x")
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: status %d", i, resp.StatusCode)
				}
			}
			var total int64
			shares := make([]float64, len(f.servers))
			for i, s := range f.servers {
				total += s.Requests.Load()
				shares[i] = float64(s.Requests.Load()) / n * 100
			}
			t.Logf("%s: %d requests over 3 apiservers: %.1f%% / %.1f%% / %.1f%%", policy, n, shares[0], shares[1], shares[2])
			if total != n {
				t.Fatalf("apiservers saw %d requests, want %d", total, n)
			}
			for i, s := range shares {
				if s < 100.0/3-5 || s > 100.0/3+5 {
					t.Errorf("apiserver %d got %.1f%% of requests, want 33.3%% ± 5", i, s)
				}
			}
			for i, s := range f.servers {
				if s.Probes.Load() == 0 {
					t.Errorf("apiserver %d: /readyz never probed", i)
				}
			}
			last := f.servers[0].last()
			if last.Proto != "HTTP/2.0" || last.CN != "system:kube-scheduler" {
				t.Errorf("upstream request = %+v, want HTTP/2.0 with client certificate CN system:kube-scheduler", last)
			}
		})
	}
}

// TestCredentials checks which identity reaches the apiserver: the
// sidecar's certificate and token by default, and the request's own
// Authorization untouched, without a client certificate, when it has one.
func TestCredentials(t *testing.T) {
	f := startSidecar(t, "sidecar-token", "round-robin")
	tests := []struct {
		name      string
		authz     string
		wantAuthz string
		wantCN    string
	}{
		{"sidecar identity", "", "Bearer sidecar-token", "system:kube-scheduler"},
		{"own token passes through without client cert", "Bearer per-controller-sa-token", "Bearer per-controller-sa-token", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 3 { // round robin: every apiserver once
				req, _ := http.NewRequest(http.MethodGet, "http://"+f.proxy.Addr().String()+"/api/v1/namespaces/default/configmaps/x", nil)
				if tt.authz != "" {
					req.Header.Set("Authorization", tt.authz)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			for i, s := range f.servers {
				got := s.last()
				if got.Authorization != tt.wantAuthz || got.CN != tt.wantCN {
					t.Errorf("apiserver %d saw Authorization %q, client CN %q; want %q, %q", i, got.Authorization, got.CN, tt.wantAuthz, tt.wantCN)
				}
			}
		})
	}
	http.DefaultClient.CloseIdleConnections()
}

// listNamespaces lists the namespaces n times with client-go over cfg;
// each answer must be the fake apiservers' one, default.
func listNamespaces(t *testing.T, cfg *rest.Config, n int) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		nss, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nss.Items) != 1 || nss.Items[0].Name != "default" {
			t.Fatalf("namespaces through fanout = %+v", nss.Items)
		}
	}
}

// TestWrittenKubeconfig drives fanout with client-go through the kubeconfig
// fanout wrote: it must point at the listener and carry no credentials.
func TestWrittenKubeconfig(t *testing.T) {
	f := startSidecar(t, "", "least-request")
	raw, err := os.ReadFile(f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "client-key") || strings.Contains(string(raw), "token") {
		t.Fatalf("written kubeconfig carries credentials:\n%s", raw)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + f.proxy.Addr().String(); cfg.Host != want {
		t.Fatalf("written kubeconfig server = %q, want %q", cfg.Host, want)
	}
	listNamespaces(t, cfg, 30)
	for i, s := range f.servers {
		if s.Requests.Load() == 0 {
			t.Errorf("apiserver %d got no request from client-go through fanout", i)
		}
	}
}
