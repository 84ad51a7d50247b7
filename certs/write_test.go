package certs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestWriteKubeconfig(t *testing.T) {
	for _, tc := range []struct {
		name, listen, wantServer string
		existing                 bool
	}{
		{"new file", "127.0.0.1:7080", "http://127.0.0.1:7080", false},
		{"replaces an existing file", "127.0.0.1:7080", "http://127.0.0.1:7080", true},
		{"IPv6", "[::1]:7080", "http://[::1]:7080", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "kubeconfig")
			if tc.existing {
				testkit.WriteFile(t, dir, "kubeconfig", []byte(strings.Repeat("old content that is longer\n", 100)))
			}
			if err := WriteKubeconfig(path, tc.listen); err != nil {
				t.Fatalf("WriteKubeconfig: %v", err)
			}

			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("mode %v, want 0644", fi.Mode().Perm())
			}
			assertOnlyFiles(t, dir, "kubeconfig")

			cfg, err := clientcmd.LoadFromFile(path)
			if err != nil {
				t.Fatalf("the written kubeconfig does not load: %v", err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil || cfg.Clusters[ctx.Cluster] == nil || cfg.AuthInfos[ctx.AuthInfo] == nil {
				t.Fatalf("current context %q is incomplete: %+v", cfg.CurrentContext, cfg)
			}
			if got := cfg.Clusters[ctx.Cluster].Server; got != tc.wantServer {
				t.Errorf("server %q, want %q", got, tc.wantServer)
			}
			if u := cfg.AuthInfos[ctx.AuthInfo]; hasCredentials(u) {
				t.Errorf("the user carries credentials: %+v", u)
			}

			// What a client-go client would build from it.
			rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				t.Fatalf("client-go rejects the kubeconfig: %v", err)
			}
			if rc.Host != tc.wantServer || rc.BearerToken != "" || rc.CertFile != "" || len(rc.CertData) != 0 || rc.Username != "" {
				t.Errorf("client config %+v: want host %s and no credentials", rc, tc.wantServer)
			}
		})
	}
}

func TestWriteKubeconfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen string
		// setup returns the path to write to.
		setup  func(t *testing.T, dir string) string
		wantIn string
	}{
		{"no host", ":7080", func(t *testing.T, dir string) string { return filepath.Join(dir, "kubeconfig") }, "HOST:PORT"},
		{"no port", "127.0.0.1", func(t *testing.T, dir string) string { return filepath.Join(dir, "kubeconfig") }, "HOST:PORT"},
		{"directory missing", "127.0.0.1:7080", func(t *testing.T, dir string) string { return filepath.Join(dir, "missing", "kubeconfig") }, "writing kubeconfig"},
		{"rename fails: path is a directory", "127.0.0.1:7080", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "kubeconfig")
			testkit.WriteFile(t, p, "keep", []byte("x"))
			return p
		}, "writing kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.setup(t, dir)
			before := listDir(t, dir)
			err := WriteKubeconfig(path, tc.listen)
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("WriteKubeconfig: %v, want an error saying %q", err, tc.wantIn)
			}
			if after := listDir(t, dir); !reflect.DeepEqual(before, after) {
				t.Errorf("a failed write left files behind: before %v, after %v", before, after)
			}
		})
	}
}

func hasCredentials(u *clientcmdapi.AuthInfo) bool {
	return u.ClientCertificate != "" || len(u.ClientCertificateData) > 0 || u.ClientKey != "" || len(u.ClientKeyData) > 0 ||
		u.Token != "" || u.TokenFile != "" || u.Username != "" || u.Password != "" ||
		u.AuthProvider != nil || u.Exec != nil || u.Impersonate != "" || len(u.ImpersonateGroups) > 0
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func assertOnlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	if got := listDir(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("directory holds %v, want only %v (temporary file left behind?)", got, want)
	}
}
