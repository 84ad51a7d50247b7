package e2e_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// helmValues installs the chart beside the kustomize-installed injector:
// the run's image, one replica, the serving certificate from files (%[2]s:
// the CA, base64), only the test's namespace (%[3]s) opted in, and a
// sidecar memory request (%[4]s) the other injector does not give, so an
// injected pod tells which injector did it.
const helmValues = `image:
  repository: %[1]s
  tag: %[5]s
replicas: 1
pki:
  mode: files
  files:
    caBundle: %[2]s
optIn:
  namespaceSelectorExpressions:
    - {key: kubernetes.io/metadata.name, operator: In, values: [%[3]s]}
sidecar:
  resources:
    requests: {memory: %[4]s}
`

// TestNodeHelmInstall installs charts/fanout with helm on the real node's
// cluster, as docs/injector.md (Install with Helm) says, as a second
// release beside the injector of manifests/injector: its namespace made by
// --create-namespace and labelled by the chart, its injector Available
// with the serving certificate from a Secret, a labelled pod in the one
// namespace it serves injected by it, and helm uninstall removing its
// webhook configuration and its namespace.
func TestNodeHelmInstall(t *testing.T) {
	ctx, e := realNode(t, 8*time.Minute)
	const (
		release  = "fanout-helm"
		ns       = "fanout-helm"
		name     = "fanout-helm-injector"
		served   = "e2e-node-helm"
		sidecarM = "40Mi"
	)
	helm, err := harness.Helm(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	chart, err := harness.RepoPath("charts", "fanout")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := harness.HelmCommand(ctx, helm, dir, append(args, "--kubeconfig", e.cp.AdminKubeconfig)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	repo, tag, _ := strings.Cut(harness.FanoutImage, ":")
	values := filepath.Join(dir, "values.yaml")
	v := fmt.Sprintf(helmValues, repo, base64.StdEncoding.EncodeToString(e.cp.PKI.CA.CertPEM), served, sidecarM, tag)
	if err := os.WriteFile(values, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	serving, err := e.cp.PKI.IssueServingFor(name, []string{name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"})
	if err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_ = harness.HelmCommand(ctx, helm, dir, "uninstall", release, "--namespace", ns, "--ignore-not-found", "--kubeconfig", e.cp.AdminKubeconfig).Run()
		_ = e.admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	out, err := run("install", release, chart, "--namespace", ns, "--create-namespace", "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install:\n%s", out)
	// The Secret the injector serves; its pod waits for it.
	tls := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-tls", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: serving.CertPEM, corev1.TLSPrivateKeyKey: serving.KeyPEM},
	}
	if _, err := e.admin.CoreV1().Secrets(ns).Create(ctx, tls, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cp.WaitDeploymentAvailable(ctx, ns, name, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("injector Available %s after helm install began", time.Since(begin).Round(time.Second))
	n, err := e.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace %s labels %v: the chart's Namespace did not label the one --create-namespace made", ns, n.Labels)
	}

	e.namespace(t, ctx, served)
	created, err := e.admin.CoreV1().Pods(served).Create(ctx, podClientPod("helm-injected", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc := sidecar(created)
	if sc == nil {
		t.Fatalf("labelled pod in %s created without fanout: %+v", served, created.Spec)
	}
	if got := sc.Resources.Requests.Memory().String(); got != sidecarM {
		t.Errorf("sidecar memory request %s, want the chart's %s: the pod was injected by another injector", got, sidecarM)
	}
	if sc.Image != harness.FanoutImage {
		t.Errorf("sidecar image %s, want %s", sc.Image, harness.FanoutImage)
	}

	// No --wait: it would wait for the chart's Namespace to go, which
	// takes the release's own record with it before helm deletes that.
	if out, err := run("uninstall", release, "--namespace", ns); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("helm uninstall:\n%s", out)
	}
	if _, err := e.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("webhook configuration %s after helm uninstall: %v, want NotFound", name, err)
	}
	if n, err := e.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.DeletionTimestamp == nil {
		t.Errorf("namespace %s not being deleted after helm uninstall", ns)
	}
}
