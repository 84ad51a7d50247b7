package harness

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NodeOptions configure StartNode.
type NodeOptions struct {
	// Name is the Node's name; default node-<n>, n counting the nodes of
	// the control plane from 1.
	Name string
	// Images are the images imported into the node's containerd before the
	// kubelet starts: nothing is ever pulled from a registry. Default: the
	// images of NodeImages.
	Images *NodeImages
}

// Node is a real Kubernetes node: containerd, kubelet and kube-proxy in a
// network namespace of their own on the control plane's test network, with
// a CNI bridge for its pods.
//
// The node's namespace is what keeps runs apart and the machine untouched:
// IP forwarding, the bridge netfilter switch and kube-proxy's iptables rules
// all live in it, and it has no route off the test network, so pods reach
// the apiservers and each other and nothing else. The apiservers' namespaces
// get routes to the pod network and the service network through the node, so
// they reach the kubelet, pod IPs and Services (webhooks) as in a cluster.
// containerd, the kubelet and kube-proxy enter only the node's network
// namespace (nsenter --net), not a mount namespace of their own, so the
// volumes the kubelet mounts are the ones containerd hands to runc.
type Node struct {
	Name string
	// IP is the node's address on the test network (its InternalIP).
	IP net.IP
	// PodCIDR is the node's pod network (CNI bridge with host-local
	// addresses).
	PodCIDR *net.IPNet
	// NS is the node's network namespace.
	NS string
	// Dir holds the node's configuration, state and logs:
	// containerd.log, kubelet.log and kube-proxy.log.
	Dir string
	// ContainerdSocket is containerd's gRPC (and CRI) socket.
	ContainerdSocket string
	// CgroupRoot is the kubelet's --cgroup-root: every pod's cgroup is
	// below it, in every hierarchy under /sys/fs/cgroup.
	CgroupRoot string
	// Images are what was imported into containerd.
	Images *NodeImages

	cp       *ControlPlane
	veth     string
	procs    []*process // containerd, kubelet, kube-proxy, in start order
	closed   sync.Once
	routesIn []string // apiserver namespaces we added routes to
}

// Well-known addresses of the node network.
const (
	// KubeletPort and KubeProxyHealthzPort are on the node's IP; the
	// namespace is the node's own, so the standard ports are free.
	KubeletPort          = 10250
	KubeProxyHealthzPort = 10256
)

var nodeSeq atomic.Int32

// StartNode starts a real node on cp's test network and waits until the Node
// is Ready and kube-proxy has synced, then lifts its not-ready taint (the
// harness runs no node lifecycle controller). It is torn down when tb ends
// (tb nil: at the end of Main or on SIGINT/SIGTERM): pods are stopped through the CRI,
// then the processes, the shims, mounts, cgroups and the namespace go. Runs
// that were SIGKILLed are swept by the next run's SweepStale.
//
// It needs root, network namespaces (not the loopback fallback), and
// Debian's containerd, runc and containernetworking-plugins (.ci/run
// installs them).
func (cp *ControlPlane) StartNode(ctx context.Context, tb testing.TB, opts NodeOptions) (_ *Node, err error) {
	if !cp.Net.NetNS {
		return nil, errors.New("a real node needs the test network's namespaces; the loopback fallback has none (run as root with iproute2)")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found: the real node needs Debian's containerd, runc and containernetworking-plugins (apt-get install containerd runc containernetworking-plugins iptables): %w", bin, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return nil, fmt.Errorf("no CNI bridge plugin in %s: apt-get install containernetworking-plugins: %w", cniBinDir, err)
	}
	begin := time.Now()
	seq := int(nodeSeq.Add(1))
	n := &Node{cp: cp, Name: opts.Name}
	if n.Name == "" {
		n.Name = fmt.Sprintf("node-%d", seq)
	}
	if n.Dir, err = os.MkdirTemp(cp.Dir, "node-"+fileSafe(n.Name)+"-"); err != nil {
		return nil, err
	}
	onCleanup(tb, n.Close)
	defer func() {
		if err != nil {
			n.Close()
		}
	}()

	if err := n.setUpNetwork(seq); err != nil {
		return nil, fmt.Errorf("node network: %w", err)
	}
	if err := n.setUpCgroups(seq); err != nil {
		return nil, fmt.Errorf("node cgroups: %w", err)
	}
	images := opts.Images
	if images == nil {
		if images, err = BuildNodeImages(ctx, cp.Bins, logWriter(cp.logf)); err != nil {
			return nil, err
		}
	}
	n.Images = images
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.importImages(ctx); err != nil {
		return nil, err
	}
	if err := n.startKubelet(); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := n.cp.untaintNotReady(ctx, n.Name); err != nil {
		return nil, err
	}
	cp.logf("harness: node %s Ready at %s, pods in %s (%s), files in %s", n.Name, n.IP, n.PodCIDR, time.Since(begin).Round(time.Second), n.Dir)
	return n, nil
}

// setUpNetwork makes the node's namespace, plugs it into the test bridge,
// turns on forwarding and bridge netfilter inside it (kube-proxy's Service
// rules must see pod-to-pod traffic across the CNI bridge), and routes the
// pod and service networks from each apiserver's namespace to it.
func (n *Node) setUpNetwork(seq int) error {
	nw := n.cp.Net
	n.IP = hostIP(nw.Subnet, 100+seq)
	// Every node's pod CIDR is 10.244.<n>.0/24: the node's namespace is
	// private to the run, so every run can use the same range.
	_, n.PodCIDR, _ = net.ParseCIDR(fmt.Sprintf("10.244.%d.0/24", seq))
	n.NS = fmt.Sprintf("fo%s-node%d", nw.RunID, seq)
	n.veth = fmt.Sprintf("fo%snd%d", nw.RunID, seq)
	inner := fmt.Sprintf("fo%snn%d", nw.RunID, seq)
	prefix := fmt.Sprintf("/%d", maskBits(nw.Subnet))
	steps := [][]string{
		{"netns", "add", n.NS},
		{"link", "add", n.veth, "type", "veth", "peer", "name", inner, "netns", n.NS},
		{"link", "set", n.veth, "master", nw.Bridge, "up"},
		{"-n", n.NS, "link", "set", "lo", "up"},
		{"-n", n.NS, "addr", "add", n.IP.String() + prefix, "dev", inner},
		{"-n", n.NS, "link", "set", inner, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	for _, s := range []string{"net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables"} {
		if err := n.sysctl(s, "1"); err != nil {
			return err
		}
	}
	for _, h := range nw.Hosts {
		for _, dst := range []string{n.PodCIDR.String(), ServiceCIDR} {
			if err := ip("-n", h.NS, "route", "replace", dst, "via", n.IP.String()); err != nil {
				return err
			}
		}
		n.routesIn = append(n.routesIn, h.NS)
	}
	return nil
}

// sysctl sets key in the node's namespace; these keys are per namespace, so
// the machine's own settings stay as they are.
func (n *Node) sysctl(key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	out, err := exec.Command("ip", "netns", "exec", n.NS, "sh", "-c", fmt.Sprintf("echo %s > %s", value, path)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("setting %s=%s in namespace %s: %w: %s", key, value, n.NS, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nodeCommand prefixes argv so that it runs in the node's network namespace
// but in the machine's mount namespace (unlike `ip netns exec`, which would
// hide the kubelet's volume mounts from containerd).
func (n *Node) nodeCommand(argv ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + n.NS, "--"}, argv...)
}

func (n *Node) start(name string, argv []string) (*process, error) {
	p, err := startProcess(name, filepath.Join(n.Dir, name+".log"), n.nodeCommand(argv...), nil)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

// Logs returns the paths of the node's process logs, for failure messages.
func (n *Node) Logs() []string {
	return []string{filepath.Join(n.Dir, "containerd.log"), filepath.Join(n.Dir, "kubelet.log"), filepath.Join(n.Dir, "kube-proxy.log")}
}

// waitReady waits until the Node is Ready and kube-proxy answers /healthz
// (it does once it has written its rules).
func (n *Node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	healthz := fmt.Sprintf("http://%s/healthz", net.JoinHostPort(n.IP.String(), strconv.Itoa(KubeProxyHealthzPort)))
	var last string
	for {
		for _, p := range n.procs {
			if p.exited() {
				return p.exitError()
			}
		}
		last = n.notReady(ctx, client, healthz)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready after 3 minutes: %s; last lines of %s:\n%s", n.Name, last, n.procs[1].logPath, tail(n.procs[1].logPath, 30))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (n *Node) notReady(ctx context.Context, client *http.Client, healthz string) string {
	node, err := n.cp.AdminClient.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return "Node not registered: " + err.Error()
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return "Node not Ready: " + c.Message
			}
			ready = true
		}
	}
	if !ready {
		return "Node has no Ready condition yet"
	}
	resp, err := client.Get(healthz)
	if err != nil {
		return "kube-proxy: " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "kube-proxy /healthz: " + resp.Status
	}
	return ""
}

// Close tears the node down: kubelet first (so it restarts nothing), then
// every pod sandbox through the CRI (which removes their network and
// namespaces), then containerd and kube-proxy, the shims and anything left in
// the node's cgroups, leftover mounts, the cgroups and the namespace.
func (n *Node) Close() {
	n.closed.Do(func() {
		if len(n.procs) > 1 {
			_ = n.procs[1].stop(15 * time.Second) // kubelet
		}
		if len(n.procs) > 0 && !n.procs[0].exited() {
			if err := n.removeSandboxes(); err != nil {
				n.cp.logf("harness: node %s: removing pod sandboxes: %v", n.Name, err)
			}
		}
		for i := len(n.procs) - 1; i >= 0; i-- {
			_ = n.procs[i].stop(15 * time.Second)
		}
		if n.ContainerdSocket != "" {
			killByCmdline(n.ContainerdSocket)
		}
		if n.CgroupRoot != "" {
			if err := removeCgroupTree(n.CgroupRoot); err != nil {
				n.cp.logf("harness: node %s: %v", n.Name, err)
			}
		}
		if n.Dir != "" {
			if err := unmountUnder(n.Dir); err != nil {
				n.cp.logf("harness: node %s: %v", n.Name, err)
			}
		}
		for _, ns := range n.routesIn {
			_ = ipQuiet("-n", ns, "route", "del", n.PodCIDR.String())
			_ = ipQuiet("-n", ns, "route", "del", ServiceCIDR)
		}
		if n.NS != "" {
			killNetnsPids(n.NS)
			_ = ipQuiet("netns", "del", n.NS)
			_ = ipQuiet("link", "del", n.veth)
		}
	})
}

// removeSandboxes stops and removes every pod sandbox of the node's
// containerd, the way the kubelet would for deleted pods.
func (n *Node) removeSandboxes() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+n.ContainerdSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox of pod %s/%s: %w", s.Metadata.Namespace, s.Metadata.Name, err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox of pod %s/%s: %w", s.Metadata.Namespace, s.Metadata.Name, err))
		}
	}
	return errors.Join(errs...)
}

// issueNodeCert issues the kubelet's serving certificate for the node's IP
// and name.
func (n *Node) issueNodeCert(dir string) (*CertKey, error) {
	return issue(dir, "kubelet-serving", n.cp.PKI.CA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: n.Name},
		IPAddresses: []net.IP{n.IP},
		DNSNames:    []string{n.Name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}
