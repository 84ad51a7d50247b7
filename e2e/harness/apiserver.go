package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APIServerPort is the secure port of every apiserver. Each test host has
// its own address, so they can all use the standard port.
const APIServerPort = 6443

// auditPolicy records every request at Metadata level: enough to tell who
// was served by which apiserver, and cheap enough to leave on.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// APIServer is one kube-apiserver on its test host.
type APIServer struct {
	Index int
	Host  *Host
	// URL is https://<host ip>:6443.
	URL string
	// Dir holds its log (kube-apiserver.log) and audit log (audit.log).
	Dir      string
	AuditLog string
	LogPath  string

	argv  []string
	admin *rest.Config
	// baseArgv is the original argv once RestartWith changed it.
	baseArgv []string
	// binIndex is where the kube-apiserver binary is in argv (after a
	// network namespace's ip netns exec).
	binIndex int

	mu      sync.Mutex
	proc    *process
	started time.Time // when proc was started
	readyAt time.Time // when WaitReady last saw /readyz pass
}

func newAPIServer(cp *ControlPlane, h *Host, binary string, extraArgs []string) (*APIServer, error) {
	dir := filepath.Join(cp.Dir, fmt.Sprintf("apiserver-%d", h.Index+1))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	a := &APIServer{
		Index:    h.Index,
		Host:     h,
		URL:      "https://" + net.JoinHostPort(h.IP.String(), fmt.Sprint(APIServerPort)),
		Dir:      dir,
		AuditLog: filepath.Join(dir, "audit.log"),
		LogPath:  filepath.Join(dir, "kube-apiserver.log"),
	}
	p := cp.PKI
	reconciler := "lease"
	if !cp.Net.NetNS {
		// Loopback addresses are not valid endpoints, so the kubernetes
		// Service cannot list them; clients get the static list instead.
		reconciler = "none"
	}
	args := []string{
		binary,
		"--advertise-address=" + h.IP.String(),
		"--bind-address=" + h.IP.String(),
		fmt.Sprintf("--secure-port=%d", APIServerPort),
		"--etcd-servers=" + cp.Etcd.URL,
		"--endpoint-reconciler-type=" + reconciler,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--client-ca-file=" + p.CA.CertFile,
		"--tls-cert-file=" + p.Serving.CertFile,
		"--tls-private-key-file=" + p.Serving.KeyFile,
		"--requestheader-client-ca-file=" + p.FrontProxyCA.CertFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.FrontProxyClient.CertFile,
		"--proxy-client-key-file=" + p.FrontProxyClient.KeyFile,
		// The aggregator reaches an APIService's Service through its
		// endpoints rather than its cluster IP: the test hosts have no
		// kube-proxy to route a cluster IP.
		"--enable-aggregator-routing=true",
		// A real kubelet (StartNode) answers only authenticated callers, and
		// its node has no name the machine's DNS knows.
		"--kubelet-client-certificate=" + p.KubeletClient.CertFile,
		"--kubelet-client-key=" + p.KubeletClient.KeyFile,
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + a.AuditLog,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		// 0 writes to the file directly: no rotation, so a count never
		// misses events that went to a rotated file.
		"--audit-log-maxsize=0",
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--v=1",
	}
	args = append(args, extraArgs...)
	a.argv = h.command(args)
	a.binIndex = len(a.argv) - len(args)

	admin := rest.CopyConfig(cp.Admin)
	admin.Host = a.URL
	a.admin = admin
	return a, nil
}

// Start runs the apiserver and waits until its /readyz passes.
func (a *APIServer) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.proc != nil && !a.proc.exited() {
		a.mu.Unlock()
		return fmt.Errorf("apiserver %d is already running", a.Index+1)
	}
	proc, err := startProcess(fmt.Sprintf("kube-apiserver %d", a.Index+1), a.LogPath, a.argv, nil)
	if err != nil {
		a.mu.Unlock()
		return err
	}
	a.proc = proc
	a.started = time.Now()
	a.readyAt = time.Time{}
	a.mu.Unlock()
	return a.WaitReady(ctx)
}

// StartedAt returns when the current process was started. Between StartedAt
// and ReadyAt the apiserver may already answer, but wrongly (an RBAC cache
// that has not synced denies everything): a load balancer must send it
// nothing then.
func (a *APIServer) StartedAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.started
}

// ReadyAt returns when WaitReady first saw the current process ready, or
// zero before that.
func (a *APIServer) ReadyAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.readyAt
}

// Running reports whether the apiserver process is alive.
func (a *APIServer) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc != nil && !a.proc.exited()
}

// WaitReady polls /readyz with the admin credentials until it returns ok.
func (a *APIServer) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cfg := rest.CopyConfig(a.admin)
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	for {
		a.mu.Lock()
		proc := a.proc
		a.mu.Unlock()
		if proc == nil {
			return fmt.Errorf("apiserver %d was never started", a.Index+1)
		}
		if proc.exited() {
			return proc.exitError()
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			a.mu.Lock()
			if a.proc == proc && a.readyAt.IsZero() {
				a.readyAt = time.Now()
			}
			a.mu.Unlock()
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("apiserver %d at %s not ready: %v (last /readyz error: %v); last lines of %s:\n%s",
				a.Index+1, a.URL, ctx.Err(), last, a.LogPath, tail(a.LogPath, 25))
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Stop shuts the apiserver down gracefully: SIGTERM makes it fail /readyz,
// drain in-flight requests and exit on its own. It is SIGKILLed if it takes
// longer than two minutes.
func (a *APIServer) Stop() error {
	a.mu.Lock()
	proc := a.proc
	a.mu.Unlock()
	if proc == nil {
		return nil
	}
	return proc.stop(2 * time.Minute)
}

// Kill SIGKILLs the apiserver: connections break without any goodbye.
func (a *APIServer) Kill() error {
	a.mu.Lock()
	proc := a.proc
	a.mu.Unlock()
	if proc == nil {
		return nil
	}
	return proc.kill()
}

// Restart stops the apiserver gracefully and starts it again.
func (a *APIServer) Restart(ctx context.Context) error {
	if err := a.Stop(); err != nil {
		return err
	}
	return a.Start(ctx)
}

// Disconnect cuts the apiserver's host off the network; see Host.Disconnect.
func (a *APIServer) Disconnect() error { return a.Host.Disconnect() }

// Reconnect undoes Disconnect.
func (a *APIServer) Reconnect() error { return a.Host.Reconnect() }
