package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// SysClassNet is where the kernel lists the network devices of the network
// namespace that mounted /sys (a container runtime mounts sysfs in the
// container's own namespace, so a pod sees its own devices and a hostNetwork
// pod sees the node's).
const SysClassNet = "/sys/class/net"

// SharedNetworkNamespace tells whether the network namespace whose devices
// sysClassNet lists is a node's rather than a pod's, and names the device
// that shows it. A pod's namespace holds only virtual devices: its end of a
// veth pair, lo, and the tunnel stubs some kernel modules add to every
// namespace. A node's holds its network card, which sysfs places under the
// bus it sits on rather than under /sys/devices/virtual, or the bridge that
// CNI plugins and container engines attach pods to. Setups that have
// neither, such as a node that is itself a container (kind), are not
// detected; reason is "" for them, as for a pod.
//
// Plaintext on loopback is safe in a pod because only the pod's containers
// share its loopback. In a node's namespace every process on the node does,
// and each could act as the client.
func SharedNetworkNamespace(sysClassNet string) (reason string, err error) {
	entries, err := os.ReadDir(sysClassNet)
	if err != nil {
		return "", fmt.Errorf("listing network devices in %s: %w", sysClassNet, err)
	}
	for _, e := range entries {
		dev := filepath.Join(sysClassNet, e.Name())
		target, err := os.Readlink(dev)
		if err != nil {
			continue // not the symlink sysfs makes; nothing to learn from it
		}
		if !strings.Contains(target, "/devices/virtual/") {
			return fmt.Sprintf("network device %s is hardware (%s)", e.Name(), target), nil
		}
		if _, err := os.Stat(filepath.Join(dev, "bridge")); err == nil {
			return fmt.Sprintf("network device %s is a bridge", e.Name()), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("checking whether %s is a bridge: %w", dev, err)
		}
	}
	return "", nil
}

// checkSharedLoopback refuses a plaintext loopback listener in a network
// namespace shared with the node unless --allow-shared-loopback says the
// operator means it. detect is SharedNetworkNamespace over the real sysfs;
// when it cannot tell (no /sys), fanout starts.
func checkSharedLoopback(c *Config, detect func() (string, error)) error {
	if c.ListenTLS || c.AllowSharedLoopback || !isLoopbackAddress(c.Listener.ListenAddress) {
		return nil
	}
	reason, err := detect()
	if err != nil || reason == "" {
		return nil
	}
	return fmt.Errorf("refusing plaintext --listen-address %s: fanout runs in a network namespace shared with the node (%s), "+
		"so every process on the node can reach that loopback address and act as the client. "+
		"Use --listen-tls (the client certificate goes only into --write-kubeconfig), "+
		"or pass --allow-shared-loopback if every process there may act as the client", c.Listener.ListenAddress, reason)
}

// CheckNetworkNamespace applies checkSharedLoopback to the network
// namespace fanout runs in. cmd/fanout calls it after Validate, so that
// tests of the options do not depend on the machine they run on.
func (c *Config) CheckNetworkNamespace() error {
	return checkSharedLoopback(c, func() (string, error) { return SharedNetworkNamespace(SysClassNet) })
}

func isLoopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLoopbackHost(host)
}
