package e2e_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

const kubectlManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: e2e-kubectl
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: e2e-color
  namespace: e2e-kubectl
data:
  color: %s
`

// TestKubectl drives the unmodified kubectl through a fanout sidecar, using
// nothing but the kubeconfig fanout wrote: reads, server-side apply of a
// manifest, a watch that sees a change, and a delete.
func TestKubectl(t *testing.T) {
	ctx, cp := controlPlane(t, 5*time.Minute)

	const user = "e2e-kubectl"
	kubeconfig, err := cp.UserKubeconfig(user, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := cp.StartFanout(ctx, t, user, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubectl := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, cp.Bins.Kubectl, append([]string{
			"--kubeconfig", sidecar.Kubeconfig, "--cache-dir", filepath.Join(dir, "cache"),
		}, args...)...)
		// Nothing from the developer's environment may leak in.
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
		return cmd
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := kubectl(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	apply := func(color string) string {
		t.Helper()
		path := filepath.Join(dir, color+".yaml")
		if err := os.WriteFile(path, []byte(strings.Replace(kubectlManifest, "%s", color, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return run("apply", "-f", path)
	}

	out := run("get", "ns")
	for _, want := range []string{"default", "kube-system"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get ns does not list %s:\n%s", want, out)
		}
	}
	out = apply("blue")
	if !strings.Contains(out, "configmap/e2e-color created") {
		t.Errorf("kubectl apply did not create the ConfigMap:\n%s", out)
	}

	watch := kubectl("get", "cm", "e2e-color", "-n", "e2e-kubectl", "-w", "--no-headers", "-o", "custom-columns=NAME:.metadata.name,COLOR:.data.color")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	watch.Stderr = &stderr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = watch.Process.Kill()
		_ = watch.Wait()
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(want string) {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl get -w ended before printing %q; stderr:\n%s", want, stderr.String())
				}
				if f := strings.Fields(line); len(f) == 2 && f[0] == "e2e-color" && f[1] == want {
					return
				}
			case <-timeout:
				t.Fatalf("kubectl get -w printed no line with color %s within a minute; stderr:\n%s", want, stderr.String())
			}
		}
	}
	expect("blue")
	if out := apply("green"); !strings.Contains(out, "configmap/e2e-color configured") {
		t.Errorf("kubectl apply did not update the ConfigMap:\n%s", out)
	}
	expect("green")
	_ = watch.Process.Kill()

	if out := run("delete", "cm", "e2e-color", "-n", "e2e-kubectl"); !strings.Contains(out, `configmap "e2e-color" deleted`) {
		t.Errorf("kubectl delete said:\n%s", out)
	}
	if out, err := kubectl("get", "cm", "e2e-color", "-n", "e2e-kubectl").CombinedOutput(); err == nil || !strings.Contains(string(out), "NotFound") {
		t.Errorf("kubectl get after delete: %v\n%s", err, out)
	}

	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl's requests served: %s", harness.FormatShares(counts))
}
