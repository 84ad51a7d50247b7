package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestCostTableMatchesAudit runs the real kube-controller-manager (with
// --use-service-account-credentials, so that each controller has its own
// User-Agent and user) behind its own fanout, gives its controllers work,
// and compares what the real `fanout top --once -o json` shows for two
// controllers (its rows' cumulative requests, per verb and resource) with
// what the apiservers' audit logs say they served for the controllers'
// service accounts: within 2%, the done-criterion.
func TestCostTableMatchesAudit(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)

	kcmKubeconfig, err := cp.ControllerManagerKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// The control plane is shared: other tests' kube-controller-managers
	// (stopped at their end) used the same service accounts. Only what
	// the apiservers received from now on is this one's.
	start := time.Now()
	sidecar, err := cp.StartFanout(ctx, t, "kcm-cost", kcmKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := cp.StartControllerManager(t, sidecar.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the kube-controller-manager log:\n%s", harness.Tail(kcm.LogPath, 30))
			t.Logf("last lines of the sidecar log:\n%s", harness.Tail(sidecar.LogPath, 30))
		}
	})

	const ns, deployments, replicas = "e2e-cost", 3, 4
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range deployments {
		labels := map[string]string{"app": fmt.Sprintf("cost-%d", i)}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cost-%d", i), Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					// No scheduler or kubelet: the pods only need to exist.
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
				},
			},
		}
		if _, err := admin.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The controllers have done their work when every ReplicaSet has
	// its pods and every Deployment has seen it.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if err := kcm.Err(); err != nil {
			t.Fatal(err)
		}
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := admin.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := len(pods.Items) == deployments*replicas
		for _, d := range ds.Items {
			done = done && d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == replicas
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 minutes %d pods exist, want %d", len(pods.Items), deployments*replicas)
		}
		time.Sleep(time.Second)
	}

	controllers := []string{"replicaset-controller", "deployment-controller"}
	// The counts move while the controllers work: compare when fanout top's
	// counts of both controllers are the same before and after the audit
	// logs settled (ServedPerAPIServerWhere waits for that).
	var fanout, audit map[string]map[string]int64
	for try := 0; ; try++ {
		before := topCounts(ctx, t, sidecar.AdminAddress, controllers)
		audit = auditCounts(t, cp, controllers, start)
		fanout = topCounts(ctx, t, sidecar.AdminAddress, controllers)
		if equalCounts(before, fanout) {
			break
		}
		if try == 20 {
			t.Fatalf("fanout's counts kept moving: %v then %v", before, fanout)
		}
	}
	for _, c := range controllers {
		if len(audit[c]) == 0 {
			t.Errorf("the audit logs show no request of %s: the workload did not reach it", c)
		}
		keys := slices.Sorted(maps.Keys(merge(fanout[c], audit[c])))
		var tf, ta int64
		for _, k := range keys {
			f, a := fanout[c][k], audit[c][k]
			tf, ta = tf+f, ta+a
			t.Logf("%-22s %-40s fanout top %4d  audit %4d", c, k, f, a)
			if diff := f - a; diff*50 > a || -diff*50 > a {
				t.Errorf("%s %s: fanout top showed %d requests, the apiservers served %d: more than 2%% apart", c, k, f, a)
			}
		}
		t.Logf("%-22s %-40s fanout top %4d  audit %4d", c, "total", tf, ta)
	}
}

// topCounts runs the real `fanout top --once -o json` against the
// sidecar's admin server and returns, for each of controllers, the
// cumulative requests of its rows per "verb group/resource[/subresource]".
func topCounts(ctx context.Context, t *testing.T, admin string, controllers []string) map[string]map[string]int64 {
	t.Helper()
	bin, err := harness.FanoutBinary(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "top", "--once", "-o", "json", "--interval", "100ms", "--admin-address", admin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fanout top --once -o json: %v: %s", err, stderr.String())
	}
	// The fields of fanout top's -o json (docs/observability.md) this test reads.
	var s struct {
		Capacity  int   `json:"capacity"`
		Evictions int64 `json:"evictions"`
		Rows      []struct {
			Component   string `json:"component"`
			Verb        string `json:"verb"`
			Group       string `json:"group"`
			Resource    string `json:"resource"`
			Subresource string `json:"subresource"`
			Cumulative  struct {
				Requests int64 `json:"requests"`
			} `json:"cumulative"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("fanout top -o json: %v:\n%s", err, out)
	}
	// The default size, and nothing evicted: every request is in a row.
	if s.Capacity != 1000 || s.Evictions != 0 {
		t.Fatalf("fanout top: capacity %d, %d evictions; want the default 1000 and none", s.Capacity, s.Evictions)
	}
	counts := map[string]map[string]int64{}
	for _, c := range controllers {
		counts[c] = map[string]int64{}
	}
	components := map[string]int64{}
	for _, r := range s.Rows {
		components[r.Component] += r.Cumulative.Requests
	}
	t.Logf("fanout top: %d rows, requests per component: %v", len(s.Rows), components)
	for _, r := range s.Rows {
		c, ok := strings.CutPrefix(r.Component, "kube-controller-manager/")
		if !ok || counts[c] == nil {
			continue
		}
		counts[c][rowKey(r.Verb, r.Group, r.Resource, r.Subresource)] += r.Cumulative.Requests
	}
	return counts
}

// auditCounts counts the requests the apiservers served for each of
// controllers' service accounts since the given time, once the logs
// settled.
func auditCounts(t *testing.T, cp *harness.ControlPlane, controllers []string, since time.Time) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	for _, c := range controllers {
		out[c] = map[string]int64{}
		user := "system:serviceaccount:kube-system:" + c
		// Settle first, then read once more to split by verb and
		// resource.
		ours := func(e *harness.AuditEvent) bool {
			return e.User.Username == user && !e.RequestReceivedTimestamp.Before(since)
		}
		if _, err := cp.ServedPerAPIServerWhere(ours); err != nil {
			t.Fatal(err)
		}
		for i, a := range cp.APIServers {
			events, err := harness.ReadAuditLog(a.AuditLog)
			if err != nil {
				t.Fatalf("audit log of apiserver %d: %v", i+1, err)
			}
			for _, e := range events {
				if !e.Served() || !ours(&e) || e.IsHealthProbe() {
					continue
				}
				var group, res, sub string
				if e.ObjectRef != nil {
					group, res, sub = e.ObjectRef.APIGroup, e.ObjectRef.Resource, e.ObjectRef.Subresource
				}
				out[c][rowKey(e.Verb, group, res, sub)]++
			}
		}
	}
	return out
}

func rowKey(verb, group, resource, subresource string) string {
	k := verb + " " + group + "/" + resource
	if subresource != "" {
		k += "/" + subresource
	}
	return k
}

func equalCounts(a, b map[string]map[string]int64) bool {
	for c := range merge(a, b) {
		if !maps.Equal(a[c], b[c]) {
			return false
		}
	}
	return true
}

func merge[V any](a, b map[string]V) map[string]V {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]V{}
	}
	maps.Copy(out, b)
	return out
}
