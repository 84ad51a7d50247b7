package sidecar

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fanout-dev/fanout/components/engine"
)

// Explain is the exit code for the reason App failed to build or start,
// 2 when a flag's value is at fault (--endpoints) and 1 when the
// environment is (files, ports), and that reason in the terms of c's flags. err is the
// root cause (startup.RootCause): the parts already name their flag,
// except the engine's credentials, which do not know where they were
// named.
func (c Config) Explain(err error) (int, error) {
	if _, ok := errors.AsType[*engine.EndpointsError](err); ok {
		return 2, err
	}
	if _, ok := errors.AsType[*engine.CredentialsError](err); ok {
		if c.InCluster {
			return 1, fmt.Errorf("--in-cluster: %w; the pod needs its service account token mounted (automountServiceAccountToken)", err)
		}
		return 1, fmt.Errorf("--kubeconfig %s: %w; the files the kubeconfig names must be readable in fanout's container: mount them at the same paths, or fix the paths in the kubeconfig", c.Kubeconfig, err)
	}
	return 1, err
}

// checkWriteKubeconfig fails before anything starts when the kubeconfig
// fanout writes for the client (--write-kubeconfig) could not be written:
// the client waits for that file, so a sidecar that runs without it only
// holds the pod back.
func checkWriteKubeconfig(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--write-kubeconfig %s: directory %s does not exist; mount a volume there that the client's container mounts too (an emptyDir), or pass a path in an existing directory", path, dir)
	case err != nil:
		return fmt.Errorf("--write-kubeconfig %s: %w; pass a path in a directory fanout can write", path, err)
	case !fi.IsDir():
		return fmt.Errorf("--write-kubeconfig %s: %s is not a directory; pass a path in a directory fanout can write", path, dir)
	}
	return nil
}
