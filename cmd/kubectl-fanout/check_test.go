package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/balancer"
)

var now = time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)

func namespace(name, label string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if label != "" {
		ns.Labels = map[string]string{webhook.LabelInject: label}
	}
	return ns
}

// kubeconfigClient is a pod whose container names its kubeconfig, as a
// controller's: what the injector injects in every scope.
func kubeconfigClient(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "controller", Image: "example.com/controller:1",
				Args:         []string{"--kubeconfig=/etc/controller/kubeconfig"},
				VolumeMounts: []corev1.VolumeMount{{Name: "kubeconfig", MountPath: "/etc/controller"}},
			}},
			Volumes: []corev1.Volume{{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "controller-kubeconfig"}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// injected is pod as the injector leaves it, running: its sidecar
// started up ago.
func injected(t *testing.T, pod *corev1.Pod, up time.Duration) *corev1.Pod {
	t.Helper()
	c := webhook.DefaultConfig()
	c.Image = "example.com/fanout:test"
	out, d := c.MutateIn(pod, webhook.ScopeNamespace)
	if !d.Mutated {
		t.Fatalf("the injector left %s alone: %+v", pod.Name, d)
	}
	out.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name:  webhook.SidecarName,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-up))}},
	}}
	return out
}

// endpoints is a sidecar's snapshot: addresses, each having served
// served requests.
func endpoints(served uint64, addrs ...string) admin.Snapshot {
	s := admin.Snapshot{Ready: true}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, balancer.EndpointStatus{Address: a, State: "ready", RequestsTotal: served})
	}
	return s
}

// runCheck runs the checker over objs with the sidecars' snapshots by
// pod name (a missing one fails to answer) and returns its findings as
// "namespace/pod kind: detail".
func runCheck(t *testing.T, namespace string, snaps map[string]admin.Snapshot, objs ...any) (report, []string) {
	t.Helper()
	cs := fake.NewClientset()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(context.Background(), o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = cs.CoreV1().Pods(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c := &checker{
		cs: cs, injector: webhook.DefaultConfig(), injectorNamespace: "fanout-system", idle: 5 * time.Minute,
		now: func() time.Time { return now },
		snapshot: func(_ context.Context, pod *corev1.Pod) (admin.Snapshot, error) {
			s, ok := snaps[pod.Name]
			if !ok {
				return s, errors.New("connection refused")
			}
			return s, nil
		},
	}
	r, err := c.run(context.Background(), namespace)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Namespace+"/"+f.Pod+" "+f.Kind+": "+f.Detail)
	}
	slices.Sort(got)
	return r, got
}

// wantFindings checks got against want, each a prefix of one finding.
func wantFindings(t *testing.T, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("findings:\n  %s\nwant (prefixes):\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestCheckNotInjected: pods opted in by their namespace or their label
// and running without fanout are found when the injector would inject
// them, or refused them with a warning; pods no webhook entry reviews,
// pods that are no client in an opted-in namespace, and the injector's
// namespace are not.
func TestCheckNotInjected(t *testing.T) {
	notClient := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ctl", Name: "etcd"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	hostNet := kubeconfigClient("apps", "hostnet", map[string]string{webhook.LabelInject: "true"})
	hostNet.Spec.HostNetwork = true
	optedOut := kubeconfigClient("ctl", "opted-out", map[string]string{webhook.LabelInject: "false"})
	done := kubeconfigClient("ctl", "finished", nil)
	done.Status.Phase = corev1.PodSucceeded
	_, got := runCheck(t, "", nil,
		namespace("ctl", webhook.NamespaceEnabled), namespace("hosted", webhook.NamespaceHosted),
		namespace("apps", ""), namespace("fanout-system", ""),
		kubeconfigClient("ctl", "scheduler", nil),
		kubeconfigClient("hosted", "kcm", nil),
		kubeconfigClient("apps", "labelled", map[string]string{webhook.LabelInject: "true"}),
		kubeconfigClient("apps", "unlabelled", nil),
		kubeconfigClient("fanout-system", "labelled", map[string]string{webhook.LabelInject: "true"}),
		notClient, hostNet, optedOut, done,
	)
	wantFindings(t, got, []string{
		"apps/hostnet not-injected: host-network: hostNetwork pod",
		"apps/labelled not-injected: opted in (pod) and the injector would inject it now",
		"ctl/scheduler not-injected: opted in (namespace) and the injector would inject it now",
		"hosted/kcm not-injected: opted in (hosted) and the injector would inject it now",
	})
}

// TestCheckBypass: an injected client whose spec names its own
// kubeconfig again, and one whose sidecar served nothing for --idle, are
// found; a sidecar that served requests, or is younger than --idle, is
// not.
func TestCheckBypass(t *testing.T) {
	two := []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	reverted := injected(t, kubeconfigClient("ctl", "reverted", nil), time.Hour)
	reverted.Spec.Containers[0].Args = []string{"--kubeconfig=/etc/controller/kubeconfig"}
	_, got := runCheck(t, "ctl", map[string]admin.Snapshot{
		"reverted": endpoints(10, two...),
		"idle":     endpoints(0, two...),
		"young":    endpoints(0, two...),
		"busy":     endpoints(10, two...),
	},
		namespace("ctl", webhook.NamespaceEnabled),
		reverted,
		injected(t, kubeconfigClient("ctl", "idle", nil), 10*time.Minute),
		injected(t, kubeconfigClient("ctl", "young", nil), time.Minute),
		injected(t, kubeconfigClient("ctl", "busy", nil), time.Hour),
	)
	wantFindings(t, got, []string{
		"ctl/idle bypass: the sidecar has served no request in 10m0s up: the clients (controller)",
		"ctl/reverted bypass: container controller names kubeconfig /etc/controller/kubeconfig, not fanout's",
	})
}

// TestCheckSidecars: a sidecar that knows one endpoint or none, one that
// does not run and one whose admin server does not answer are found.
func TestCheckSidecars(t *testing.T) {
	crashing := injected(t, kubeconfigClient("ctl", "crashing", nil), time.Hour)
	crashing.Status.InitContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	crashing.Status.InitContainerStatuses[0].RestartCount = 4
	r, got := runCheck(t, "ctl", map[string]admin.Snapshot{
		"one":  endpoints(5, "10.0.0.1:6443"),
		"none": endpoints(5),
		"two":  endpoints(5, "10.0.0.1:6443", "10.0.0.2:6443"),
	},
		namespace("ctl", webhook.NamespaceEnabled),
		injected(t, kubeconfigClient("ctl", "one", nil), time.Hour),
		injected(t, kubeconfigClient("ctl", "none", nil), time.Hour),
		injected(t, kubeconfigClient("ctl", "two", nil), time.Hour),
		injected(t, kubeconfigClient("ctl", "silent", nil), time.Hour),
		crashing,
	)
	wantFindings(t, got, []string{
		"ctl/crashing sidecar-down: the fanout container is not running: waiting (CrashLoopBackOff) after 4 restarts",
		"ctl/none one-endpoint: the sidecar knows no kube-apiserver endpoint",
		"ctl/one one-endpoint: the sidecar knows one kube-apiserver endpoint (10.0.0.1:6443)",
		"ctl/silent sidecar-down: its admin server did not answer: connection refused",
	})
	if r.Pods != 5 || r.Injected != 5 {
		t.Errorf("report counts %d pods, %d injected; want 5, 5", r.Pods, r.Injected)
	}

	// The JSON an operator scripts against, and the table.
	var buf bytes.Buffer
	if err := r.write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back.Findings) != 4 || back.Findings[0].Kind == "" {
		t.Errorf("-o json = %s (%v)", buf.String(), err)
	}
	buf.Reset()
	if err := r.write(&buf, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "NAMESPACE  POD") || !strings.Contains(buf.String(), "; 4 findings\n") {
		t.Errorf("table:\n%s", buf.String())
	}
}
