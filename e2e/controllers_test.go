package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestControllersBehindSidecars runs the real kube-controller-manager and
// kube-scheduler, each with its own fanout sidecar, and checks that they
// still do their jobs (a Deployment ends with every pod bound to a node) and
// that each one's requests spread over every apiserver.
func TestControllersBehindSidecars(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)

	ctrl := startControllers(ctx, t, cp, "")
	kcm, sched := ctrl.kcm, ctrl.sched

	const ns, replicas = "e2e-controllers", 30
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "e2e-spread"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// No kubelet ever pulls it; pods only need binding.
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	start := time.Now()
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var pods *corev1.PodList
	var err error
	bound := 0
	deadline := time.Now().Add(5 * time.Minute)
	for {
		for _, c := range []*harness.Component{kcm, sched} {
			if err := c.Err(); err != nil {
				t.Fatal(err)
			}
		}
		pods, err = admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=e2e-spread"})
		if err != nil {
			t.Fatal(err)
		}
		bound = 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		if bound == replicas && len(pods.Items) == replicas {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 minutes %d pods exist and %d are bound, want %d bound", len(pods.Items), bound, replicas)
		}
		time.Sleep(2 * time.Second)
	}
	perNode := map[string]int{}
	for _, p := range pods.Items {
		perNode[p.Spec.NodeName]++
	}
	t.Logf("%d pods bound in %s: %s", bound, time.Since(start).Round(time.Second), formatMap(perNode))

	for _, c := range []struct {
		name  string
		match func(string) bool
	}{
		{"kube-controller-manager", harness.ControllerManagerUsers},
		{"kube-scheduler", harness.UserIs("system:kube-scheduler")},
	} {
		counts, err := cp.ServedPerAPIServer(c.match)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s served: %s", c.name, harness.FormatShares(counts))
		for i, s := range harness.Shares(counts) {
			if s < 0.15 {
				t.Errorf("apiserver %d served %.1f%% of %s's requests, want ≥ 15%% (%s)", i+1, 100*s, c.name, harness.FormatShares(counts))
			}
		}
	}
}

func formatMap(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// controllers are a kube-controller-manager and a kube-scheduler, each
// behind its own fanout sidecar.
type controllers struct {
	kcm, sched               *harness.Component
	kcmSidecar, schedSidecar *harness.Fanout
}

// startControllers starts cp's kube-controller-manager and kube-scheduler
// (cp.ComponentBins), each behind a sidecar named prefix plus the
// component's name, and logs the last lines of all four logs if t fails.
func startControllers(ctx context.Context, t *testing.T, cp *harness.ControlPlane, prefix string) controllers {
	t.Helper()
	kcmKubeconfig, err := cp.ControllerManagerKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	schedKubeconfig, err := cp.SchedulerKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	var c controllers
	if c.kcmSidecar, err = cp.StartFanout(ctx, t, prefix+"kube-controller-manager", kcmKubeconfig); err != nil {
		t.Fatal(err)
	}
	if c.schedSidecar, err = cp.StartFanout(ctx, t, prefix+"kube-scheduler", schedKubeconfig); err != nil {
		t.Fatal(err)
	}
	if c.kcm, err = cp.StartControllerManager(t, c.kcmSidecar.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if c.sched, err = cp.StartScheduler(t, c.schedSidecar.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []struct{ name, path string }{
				{"kube-controller-manager", c.kcm.LogPath}, {"kube-scheduler", c.sched.LogPath},
				{"kcm sidecar", c.kcmSidecar.LogPath}, {"scheduler sidecar", c.schedSidecar.LogPath},
			} {
				t.Logf("last lines of the %s log %s:\n%s", l.name, l.path, harness.Tail(l.path, 30))
			}
		}
	})
	return c
}
