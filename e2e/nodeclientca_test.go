package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// webhookClientPKI is what the apiservers of TestNodeQuickStart present to
// the injector when it asks for a client certificate: a CA of its own (not
// the cluster's, so that no user certificate can call the webhook), a
// client certificate it signs, and the admission configuration that names
// it for the webhook's Service, as docs/injector.md ("Restricting who can
// call the webhook") tells operators to write. other is a CA that signed
// nothing the apiservers hold.
type webhookClientPKI struct {
	ca, other       *harness.CertKey
	admissionConfig string
}

func newWebhookClientPKI(t *testing.T) *webhookClientPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := harness.NewCA(dir, "webhook-client-ca", "fanout-e2e webhook client CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA(dir, "other-ca", "fanout-e2e another CA")
	if err != nil {
		t.Fatal(err)
	}
	client, err := harness.IssueClient(ca, dir, "kube-apiserver-webhook-client", "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "admission-webhooks.kubeconfig")
	// The user's name is what kube-apiserver looks up for a webhook
	// Service: <service>.<namespace>.svc (with :PORT if not 443).
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
  - name: fanout-injector.fanout-system.svc
    user:
      client-certificate: %s
      client-key: %s
`, client.CertFile, client.KeyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "admission-config.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %s
`, kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return &webhookClientPKI{ca: ca, other: other, admissionConfig: config}
}

// clientCAMount is where the injector reads the Secret
// fanout-injector-client-ca (docs/injector.md).
const clientCAMount = "/etc/fanout-injector/client-ca"

// injectorClientCertificate turns on --client-ca-file in the injector the
// quick start installed: with the CA that signed the apiservers' webhook
// client certificate a pod is injected, and with another CA the apiservers'
// calls are refused at the handshake, the pod is admitted unmutated
// (failurePolicy Ignore) and the injector counts the refusals. Pods are
// created with a server-side dry run: the webhook sees them as any other,
// and nothing runs.
func injectorClientCertificate(t *testing.T, ctx context.Context, e *nodeEnv, wh *webhookClientPKI, ns, name string) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "fanout-injector-client-ca"},
		Data:       map[string][]byte{"ca.crt": wh.ca.CertPEM, "other-ca.crt": wh.other.CertPEM},
	}
	if _, err := e.admin.CoreV1().Secrets("fanout-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := e.admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	template := d.Spec.Template

	patch := []map[string]any{
		{"op": "add", "path": "/spec/template/spec/volumes", "value": []any{
			map[string]any{"name": "client-ca", "secret": map[string]any{"secretName": secret.Name}},
		}},
		{"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts", "value": []any{
			map[string]any{"name": "client-ca", "mountPath": clientCAMount, "readOnly": true},
		}},
		{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--client-ca-file=" + clientCAMount + "/ca.crt"},
	}
	injectors := rollInjector(t, ctx, e, patch)
	pod := dryRunPod(t, ctx, e, ns, "client-ca-ok", template)
	if !hasFanout(pod) {
		t.Fatalf("with --client-ca-file naming the CA of the apiservers' webhook client certificate, the pod was not injected; injector pods:\n%s", e.cp.DescribePods(ctx, "fanout-system"))
	}
	m := injectorMetrics(t, ctx, e, injectors)
	if got := metricSum(m, "fanout_injector_rejected_total", `reason="client-certificate"`); got != 0 {
		t.Errorf("fanout_injector_rejected_total{reason=\"client-certificate\"} = %v with the right CA, want 0", got)
	}
	t.Logf("client CA that signed the apiservers' certificate: pod injected, fanout_injector_mutations_total %v", metricSum(m, "fanout_injector_mutations_total"))

	d2, err := e.admin.AppsV1().Deployments("fanout-system").Get(ctx, "fanout-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := len(d2.Spec.Template.Spec.Containers[0].Args) - 1
	injectors = rollInjector(t, ctx, e, []map[string]any{
		{"op": "test", "path": fmt.Sprintf("/spec/template/spec/containers/0/args/%d", last), "value": "--client-ca-file=" + clientCAMount + "/ca.crt"},
		{"op": "replace", "path": fmt.Sprintf("/spec/template/spec/containers/0/args/%d", last), "value": "--client-ca-file=" + clientCAMount + "/other-ca.crt"},
	})
	start := time.Now()
	pod = dryRunPod(t, ctx, e, ns, "client-ca-other", template)
	took := time.Since(start)
	if hasFanout(pod) {
		t.Fatalf("with --client-ca-file naming another CA, the pod was injected: the injector took a client certificate its CA did not sign")
	}
	m = injectorMetrics(t, ctx, e, injectors)
	refused := metricSum(m, "fanout_injector_rejected_total", `reason="client-certificate"`)
	if refused < 1 {
		t.Fatalf("the pod was admitted unmutated but fanout_injector_rejected_total{reason=\"client-certificate\"} = %v, want ≥ 1: it was not refused for its certificate", refused)
	}
	if got := metricSum(m, "fanout_injector_mutations_total"); got != 0 {
		t.Errorf("fanout_injector_mutations_total = %v on the injectors with another CA, want 0", got)
	}
	t.Logf("another client CA: pod admitted unmutated in %s, %v handshakes refused (fanout_injector_rejected_total{reason=\"client-certificate\"})", took.Round(time.Millisecond), refused)
}

// rollInjector applies a JSON patch to the injector's Deployment, waits
// until only the new pods are left, Ready, and returns their names.
func rollInjector(t *testing.T, ctx context.Context, e *nodeEnv, patch []map[string]any) []string {
	t.Helper()
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.cp.Kubectl(ctx, "-n", "fanout-system", "patch", "deployment", "fanout-injector", "--type=json", "-p", string(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cp.Kubectl(ctx, "-n", "fanout-system", "rollout", "status", "deployment/fanout-injector", "--timeout=3m"); err != nil {
		t.Fatalf("%v; pods:\n%s", err, e.cp.DescribePods(ctx, "fanout-system"))
	}
	// rollout status returns once the old pods are terminating; wait until
	// they are gone, so that no review reaches one.
	pods, err := e.waitPodsReady(ctx, "fanout-system", "app.kubernetes.io/name=fanout-injector", 2, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	t.Logf("injector rolled in %s: %s", time.Since(start).Round(100*time.Millisecond), strings.Join(names, ", "))
	return names
}

// dryRunPod creates a pod of template in ns with a server-side dry run and
// returns what admission made of it.
func dryRunPod(t *testing.T, ctx context.Context, e *nodeEnv, ns, name string, template corev1.PodTemplateSpec) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
	p.Name, p.Namespace = name, ns
	out, err := e.admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// injectorMetrics reads every named injector pod's /metrics through the
// apiserver's pod proxy, concatenated.
func injectorMetrics(t *testing.T, ctx context.Context, e *nodeEnv, pods []string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range pods {
		raw, err := e.admin.CoreV1().Pods("fanout-system").ProxyGet("http", p, "8080", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			t.Fatalf("reading %s's /metrics: %v", p, err)
		}
		b.Write(raw)
		b.WriteString("\n")
	}
	return b.String()
}
