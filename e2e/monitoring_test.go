package e2e_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// prometheusOperatorModule holds the Prometheus Operator's CRDs
// (example/prometheus-operator-crd/); the Go module proxy serves it, so
// the test needs no download site.
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.88.0"

// TestMonitoringManifestsDryRun installs the Prometheus Operator's
// PodMonitor and PrometheusRule CRDs on the real apiservers, then checks
// that `kubectl apply --dry-run=server -k manifests/monitoring` is
// accepted: the PodMonitor, the alerting rules and the dashboard
// ConfigMap match the CRDs' schemas.
func TestMonitoringManifestsDryRun(t *testing.T) {
	ctx, cp := controlPlane(t, 5*time.Minute)
	root, err := harness.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", prometheusOperatorModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", prometheusOperatorModule, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", prometheusOperatorModule, mod.Error, err)
	}
	dir := t.TempDir()
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, cp.Bins.Kubectl, append([]string{"--kubeconfig", cp.AdminKubeconfig, "--cache-dir", filepath.Join(dir, "cache")}, args...)...)
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	crds := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
	for _, kind := range []string{"podmonitors", "prometheusrules"} {
		// Server-side apply: the CRDs are too large for the client-side
		// last-applied annotation.
		kubectl("apply", "--server-side", "-f", filepath.Join(crds, "monitoring.coreos.com_"+kind+".yaml"))
		kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/"+kind+".monitoring.coreos.com")
	}
	t.Cleanup(func() {
		for _, kind := range []string{"podmonitors", "prometheusrules"} {
			c := exec.Command(cp.Bins.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "delete", "--ignore-not-found", "crd", kind+".monitoring.coreos.com")
			c.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
			_ = c.Run()
		}
	})
	got := kubectl("apply", "--dry-run=server", "-n", "default", "-k", filepath.Join(filepath.Dir(root), "manifests", "monitoring"))
	t.Logf("kubectl apply --dry-run=server -k manifests/monitoring:\n%s", got)
	for _, want := range []string{"podmonitor.monitoring.coreos.com/fanout-sidecars", "podmonitor.monitoring.coreos.com/fanout-injector", "prometheusrule.monitoring.coreos.com/fanout", "configmap/fanout-grafana-dashboard"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s", want)
		}
	}
}
