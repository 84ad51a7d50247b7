package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestOwnImage: with --sidecar-image empty, the sidecar gets the image
// of the injector's own container as its pod's spec names it, found by
// CONTAINER_NAME or as the pod's only container; errors no retry can fix
// fail at once and say what to set; others are retried.
func TestOwnImage(t *testing.T) {
	pod := func(containers ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fanout-system", Name: "fanout-injector-abc"},
			Spec:       corev1.PodSpec{Containers: containers},
			// The node's resolved reference: not what the sidecar gets.
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "injector", Image: "ghcr.io/fanout-dev/fanout@sha256:0123"}}},
		}
	}
	injector := corev1.Container{Name: "injector", Image: "registry.example/mirror/fanout:v0.2.0"}
	proxy := corev1.Container{Name: "mesh-proxy", Image: "mesh/proxy:1"}
	self := ownPod{namespace: "fanout-system", name: "fanout-injector-abc"}
	named := self
	named.container = "injector"
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, self.name, errors.New("RBAC: no"))
	for _, tt := range []struct {
		name      string
		pod       *corev1.Pod
		self      ownPod
		failFirst int   // Gets that fail with a transient error first
		failWith  error // a Get error that is never transient
		want      string
		wantErr   []string
	}{
		{name: "the only container", pod: pod(injector), self: self, want: injector.Image},
		{name: "the named container among several", pod: pod(proxy, injector), self: named, want: injector.Image},
		{name: "transient errors are retried", pod: pod(injector), self: self, failFirst: 2, want: injector.Image},
		{name: "several containers, none named", pod: pod(proxy, injector), self: self, wantErr: []string{"has containers mesh-proxy, injector", "set CONTAINER_NAME", "--sidecar-image"}},
		{name: "the named container is absent", pod: pod(proxy), self: named, wantErr: []string{`no container CONTAINER_NAME="injector"`, "only mesh-proxy"}},
		{name: "another pod's name", pod: pod(injector), self: ownPod{namespace: "fanout-system", name: "gone"}, wantErr: []string{"fanout-system/gone", "not found", "POD_NAME"}},
		{name: "no RBAC", pod: pod(injector), self: self, failWith: forbidden, wantErr: []string{"forbidden", "own-pod-rbac.yaml", "--sidecar-image"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tt.pod)
			gets := 0
			cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets++
				if tt.failWith != nil {
					return true, nil, tt.failWith
				}
				if gets <= tt.failFirst {
					return true, nil, apierrors.NewServiceUnavailable("apiserver starting")
				}
				return false, nil, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := ownImage(ctx, cs.CoreV1(), tt.self, time.Millisecond)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("ownImage = %q, %v; want %q", got, err, tt.want)
				}
				if gets != tt.failFirst+1 {
					t.Errorf("%d Gets, want %d", gets, tt.failFirst+1)
				}
				return
			}
			if err == nil {
				t.Fatalf("ownImage = %q, want an error containing %q", got, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if gets != 1 {
				t.Errorf("%d Gets for an error no retry fixes, want 1", gets)
			}
		})
	}
}

// TestOwnImageGivesUp: an API that stays unreachable fails the start when
// the context ends, with the last error.
func TestOwnImageGivesUp(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("apiserver starting")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ownImage(ctx, cs.CoreV1(), ownPod{namespace: "ns", name: "p"}, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "apiserver starting") || !strings.Contains(err.Error(), "--sidecar-image is empty") {
		t.Fatalf("ownImage = %v, want the last error and what was being read", err)
	}
}

// TestOptionsOwnPod: an empty --sidecar-image needs POD_NAMESPACE and
// POD_NAME, and takes CONTAINER_NAME when set.
func TestOptionsOwnPod(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     map[string]string
		want    ownPod
		wantErr bool
	}{
		{"all three", map[string]string{"POD_NAMESPACE": "ns", "POD_NAME": "p", "CONTAINER_NAME": "injector"}, ownPod{"ns", "p", "injector"}, false},
		{"no container name", map[string]string{"POD_NAMESPACE": "ns", "POD_NAME": "p"}, ownPod{"ns", "p", ""}, false},
		{"no pod name", map[string]string{"POD_NAMESPACE": "ns"}, ownPod{}, true},
		{"nothing", nil, ownPod{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := newOptions()
			o.certFile, o.keyFile = "c", "k"
			o.getenv = func(k string) string { return tt.env[k] }
			err := o.complete()
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "--sidecar-image is empty and POD_NAMESPACE and POD_NAME") {
					t.Fatalf("complete() = %v, want the missing environment named", err)
				}
				return
			}
			if err != nil || o.ownPod != tt.want || o.sidecar.Image != "" {
				t.Fatalf("complete() = %v, ownPod %+v, image %q; want %+v and the image left to the start", err, o.ownPod, o.sidecar.Image, tt.want)
			}
		})
	}
}
