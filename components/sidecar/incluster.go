package sidecar

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/fanout-dev/fanout/certs"
)

// inClusterPaths is where --in-cluster looks; tests point it at files of
// their own.
var inClusterPaths certs.InCluster

// loadUpstream reads the client's identity: its kubeconfig, or with
// --in-cluster the pod's service account.
func loadUpstream(c *Config) (*certs.Upstream, error) {
	if c.InCluster {
		up, err := certs.LoadInCluster(inClusterPaths)
		if err != nil {
			return nil, fmt.Errorf("--in-cluster: %w", err)
		}
		return up, nil
	}
	up, err := certs.LoadKubeconfig(c.Kubeconfig)
	if _, unreadable := errors.AsType[*fs.PathError](err); unreadable && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--kubeconfig %s: %w; pass the kubeconfig file the client uses, readable by fanout's user", c.Kubeconfig, err)
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", c.Kubeconfig, err)
	}
	return up, nil
}
