package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The rotation tests change credentials under a running fanout while a
// client keeps cycling ConfigMaps through it: every rotation must cost
// zero failed requests and no restart. Each names its files the way a
// Kubernetes pod would see them (a secret volume with the ..data swap) or
// the way an operator edits them (atomic renames).

// fileFanout starts a fanout sidecar (name) on a kubeconfig, written in
// dir, that names its credentials by file as a mounted volume does; empty
// names leave a credential out. It logs the tail of fanout's log if the test
// fails.
func fileFanout(ctx context.Context, t *testing.T, cp *harness.ControlPlane, name, dir, caFile, certFile, keyFile, tokenFile string) *harness.Fanout {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cp.Endpoints()[0], CertificateAuthority: caFile}
	cfg.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile, TokenFile: tokenFile}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	cfg.CurrentContext = "e2e"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	f, err := cp.StartFanout(ctx, t, name, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	logOnFailure(t, f)
	return f
}

// grantConfigMaps lets user use the configmaps Role that userNamespace
// made in ns.
func grantConfigMaps(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns, user string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps-" + user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := cp.AdminClient.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding %s: %v", user, err)
	}
	for _, verb := range []string{"create", "get", "list", "watch", "update", "delete"} {
		if err := cp.WaitAuthorized(ctx, user, verb, "configmaps", ns); err != nil {
			t.Fatal(err)
		}
	}
}

// whoAmI asks kube-apiserver, through cfg, who the request came from.
func whoAmI(ctx context.Context, t *testing.T, cfg *rest.Config) string {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo.Username
}

// waitMetric waits until fanout's series name{labels} reaches at least
// want and returns how long that took.
func waitMetric(ctx context.Context, t *testing.T, f *harness.Fanout, name string, labels map[string]string, want float64) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(time.Minute)
	for {
		v, err := f.Metric(name, labels)
		if err == nil && v >= want {
			return time.Since(start)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s%v = %v (err %v) after a minute, want at least %v; fanout log:\n%s", name, labels, v, err, want, harness.Tail(f.LogPath, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metric(t *testing.T, f *harness.Fanout, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := f.Metric(name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkNoRestart fails t if fanout's process changed or exited.
func checkNoRestart(t *testing.T, f *harness.Fanout, pid int) {
	t.Helper()
	if !f.Running() || f.PID() != pid {
		t.Errorf("fanout restarted or exited: PID %d, now %d, running %v", pid, f.PID(), f.Running())
	}
}

// logOnFailure prints the end of fanout's log if t failed.
func logOnFailure(t *testing.T, f *harness.Fanout) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the sidecar log %s:\n%s", f.LogPath, harness.Tail(f.LogPath, 60))
		}
	})
}

// TestRotateClientCertificate swaps the client certificate, in a secret
// volume, for one with another user name while a workload and a watch
// run through fanout. No request may fail; the next requests must act as
// the new user (SelfSubjectReview through fanout); the watch, on a
// connection made with the old certificate, must keep delivering; and
// the old connections must close once idle.
func TestRotateClientCertificate(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)
	const ns, user1, user2 = "e2e-rotate-cert", "e2e-rotate-cert-one", "e2e-rotate-cert-two"
	userNamespace(ctx, t, cp, ns, user1)
	grantConfigMaps(ctx, t, cp, ns, user2)

	dir := t.TempDir()
	ck1, err := harness.IssueClient(cp.PKI.CA, filepath.Join(dir, "minted"), "one", user1)
	if err != nil {
		t.Fatal(err)
	}
	ck2, err := harness.IssueClient(cp.PKI.CA, filepath.Join(dir, "minted"), "two", user2)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := harness.NewSecretVolume(filepath.Join(dir, "client"), map[string][]byte{"tls.crt": ck1.CertPEM, "tls.key": ck1.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, cp.PKI.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sidecar := fileFanout(ctx, t, cp, "rotate-cert", dir, caFile, vol.Path("tls.crt"), vol.Path("tls.key"), "")
	pid := sidecar.PID()
	if got := whoAmI(ctx, t, sidecar.Config); got != user1 {
		t.Fatalf("before the rotation fanout acts as %q, want %q", got, user1)
	}

	client, err := kubernetes.NewForConfig(sidecar.Config)
	if err != nil {
		t.Fatal(err)
	}
	marker := metav1.ListOptions{LabelSelector: "e2e-rotation=marker"}
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, marker)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	load := startLoad(ctx, t, sidecar.Config, ns, "c")
	time.Sleep(5 * time.Second)
	sentBefore := load.sent.Load()
	swapped := time.Now()
	if err := vol.Update(map[string][]byte{"tls.crt": ck2.CertPEM, "tls.key": ck2.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	took := waitMetric(ctx, t, sidecar, "fanout_credential_reloads_total", map[string]string{"kind": "client", "result": "success"}, 1)
	t.Logf("fanout reloaded the client certificate %s after the ..data swap", took.Round(time.Millisecond))
	for i := 0; i < 3; i++ {
		if got := whoAmI(ctx, t, sidecar.Config); got != user2 {
			t.Errorf("SelfSubjectReview %d after the reload: fanout acts as %q, want %q", i, got, user2)
		}
	}
	time.Sleep(10 * time.Second)
	load.Stop()

	// The watch was opened as user1, on a connection of the old
	// certificate: it must still deliver.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker", Labels: map[string]string{"e2e-rotation": "marker"}}}
	if _, err := cp.AdminClient.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-w.ResultChan():
		if !ok || ev.Type != watch.Added {
			t.Errorf("the watch opened before the rotation got %v (open %v), want the marker's ADDED event", ev.Type, ok)
		}
	case <-time.After(30 * time.Second):
		t.Error("the watch opened before the rotation delivered nothing in 30 s")
	}
	w.Stop()

	served, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
		return e.User.Username == user2 && e.StageTimestamp.After(swapped)
	})
	if err != nil {
		t.Fatal(err)
	}
	rotations := metric(t, sidecar, "fanout_upstream_connection_rotations_total", map[string]string{"reason": "certificate"})
	t.Logf("%d requests sent (%d after the swap), %d cycles failed; served as %s after the swap: %s; pool rotations: %v",
		load.sent.Load(), load.sent.Load()-sentBefore, load.failed.Load(), user2, harness.FormatShares(served), rotations)
	load.reportErrors(t)
	if load.failed.Load() != 0 {
		t.Errorf("%d request cycles failed across the rotation, want 0", load.failed.Load())
	}
	for i, n := range served {
		if n == 0 {
			t.Errorf("apiserver %d served nothing as %s after the rotation", i+1, user2)
		}
	}
	if rotations < 1 {
		t.Error("no connection pool rotated")
	}
	// With the watch gone and the load stopped, the old connections
	// drain: one sidecar connection per apiserver is left at most.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := metric(t, sidecar, "fanout_upstream_connections", map[string]string{"mode": "sidecar"})
		if n <= float64(len(cp.APIServers)) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%v sidecar connections 30 s after the load stopped, want at most %d: old connections did not close", n, len(cp.APIServers))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkNoRestart(t, sidecar, pid)
}

// TestRotateToken rotates a tokenFile, in a projected-volume layout, from
// one TokenRequest token of a ServiceAccount to another, then invalidates
// the first (it is bound to a Secret that gets deleted): requests keep
// succeeding only if fanout uses the new token.
func TestRotateToken(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)
	const ns, sa = "e2e-rotate-token", "rotator"
	user := "system:serviceaccount:" + ns + ":" + sa
	userNamespace(ctx, t, cp, ns, user)
	admin := cp.AdminClient
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(secret string) []byte {
		t.Helper()
		s, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		exp := int64(3600)
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: s.Name, UID: s.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest: %v", err)
		}
		return []byte(tr.Status.Token)
	}
	tok1, tok2 := token("bound-1"), token("bound-2")

	dir := t.TempDir()
	vol, err := harness.NewSecretVolume(filepath.Join(dir, "token"), map[string][]byte{"token": tok1})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, cp.PKI.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sidecar := fileFanout(ctx, t, cp, "rotate-token", dir, caFile, "", "", vol.Path("token"))
	pid := sidecar.PID()
	if got := whoAmI(ctx, t, sidecar.Config); got != user {
		t.Fatalf("fanout acts as %q, want %q", got, user)
	}

	load := startLoad(ctx, t, sidecar.Config, ns, "t")
	time.Sleep(5 * time.Second)
	if err := vol.Update(map[string][]byte{"token": tok2}); err != nil {
		t.Fatal(err)
	}
	took := waitMetric(ctx, t, sidecar, "fanout_credential_reloads_total", map[string]string{"kind": "token", "result": "success"}, 1)
	t.Logf("fanout took the new token %s after the ..data swap", took.Round(time.Millisecond))
	// Invalidate the first token, and wait until kube-apiserver rejects
	// it, so that the load after this point proves the new one is used.
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "bound-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	old := rest.CopyConfig(cp.Admin)
	old.TLSClientConfig = rest.TLSClientConfig{CAData: cp.PKI.CA.CertPEM}
	old.BearerToken = string(tok1)
	oldClient, err := kubernetes.NewForConfig(old)
	if err != nil {
		t.Fatal(err)
	}
	invalidated := time.Now()
	for {
		_, err := oldClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Since(invalidated) > time.Minute {
			t.Fatalf("the first token still works a minute after its Secret was deleted (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sentAfterInvalidation := load.sent.Load()
	time.Sleep(10 * time.Second)
	load.Stop()
	if got := whoAmI(ctx, t, sidecar.Config); got != user {
		t.Errorf("after the rotation fanout acts as %q, want %q", got, user)
	}
	t.Logf("%d requests sent (%d after the first token was rejected), %d cycles failed", load.sent.Load(), load.sent.Load()-sentAfterInvalidation, load.failed.Load())
	load.reportErrors(t)
	if load.failed.Load() != 0 {
		t.Errorf("%d request cycles failed across the token rotation, want 0", load.failed.Load())
	}
	if load.sent.Load()-sentAfterInvalidation == 0 {
		t.Error("no request was sent after the first token was invalidated")
	}
	checkNoRestart(t, sidecar, pid)
}

// TestRotateServingCA moves every apiserver to a serving certificate from
// a new CA. fanout's CA bundle first gains the new CA (old and new), then
// the apiservers switch, then the client certificate rotates so that
// fanout dials every apiserver afresh and must verify the new chain. The
// original serving certificate is restored at the end: the other tests'
// clients trust only the original CA.
func TestRotateServingCA(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)
	const ns, user = "e2e-rotate-ca", "e2e-rotate-ca-user"
	userNamespace(ctx, t, cp, ns, user)

	dir := t.TempDir()
	minted := filepath.Join(dir, "minted")
	ck1, err := harness.IssueClient(cp.PKI.CA, minted, "one", user)
	if err != nil {
		t.Fatal(err)
	}
	ck2, err := harness.IssueClient(cp.PKI.CA, minted, "two", user)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := harness.NewCA(minted, "new-ca", "fanout-e2e-rotated-serving-ca")
	if err != nil {
		t.Fatal(err)
	}
	newServing, err := cp.PKI.IssueServing(newCA, minted, "apiserver-new")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := harness.NewSecretVolume(filepath.Join(dir, "client"), map[string][]byte{"tls.crt": ck1.CertPEM, "tls.key": ck1.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca", "ca.crt")
	if err := os.MkdirAll(filepath.Dir(caFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, cp.PKI.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sidecar := fileFanout(ctx, t, cp, "rotate-ca", dir, caFile, vol.Path("tls.crt"), vol.Path("tls.key"), "")
	pid := sidecar.PID()

	orig := cp.PKI.Serving
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		start := time.Now()
		if err := cp.ServeCertificate(orig.CertPEM, orig.KeyPEM); err != nil {
			t.Errorf("restoring the original serving certificate: %v", err)
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cp.WaitServing(rctx, orig.Cert); err != nil {
			t.Errorf("after restoring the original serving certificate: %v", err)
			return
		}
		t.Logf("every apiserver serves the original certificate again, %s after it was restored", time.Since(start).Round(time.Millisecond))
	}
	t.Cleanup(restore)

	load := startLoad(ctx, t, sidecar.Config, ns, "a")
	time.Sleep(5 * time.Second)
	dialErrors := metric(t, sidecar, "fanout_upstream_dials_total", map[string]string{"mode": "sidecar", "result": "error"})

	// 1. The bundle gains the new CA, by an atomic rename.
	bundle := append(append([]byte{}, cp.PKI.CA.CertPEM...), newCA.CertPEM...)
	if err := harness.ReplaceFile(caFile, bundle); err != nil {
		t.Fatal(err)
	}
	took := waitMetric(ctx, t, sidecar, "fanout_credential_reloads_total", map[string]string{"kind": "ca", "result": "success"}, 1)
	t.Logf("fanout reloaded the CA bundle %s after the rename", took.Round(time.Millisecond))

	// 2. The apiservers switch to the new CA's certificate.
	switched := time.Now()
	if err := cp.ServeCertificate(newServing.CertPEM, newServing.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitServing(ctx, newServing.Cert); err != nil {
		t.Fatal(err)
	}
	t.Logf("every apiserver serves the new CA's certificate %s after the files were replaced", time.Since(switched).Round(time.Millisecond))

	// 3. New connections: the client certificate rotates, so every pool
	// dials again and must verify the new chain with the bundle.
	dialsOK := metric(t, sidecar, "fanout_upstream_dials_total", map[string]string{"mode": "sidecar", "result": "ok"})
	if err := vol.Update(map[string][]byte{"tls.crt": ck2.CertPEM, "tls.key": ck2.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	waitMetric(ctx, t, sidecar, "fanout_credential_reloads_total", map[string]string{"kind": "client", "result": "success"}, 1)
	if got := whoAmI(ctx, t, sidecar.Config); got != user {
		t.Errorf("fanout acts as %q, want %q", got, user)
	}
	waitMetric(ctx, t, sidecar, "fanout_upstream_dials_total", map[string]string{"mode": "sidecar", "result": "ok"}, dialsOK+float64(len(cp.APIServers)))
	time.Sleep(5 * time.Second)

	// 4. Back to the original certificate, still under load.
	restore()
	time.Sleep(5 * time.Second)
	load.Stop()

	newDialErrors := metric(t, sidecar, "fanout_upstream_dials_total", map[string]string{"mode": "sidecar", "result": "error"}) - dialErrors
	t.Logf("%d requests sent, %d cycles failed, %v failed dials during the rotation", load.sent.Load(), load.failed.Load(), newDialErrors)
	load.reportErrors(t)
	if load.failed.Load() != 0 {
		t.Errorf("%d request cycles failed across the serving CA rotation, want 0", load.failed.Load())
	}
	if newDialErrors != 0 {
		t.Errorf("%v dials failed during the rotation: the bundle did not verify both CAs", newDialErrors)
	}
	checkNoRestart(t, sidecar, pid)
}
