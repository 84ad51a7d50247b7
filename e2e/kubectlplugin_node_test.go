package e2e_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestNodeKubectlFanout runs the kubectl plugin as an operator does, with
// kubectl finding kubectl-fanout on PATH and the kubeconfig in KUBECONFIG:
// `kubectl fanout status` and `top` read an injected pod's sidecar on the
// real node through the API server's port-forward, and `kubectl fanout
// check` reports the labelled pod created while the injector was scaled to
// 0 (admitted unmutated: failurePolicy Ignore) and nothing about the
// injected one, whose sidecar knows the three apiservers.
func TestNodeKubectlFanout(t *testing.T) {
	ctx, e := realNode(t, 8*time.Minute)
	const ns = "e2e-node-plugin"
	e.namespace(t, ctx, ns)
	e.allowDiscovery(t, ctx, ns, rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})

	if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, podClientPod("injected", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.waitPodsReady(ctx, ns, "app=injected", 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sidecar(&pods[0]) == nil {
		t.Fatal("the labelled pod created with the injector up has no sidecar")
	}
	e.injectorDown(t, ctx)
	created, err := e.admin.CoreV1().Pods(ns).Create(ctx, podClientPod("uninjected", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sidecar(created) != nil {
		t.Fatal("the pod created with the injector down was injected")
	}
	if _, err := e.waitPodsReady(ctx, ns, "app=uninjected", 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	root, err := harness.RepoPath()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "kubectl-fanout"), "./cmd/kubectl-fanout")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-fanout: %v\n%s", err, out)
	}
	kubectl := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, e.cp.Bins.Kubectl, append([]string{"fanout"}, args...)...)
		cmd.Env = []string{"HOME=" + bin, "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG=" + e.cp.AdminKubeconfig}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("kubectl fanout %s: %v", strings.Join(args, " "), err)
		}
		t.Logf("kubectl fanout %s: exit code %d\n%s%s", strings.Join(args, " "), code, out, stderr.String())
		return string(out), code
	}

	out, code := kubectl("status", "-n", ns, "injected")
	if code != 0 || !strings.HasPrefix(out, "fanout ready, 3 endpoints,") || strings.Count(out, ":6443") != 3 {
		t.Errorf("kubectl fanout status: exit code %d, want 0 and the table of 3 endpoints", code)
	}
	out, code = kubectl("top", "-n", ns, "injected", "--once", "--interval", "500ms", "-o", "json")
	var rows any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Errorf("kubectl fanout top --once -o json: exit code %d, want 0 and JSON", code)
	}

	out, code = kubectl("check", "-n", ns, "-o", "json")
	var r struct {
		Pods, Injected int
		Findings       []struct{ Namespace, Pod, Kind, Detail string }
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("kubectl fanout check -o json: %v", err)
	}
	if code != 1 || r.Pods != 2 || r.Injected != 1 || len(r.Findings) != 1 ||
		r.Findings[0].Pod != "uninjected" || r.Findings[0].Kind != "not-injected" {
		t.Errorf("kubectl fanout check: exit code %d, %+v; want 1, 2 pods, 1 injected, and one finding: uninjected not-injected", code, r)
	}
	if out, code = kubectl("check", "-n", ns); code != 1 || !strings.Contains(out, "uninjected") {
		t.Errorf("kubectl fanout check (table): exit code %d, want 1 and the uninjected pod", code)
	}
}
