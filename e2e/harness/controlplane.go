package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

// ServiceCIDR is the (virtual, never routed) service network; the first
// address is the kubernetes Service's cluster IP.
const ServiceCIDR = "10.96.0.0/16"

// ServiceIP is the kubernetes Service's cluster IP, which the serving
// certificate covers.
var ServiceIP = net.ParseIP("10.96.0.1")

// Options configure a control plane. The zero value is three apiservers and
// three nodes.
type Options struct {
	// APIServers is the number of apiservers (test hosts); default 3.
	APIServers int
	// Nodes is the number of Ready Node objects to register; default 3,
	// and negative for none (when a real node, StartNode, is to get every
	// pod). There are no kubelets: the nodes exist so the scheduler can
	// bind pods.
	Nodes int
	// APIServerArgs are appended to every apiserver's command line.
	APIServerArgs []string
	// PerAPIServerArgs[i] is appended to apiserver i's command line, after
	// APIServerArgs: apiservers that serve different APIs, as during an
	// upgrade (--runtime-config on some of them).
	PerAPIServerArgs [][]string
	// PerAPIServerBinary[i], when set, is the kube-apiserver binary
	// apiserver i runs instead of Bins.KubeAPIServer: another release's
	// (ReleaseBinaries), for an upgrade (APIServer.RestartFrom).
	PerAPIServerBinary []string
	// ComponentBins, when set, supplies the kube-controller-manager and
	// kube-scheduler that StartControllerManager and StartScheduler run
	// instead of Bins': an upgrade keeps the old release's until the
	// apiservers are done.
	ComponentBins *Bins
	// Logf receives progress; default writes to stderr.
	Logf func(format string, args ...any)
}

// ControlPlane is a running cluster: etcd, the apiservers on their test
// hosts, and registered nodes. Start it with Start.
type ControlPlane struct {
	// Dir holds everything the run writes: PKI, kubeconfigs, logs, etcd.
	Dir  string
	Bins *Bins
	// ComponentBins holds the kube-controller-manager and kube-scheduler
	// the control plane runs: Options.ComponentBins, else Bins.
	ComponentBins *Bins
	PKI           *PKI
	Net           *Network
	Etcd          *Etcd
	APIServers    []*APIServer
	// AdminKubeconfig and Admin talk to the first apiserver directly as
	// kubernetes-admin (O=system:masters).
	AdminKubeconfig string
	Admin           *rest.Config
	AdminClient     kubernetes.Interface
	// Nodes are the names of the registered nodes.
	Nodes []string

	logf      func(string, ...any)
	closeOnce sync.Once
}

// Start brings up a control plane. With tb non-nil it is torn down when tb
// ends; with tb nil (in TestMain) it is torn down at the end of Main. Either
// way SIGINT and SIGTERM tear it down too, as long as the package uses Main.
func Start(ctx context.Context, tb testing.TB, opts Options) (_ *ControlPlane, err error) {
	if opts.APIServers == 0 {
		opts.APIServers = 3
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	begin := time.Now()

	bins, err := Binaries(ctx, logWriter(logf))
	if err != nil {
		return nil, err
	}
	// The pid in the name lets SweepStale tell a dead run's directory.
	dir, err := os.MkdirTemp("", "fanout-e2e-"+runID()+"-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, Bins: bins, ComponentBins: bins, logf: logf}
	if opts.ComponentBins != nil {
		cp.ComponentBins = opts.ComponentBins
	}
	onCleanup(tb, cp.Close)
	defer func() {
		if err != nil {
			cp.Close()
		}
	}()

	if cp.Net, err = newNetwork(ctx, opts.APIServers, logf); err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, h := range cp.Net.Hosts {
		ips = append(ips, h.IP)
	}
	if cp.PKI, err = NewPKI(filepath.Join(dir, "pki"), ips, ServiceIP); err != nil {
		return nil, fmt.Errorf("generating the PKI: %w", err)
	}
	cp.AdminKubeconfig = filepath.Join(dir, "kubeconfigs", "admin.conf")
	if err := cp.PKI.WriteKubeconfig(cp.AdminKubeconfig, cp.Endpoints()[0], cp.PKI.Admin); err != nil {
		return nil, err
	}
	if cp.Admin, err = RESTConfig(cp.AdminKubeconfig); err != nil {
		return nil, err
	}
	if cp.AdminClient, err = kubernetes.NewForConfig(cp.Admin); err != nil {
		return nil, err
	}

	if cp.Etcd, err = startEtcd(filepath.Join(dir, "etcd"), cp.Net.BridgeIP); err != nil {
		return nil, err
	}
	for i, h := range cp.Net.Hosts {
		args := slices.Clone(opts.APIServerArgs)
		if i < len(opts.PerAPIServerArgs) {
			args = append(args, opts.PerAPIServerArgs[i]...)
		}
		bin := cp.Bins.KubeAPIServer
		if i < len(opts.PerAPIServerBinary) && opts.PerAPIServerBinary[i] != "" {
			bin = opts.PerAPIServerBinary[i]
		}
		a, err := newAPIServer(cp, h, bin, args)
		if err != nil {
			return nil, err
		}
		cp.APIServers = append(cp.APIServers, a)
	}
	// Started together: each takes tens of seconds on a busy machine, and
	// they only share etcd.
	errs := make([]error, len(cp.APIServers))
	var wg sync.WaitGroup
	for i, a := range cp.APIServers {
		wg.Go(func() { errs[i] = a.Start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	logf("harness: %d apiservers ready at %s (%s)", len(cp.APIServers), strings.Join(cp.Endpoints(), ", "), time.Since(begin).Round(time.Second))

	if cp.Net.NetNS {
		if err := cp.waitKubernetesEndpoints(ctx); err != nil {
			return nil, err
		}
	}
	if err := cp.registerNodes(ctx, max(opts.Nodes, 0)); err != nil {
		return nil, err
	}
	logf("harness: control plane up in %s, files in %s", time.Since(begin).Round(time.Second), dir)
	return cp, nil
}

// Close stops everything the control plane runs and removes its network. The
// run directory is kept when FANOUT_E2E_KEEP=1, for reading logs afterwards.
func (cp *ControlPlane) Close() {
	cp.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, a := range cp.APIServers {
			// No graceful shutdown: nobody is left to serve.
			wg.Go(func() { _ = a.Kill() })
		}
		wg.Wait()
		if cp.Etcd != nil {
			cp.Etcd.Close()
		}
		if cp.Net != nil {
			if err := cp.Net.Close(); err != nil {
				cp.logf("harness: removing the test network: %v", err)
			}
		}
		if os.Getenv("FANOUT_E2E_KEEP") == "1" {
			cp.logf("harness: FANOUT_E2E_KEEP=1: keeping %s", cp.Dir)
			return
		}
		os.RemoveAll(cp.Dir)
	})
}

// Endpoints returns the apiservers' URLs, in order.
func (cp *ControlPlane) Endpoints() []string {
	var out []string
	for _, h := range cp.Net.Hosts {
		out = append(out, "https://"+net.JoinHostPort(h.IP.String(), fmt.Sprint(APIServerPort)))
	}
	return out
}

// UserKubeconfig mints a client certificate for user name in groups orgs and
// writes a kubeconfig for it that points at the first apiserver, the way a
// user's kubeconfig names one address. It returns the kubeconfig's path.
func (cp *ControlPlane) UserKubeconfig(name string, orgs ...string) (string, error) {
	ck, err := cp.PKI.MintUser(name, orgs...)
	if err != nil {
		return "", err
	}
	return cp.writeKubeconfig(name, ck)
}

func (cp *ControlPlane) writeKubeconfig(name string, ck *CertKey) (string, error) {
	path := filepath.Join(cp.Dir, "kubeconfigs", fileSafe(name)+".conf")
	if err := cp.PKI.WriteKubeconfig(path, cp.Endpoints()[0], ck); err != nil {
		return "", err
	}
	return path, nil
}

// ControllerManagerKubeconfig writes the kubeconfig of
// system:kube-controller-manager, for a sidecar in front of it.
func (cp *ControlPlane) ControllerManagerKubeconfig() (string, error) {
	return cp.writeKubeconfig("kube-controller-manager", cp.PKI.ControllerManager)
}

// SchedulerKubeconfig writes the kubeconfig of system:kube-scheduler.
func (cp *ControlPlane) SchedulerKubeconfig() (string, error) {
	return cp.writeKubeconfig("kube-scheduler", cp.PKI.Scheduler)
}

// RESTConfig loads a kubeconfig file.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// waitKubernetesEndpoints waits until the default/kubernetes EndpointSlice
// lists every apiserver: the lease reconciler is how in-cluster clients (and
// fanout's endpointslice resolver) learn about all of them.
func (cp *ControlPlane) waitKubernetesEndpoints(ctx context.Context) error {
	want := make([]string, 0, len(cp.Net.Hosts))
	for _, h := range cp.Net.Hosts {
		want = append(want, h.IP.String())
	}
	sort.Strings(want)
	var got []string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		got = nil
		slice, err := cp.AdminClient.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if err == nil {
			got = sliceAddresses(slice)
			if slices.Equal(got, want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("EndpointSlice default/kubernetes lists %v after a minute, want %v: the lease endpoint reconciler is not working", got, want)
}

func sliceAddresses(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, ep := range s.Endpoints {
		out = append(out, ep.Addresses...)
	}
	sort.Strings(out)
	return out
}

// registerNodes creates n Ready nodes with room for plenty of pods, and
// removes the not-ready taint that admission puts on every new node (with no
// node lifecycle controller and no kubelet, nothing else would).
func (cp *ControlPlane) registerNodes(ctx context.Context, n int) error {
	nodes := cp.AdminClient.CoreV1().Nodes()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("e2e-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
			},
		}
		created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("registering node %s: %w", name, err)
		}
		if err != nil {
			if created, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		now := metav1.Now()
		created.Status.Capacity = capacity
		created.Status.Allocatable = capacity
		created.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "fake node of the fanout e2e harness", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking node %s Ready: %w", name, err)
		}
		if err := cp.untaintNotReady(ctx, name); err != nil {
			return err
		}
		cp.Nodes = append(cp.Nodes, name)
	}
	return nil
}

// untaintNotReady removes the not-ready taint that admission puts on every
// new node. The node lifecycle controller would, once the node is Ready;
// the harness's kube-controller-manager runs without it, and a control plane
// may run none at all.
func (cp *ControlPlane) untaintNotReady(ctx context.Context, name string) error {
	nodes := cp.AdminClient.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := cur.Spec.Taints[:0]
		for _, t := range cur.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				kept = append(kept, t)
			}
		}
		cur.Spec.Taints = kept
		_, err = nodes.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing the not-ready taint of node %s: %w", name, err)
	}
	return nil
}

// logWriter adapts a printf-style logger to an io.Writer, one call per write.
type logWriter func(string, ...any)

func (l logWriter) Write(p []byte) (int, error) {
	l("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
