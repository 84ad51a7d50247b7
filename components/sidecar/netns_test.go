package sidecar

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysClassNet lays out devices as sysfs does: /sys/class/net/NAME is a
// symlink into /sys/devices/..., and a bridge has a bridge/ directory.
func fakeSysClassNet(t *testing.T, devices map[string]string, bridges ...string) string {
	t.Helper()
	root := t.TempDir()
	class := filepath.Join(root, "class", "net")
	if err := os.MkdirAll(class, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range devices {
		dir := filepath.Join(root, "devices", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "devices", target), filepath.Join(class, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range bridges {
		if err := os.MkdirAll(filepath.Join(root, "devices", devices[b], "bridge"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return class
}

func TestSharedNetworkNamespace(t *testing.T) {
	tests := []struct {
		name    string
		devices map[string]string
		bridges []string
		want    string // substring of the reason; "" for a pod's namespace
	}{
		{"pod: lo and its veth", map[string]string{"lo": "virtual/net/lo", "eth0": "virtual/net/eth0"}, nil, ""},
		{"pod with tunnel stubs", map[string]string{"lo": "virtual/net/lo", "eth0": "virtual/net/eth0", "tunl0": "virtual/net/tunl0"}, nil, ""},
		{"node: a network card", map[string]string{"lo": "virtual/net/lo", "eth0": "pci0000:00/0000:00:03.0/virtio2/net/eth0"}, nil, "eth0 is hardware"},
		{"node: a CNI bridge", map[string]string{"lo": "virtual/net/lo", "cni0": "virtual/net/cni0", "veth1": "virtual/net/veth1"}, []string{"cni0"}, "cni0 is a bridge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SharedNetworkNamespace(fakeSysClassNet(t, tt.devices, tt.bridges...))
			if err != nil {
				t.Fatal(err)
			}
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("reason %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := SharedNetworkNamespace(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing directory gave no error")
	}
}

func TestCheckSharedLoopback(t *testing.T) {
	shared := func() (string, error) { return "network device eth0 is hardware", nil }
	pod := func() (string, error) { return "", nil }
	unknown := func() (string, error) { return "", errors.New("no sysfs") }
	tests := []struct {
		name    string
		mutate  func(*Config)
		detect  func() (string, error)
		refused bool
	}{
		{"plaintext on the node's loopback", func(*Config) {}, shared, true},
		{"plaintext in a pod", func(*Config) {}, pod, false},
		{"cannot tell", func(*Config) {}, unknown, false},
		{"TLS on the node's loopback", func(o *Config) { o.ListenTLS = true }, shared, false},
		{"operator allows it", func(o *Config) { o.AllowSharedLoopback = true }, shared, false},
		{"remote listener is --allow-remote's business", func(o *Config) { o.Listener.ListenAddress, o.Listener.AllowAnyHost = "0.0.0.0:7080", true }, shared, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewConfig()
			tt.mutate(o)
			err := checkSharedLoopback(o, tt.detect)
			if (err != nil) != tt.refused {
				t.Fatalf("error %v, refused want %v", err, tt.refused)
			}
			if err != nil && (!strings.Contains(err.Error(), "--listen-tls") || !strings.Contains(err.Error(), "--allow-shared-loopback")) {
				t.Errorf("the error does not name both ways out: %v", err)
			}
		})
	}
}
