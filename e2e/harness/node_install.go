package harness

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstallFanout installs fanout on the node as a user would: the injector
// with `kubectl apply -k` through an overlay of manifests/injector, then the
// example Deployments of manifests/examples/injected as shipped, with
// kubeconfig Secrets made from the run's PKI. It returns once the in-pod
// kube-controller-manager and kube-scheduler lead.
//
// Nothing runs Deployments or schedules pods until the example
// kube-controller-manager and kube-scheduler do, and they are Deployments
// themselves: bootstrap ones on the host hold the leader leases until the
// in-pod ones are up, then step down. Each step's time goes to the control
// plane's Logf.
func (n *Node) InstallFanout(ctx context.Context) error {
	cp := n.cp
	begin, step := time.Now(), time.Now()
	var steps []string
	took := func(what string) {
		d := time.Since(step).Round(time.Second)
		steps = append(steps, fmt.Sprintf("%s %s", what, d))
		cp.logf("harness: %s (%s)", what, d)
		step = time.Now()
	}
	kcmConf, err := cp.ControllerManagerKubeconfig()
	if err != nil {
		return err
	}
	schedConf, err := cp.SchedulerKubeconfig()
	if err != nil {
		return err
	}
	bootKCM, err := cp.StartControllerManager(nil, kcmConf, "--leader-elect=true")
	if err != nil {
		return err
	}
	bootSched, err := cp.StartScheduler(nil, schedConf, "--leader-elect=true")
	if err != nil {
		return err
	}
	if err := n.installInjector(ctx); err != nil {
		return err
	}
	took("injector installed and Available")
	if err := n.installExamples(ctx, kcmConf, schedConf); err != nil {
		return err
	}
	took("example Deployments Available")
	if err := bootKCM.Stop(); err != nil {
		return err
	}
	if err := bootSched.Stop(); err != nil {
		return err
	}
	// The in-pod ones take the leases over once the bootstrap ones' expire.
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := cp.waitLeaseHeldByPod(ctx, lease); err != nil {
			return err
		}
	}
	took("in-pod controllers leading")
	cp.logf("harness: fanout installed on node %s in %s: %s", n.Name, time.Since(begin).Round(time.Second), strings.Join(steps, ", "))
	return nil
}

// Kubectl runs kubectl as the cluster admin against the first apiserver
// and returns its combined output.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	home := filepath.Join(cp.Dir, "kubectl-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, cp.Bins.Kubectl, append([]string{"--kubeconfig", cp.AdminKubeconfig, "--cache-dir", filepath.Join(home, "cache")}, args...)...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// RepoPath is a path in the repository the e2e module lives in.
func RepoPath(elem ...string) (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{filepath.Dir(mod)}, elem...)...), nil
}

// injectorOverlay is what an operator who brings their own certificate,
// without cert-manager, writes next to manifests/injector (docs/injector.md):
// the files-pki component, the image they run, the serving certificate
// Secret and the webhook's caBundle. The images: entry sets the sidecars'
// image too: the injector gives them its own.
const injectorOverlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %[1]s
components:
  - %[1]s/files-pki
images:
  - name: ghcr.io/fanout-dev/fanout
    newTag: %[2]s
secretGenerator:
  - name: fanout-injector-tls
    namespace: fanout-system
    type: kubernetes.io/tls
    files: [tls.crt, tls.key]
generatorOptions:
  disableNameSuffixHash: true
patches:
  - target: {kind: MutatingWebhookConfiguration, name: fanout-injector}
    patch: |-
      - op: add
        path: /webhooks/0/clientConfig/caBundle
        value: %[3]s
      - op: add
        path: /webhooks/1/clientConfig/caBundle
        value: %[3]s
      - op: add
        path: /webhooks/2/clientConfig/caBundle
        value: %[3]s
`

func (n *Node) installInjector(ctx context.Context) error {
	cp := n.cp
	dir := filepath.Join(n.Dir, "injector-overlay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	serving, err := cp.PKI.IssueServingFor("fanout-injector", []string{"fanout-injector.fanout-system.svc", "fanout-injector.fanout-system.svc.cluster.local"})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), serving.CertPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), serving.KeyPEM, 0o600); err != nil {
		return err
	}
	base, err := RepoPath("manifests", "injector")
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		return err
	}
	_, tag, _ := strings.Cut(FanoutImage, ":")
	kust := fmt.Sprintf(injectorOverlay, rel, tag, base64.StdEncoding.EncodeToString(cp.PKI.CA.CertPEM))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, "apply", "-k", dir); err != nil {
		return err
	}
	return cp.WaitDeploymentAvailable(ctx, "fanout-system", "fanout-injector", 3*time.Minute)
}

// installExamples creates the Secrets the examples mount, from the e2e PKI,
// and applies manifests/examples/injected unchanged.
func (n *Node) installExamples(ctx context.Context, kcmConf, schedConf string) error {
	cp := n.cp
	p := cp.PKI
	files := map[string][]byte{}
	for _, f := range []string{kcmConf, schedConf, p.ServiceAccountKey} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		files[f] = b
	}
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-kubeconfig"}, Data: map[string][]byte{"kubeconfig": files[kcmConf]}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-pki"}, Data: map[string][]byte{
			"ca.crt": p.CA.CertPEM, "ca.key": p.CA.KeyPEM, "sa.key": files[p.ServiceAccountKey],
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler-kubeconfig"}, Data: map[string][]byte{"kubeconfig": files[schedConf]}},
	}
	for _, s := range secrets {
		if _, err := cp.AdminClient.CoreV1().Secrets("kube-system").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	dir, err := RepoPath("manifests", "examples", "injected")
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, "apply", "-k", dir); err != nil {
		return err
	}
	for _, d := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := cp.WaitDeploymentAvailable(ctx, "kube-system", d, 5*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// WaitDeploymentAvailable waits until every replica of the Deployment is
// updated, ready and available, and reports what its pods are doing if not.
func (cp *ControlPlane) WaitDeploymentAvailable(ctx context.Context, ns, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		d, err := cp.AdminClient.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && d.Status.ObservedGeneration >= d.Generation && d.Spec.Replicas != nil &&
			d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.ReadyReplicas == *d.Spec.Replicas &&
			d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("deployment %s/%s not available after %s (%v); pods:\n%s", ns, name, timeout, err, cp.DescribePods(ctx, ns))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// DescribePods summarises the pods of ns, and its warning events, for
// failure messages.
func (cp *ControlPlane) DescribePods(ctx context.Context, ns string) string {
	pods, err := cp.AdminClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "  %s: %s node=%q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Message)
			}
		}
		for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, " [%s ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
			if w := s.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if x := s.State.Terminated; x != nil {
				fmt.Fprintf(&b, " terminated %s (%d): %s", x.Reason, x.ExitCode, x.Message)
			}
			if x := s.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " last: %s (%d): %s", x.Reason, x.ExitCode, strings.TrimSpace(x.Message))
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	evs, err := cp.AdminClient.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "  event %s %s: %s\n", ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
	}
	return b.String()
}

// waitLeaseHeldByPod waits until the leader lease kube-system/name names a
// pod of the example Deployment (holder identities are "<hostname>_<uid>",
// and a pod's hostname is its name).
func (cp *ControlPlane) waitLeaseHeldByPod(ctx context.Context, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	var holder string
	for time.Now().Before(deadline) {
		l, err := cp.AdminClient.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
			if strings.HasPrefix(holder, name+"-") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("lease kube-system/%s still held by %q two minutes after the bootstrap %s stopped: the in-pod one did not take over; pods:\n%s", name, holder, name, cp.DescribePods(ctx, "kube-system"))
}

// FromPod reports whether the audit event's connection came from a pod of
// the node, i.e. from a sidecar there, and not from a process on the host
// (such as the bootstrap controllers, which share the example users).
func (n *Node) FromPod(ev *AuditEvent) bool {
	for _, s := range ev.SourceIPs {
		if ip := net.ParseIP(s); ip != nil && n.PodCIDR.Contains(ip) {
			return true
		}
	}
	return false
}
