package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cniBinDir is where Debian's containernetworking-plugins installs.
const cniBinDir = "/usr/lib/cni"

// containerdConfig is containerd 1.6's configuration (version 2 format) for
// one node: its own root, state and socket under the node's directory so
// runs never share a containerd, and a CRI setup that works on these
// machines:
//   - restrict_oom_score_adj: the machines withhold CAP_SYS_RESOURCE, so a
//     sandbox's negative oom_score_adj is refused (runc then says only
//     "can't get final child's PID from pipe: EOF");
//   - runc (the runc.v2 shim) with cgroupfs, as the kubelet's cgroupDriver,
//     and its state under the node's directory;
//   - no AppArmor profile (no apparmor_parser here);
//   - the sandbox image is the harness's pause image, imported, never
//     pulled.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[4]q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    # Pod network namespaces under the state directory, not the machine's
    # /run/netns, so that they go with the node.
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[8]q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[6]q
      conf_dir = %[7]q
      max_conf_num = 1
`

// cniConfig is the pod network: a bridge inside the node's namespace with
// host-local addresses from the node's pod CIDR. No masquerading: the
// apiservers see pod IPs, and route back to them through the node.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "fanout-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[1]q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %[2]q
      }
    }
  ]
}
`

func (n *Node) startContainerd(ctx context.Context) error {
	dir := filepath.Join(n.Dir, "containerd")
	cniDir := filepath.Join(n.Dir, "cni")
	for _, d := range []string{dir, filepath.Join(cniDir, "net.d"), filepath.Join(cniDir, "ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	n.ContainerdSocket = filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(containerdConfig,
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), n.ContainerdSocket,
		filepath.Join(dir, "opt"), n.Images.Pause.Ref, cniBinDir, filepath.Join(cniDir, "net.d"), filepath.Join(dir, "runc"))
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(cniConfig, n.PodCIDR.String(), filepath.Join(cniDir, "ipam"))
	if err := os.WriteFile(filepath.Join(cniDir, "net.d", "10-fanout-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	p, err := n.start("containerd", []string{"containerd", "--config", cfgPath})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if p.exited() {
			return p.exitError()
		}
		if _, err := n.ctr(ctx, "version"); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("containerd not answering on %s after a minute: %v; last lines of %s:\n%s", n.ContainerdSocket, err, p.logPath, tail(p.logPath, 25))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ctr runs containerd's ctr against the node's containerd, in the k8s.io
// namespace the CRI uses.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// TagImage gives the node's image ref a second name, as a registry would
// serve the same image under another tag: pods naming either run it
// without a pull.
func (n *Node) TagImage(ctx context.Context, ref, name string) error {
	_, err := n.ctr(ctx, "images", "tag", "--force", ref, name)
	return err
}

// importImages loads every image tarball into containerd and checks that
// each reference is there, so that no pod ever has a reason to pull.
//
// The image is named by the ref.name annotation the tarball's index.json
// carries, never by --index-name: ctr 1.6 then records the same name twice,
// first for the index and then for the manifest, so the index blob is left
// unreferenced once the import's lease ends, and the unpack that follows
// fails with "content digest ...: not found" whenever containerd's garbage
// collector gets there first.
func (n *Node) importImages(ctx context.Context) error {
	begin := time.Now()
	for _, img := range n.Images.All() {
		if _, err := n.ctr(ctx, "images", "import", img.Tar); err != nil {
			return fmt.Errorf("importing %s into the node's containerd: %w", img.Tar, err)
		}
	}
	out, err := n.ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(out) {
		have[l] = true
	}
	for _, img := range n.Images.All() {
		if !have[img.Ref] {
			return fmt.Errorf("image %s not in the node's containerd after importing %s; it has:\n%s", img.Ref, img.Tar, out)
		}
	}
	n.cp.logf("harness: node %s: %d images imported (%s)", n.Name, len(n.Images.All()), time.Since(begin).Round(time.Second))
	return nil
}

// kubeletConfig is the KubeletConfiguration of the node. failCgroupV1:
// false because these machines have a v1/v2 hybrid; cgroupfs because
// containerd 1.x cannot tell the kubelet its driver. Image garbage
// collection and disk eviction are off: the images were imported and cannot
// be pulled again. syncFrequency is short so that an updated Secret reaches
// its volume within seconds (the token rotation test).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: %[3]s
tlsPrivateKeyFile: %[4]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[5]s}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%[6]s
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: %[7]s
cgroupsPerQOS: true
failSwapOn: false
resolvConf: ""
podLogsDir: %[8]s
volumePluginDir: %[9]s
staticPodPath: ""
syncFrequency: 10s
maxPods: 110
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
serializeImagePulls: false
`

func (n *Node) startKubelet() error {
	dir := filepath.Join(n.Dir, "kubelet")
	for _, d := range []string{filepath.Join(dir, "root"), filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	serving, err := n.issueNodeCert(dir)
	if err != nil {
		return err
	}
	client, err := n.cp.PKI.MintUser("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := n.cp.PKI.WriteKubeconfig(kubeconfig, n.cp.Endpoints()[0], client); err != nil {
		return err
	}
	cfg := fmt.Sprintf(kubeletConfig, n.IP, KubeletPort, serving.CertFile, serving.KeyFile, n.cp.PKI.CA.CertFile,
		n.ContainerdSocket, n.CgroupRoot, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"))
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err = n.start("kubelet", []string{
		n.cp.Bins.Kubelet,
		"--config=" + cfgPath,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + filepath.Join(dir, "root"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
		"--v=1",
	})
	return err
}

const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
mode: iptables
clusterCIDR: %[2]s
hostnameOverride: %[3]s
bindAddress: %[4]s
healthzBindAddress: %[4]s:%[5]d
metricsBindAddress: 127.0.0.1:10249
conntrack:
  # 0: leave the machine-wide conntrack table size and timeouts alone.
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

func (n *Node) startKubeProxy() error {
	dir := filepath.Join(n.Dir, "kube-proxy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	client, err := n.cp.PKI.MintUser("system:kube-proxy")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := n.cp.PKI.WriteKubeconfig(kubeconfig, n.cp.Endpoints()[0], client); err != nil {
		return err
	}
	cfg := fmt.Sprintf(kubeProxyConfig, kubeconfig, n.PodCIDR, n.Name, n.IP, KubeProxyHealthzPort)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err = n.start("kube-proxy", []string{n.cp.Bins.KubeProxy, "--config=" + cfgPath, "--v=1"})
	return err
}
