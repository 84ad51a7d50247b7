package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadInCluster(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("ca"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ic      InCluster
		server  string
		wantErr string
	}{
		{name: "ipv4", ic: InCluster{TokenFile: token, CAFile: ca, Host: "10.96.0.1", Port: "443"}, server: "https://10.96.0.1:443"},
		{name: "ipv6", ic: InCluster{TokenFile: token, CAFile: ca, Host: "fd00::1", Port: "443"}, server: "https://[fd00::1]:443"},
		{name: "no token", ic: InCluster{TokenFile: filepath.Join(dir, "missing"), CAFile: ca, Host: "10.96.0.1", Port: "443"}, wantErr: "service account token"},
		{name: "no ca", ic: InCluster{TokenFile: token, CAFile: filepath.Join(dir, "missing"), Host: "10.96.0.1", Port: "443"}, wantErr: "service account CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, err := LoadInCluster(tt.ic)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if up.Server.String() != tt.server || up.ServerName != tt.ic.Host || up.CA.Path != ca || up.Token.Path != token {
				t.Fatalf("got %+v", up)
			}
		})
	}
}

// TestLoadInClusterEnv: without explicit host and port the environment the
// kubelet sets is used, and its absence is an error that says what to do.
func TestLoadInClusterEnv(t *testing.T) {
	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	os.WriteFile(token, []byte("t"), 0o600)
	os.WriteFile(ca, []byte("c"), 0o600)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := LoadInCluster(InCluster{TokenFile: token, CAFile: ca}); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("err = %v, want a hint at --kubeconfig", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	up, err := LoadInCluster(InCluster{TokenFile: token, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	if up.Server.Host != "10.0.0.1:6443" {
		t.Fatalf("server %s", up.Server)
	}
}
