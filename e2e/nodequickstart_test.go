package e2e_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// quickStartUser is the client's user in TestNodeQuickStart.
const quickStartUser = "e2e-quickstart-client"

// TestNodeQuickStart follows the README's quick start on a control plane and
// real node of its own, with nothing installed but a client: the overlay of
// docs/injector.md (the locally imported image set with kustomize images:,
// which the sidecars get too), then each README command as written, with
// its placeholders filled in. The injector runs as shipped, --pki=self: it
// must create its Secret and write caBundle, or no pod is injected. The
// client, a Deployment of podclient with a kubeconfig (user
// e2e-quickstart-client, a GET every 50 ms), is rolled after its namespace
// is labelled, comes back with the sidecar, and its requests from the new
// pod land within a quarter of a third on each apiserver (audit logs);
// `fanout status` in the sidecar shows 3 ready endpoints.
//
// The apiservers run with an --admission-control-config-file that gives
// them a client certificate for fanout-injector.fanout-system.svc, which the
// injector asks for only with --client-ca-file: the subtest "client
// certificate" turns that on (the CA that signed it: pods injected) and then
// points it at another CA (pods admitted unmutated, the refusals counted).
func TestNodeQuickStart(t *testing.T) {
	steps := readmeQuickStart(t)
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	wh := newWebhookClientPKI(t)
	cp, err := harness.Start(ctx, t, harness.Options{Nodes: -1, APIServerArgs: []string{"--admission-control-config-file=" + wh.admissionConfig}})
	if err != nil {
		t.Fatal(err)
	}
	node, err := cp.StartNode(ctx, t, harness.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &nodeEnv{cp: cp, node: node, admin: cp.AdminClient}
	// Nothing else runs Deployments or schedules pods on this cluster.
	for _, start := range []func() error{
		func() error {
			conf, err := cp.ControllerManagerKubeconfig()
			if err == nil {
				_, err = cp.StartControllerManager(t, conf)
			}
			return err
		},
		func() error {
			conf, err := cp.SchedulerKubeconfig()
			if err == nil {
				_, err = cp.StartScheduler(t, conf)
			}
			return err
		},
	} {
		if err := start(); err != nil {
			t.Fatal(err)
		}
	}
	const ns, name = "quickstart", "client"
	e.namespace(t, ctx, ns)
	clientPod := quickStartClient(t, ctx, e, ns, name)
	t.Logf("control plane, node, host controllers and the client (uninjected, %s) up in %s", clientPod, time.Since(begin).Round(time.Second))

	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := harness.RepoPath("manifests", "injector")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	imageName, imageTag, _ := strings.Cut(harness.FanoutImage, ":")
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(docsOverlay(t, rel, imageName, imageTag)), 0o644); err != nil {
		t.Fatal(err)
	}

	values := map[string]string{"OVERLAY": overlay, "NS": ns, "NAME": name, "USER": quickStartUser}
	var rolledAt time.Time
	var pod *corev1.Pod
	for _, s := range steps {
		if s.kind == "status" {
			waitQuickStartRequests(t, ctx, e, pod, 300)
		}
		args := replacePlaceholders(s.args, values)
		stepBegin := time.Now()
		out, err := cp.Kubectl(ctx, args[1:]...)
		if err != nil {
			t.Fatalf("README quick start, %s: %v", strings.Join(args, " "), err)
		}
		t.Logf("%s (%s):\n%s", strings.Join(args, " "), time.Since(stepBegin).Round(100*time.Millisecond), strings.TrimSpace(out))
		switch s.kind {
		case "apply":
			checkSelfPKI(t, ctx, e)
			t.Logf("injector Available with --pki=self, Secret and caBundle in place, %s after the apply", time.Since(stepBegin).Round(100*time.Millisecond))
		case "restart":
			rolledAt = time.Now()
			pod = waitInjectedRollout(t, ctx, e, ns, name, clientPod)
			values["POD"] = pod.Name
			t.Logf("client rolled: %s with fanout, Ready %s after the restart", pod.Name, time.Since(rolledAt).Round(100*time.Millisecond))
		case "status":
			checkStatusOutput(t, out, len(cp.APIServers))
		}
	}

	// Every request of the client since its new pod's IP appeared, up to
	// now: from that IP it only talks through fanout.
	podIP := pod.Status.PodIP
	until := time.Now()
	counts, err := cp.ServedPerAPIServerWhere(func(ev *harness.AuditEvent) bool {
		return ev.User.Username == quickStartUser && !ev.IsHealthProbe() && !ev.StageTimestamp.After(until) && slices.Contains(ev.SourceIPs, podIP)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the client's requests through its sidecar: %s", harness.FormatShares(counts))
	for i, s := range harness.Shares(counts) {
		if s < spreadLow || s > spreadHigh {
			t.Errorf("apiserver %d served %.1f%% of the client's requests, want %.1f–%.1f%% (%s)", i+1, 100*s, 100*spreadLow, 100*spreadHigh, harness.FormatShares(counts))
		}
	}
	t.Logf("quick start done %s after the test began", time.Since(begin).Round(time.Second))

	t.Run("client certificate", func(t *testing.T) {
		injectorClientCertificate(t, ctx, e, wh, ns, name)
	})
	t.Logf("TestNodeQuickStart took %s", time.Since(begin).Round(time.Second))
}

// quickStartClient creates the user's client before fanout is installed: a
// kubeconfig Secret for quickStartUser and a Deployment of podclient that
// reads it. It returns the name of its (uninjected) Ready pod.
func quickStartClient(t *testing.T, ctx context.Context, e *nodeEnv, ns, name string) string {
	t.Helper()
	conf, err := e.cp.UserKubeconfig(quickStartUser)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"}, Data: map[string][]byte{"kubeconfig": b}}
	if _, err := e.admin.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := deployment(name, 1, harness.PodClientImage, nil, "run", "--interval=50ms", "--kubeconfig=/etc/client/kubeconfig")
	spec := &d.Spec.Template.Spec
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.Containers[0].Name = "client"
	spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8081)}},
		PeriodSeconds: 1,
	}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kubeconfig", MountPath: "/etc/client", ReadOnly: true}}
	spec.Volumes = []corev1.Volume{{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret.Name}}}}
	if _, err := e.admin.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.waitPodsReady(ctx, ns, "app="+name, 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if hasFanout(&pods[0]) {
		t.Fatalf("%s has a fanout container before fanout is installed", pods[0].Name)
	}
	return pods[0].Name
}

func hasFanout(p *corev1.Pod) bool {
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == "fanout" {
			return true
		}
	}
	return false
}

// checkSelfPKI waits for the injector the quick start applied and checks
// that it is the shipped --pki=self one and that it did what that mode
// promises: its Secret holds a CA and a serving certificate for the
// Service's name, and every webhook entry's caBundle trusts it.
func checkSelfPKI(t *testing.T, ctx context.Context, e *nodeEnv) {
	t.Helper()
	if err := e.cp.WaitDeploymentAvailable(ctx, "fanout-system", "fanout-injector", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	d, err := e.admin.AppsV1().Deployments("fanout-system").Get(ctx, "fanout-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--pki=self") || c.Image != harness.FanoutImage {
		t.Fatalf("injector image %s args %v: want %s with --pki=self", c.Image, c.Args, harness.FanoutImage)
	}
	// Available means /healthz answered, which it does once the first
	// Secret read is done; caBundle is written right after.
	deadline := time.Now().Add(time.Minute)
	for {
		err := selfPKIInPlace(ctx, e)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("--pki=self: %v; injector pods:\n%s", err, e.cp.DescribePods(ctx, "fanout-system"))
		}
		time.Sleep(time.Second)
	}
}

func selfPKIInPlace(ctx context.Context, e *nodeEnv) error {
	s, err := e.admin.CoreV1().Secrets("fanout-system").Get(ctx, "fanout-injector-pki", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("Secret fanout-injector-pki: %w", err)
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		return fmt.Errorf("Secret fanout-injector-pki has no serving certificate (tls.crt)")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	w, err := e.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fanout-injector", metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, wh := range w.Webhooks {
		pool := x509.NewCertPool()
		if len(wh.ClientConfig.CABundle) == 0 || !pool.AppendCertsFromPEM(wh.ClientConfig.CABundle) {
			return fmt.Errorf("webhook %s has no caBundle", wh.Name)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "fanout-injector.fanout-system.svc"}); err != nil {
			return fmt.Errorf("webhook %s: its caBundle does not verify the served certificate for fanout-injector.fanout-system.svc: %w", wh.Name, err)
		}
	}
	return nil
}

// waitInjectedRollout waits until the Deployment's only pod is a new one,
// Ready, with fanout injected, and returns it.
func waitInjectedRollout(t *testing.T, ctx context.Context, e *nodeEnv, ns, name, old string) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := e.waitPodsReady(ctx, ns, "app="+name, 1, time.Until(deadline))
		if err != nil {
			t.Fatal(err)
		}
		if p := &pods[0]; p.Name != old {
			if !hasFanout(p) {
				t.Fatalf("the rolled pod %s has no fanout container: the injector did not inject it", p.Name)
			}
			return p
		}
		time.Sleep(time.Second)
	}
}

// waitQuickStartRequests waits until the client sent n requests from its
// injected pod.
func waitQuickStartRequests(t *testing.T, ctx context.Context, e *nodeEnv, p *corev1.Pod, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		counts, err := e.cp.ServedPerAPIServerNow(func(ev *harness.AuditEvent) bool {
			return ev.User.Username == quickStartUser && !ev.IsHealthProbe() && slices.Contains(ev.SourceIPs, p.Status.PodIP)
		})
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		if total >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client sent %d requests from %s (%s) in 2 minutes, want %d", total, p.Name, p.Status.PodIP, n)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// checkStatusOutput checks `fanout status`: ready, n endpoints, each ready
// with a share.
func checkStatusOutput(t *testing.T, out string, n int) {
	t.Helper()
	if want := fmt.Sprintf("fanout ready, %d endpoints,", n); !strings.Contains(out, want) {
		t.Fatalf("fanout status does not say %q:\n%s", want, out)
	}
	ready := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "ready" && strings.HasSuffix(f[2], "%") {
			if _, _, err := net.SplitHostPort(strings.TrimPrefix(f[0], "https://")); err == nil {
				ready++
			}
		}
	}
	if ready != n {
		t.Fatalf("fanout status lists %d ready endpoints with a share, want %d:\n%s", ready, n, out)
	}
}
