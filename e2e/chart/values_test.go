package chart_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChartValues renders the chart with each value set and checks the
// objects it changes.
func TestChartValues(t *testing.T) {
	t.Run("image", func(t *testing.T) {
		objs := render(t, "fanout", "fanout-system", "--set", "image.repository=registry.example/fanout,image.tag=v1.2.3,image.pullPolicy=Always")
		_, c := injector(t, objs, defaultDeployment)
		if c.Image != "registry.example/fanout:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("injector image %s, pull policy %s", c.Image, c.ImagePullPolicy)
		}
		wantArgs(t, c, "--sidecar-image-pull-policy=Always")
		ownImage(t, c)
	})

	t.Run("tag defaults to appVersion", func(t *testing.T) {
		// A copy of the chart with another appVersion.
		dir := filepath.Join(t.TempDir(), "fanout")
		if err := os.CopyFS(dir, os.DirFS(repo(t, "charts", "fanout"))); err != nil {
			t.Fatal(err)
		}
		chartYAML := filepath.Join(dir, "Chart.yaml")
		b, err := os.ReadFile(chartYAML)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^appVersion: .*$`)
		if !re.Match(b) {
			t.Fatalf("no appVersion line in Chart.yaml:\n%s", b)
		}
		if err := os.WriteFile(chartYAML, re.ReplaceAll(b, []byte(`appVersion: "v9.8.7"`)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := template(t, dir, "fanout", "fanout-system")
		if err != nil {
			t.Fatal(err)
		}
		_, c := injector(t, decode(t, out), defaultDeployment)
		if c.Image != "ghcr.io/fanout-dev/fanout:v9.8.7" {
			t.Errorf("image %s, want the appVersion's tag v9.8.7", c.Image)
		}
		ownImage(t, c)
	})

	t.Run("replicas", func(t *testing.T) {
		d, _ := injector(t, render(t, "fanout", "fanout-system", "--set", "replicas=3"), defaultDeployment)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
			t.Errorf("replicas %v, want 3", d.Spec.Replicas)
		}
	})

	t.Run("release name", func(t *testing.T) {
		// A second release beside the default one shares no name of a
		// cluster-scoped object, and its injector is told its own names.
		def := render(t, "fanout", "fanout-system")
		objs := render(t, "canary", "fanout-canary")
		for k := range objs {
			if _, clash := def[k]; clash {
				t.Errorf("release canary renders %s, as release fanout does", k)
			}
		}
		_, c := injector(t, objs, "Deployment fanout-canary/canary-fanout-injector")
		wantArgs(t, c, "--pki=self", "--webhook-configuration=canary-fanout-injector", "--pki-service=canary-fanout-injector", "--pki-secret=canary-fanout-injector-pki")
		role := get[rbacv1.Role](t, objs, "Role fanout-canary/canary-fanout-injector-pki")
		if got := role.Rules[0].ResourceNames; !slices.Equal(got, []string{"canary-fanout-injector-pki"}) {
			t.Errorf("Role resourceNames %q", got)
		}
		cr := get[rbacv1.ClusterRole](t, objs, "ClusterRole /canary-fanout-injector-pki")
		if got := cr.Rules[0].ResourceNames; !slices.Equal(got, []string{"canary-fanout-injector"}) {
			t.Errorf("ClusterRole resourceNames %q", got)
		}
		mwc := get[admissionv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration /canary-fanout-injector")
		for _, w := range mwc.Webhooks {
			if s := w.ClientConfig.Service; s == nil || s.Name != "canary-fanout-injector" || s.Namespace != "fanout-canary" {
				t.Errorf("%s calls %+v", w.Name, s)
			}
			if e := w.NamespaceSelector.MatchExpressions[0]; e.Key != "kubernetes.io/metadata.name" || !slices.Equal(e.Values, []string{"fanout-canary"}) {
				t.Errorf("%s does not leave out its own namespace: %+v", w.Name, e)
			}
		}
		rb := get[rbacv1.RoleBinding](t, objs, "RoleBinding default/canary-fanout-sidecar-endpointslice-discovery")
		if rb.RoleRef.Name != "canary-fanout-endpointslice-discovery" {
			t.Errorf("sidecar RoleBinding refers to %s", rb.RoleRef.Name)
		}
		// A release named after the chart keeps its name as the prefix.
		if _, ok := render(t, "fanout-blue", "fanout-blue")["Deployment fanout-blue/fanout-blue-injector"]; !ok {
			t.Error("release fanout-blue has no Deployment fanout-blue-injector")
		}
	})

	t.Run("pki files", func(t *testing.T) {
		objs := render(t, "fanout", "fanout-system", "-f", valuesFile(t, `
pki:
  mode: files
  files:
    secretName: my-tls
    caBundle: Q0EK
    certManager:
      issuerRef: {name: my-issuer, kind: ClusterIssuer}
`))
		d, c := injector(t, objs, defaultDeployment)
		wantArgs(t, c, "--tls-cert-file=/etc/fanout-injector/tls/tls.crt", "--tls-private-key-file=/etc/fanout-injector/tls/tls.key")
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--pki") || strings.HasPrefix(a, "--webhook-configuration") {
				t.Errorf("files mode passes %s", a)
			}
		}
		if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "my-tls" {
			t.Errorf("volumes %+v, want Secret my-tls", v)
		}
		// The token reads its own pod, for its image.
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
			t.Errorf("automountServiceAccountToken %v, want true", a)
		}
		for k := range objs {
			if strings.Contains(k, "-pki") {
				t.Errorf("files mode renders %s", k)
			}
		}
		if _, ok := objs["RoleBinding fanout-system/fanout-injector-own-pod"]; !ok {
			t.Error("files mode renders no RoleBinding fanout-injector-own-pod")
		}
		mwc := get[admissionv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration /fanout-injector")
		if len(mwc.Annotations) != 0 {
			t.Errorf("with a caBundle the webhook configuration has annotations %v", mwc.Annotations)
		}
		for _, w := range mwc.Webhooks {
			if string(w.ClientConfig.CABundle) != "CA\n" {
				t.Errorf("%s caBundle %q, want the value's", w.Name, w.ClientConfig.CABundle)
			}
		}
		cert := objs["Certificate fanout-system/fanout-injector"]
		if cert == nil {
			t.Fatal("no cert-manager Certificate with issuerRef set")
		}
		spec := cert["spec"].(map[string]any)
		if spec["secretName"] != "my-tls" || spec["issuerRef"].(map[string]any)["name"] != "my-issuer" ||
			!slices.Contains(spec["dnsNames"].([]any), any("fanout-injector.fanout-system.svc")) {
			t.Errorf("Certificate spec %v", spec)
		}
	})

	t.Run("pki mode checked", func(t *testing.T) {
		out, err := template(t, repo(t, "charts", "fanout"), "fanout", "fanout-system", "--set", "pki.mode=selfish")
		if err == nil || !strings.Contains(out, `pki.mode is "selfish": use self or files`) {
			t.Errorf("pki.mode=selfish: %v\n%s", err, out)
		}
	})

	t.Run("opt-in", func(t *testing.T) {
		objs := render(t, "fanout", "fanout-system", "-f", valuesFile(t, `
optIn:
  pods: false
  hosted: false
  namespaceSelectorExpressions:
    - {key: team, operator: In, values: [a]}
`))
		mwc := get[admissionv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration /fanout-injector")
		if len(mwc.Webhooks) != 1 || mwc.Webhooks[0].Name != "namespace.inject.fanout.dev" {
			t.Fatalf("entries %v, want namespace.inject.fanout.dev only", mwc.Webhooks)
		}
		want := metav1.LabelSelectorRequirement{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}
		exprs := mwc.Webhooks[0].NamespaceSelector.MatchExpressions
		if len(exprs) != 4 || exprs[3].Key != want.Key || exprs[3].Operator != want.Operator || !slices.Equal(exprs[3].Values, want.Values) {
			t.Errorf("namespaceSelector %+v, want its own namespace's, fanout.dev/rev's and the opt-in's expressions, then %+v", exprs, want)
		}
		out, err := template(t, repo(t, "charts", "fanout"), "fanout", "fanout-system", "--set", "optIn.pods=false,optIn.namespaces=false,optIn.hosted=false")
		if err == nil || !strings.Contains(out, "the webhook would have no entry") {
			t.Errorf("no opt-in at all: %v\n%s", err, out)
		}
	})

	t.Run("revision", func(t *testing.T) {
		// A canary release serves the namespaces of its revision only; the
		// stable one (no revision) leaves them out.
		for _, tc := range []struct {
			args []string
			want metav1.LabelSelectorRequirement
		}{
			{nil, metav1.LabelSelectorRequirement{Key: "fanout.dev/rev", Operator: metav1.LabelSelectorOpDoesNotExist}},
			{[]string{"--set", "revision=canary"}, metav1.LabelSelectorRequirement{Key: "fanout.dev/rev", Operator: metav1.LabelSelectorOpIn, Values: []string{"canary"}}},
		} {
			mwc := get[admissionv1.MutatingWebhookConfiguration](t, render(t, "fanout", "fanout-system", tc.args...), "MutatingWebhookConfiguration /fanout-injector")
			for _, w := range mwc.Webhooks {
				var rev []metav1.LabelSelectorRequirement
				for _, e := range w.NamespaceSelector.MatchExpressions {
					if e.Key == "fanout.dev/rev" {
						rev = append(rev, e)
					}
				}
				if len(rev) != 1 || rev[0].Operator != tc.want.Operator || !slices.Equal(rev[0].Values, tc.want.Values) {
					t.Errorf("%q: %s: fanout.dev/rev expressions %+v, want only %+v", tc.args, w.Name, rev, tc.want)
				}
			}
		}
	})

	t.Run("webhook", func(t *testing.T) {
		mwc := get[admissionv1.MutatingWebhookConfiguration](t, render(t, "fanout", "fanout-system", "--set", "webhook.failurePolicy=Fail,webhook.timeoutSeconds=7"), "MutatingWebhookConfiguration /fanout-injector")
		for _, w := range mwc.Webhooks {
			if *w.FailurePolicy != admissionv1.Fail || *w.TimeoutSeconds != 7 {
				t.Errorf("%s: failurePolicy %s, timeoutSeconds %d", w.Name, *w.FailurePolicy, *w.TimeoutSeconds)
			}
		}
	})

	t.Run("sidecar", func(t *testing.T) {
		_, c := injector(t, render(t, "fanout", "fanout-system", "-f", valuesFile(t, `
defaultEndpoints: endpointslice:///kube-system/apiservers
sidecar:
  resources:
    requests: {cpu: 50m, memory: 40Mi}
    limits: {cpu: "1", memory: 300Mi}
  extraArgs: [--probe-interval=5s, --balancer=round-robin]
extraArgs: [--max-concurrent-reviews=8]
resources:
  requests: {cpu: 20m, memory: 48Mi}
`)), defaultDeployment)
		wantArgs(t, c, "--default-endpoints=endpointslice:///kube-system/apiservers",
			"--sidecar-cpu-request=50m", "--sidecar-memory-request=40Mi", "--sidecar-cpu-limit=1", "--sidecar-memory-limit=300Mi",
			"--sidecar-extra-args=--probe-interval=5s,--balancer=round-robin", "--max-concurrent-reviews=8")
		if r := c.Resources.Requests; r.Memory().String() != "48Mi" || r.Cpu().String() != "20m" {
			t.Errorf("injector requests %v", r)
		}
	})

	t.Run("optional objects", func(t *testing.T) {
		objs := render(t, "fanout", "fanout-system", "-f", valuesFile(t, `
namespace: {create: false}
podDisruptionBudget: {enabled: false}
sidecarDiscovery: {enabled: false}
kubectlPluginRole: {enabled: false}
`))
		for _, k := range []string{"Namespace /fanout-system", "PodDisruptionBudget fanout-system/fanout-injector", "ClusterRole /fanout-endpointslice-discovery", "RoleBinding default/fanout-sidecar-endpointslice-discovery", "ClusterRole /fanout-kubectl-plugin"} {
			if _, ok := objs[k]; ok {
				t.Errorf("%s rendered though turned off", k)
			}
		}
		objs = render(t, "fanout", "fanout-system", "-f", valuesFile(t, `
sidecarDiscovery:
  subjects: [{kind: ServiceAccount, name: my-controller, namespace: team-a}]
podDisruptionBudget: {minAvailable: 2}
`))
		rb := get[rbacv1.RoleBinding](t, objs, "RoleBinding default/fanout-sidecar-endpointslice-discovery")
		if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "my-controller" {
			t.Errorf("subjects %+v", rb.Subjects)
		}
		if pdb := objs["PodDisruptionBudget fanout-system/fanout-injector"]; pdb["spec"].(map[string]any)["minAvailable"] != float64(2) {
			t.Errorf("PDB %v", pdb["spec"])
		}
	})

	t.Run("networkpolicy needs a range", func(t *testing.T) {
		out, err := template(t, repo(t, "charts", "fanout"), "fanout", "fanout-system", "--set", "networkPolicy.enabled=true")
		if err == nil || !strings.Contains(out, "networkPolicy.enabled needs networkPolicy.apiserverCIDRs") {
			t.Errorf("networkPolicy without a range: %v\n%s", err, out)
		}
	})

	t.Run("monitoring names", func(t *testing.T) {
		objs := render(t, "canary", "monitoring", "--set", "monitoring.podMonitor=true,monitoring.prometheusRule=true,monitoring.dashboard=true")
		for _, k := range []string{"PodMonitor monitoring/canary-fanout-sidecars", "PodMonitor monitoring/canary-fanout-injector", "PrometheusRule monitoring/canary-fanout", "ConfigMap monitoring/canary-fanout-grafana-dashboard"} {
			if _, ok := objs[k]; !ok {
				t.Errorf("no %s", k)
			}
		}
	})
}

// ownImage: the injector gets no --sidecar-image but the downward API's
// names of its pod, and gives the sidecars its own image.
func ownImage(t *testing.T, c *corev1.Container) {
	t.Helper()
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--sidecar-image=") {
			t.Errorf("injector passes %s: the sidecars get its own image", a)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		default:
			env[e.Name] = e.Value
		}
	}
	want := map[string]string{"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "CONTAINER_NAME": c.Name}
	if !maps.Equal(env, want) {
		t.Errorf("injector env %v, want %v", env, want)
	}
}
