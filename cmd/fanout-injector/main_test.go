package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/fanout-dev/fanout/internal/testpki"
)

func TestFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fanout-injector")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	ca := testpki.NewCA(t)
	kp := ca.Serving("fanout-injector.fanout-system.svc")
	cert := testpki.WriteFile(t, dir, "tls.crt", kp.CertPEM)
	key := testpki.WriteFile(t, dir, "tls.key", kp.KeyPEM)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"help", []string{"--help"}, 0, "--sidecar-image"},
		{"nothing", nil, 2, "--tls-cert-file and --tls-private-key-file are required"},
		{"no image", []string{"--tls-cert-file", cert, "--tls-private-key-file", key}, 2, "--sidecar-image"},
		{"bad quantity", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--sidecar-memory-limit", "lots"}, 2, "--sidecar-memory-limit"},
		{"request above limit", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--sidecar-memory-request", "1Gi"}, 2, "exceeds its limit"},
		{"same ports", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--sidecar-admin-port", "7080"}, 2, "must differ"},
		{"unreadable key pair", []string{"--tls-cert-file", cert, "--tls-private-key-file", cert, "--sidecar-image", "i"}, 1, "--tls-private-key-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(bin, tt.args...).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(string(out), tt.wantOut) {
				t.Fatalf("fanout-injector %v: exit %d, output:\n%s\nwant exit %d and output containing %q", tt.args, code, out, tt.wantCode, tt.wantOut)
			}
		})
	}
}

func TestOptionsResources(t *testing.T) {
	o := newOptions()
	o.certFile, o.keyFile, o.sidecar.Image = "c", "k", "i"
	o.cpuLimit = "100m"
	o.memoryRequest = ""
	if err := o.complete(); err != nil {
		t.Fatal(err)
	}
	r := o.sidecar.Resources
	if r.Requests.Cpu().String() != "20m" || r.Limits.Cpu().String() != "100m" || r.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources %+v", r)
	}
	if _, ok := r.Requests[corev1.ResourceMemory]; ok {
		t.Errorf("empty --sidecar-memory-request still set a request: %+v", r.Requests)
	}
}
