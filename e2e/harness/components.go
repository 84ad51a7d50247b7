package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Component is a control-plane component process (kube-controller-manager,
// kube-scheduler) running in the root namespace.
type Component struct {
	Name       string
	Kubeconfig string
	LogPath    string
	proc       *process
}

// Running reports whether the process is alive.
func (c *Component) Running() bool { return !c.proc.exited() }

// Err returns why the process exited, or nil while it runs.
func (c *Component) Err() error {
	if !c.proc.exited() {
		return nil
	}
	return c.proc.exitError()
}

// Stop SIGTERMs the component and waits for it to exit.
func (c *Component) Stop() error { return c.proc.stop(30 * time.Second) }

// StartControllerManager runs kube-controller-manager against kubeconfig
// (typically a fanout sidecar's written kubeconfig). Each controller uses its
// own service-account token, as in a kubeadm cluster, so its requests carry
// bearer tokens rather than the client certificate. The node lifecycle
// controller is off: there are no kubelets to renew leases, and it would
// taint every node unreachable.
func (cp *ControlPlane) StartControllerManager(tb testing.TB, kubeconfig string, extraArgs ...string) (*Component, error) {
	dir, err := cp.componentDir("kube-controller-manager")
	if err != nil {
		return nil, err
	}
	port, err := freePort(net.ParseIP("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	p := cp.PKI
	args := []string{
		cp.ComponentBins.KubeControllerManager,
		"--kubeconfig=" + kubeconfig,
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.ServiceAccountKey,
		"--root-ca-file=" + p.CA.CertFile,
		"--cluster-signing-cert-file=" + p.CA.CertFile,
		"--cluster-signing-key-file=" + p.CA.KeyFile,
		"--controllers=*,-node-lifecycle-controller",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--profiling=false",
		"--v=1",
	}
	return cp.startComponent(tb, "kube-controller-manager", dir, kubeconfig, append(args, extraArgs...))
}

// StartScheduler runs kube-scheduler against kubeconfig.
func (cp *ControlPlane) StartScheduler(tb testing.TB, kubeconfig string, extraArgs ...string) (*Component, error) {
	dir, err := cp.componentDir("kube-scheduler")
	if err != nil {
		return nil, err
	}
	port, err := freePort(net.ParseIP("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	args := []string{
		cp.ComponentBins.KubeScheduler,
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--profiling=false",
		"--v=1",
	}
	return cp.startComponent(tb, "kube-scheduler", dir, kubeconfig, append(args, extraArgs...))
}

func (cp *ControlPlane) componentDir(name string) (string, error) {
	dir, err := os.MkdirTemp(cp.Dir, name+"-")
	if err != nil {
		return "", err
	}
	return dir, nil
}

func (cp *ControlPlane) startComponent(tb testing.TB, name, dir, kubeconfig string, argv []string) (*Component, error) {
	c := &Component{Name: name, Kubeconfig: kubeconfig, LogPath: filepath.Join(dir, name+".log")}
	proc, err := startProcess(name, c.LogPath, argv, nil)
	if err != nil {
		return nil, err
	}
	c.proc = proc
	onCleanup(tb, func() { _ = proc.stop(10 * time.Second) })
	// Neither component has a readiness signal worth waiting for here; a
	// bad flag, though, makes it exit at once, and that is worth reporting
	// now rather than as a mysterious timeout later.
	select {
	case <-proc.done:
		return nil, proc.exitError()
	case <-time.After(2 * time.Second):
	}
	return c, nil
}
