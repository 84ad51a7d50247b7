package e2e_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestListenTLSThroughFanout runs fanout --listen-tls in front of the real
// control plane: a client-go client with the kubeconfig fanout wrote lists
// pods and runs the mixed workload over one HTTP/2 connection to fanout,
// and its requests spread over the apiservers as over plaintext. A client
// without the loopback client certificate is refused at the handshake.
// The same workload through a plaintext fanout shows the connection count
// HTTP/1.1 costs.
func TestListenTLSThroughFanout(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)

	const user, ns = "e2e-listen-tls", "e2e-listen-tls"
	kubeconfig, err := cp.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	userNamespace(ctx, t, cp, ns, user)
	grantPodList(ctx, t, cp, ns, user)

	sidecar, err := cp.StartFanout(ctx, t, user+"-tls", kubeconfig, "--listen-tls")
	if err != nil {
		t.Fatal(err)
	}
	cfg := sidecar.Config
	if !strings.HasPrefix(cfg.Host, "https://127.0.0.1:") || len(cfg.KeyData) == 0 {
		t.Fatalf("written kubeconfig: server %q, client key %d bytes; want https://127.0.0.1 and the loopback client key", cfg.Host, len(cfg.KeyData))
	}

	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if _, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("listing pods through fanout --listen-tls: %v", err)
		}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/version")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("client-go spoke %s to fanout --listen-tls, want HTTP/2", resp.Proto)
	}

	var tlsConns, plainConns float64
	w := mixed
	w.whileWatching = func() { tlsConns = downstreamConnections(t, sidecar.AdminAddress) }
	res := w.run(ctx, t, cfg, ns)
	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through fanout --listen-tls: 30 pod lists + %d requests + %d watches in %s; client connections to fanout with the watches open: %v; served: %s",
		res.requests, w.watches, res.elapsed.Round(time.Millisecond), tlsConns, harness.FormatShares(counts))
	checkServedAll(t, counts, res.requests+int64(w.watches)+30)
	w.checkWatches(t, res)
	for i, s := range harness.Shares(counts) {
		if s < 0.2833 || s > 0.3833 {
			t.Errorf("apiserver %d served %.1f%% of %s's requests, want 33.3%% ± 5 points (%s)", i+1, 100*s, user, harness.FormatShares(counts))
		}
	}
	// client-go multiplexes everything over HTTP/2; 2 allows for one
	// connection being replaced at the wrong moment.
	if tlsConns < 1 || tlsConns > 2 {
		t.Errorf("client connections to fanout --listen-tls with %d watches open: %v, want 1 (HTTP/2)", w.watches, tlsConns)
	}

	// Without the written client certificate: refused at the handshake.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cfg.CAData)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	if resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(cfg.Host + "/api/v1/namespaces/" + ns + "/pods"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without the loopback certificate got %d, want a refused handshake", resp.StatusCode)
	} else {
		// The alert ("certificate required") or, depending on timing, the
		// HTTP/2 layer's summary of it or a broken pipe.
		t.Logf("client without the loopback certificate refused: %v", err)
	}
	tr.CloseIdleConnections()

	// The same watches through a plaintext fanout, for the comparison.
	plain, err := cp.StartFanout(ctx, t, user+"-plain", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	small := workload{requests: 200, workers: 4, watches: mixed.watches}
	small.whileWatching = func() { plainConns = downstreamConnections(t, plain.AdminAddress) }
	small.run(ctx, t, plain.Config, ns)
	t.Logf("client connections with %d watches open: --listen-tls %v, plaintext %v", mixed.watches, tlsConns, plainConns)
	if plainConns <= tlsConns {
		t.Errorf("plaintext fanout held %v client connections with %d watches, --listen-tls %v; HTTP/1.1 should need more", plainConns, mixed.watches, tlsConns)
	}
}

func grantPodList(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns, user string) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pods-list", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}
	if _, err := cp.AdminClient.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pods-list", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pods-list"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := cp.AdminClient.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitAuthorized(ctx, user, "list", "pods", ns); err != nil {
		t.Fatal(err)
	}
}

// downstreamConnections reads fanout_downstream_connections from /metrics.
func downstreamConnections(t *testing.T, admin string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "fanout_downstream_connections "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("fanout_downstream_connections not in /metrics")
	return 0
}
