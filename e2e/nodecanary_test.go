package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// canaryOverlay is what docs/upgrading.md has an operator write: the
// canary revision of manifests/injector-canary with the new release's
// image, named once.
const canaryOverlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: ghcr.io/fanout-dev/fanout
    newTag: %s
`

// TestNodeInjectorCanary runs docs/upgrading.md's canary and rollback on
// the real node: a second injector (manifests/injector-canary, --pki=self)
// with another tag of fanout's image beside the stable one, a namespace
// labelled fanout.dev/rev=canary, its client restarted: its sidecar is the
// canary's image; the label removed and the client restarted: the stable
// one's again. Each injector gives sidecars its own image (no
// --sidecar-image in the manifests), so the tag is the version marker.
func TestNodeInjectorCanary(t *testing.T) {
	ctx, e := realNode(t, 6*time.Minute)
	begin := time.Now()
	const ns = "e2e-node-canary"
	repo, _, _ := strings.Cut(harness.FanoutImage, ":")
	stable, canary := harness.FanoutImage, repo+":canary"

	// The new release, as a registry would serve it under its own tag.
	if err := e.node.TagImage(ctx, harness.FanoutImage, canary); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base, err := harness.RepoPath("manifests", "injector-canary")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), fmt.Appendf(nil, canaryOverlay, rel, "canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cp.Kubectl(ctx, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := e.cp.Kubectl(ctx, "delete", "-k", dir, "--wait=false"); err != nil {
			t.Error(err)
		}
		if _, err := e.cp.Kubectl(ctx, "-n", "fanout-system", "delete", "secret", "fanout-injector-pki-canary", "--ignore-not-found"); err != nil {
			t.Error(err)
		}
	})
	if err := e.cp.WaitDeploymentAvailable(ctx, "fanout-system", "fanout-injector-canary", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("canary injector Available %s after the start", time.Since(begin).Round(time.Second))

	e.namespace(t, ctx, ns)
	e.allowDiscovery(t, ctx, ns, rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})
	d := deployment("canary-client", 1, harness.PodClientImage, map[string]string{"fanout.dev/inject": "true"}, "run")
	if _, err := e.admin.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.sidecarImageIs(ctx, ns, "canary-client", stable); err != nil {
		t.Fatal(err)
	}

	// move relabels the namespace, waits until the apiservers call the
	// injector of that label (a server dry run goes through the
	// webhooks), restarts the client and checks its new sidecar.
	move := func(label, image, what string) {
		t.Helper()
		if _, err := e.cp.Kubectl(ctx, "label", "namespace", ns, label); err != nil {
			t.Fatal(err)
		}
		if err := e.waitDryRunSidecar(ctx, ns, image); err != nil {
			t.Fatal(err)
		}
		if _, err := e.cp.Kubectl(ctx, "-n", ns, "rollout", "restart", "deployment", "canary-client"); err != nil {
			t.Fatal(err)
		}
		if err := e.sidecarImageIs(ctx, ns, "canary-client", image); err != nil {
			t.Fatal(err)
		}
		t.Logf("client on the %s sidecar %s after the start", what, time.Since(begin).Round(time.Second))
	}
	move("fanout.dev/rev=canary", canary, "canary's")
	// Rollback.
	move("fanout.dev/rev-", stable, "stable")
}

// sidecarImageIs waits until the Deployment name in ns has rolled out and
// its one pod is Ready with a fanout sidecar of image. (Its status cannot
// tell: containerd 1.6 reports an image's first tag, whichever the
// container was created with.)
func (e *nodeEnv) sidecarImageIs(ctx context.Context, ns, name, image string) error {
	if err := e.cp.WaitDeploymentAvailable(ctx, ns, name, 3*time.Minute); err != nil {
		return err
	}
	pods, err := e.waitPodsReady(ctx, ns, "app="+name, 1, 3*time.Minute)
	if err != nil {
		return err
	}
	p := &pods[0]
	switch sc := sidecar(p); {
	case sc == nil:
		return fmt.Errorf("pod %s/%s has no fanout sidecar, want one of image %s", ns, p.Name, image)
	case sc.Image != image:
		return fmt.Errorf("pod %s/%s: sidecar image %s, want %s", ns, p.Name, sc.Image, image)
	}
	return nil
}

// waitDryRunSidecar waits until a labelled pod created in ns with a server
// dry run (mutating webhooks run, nothing is stored) comes back with a
// fanout sidecar of image: the apiservers then call the right injector
// for the namespace's labels.
func (e *nodeEnv) waitDryRunSidecar(ctx context.Context, ns, image string) error {
	deadline := time.Now().Add(time.Minute)
	var got string
	for {
		p, err := e.admin.CoreV1().Pods(ns).Create(ctx, podClientPod("dry-run", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err != nil:
			got = err.Error()
		case sidecar(p) == nil:
			got = "no sidecar"
		case sidecar(p).Image == image:
			return nil
		default:
			got = sidecar(p).Image
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a pod dry-run in %s still gets %s a minute later, want a sidecar of %s", ns, got, image)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
