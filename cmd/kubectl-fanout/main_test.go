package main

import (
	"context"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUsageErrors: bad command lines end with 2 and say why, before any
// kubeconfig is read; --help ends with 0.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		say  string
	}{
		{args: nil, code: 2, say: "Usage: kubectl fanout status POD"},
		{args: []string{"frobnicate"}, code: 2, say: `unknown command "frobnicate"`},
		{args: []string{"status"}, code: 2, say: "expected one argument, the pod's name"},
		{args: []string{"top", "a", "b"}, code: 2, say: "expected one argument, the pod's name"},
		{args: []string{"check", "pod"}, code: 2, say: "unexpected arguments"},
		{args: []string{"check", "-o", "yaml"}, code: 2, say: `--output "yaml": expected table or json`},
		{args: []string{"check", "--help"}, code: 0},
		{args: []string{"--help"}, code: 0},
	} {
		var out strings.Builder
		code := run(context.Background(), tc.args, io.Discard, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.say) {
			t.Errorf("kubectl fanout %q: exit code %d, stderr %q; want %d and %q", tc.args, code, out.String(), tc.code, tc.say)
		}
	}
}

// TestAdminPort: the sidecar's port named fanout-admin, else its
// --admin-address, else an error naming what is missing.
func TestAdminPort(t *testing.T) {
	pod := func(init bool, ct corev1.Container) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		if init {
			p.Spec.InitContainers = []corev1.Container{ct}
		} else {
			p.Spec.Containers = []corev1.Container{ct}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		port int
		err  string
	}{
		{name: "injected", pod: pod(true, corev1.Container{Name: "fanout", Ports: []corev1.ContainerPort{{Name: "fanout-admin", ContainerPort: 7091}}}), port: 7091},
		{name: "by hand", pod: pod(false, corev1.Container{Name: "fanout", Args: []string{"--admin-address=127.0.0.1:9000"}}), port: 9000},
		{name: "no port", pod: pod(false, corev1.Container{Name: "fanout"}), err: `declares no port "fanout-admin"`},
		{name: "no sidecar", pod: pod(false, corev1.Container{Name: "client"}), err: "runs without fanout"},
	} {
		port, err := adminPort(tc.pod)
		if port != tc.port || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: adminPort = %d, %v; want %d, %q", tc.name, port, err, tc.port, tc.err)
		}
	}
}
