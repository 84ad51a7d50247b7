package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestBypasses holds Bypasses to the injector's own output: a pod just
// injected has none, and each later change that takes a container around
// fanout is reported for that container.
func TestBypasses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    func() *corev1.Pod
		change func(p *corev1.Pod)
		want   string // "container: part of the detail", "" for none
	}{
		{name: "kubeconfig client as injected", pod: kcmPod},
		{name: "in-cluster client as injected", pod: operatorPod},
		{
			name: "client's flag set back to its own kubeconfig", pod: kcmPod,
			change: func(p *corev1.Pod) {
				p.Spec.Containers[0].Args[0] = "--kubeconfig=/etc/kubernetes/controller-manager.conf"
			},
			want: "kube-controller-manager: names kubeconfig /etc/kubernetes/controller-manager.conf",
		},
		{
			name: "in-cluster client's KUBECONFIG removed", pod: operatorPod,
			change: func(p *corev1.Pod) { p.Spec.Containers[0].Env = nil },
			want:   "manager: was pointed at fanout",
		},
		{
			name: "a second container with a kubeconfig of its own", pod: operatorPod,
			change: func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "helper", Env: []corev1.EnvVar{{Name: "KUBECONFIG", Value: "/config/kubeconfig"}}})
			},
			want: "helper: names kubeconfig /config/kubeconfig",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, d := testConfig().Mutate(tc.pod())
			if !d.Mutated {
				t.Fatalf("not injected: %+v", d)
			}
			if tc.change != nil {
				tc.change(pod)
			}
			var got []string
			for _, b := range Bypasses(pod) {
				got = append(got, b.Container+": "+b.Detail)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("Bypasses = %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
				t.Errorf("Bypasses = %q, want one starting %q", got, tc.want)
			}
		})
	}
}
