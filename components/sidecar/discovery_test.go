package sidecar

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/listener"
)

// serveSlices answers the EndpointSlice list and watch of the resolver:
// the list from list, a watch that stays open without events, and a 400
// for a streaming list (sendInitialEvents), which the resolver must not
// send.
func serveSlices(w http.ResponseWriter, r *http.Request, list string) {
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	switch {
	case q.Get("sendInitialEvents") == "true":
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`)
	case q.Get("watch") == "true":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		fmt.Fprint(w, list)
	}
}

// sliceList is an EndpointSliceList with one slice per address, as the
// three test apiservers listen on different ports.
func sliceList(t *testing.T, servers []*apiserver, terminating int) string {
	var items []string
	for i, s := range servers {
		u, err := url.Parse(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		cond := `{"ready":true,"serving":true,"terminating":false}`
		if i == terminating {
			cond = `{"ready":false,"serving":true,"terminating":true}`
		}
		items = append(items, fmt.Sprintf(`{"metadata":{"name":"kubernetes-%d","namespace":"default","labels":{"kubernetes.io/service-name":"kubernetes"}},`+
			`"addressType":"IPv4","endpoints":[{"addresses":[%q],"conditions":%s}],"ports":[{"name":"https","port":%s,"protocol":"TCP"}]}`,
			i, u.Hostname(), cond, u.Port()))
	}
	return `{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[` + strings.Join(items, ",") + `]}`
}

// TestEndpointSliceDiscovery runs the sidecar with --endpoints
// endpointslice:///default/kubernetes:https: it discovers the three
// apiservers through the kubeconfig's server, skips the terminating one
// (draining, still listed), and spreads requests over the other two.
func TestEndpointSliceDiscovery(t *testing.T) {
	checkDiscovery(t)
}

func checkDiscovery(t *testing.T) {
	f := startSidecar(t, "", "round-robin")
	// startSidecar's app uses a static list; build a second one on the
	// same kubeconfig with discovery instead.
	f.app.RequireStop()
	list := sliceList(t, f.servers, 2)
	f.servers[0].slices.Store(&list)
	for _, s := range f.servers {
		s.Requests.Store(0)
	}

	o := NewConfig()
	o.Kubeconfig = filepath.Join(filepath.Dir(f.kubeconfig), "upstream.kubeconfig")
	o.Engine.Endpoints = "endpointslice:///default/kubernetes:https"
	o.Listener.ListenAddress = "127.0.0.1:0"
	o.Admin.ListenAddress = "127.0.0.1:0"
	o.Engine.Balancer.Policy = "round-robin"
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	var p *listener.Server
	var b *engine.Engine
	var reg prometheus.Gatherer
	app := fxtest.New(t, App(*o, slog.New(slog.DiscardHandler)), fx.Populate(&p, &b, &reg))
	app.RequireStart()
	defer app.RequireStop()

	draining := strings.TrimPrefix(f.servers[2].URL, "https://")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready, drained := 0, false
		for _, s := range b.Endpoints() {
			switch {
			case s.State == balancer.StateReady:
				ready++
			case s.State == balancer.StateDraining && s.Address == draining:
				drained = true
			}
		}
		if ready == 2 && drained {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("balancer endpoints %+v, want the three apiservers with the third draining", b.Endpoints())
		}
		time.Sleep(10 * time.Millisecond)
	}

	c := &http.Client{}
	for i := range 30 {
		resp, err := c.Get("http://" + p.Addr().String() + "/api/v1/namespaces/default/configmaps/x")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Server 0 also answered the informer's list and watch.
	if n := f.servers[2].Requests.Load(); n != 0 {
		t.Errorf("the draining apiserver got %d requests, want 0", n)
	}
	if n := f.servers[1].Requests.Load(); n != 15 {
		t.Errorf("apiserver 1 got %d requests, want 15 of 30", n)
	}
	want := `
# HELP fanout_resolver_endpoints Endpoints in the last published snapshot by state (ready, or draining: terminating or not ready, taking no new requests).
# TYPE fanout_resolver_endpoints gauge
fanout_resolver_endpoints{state="draining"} 1
fanout_resolver_endpoints{state="ready"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fanout_resolver_endpoints"); err != nil {
		t.Error(err)
	}
}

func TestDiscoveryConfig(t *testing.T) {
	dir := t.TempDir()
	kc := func(server string) string {
		p := filepath.Join(dir, strings.NewReplacer(":", "_", "/", "_").Replace(server))
		body := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n", server)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own, other := kc("https://own.example:6443"), kc("https://other.example:6443")
	execPlugin := filepath.Join(dir, "exec")
	if err := os.WriteFile(execPlugin, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://x.example\"}\nusers:\n- name: u\n  user: {exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	tests := []struct {
		name     string
		flag     string
		wantHost string
		wantErr  string
	}{
		{"default: the client's kubeconfig", "", "https://own.example:6443", ""},
		{"a path", other, "https://other.example:6443", ""},
		{"missing path", filepath.Join(dir, "nope"), "", "--discovery-kubeconfig"},
		{"in-cluster outside a pod", DiscoveryInCluster, "", "--discovery-kubeconfig in-cluster"},
		{"exec plugin", execPlugin, "", "exec credential plugins are not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := discoveryAPIServer(&Config{Kubeconfig: own, DiscoveryKubeconfig: tt.flag}, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.URL != tt.wantHost {
				t.Fatalf("URL = %q, want %q", c.URL, tt.wantHost)
			}
		})
	}
}
