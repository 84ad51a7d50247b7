package certs

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// clientName names the cluster, user and context of the written kubeconfig.
const clientName = "fanout"

// WriteKubeconfig writes to path a kubeconfig that sends the client to
// fanout at http://listenAddress, with no credentials: fanout adds them.
//
// The file is replaced atomically (a temporary file in the same directory,
// synced, then renamed over path), so a client that starts concurrently
// reads either the old file or the whole new one, never a prefix. Mode is
// 0644: it holds no secret.
func WriteKubeconfig(path, listenAddress string) error {
	host, port, err := net.SplitHostPort(listenAddress)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("listen address %q is not HOST:PORT with a host clients can dial, such as 127.0.0.1:7080", listenAddress)
	}
	data, err := encodeKubeconfig(kubeconfigCluster{Server: "http://" + listenAddress}, kubeconfigUser{})
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return writeAtomic(path, data, 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	// Make the rename itself durable; failing to is no reason to report
	// an error for a file that is already in place.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
