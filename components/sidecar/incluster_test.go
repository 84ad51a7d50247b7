package sidecar

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx/fxtest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestInClusterFlagValidation(t *testing.T) {
	tests := []struct {
		name       string
		kubeconfig string
		inCluster  bool
		wantErr    string
	}{
		{name: "kubeconfig", kubeconfig: "/k"},
		{name: "in-cluster", inCluster: true},
		{name: "neither", wantErr: "--kubeconfig is required"},
		{name: "both", kubeconfig: "/k", inCluster: true, wantErr: "exclude each other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewConfig()
			o.Kubeconfig, o.InCluster = tt.kubeconfig, tt.inCluster
			err := o.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestInClusterOutsidePod: --in-cluster outside a pod fails before start
// with a hint, rather than at the first request.
func TestInClusterOutsidePod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o := NewConfig()
	o.InCluster = true
	if _, err := loadUpstream(o); err == nil || !strings.Contains(err.Error(), "--in-cluster") {
		t.Fatalf("loadUpstream = %v, want an --in-cluster error", err)
	}
}

// TestInClusterSidecar runs the whole sidecar with --in-cluster against
// three test apiservers: requests carry the service account token from its
// file, and a rotated token is used once the file changes.
func TestInClusterSidecar(t *testing.T) {
	ca := testkit.NewCA(t)
	// As in a cluster: the serving certificate carries the kubernetes
	// Service address, which in-cluster clients verify.
	var servers []*apiserver
	var eps []string
	for range 3 {
		s := newAPIServer(t, ca, testkit.WithNames("127.0.0.1"))
		servers = append(servers, s)
		eps = append(eps, s.URL)
	}
	dir := t.TempDir()
	token := testkit.WriteFile(t, dir, "token", []byte("tok-1\n"))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(eps[0], "https://"))
	old := inClusterPaths
	inClusterPaths = certs.InCluster{TokenFile: token, CAFile: testkit.WriteFile(t, dir, "ca.crt", ca.CertPEM), Host: "127.0.0.1", Port: port}
	t.Cleanup(func() { inClusterPaths = old })

	o := NewConfig()
	o.InCluster = true
	o.Engine.Endpoints = strings.Join(eps, ",")
	o.Listener.ListenAddress = "127.0.0.1:0"
	o.Admin.ListenAddress = "127.0.0.1:0"
	o.WriteKubeconfig = filepath.Join(dir, "client.kubeconfig")
	o.Engine.Probe.Interval = 0
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	app := fxtest.New(t, App(*o, slog.New(slog.DiscardHandler)))
	app.RequireStart()
	defer app.RequireStop()

	cfg, err := clientcmd.BuildConfigFromFlags("", o.WriteKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	authz := func() map[string]bool {
		seen := map[string]bool{}
		for _, s := range servers {
			for _, r := range s.clientRequests() {
				seen[r.Authorization] = true
			}
		}
		return seen
	}
	for range 6 {
		if _, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := authz(); len(got) != 1 || !got["Bearer tok-1"] {
		t.Fatalf("Authorization headers seen: %v, want only the service account token", got)
	}
	if err := os.WriteFile(token, []byte("tok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !authz()["Bearer tok-2"] {
		if time.Now().After(deadline) {
			t.Fatalf("the rotated token was never sent; seen %v", authz())
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
