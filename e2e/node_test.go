package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The real-node tests share one control plane of their own (no fake nodes,
// so every pod lands on the real node) and one node, set up the way a user
// installs fanout (harness.Node.InstallFanout): the injector with
// `kubectl apply -k` through an overlay, then the example Deployments from
// manifests/examples/injected as shipped. Each test works in its own
// namespace or on its own Deployment.
type nodeEnv struct {
	cp    *harness.ControlPlane
	node  *harness.Node
	admin kubernetes.Interface
}

var sharedNode struct {
	baseOnce, fullOnce sync.Once
	env                *nodeEnv
	err                error
}

// startedNode returns the package's control plane and real node, starting
// them on first use; it skips the test under -short.
func startedNode(t *testing.T) *nodeEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the real node")
	}
	sharedNode.baseOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		sharedNode.env, sharedNode.err = startNodeBase(ctx)
	})
	if sharedNode.err != nil {
		t.Fatalf("setting up the real node: %v", sharedNode.err)
	}
	return sharedNode.env
}

// nodeBase is the preamble of a test on the real node without fanout
// installed: the node, and a context that ends after timeout or with the
// test.
func nodeBase(t *testing.T, timeout time.Duration) (context.Context, *nodeEnv) {
	t.Helper()
	e := startedNode(t)
	return testContext(t, timeout), e
}

// realNode is nodeBase with fanout installed: the injector and the example
// Deployments, Running, with the in-pod controllers leading. The context's
// time starts once they are.
func realNode(t *testing.T, timeout time.Duration) (context.Context, *nodeEnv) {
	t.Helper()
	e := startedNode(t)
	sharedNode.fullOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		sharedNode.err = e.node.InstallFanout(ctx)
	})
	if sharedNode.err != nil {
		t.Fatalf("installing fanout on the real node: %v", sharedNode.err)
	}
	return testContext(t, timeout), e
}

// startNodeBase starts the control plane and the node. Progress goes to
// stderr: the environment outlives the first test.
func startNodeBase(ctx context.Context) (*nodeEnv, error) {
	e := &nodeEnv{}
	var err error
	if e.cp, err = harness.Start(ctx, nil, harness.Options{Nodes: -1}); err != nil {
		return nil, err
	}
	e.admin = e.cp.AdminClient
	if e.node, err = e.cp.StartNode(ctx, nil, harness.NodeOptions{}); err != nil {
		return nil, err
	}
	return e, nil
}

// namespace creates a namespace for one test and deletes it afterwards.
func (e *nodeEnv) namespace(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// Pods are refused until the in-pod kube-controller-manager has made
	// the namespace's default ServiceAccount.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := e.admin.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ServiceAccount default in %s a minute after creating it: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// allowDiscovery lets subject read the kubernetes EndpointSlices, as
// manifests/injector/sidecar-rolebinding.yaml tells users to do for their
// injected clients.
func (e *nodeEnv) allowDiscovery(t *testing.T, ctx context.Context, name string, subjects ...rbacv1.Subject) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fanout-endpointslice-discovery"},
		Subjects:   subjects,
	}
	if _, err := e.admin.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.admin.RbacV1().RoleBindings("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// waitPodsReady waits until n pods match selector in ns and all are Running
// and Ready, and returns them.
func (e *nodeEnv) waitPodsReady(ctx context.Context, ns, selector string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := e.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			var ready []corev1.Pod
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
					ready = append(ready, p)
				}
			}
			if len(ready) == n && len(pods.Items) == n {
				return ready, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d Ready pods %q in %s not there after %s (%v); pods:\n%s", n, selector, ns, timeout, err, e.cp.DescribePods(ctx, ns))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// injectorDown scales fanout-injector to 0 until the test ends (then back
// to 2, Available) and waits until none of its pods is left: the webhook's
// Service has no endpoints, and failurePolicy Ignore admits pods as they
// are.
func (e *nodeEnv) injectorDown(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := e.cp.Kubectl(ctx, "-n", "fanout-system", "scale", "deployment", "fanout-injector", "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := e.cp.Kubectl(ctx, "-n", "fanout-system", "scale", "deployment", "fanout-injector", "--replicas=2"); err != nil {
			t.Error(err)
		}
		if err := e.cp.WaitDeploymentAvailable(ctx, "fanout-system", "fanout-injector", 3*time.Minute); err != nil {
			t.Error(err)
		}
	})
	if _, err := e.waitPodsReady(ctx, "fanout-system", "app.kubernetes.io/name=fanout-injector", 0, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	return statusOf(p.Status.InitContainerStatuses, name)
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	return statusOf(p.Status.ContainerStatuses, name)
}

func statusOf(list []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	i := slices.IndexFunc(list, func(s corev1.ContainerStatus) bool { return s.Name == name })
	if i < 0 {
		return nil
	}
	return &list[i]
}

// podClientPod is a labelled pod running e2e/cmd/podclient as an in-cluster
// client (its service account token): the injector points it at fanout
// through KUBECONFIG.
func podClientPod(name string, labels map[string]string) *corev1.Pod {
	l := map[string]string{"app": name, "fanout.dev/inject": "true"}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{
				Name:            "client",
				Image:           harness.PodClientImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"run", "--shutdown-for=5s"},
				Stdin:           true,
				Ports:           []corev1.ContainerPort{{Name: "echo", ContainerPort: 8080}, {Name: "health", ContainerPort: 8081}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("health")}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// TestNodeNativeSidecarPod checks the node itself, before any fanout: a pod
// with a native sidecar, bound to the node directly (nothing schedules yet),
// runs both containers with a pod IP from the CNI bridge, and kubectl exec
// and logs reach the real container through an apiserver and the kubelet.
func TestNodeNativeSidecarPod(t *testing.T) {
	ctx, e := nodeBase(t, 5*time.Minute)
	const ns = "e2e-node-plain"
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No kube-controller-manager may be running yet to make it.
	if _, err := e.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	probe := func(port string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(port)}}, PeriodSeconds: 1}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: corev1.PodSpec{
			NodeName:                      e.node.Name,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			InitContainers: []corev1.Container{{
				Name: "sidecar", Image: harness.PodClientImage, ImagePullPolicy: corev1.PullNever,
				Args:          []string{"run", "--echo-address=:7000", "--health-address=:7001"},
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports:         []corev1.ContainerPort{{Name: "sidecar-health", ContainerPort: 7001}},
				StartupProbe:  probe("sidecar-health"),
			}},
			Containers: []corev1.Container{{
				Name: "main", Image: harness.PodClientImage, ImagePullPolicy: corev1.PullNever,
				Args:           []string{"run"},
				Ports:          []corev1.ContainerPort{{Name: "health", ContainerPort: 8081}},
				ReadinessProbe: probe("health"),
			}},
		},
	}
	if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.admin.CoreV1().Pods(ns).Delete(context.Background(), "plain", metav1.DeleteOptions{})
	})
	start := time.Now()
	pods, err := e.waitPodsReady(ctx, ns, "", 1, 3*time.Minute)
	if err != nil {
		t.Fatalf("%v\nlast lines of %s:\n%s", err, e.node.Logs()[1], harness.Tail(e.node.Logs()[1], 30))
	}
	p := pods[0]
	t.Logf("pod Running and Ready %s after creation, IP %s", time.Since(start).Round(time.Millisecond), p.Status.PodIP)
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !e.node.PodCIDR.Contains(ip) {
		t.Errorf("pod IP %q is not from the node's pod network %s", p.Status.PodIP, e.node.PodCIDR)
	}
	sc, main := initStatus(&p, "sidecar"), containerStatus(&p, "main")
	if sc == nil || sc.State.Running == nil || main == nil || main.State.Running == nil {
		t.Fatalf("sidecar %+v, main %+v: want both running", sc, main)
	}
	if main.State.Running.StartedAt.Before(&sc.State.Running.StartedAt) {
		t.Errorf("main started at %s, before its sidecar (%s)", main.State.Running.StartedAt, sc.State.Running.StartedAt)
	}
	out, err := e.cp.Kubectl(ctx, "-n", ns, "exec", "plain", "-c", "main", "--", "/podclient", "echo", "hello", "from", "the", "node")
	if err != nil || strings.TrimSpace(out) != "hello from the node" {
		t.Errorf("kubectl exec: %q, %v", out, err)
	}
	out, err = e.cp.Kubectl(ctx, "-n", ns, "logs", "plain", "-c", "sidecar")
	if err != nil || !strings.Contains(out, "started") {
		t.Errorf("kubectl logs: %q, %v", out, err)
	}
}

// TestNodePodsStartRight is test 1 of the real node: the injector and the
// example Deployments were installed as a user would; every labelled pod is
// Running and Ready with fanout as a native sidecar (non-root, read-only
// root filesystem) that started, and passed its startup probe, before the
// client container started.
func TestNodePodsStartRight(t *testing.T) {
	ctx, e := realNode(t, 5*time.Minute)

	pods, err := e.admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "fanout.dev/inject=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 4 {
		t.Fatalf("%d labelled pods in kube-system, want 4 (2 kube-controller-manager, 2 kube-scheduler):\n%s", len(pods.Items), e.cp.DescribePods(ctx, "kube-system"))
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		t.Run(p.Name, func(t *testing.T) {
			if p.Status.Phase != corev1.PodRunning || !podReady(p) {
				t.Fatalf("pod %s is %s, Ready=%v:\n%s", p.Name, p.Status.Phase, podReady(p), e.cp.DescribePods(ctx, "kube-system"))
			}
			if p.Spec.NodeName != e.node.Name {
				t.Errorf("pod runs on %q, want the real node %s", p.Spec.NodeName, e.node.Name)
			}
			sc := sidecar(p)
			if sc == nil {
				t.Fatalf("pod %s has no fanout init container: not injected (annotations %v)", p.Name, p.Annotations)
			}
			if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("fanout is not a native sidecar (restartPolicy %v)", sc.RestartPolicy)
			}
			sec := sc.SecurityContext
			if sec == nil || sec.RunAsUser == nil || *sec.RunAsUser == 0 || sec.RunAsNonRoot == nil || !*sec.RunAsNonRoot {
				t.Errorf("fanout's securityContext %+v: want a non-root runAsUser and runAsNonRoot", sec)
			}
			if sec == nil || sec.ReadOnlyRootFilesystem == nil || !*sec.ReadOnlyRootFilesystem {
				t.Errorf("fanout's root filesystem is not read-only: %+v", sec)
			}
			fs := initStatus(p, "fanout")
			if fs == nil || fs.State.Running == nil || fs.Started == nil || !*fs.Started || !fs.Ready {
				t.Fatalf("fanout status %+v: want running, started and ready", fs)
			}
			client := containerStatus(p, p.Spec.Containers[0].Name)
			if client == nil || client.State.Running == nil {
				t.Fatalf("client status %+v: want running", client)
			}
			if fs.RestartCount != 0 || client.RestartCount != 0 {
				t.Errorf("restarts: fanout %d, client %d; want none", fs.RestartCount, client.RestartCount)
			}
			// --memory-limit auto found the container's limit in the
			// node's cgroups (v1 and v2 side by side on this node) and gave
			// Go 90% of it; fanout runs as it started, not executed again.
			if raw, err := e.sidecarMetrics(ctx, p); err != nil {
				t.Errorf("reading fanout's /metrics: %v", err)
			} else {
				want := 0.9 * float64(sc.Resources.Limits.Memory().Value())
				got, ok := metricSample(string(raw), "go_gc_gomemlimit_bytes")
				if want == 0 || !ok || math.Abs(got-want) > 1 {
					t.Errorf("fanout's go_gc_gomemlimit_bytes %v (found: %v), want 90%% of its memory limit %s: %.0f", got, ok, sc.Resources.Limits.Memory(), want)
				}
				if !strings.Contains(string(raw), "\nfanout_sysmon_steady 0\n") {
					t.Errorf("fanout's /metrics lacks fanout_sysmon_steady 0: it executed itself again with GODEBUG=schedtrace")
				}
			}
			fStart, cStart := fs.State.Running.StartedAt.Time, client.State.Running.StartedAt.Time
			if cStart.Before(fStart) {
				t.Errorf("client started at %s, before fanout (%s)", cStart, fStart)
			}
			// The kubelet starts the next container only once a sidecar's
			// startup probe passed; the probe passes when fanout has written
			// the client's kubeconfig, which its log records.
			wrote, err := fanoutWroteKubeconfig(ctx, e, p)
			if err != nil {
				t.Fatal(err)
			}
			if wrote.After(cStart.Add(time.Second)) { // startedAt has whole seconds
				t.Errorf("fanout wrote the client's kubeconfig at %s, after the client started (%s)", wrote.Format(time.RFC3339Nano), cStart)
			}
			t.Logf("%s: fanout started %s, kubeconfig written %s, client started %s", p.Name, fStart.Format(time.RFC3339), wrote.Format(time.RFC3339Nano), cStart.Format(time.RFC3339))
		})
	}
}

// fanoutWroteKubeconfig returns when fanout's log (with the kubelet's
// timestamps) says it wrote the client's kubeconfig.
func fanoutWroteKubeconfig(ctx context.Context, e *nodeEnv, p *corev1.Pod) (time.Time, error) {
	raw, err := e.admin.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "fanout", Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading fanout's log of %s: %w", p.Name, err)
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if bytes.Contains(line, []byte("wrote client kubeconfig")) {
			ts, _, _ := strings.Cut(string(line), " ")
			return time.Parse(time.RFC3339Nano, ts)
		}
	}
	return time.Time{}, fmt.Errorf("fanout's log of %s never says it wrote the client kubeconfig:\n%s", p.Name, raw)
}

// deployment is a Deployment of n pods of image on the real node.
func deployment(name string, n int32, image string, labels map[string]string, args ...string) *appsv1.Deployment {
	l := map[string]string{"app": name}
	for k, v := range labels {
		l[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Args: args,
					}},
				},
			},
		},
	}
}

// TestNodeControlPlaneWorkSpreads is test 2: the in-pod
// kube-controller-manager and kube-scheduler, each behind its injected
// sidecar, bring a Deployment of 30 replicas to 30 Running pods on the
// node, and every one of their requests since they started landed near a
// third on each apiserver, per client: within a quarter of a third
// (spreadLow..spreadHigh). A client pinned by an L4 balancer gets 100/0/0.
func TestNodeControlPlaneWorkSpreads(t *testing.T) {
	ctx, e := realNode(t, 10*time.Minute)
	const ns = "e2e-node-spread"
	e.namespace(t, ctx, ns)

	start := time.Now()
	if _, err := e.admin.AppsV1().Deployments(ns).Create(ctx, deployment("spread", 30, harness.PauseImage, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.waitPodsReady(ctx, ns, "app=spread", 30, 8*time.Minute); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)

	clients := []struct {
		name  string
		match func(string) bool
	}{
		{"kube-controller-manager", harness.ControllerManagerUsers},
		{"kube-scheduler", harness.UserIs("system:kube-scheduler")},
	}
	for _, c := range clients {
		all, err := e.cp.ServedPerAPIServerWhere(func(ev *harness.AuditEvent) bool {
			return c.match(ev.User.Username) && e.node.FromPod(ev)
		})
		if err != nil {
			t.Fatal(err)
		}
		window, err := e.cp.ServedPerAPIServerWhere(func(ev *harness.AuditEvent) bool {
			return c.match(ev.User.Username) && e.node.FromPod(ev) && !ev.StageTimestamp.Before(start)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s through its sidecars: since start %s; during the 30-replica rollout (%s) %s",
			c.name, harness.FormatShares(all), took.Round(time.Second), harness.FormatShares(window))
		total := 0
		for _, n := range all {
			total += n
		}
		if total < 100 {
			t.Errorf("%s sent only %d requests through its sidecars: too few to judge a spread", c.name, total)
		}
		uneven := false
		for i, s := range harness.Shares(all) {
			if s < spreadLow || s > spreadHigh {
				uneven = true
				t.Errorf("apiserver %d served %.1f%% of %s's requests, want %.1f–%.1f%% (%s)", i+1, 100*s, c.name, 100*spreadLow, 100*spreadHigh, harness.FormatShares(all))
			}
		}
		if uneven {
			e.logSidecarBalance(t, ctx, c.name)
		}
	}
}

// A client's share of each of three apiservers in
// TestNodeControlPlaneWorkSpreads is within a quarter of a third.
//
// fanout's picks are latency-aware (peak EWMA, components/balancer), and
// while 30 pods start on this 2-CPU node the apiservers are not equally
// fast: the scheduler's sidecar once scored them 1.6, 8.2 and 2.4 times
// their usual latency. The spread follows their speed. Over the 12 runs on
// record (CI and local, 2026-12-01), a client's lowest share was 27.5% and
// its highest 40.3% during the rollout window and 39.6% since start. The
// first bound, 33.3% ± 5 points, failed one CI run of those 12 (27.5, 39.6).
const (
	spreadLow  = 0.75 / 3
	spreadHigh = 1.25 / 3
)

// sidecarMetrics reads the /metrics of an injected pod's fanout sidecar
// (its admin port) through the apiserver's pod proxy.
// metricSample is the value of the unlabelled sample name in a
// Prometheus text exposition, and whether there is one.
func metricSample(exposition, name string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func (e *nodeEnv) sidecarMetrics(ctx context.Context, p *corev1.Pod) ([]byte, error) {
	return e.admin.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, "7081", "/metrics", nil).DoRaw(ctx)
}

// logSidecarBalance logs, for each injected pod whose name starts with
// prefix, its sidecar's per-apiserver latency scores and requests: why a
// spread came out as it did.
func (e *nodeEnv) logSidecarBalance(t *testing.T, ctx context.Context, prefix string) {
	t.Helper()
	e.logSidecarMetrics(t, ctx, prefix, func(l string) bool {
		return strings.HasPrefix(l, "fanout_endpoint_latency_score{") || strings.HasPrefix(l, "fanout_endpoint_requests_total{")
	})
}

// logSidecarMetrics logs, for each injected pod in kube-system whose name
// starts with prefix, the samples on its sidecar's /metrics that keep
// keeps.
func (e *nodeEnv) logSidecarMetrics(t *testing.T, ctx context.Context, prefix string, keep func(line string) bool) {
	t.Helper()
	pods, err := e.admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "fanout.dev/inject=true"})
	if err != nil {
		t.Logf("listing the injected pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, prefix) {
			continue
		}
		raw, err := e.sidecarMetrics(ctx, &p)
		if err != nil {
			t.Logf("%s: reading its sidecar's /metrics: %v", p.Name, err)
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(raw), "\n") {
			if keep(l) {
				lines = append(lines, l)
			}
		}
		t.Logf("%s's sidecar: %s", p.Name, strings.Join(lines, "; "))
	}
}

// nodeClientPod creates a podclient pod in ns and waits until it is Ready.
func (e *nodeEnv) nodeClientPod(t *testing.T, ctx context.Context, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.waitPodsReady(ctx, ns, "app="+pod.Labels["app"], 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return &pods[0]
}

// TestNodeStreaming is test 3: kubectl exec, attach, logs -f and
// port-forward through a fanout sidecar to a real container on the real
// kubelet, over SPDY and over WebSocket.
func TestNodeStreaming(t *testing.T) {
	ctx, n := realNode(t, 10*time.Minute)
	ns := upgradeNS
	n.namespace(t, ctx, ns)
	n.allowDiscovery(t, ctx, "e2e-node-streaming", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})
	pod := n.nodeClientPod(t, ctx, ns, podClientPod(upgradePod, nil))
	if sidecar(pod) == nil {
		t.Fatalf("pod %s was not injected", pod.Name)
	}

	kubeconfig, err := n.cp.UserKubeconfig(upgradeUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	fo, err := n.cp.StartFanout(ctx, t, upgradeUser, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	e := &upgradeEnv{cp: n.cp, sidecar: fo, dir: t.TempDir()}

	for _, p := range protocols {
		t.Run("exec-attach/"+p.name, func(t *testing.T) {
			before := e.counts(ctx, t)
			e.execCat(ctx, t, p.websocket, strings.Repeat("hello through fanout to a real container\n", 1000), "client", "/podclient", "cat")
			out, err := e.kubectl(ctx, protocolEnv(p.websocket), "exec", upgradePod, "-c", "client", "--", "/podclient", "exit", "3").CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Errorf("kubectl exec exit 3: %v, want exit code 3\n%s", err, out)
			}

			// attach: the client echoes its stdin into its log, marked.
			token := fmt.Sprintf("attach-%s-%d", p.name, time.Now().UnixNano())
			attach := e.kubectl(ctx, protocolEnv(p.websocket), "attach", "-i", upgradePod, "-c", "client")
			stdin, err := attach.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := waitOutput(t, attach, token, func() { fmt.Fprintln(stdin, token) }); err != nil {
				t.Fatalf("kubectl attach -i: %v", err)
			}
			checkFanoutProtocol(t, e.counts(ctx, t).minus(before), p.websocket, 3)
		})
		t.Run("port-forward/"+p.name, func(t *testing.T) {
			before := e.counts(ctx, t)
			local := startPortForward(t, e.kubectl(ctx, protocolEnv(p.websocket), "port-forward", "pod/"+upgradePod, ":8080"))
			start := time.Now()
			sent, got := transferEcho(t, local, 4<<20)
			if sent != got {
				t.Fatalf("port-forward echoed sha256 %s, sent %s", got, sent)
			}
			t.Logf("port-forward over %s to the real container: 4 MiB each way in %v", p.name, time.Since(start).Round(time.Millisecond))
			checkFanoutProtocol(t, e.counts(ctx, t).minus(before), p.websocket, 1)
		})
	}
	t.Run("logs-f", func(t *testing.T) {
		before := e.counts(ctx, t)
		// The client logs each of its requests: new lines must keep coming.
		logs := e.kubectl(ctx, nil, "logs", "-f", "--tail=0", upgradePod, "-c", "client")
		seen := 0
		if err := waitOutputFunc(t, logs, func(line string) bool {
			if strings.Contains(line, " ok") {
				seen++
			}
			return seen >= 3
		}, nil); err != nil {
			t.Fatalf("kubectl logs -f: %v", err)
		}
		if d := e.counts(ctx, t).minus(before); d.fanoutLong < 1 {
			t.Errorf("fanout counted %v long-running requests for logs -f, want 1", d.fanoutLong)
		}
	})
}

// checkFanoutProtocol fails t unless exactly the upgrades of the wanted
// protocol went through fanout. Unlike with the kubelet stand-in, the
// apiservers' translator and tunnel counters do not move for WebSocket here:
// the real kubelet v1.37 speaks WebSocket itself, so the apiserver passes the
// upgrade through; they are logged only.
func checkFanoutProtocol(t *testing.T, d protocolCounts, websocket bool, upgrades float64) {
	t.Helper()
	t.Logf("through fanout: %v SPDY, %v WebSocket upgrades; apiservers' translator +%v, tunnel +%v", d.fanoutSPDY, d.fanoutWS, d.translator, d.tunnel)
	wantSPDY, wantWS := upgrades, 0.0
	if websocket {
		wantSPDY, wantWS = 0, upgrades
	}
	if d.fanoutSPDY != wantSPDY || d.fanoutWS != wantWS {
		t.Errorf("fanout upgraded %v SPDY and %v WebSocket connections, want %v and %v", d.fanoutSPDY, d.fanoutWS, wantSPDY, wantWS)
	}
}

// waitOutput starts cmd, calls send once it runs, and waits until a line of
// its output contains want; then it kills cmd.
func waitOutput(t *testing.T, cmd *exec.Cmd, want string, send func()) error {
	return waitOutputFunc(t, cmd, func(line string) bool { return strings.Contains(line, want) }, send)
}

func waitOutputFunc(t *testing.T, cmd *exec.Cmd, done func(string) bool, send func()) error {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	found := make(chan struct{})
	var lines []string
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if done(sc.Text()) {
				close(found)
				return
			}
		}
	}()
	// attach connects asynchronously: send until it comes back.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	if send != nil {
		send()
	}
	for {
		select {
		case <-found:
			return nil
		case <-tick.C:
			if send != nil {
				send()
			}
		case <-deadline:
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("wanted output not seen within a minute; got %d lines (last: %v); stderr:\n%s", len(lines), lastN(lines, 5), stderr.String())
		}
	}
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// logLine is one line of a container's log with the kubelet's timestamp.
type logLine struct {
	at   time.Time
	text string
}

// followLogs streams a container's log (with timestamps) until the
// container exits, and returns the lines on the channel when it does.
func (e *nodeEnv) followLogs(ctx context.Context, ns, pod, container string) (<-chan []logLine, error) {
	rc, err := e.admin.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan []logLine, 1)
	go func() {
		defer rc.Close()
		var lines []logLine
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			ts, text, _ := strings.Cut(sc.Text(), " ")
			at, _ := time.Parse(time.RFC3339Nano, ts)
			lines = append(lines, logLine{at, text})
		}
		out <- lines
	}()
	return out, nil
}

// TestNodeShutdownOrder is test 4: deleting a client pod SIGTERMs the client
// first; fanout keeps serving while the client finishes (podclient makes
// requests for 5 s after SIGTERM), and exits after it, within the grace
// period; none of the client's shutdown requests fails.
func TestNodeShutdownOrder(t *testing.T) {
	ctx, e := realNode(t, 5*time.Minute)
	const ns = "e2e-node-shutdown"
	e.namespace(t, ctx, ns)
	e.allowDiscovery(t, ctx, "e2e-node-shutdown", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})
	pod := e.nodeClientPod(t, ctx, ns, podClientPod("shutdown", nil))
	// Only fanout's presence is required here: a fanout injected as a
	// plain container, which the kubelet stops together with the client,
	// is what the checks below are to catch by its effects.
	if sidecar(pod) == nil && !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "fanout" }) {
		t.Fatalf("pod %s was not injected", pod.Name)
	}
	clientLogs, err := e.followLogs(ctx, ns, pod.Name, "client")
	if err != nil {
		t.Fatal(err)
	}
	fanoutLogs, err := e.followLogs(ctx, ns, pod.Name, "fanout")
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	deleted := time.Now()
	if err := e.admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet reports each container's termination before the pod
	// object goes.
	terminated := map[string]*corev1.ContainerStateTerminated{}
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if s.State.Terminated != nil && terminated[s.Name] == nil {
				terminated[s.Name] = s.State.Terminated
			}
		}
		if ev.Type == "DELETED" {
			break
		}
	}
	gone := time.Since(deleted)
	client, fo := <-clientLogs, <-fanoutLogs

	var sigterm, shutdown *logLine
	okAfter, failed := 0, 0
	for i := range client {
		l := &client[i]
		switch {
		case strings.Contains(l.text, "sigterm"):
			sigterm = l
		case strings.Contains(l.text, "shutdown:"):
			shutdown = l
		case strings.Contains(l.text, "failed"):
			failed++
			t.Errorf("client request failed: %s %s", l.at.Format(time.RFC3339Nano), l.text)
		case sigterm != nil && strings.Contains(l.text, " ok"):
			okAfter++
		}
	}
	if sigterm == nil || shutdown == nil {
		t.Fatalf("the client's log lacks its SIGTERM or shutdown line:\n%v", lastLines(client, 15))
	}
	if !strings.Contains(shutdown.text, " 0 failed") || okAfter < 5 {
		t.Errorf("client's shutdown: %q, %d requests ok after SIGTERM; want at least 5 and none failed", shutdown.text, okAfter)
	}
	// The client's requests after SIGTERM all went through fanout and
	// succeeded, up to its last one just before its shutdown line: fanout
	// was still serving then. The kubelet records when each exited.
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	for _, name := range []string{"client", "fanout"} {
		x := terminated[name]
		if x == nil {
			t.Errorf("never saw %s terminated", name)
			continue
		}
		if x.ExitCode != 0 {
			t.Errorf("%s exited with %d (%s), want 0", name, x.ExitCode, x.Reason)
		}
	}
	c, f := terminated["client"], terminated["fanout"]
	if c != nil && f != nil && f.FinishedAt.Before(&c.FinishedAt) {
		t.Errorf("fanout finished at %s, before the client (%s)", f.FinishedAt, c.FinishedAt)
	}
	if c != nil && f != nil {
		t.Logf("kubelet: client finished %s (exit %d), fanout finished %s (exit %d)", c.FinishedAt.Format(time.RFC3339), c.ExitCode, f.FinishedAt.Format(time.RFC3339), f.ExitCode)
	}
	if gone > grace {
		t.Errorf("the pod took %s to go, more than its grace period %s: something was killed", gone.Round(time.Millisecond), grace)
	}
	t.Logf("delete at %s; client SIGTERM at +%s, %d requests ok after it, shutdown line at +%s; pod gone after %s (grace %s)",
		deleted.Format(time.RFC3339Nano), sigterm.at.Sub(deleted).Round(time.Millisecond), okAfter, shutdown.at.Sub(deleted).Round(time.Millisecond),
		gone.Round(time.Millisecond), grace)
	t.Logf("fanout's shutdown log:\n%s", strings.Join(lastLines(fo, 8), "\n"))
}

func lastLines(lines []logLine, n int) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.at.Format(time.RFC3339Nano)+" "+l.text)
	}
	return lastN(out, n)
}

// summary is the part of the kubelet's /stats/summary the test reads.
type summary struct {
	Pods []struct {
		PodRef struct {
			Name, Namespace string
		} `json:"podRef"`
		Containers []struct {
			Name   string `json:"name"`
			Memory *struct {
				WorkingSetBytes *uint64 `json:"workingSetBytes"`
				RSSBytes        *uint64 `json:"rssBytes"`
			} `json:"memory"`
		} `json:"containers"`
	} `json:"pods"`
}

// TestNodeFootprint is test 5: the memory of each example pod's sidecar,
// from the kubelet's summary API (through the apiserver's node proxy), fits
// within the memory request the injector gave it.
func TestNodeFootprint(t *testing.T) {
	ctx, e := realNode(t, 3*time.Minute)
	pods, err := e.admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "fanout.dev/inject=true"})
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet collects stats every few seconds: wait until it has them
	// for every sidecar.
	var s summary
	deadline := time.Now().Add(2 * time.Minute)
	for {
		raw, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", e.node.Name, "proxy/stats/summary").DoRaw(ctx)
		if err != nil {
			t.Fatalf("summary API: %v", err)
		}
		s = summary{}
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		if countSidecarStats(&s) >= len(pods.Items) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	checked := 0
	for _, p := range pods.Items {
		sc := sidecar(&p)
		if sc == nil {
			t.Fatalf("pod %s was not injected", p.Name)
		}
		request := sc.Resources.Requests.Memory()
		for _, sp := range s.Pods {
			if sp.PodRef.Name != p.Name || sp.PodRef.Namespace != p.Namespace {
				continue
			}
			for _, c := range sp.Containers {
				if c.Name != "fanout" || c.Memory == nil || c.Memory.WorkingSetBytes == nil {
					continue
				}
				ws := int64(*c.Memory.WorkingSetBytes)
				rss := int64(0)
				if c.Memory.RSSBytes != nil {
					rss = int64(*c.Memory.RSSBytes)
				}
				t.Logf("%s: fanout working set %.1f MiB, RSS %.1f MiB; request %s", p.Name, float64(ws)/(1<<20), float64(rss)/(1<<20), request)
				if ws > request.Value() {
					t.Errorf("%s: fanout's working set %d bytes exceeds its memory request %s", p.Name, ws, request)
				}
				checked++
			}
		}
	}
	if checked != len(pods.Items) {
		t.Fatalf("the summary API has memory stats for %d of %d sidecars", checked, len(pods.Items))
	}
}

func countSidecarStats(s *summary) int {
	n := 0
	for _, p := range s.Pods {
		for _, c := range p.Containers {
			if c.Name == "fanout" && c.Memory != nil && c.Memory.WorkingSetBytes != nil {
				n++
			}
		}
	}
	return n
}

// TestNodeLabelToggle is test 6: removing the label and rolling the
// Deployment removes fanout; and with the injector scaled to 0, labelled
// pods are still created (failurePolicy Ignore), unmutated.
func TestNodeLabelToggle(t *testing.T) {
	ctx, e := realNode(t, 8*time.Minute)
	const ns = "e2e-node-toggle"
	e.namespace(t, ctx, ns)
	e.allowDiscovery(t, ctx, "e2e-node-toggle", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})

	d := deployment("toggle", 1, harness.PodClientImage, map[string]string{"fanout.dev/inject": "true"}, "run")
	if _, err := e.admin.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := e.waitPodsReady(ctx, ns, "app=toggle", 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sidecar(&pods[0]) == nil {
		t.Fatalf("labelled pod %s has no sidecar", pods[0].Name)
	}
	if _, err := e.cp.Kubectl(ctx, "-n", ns, "patch", "deployment", "toggle", "--type=json",
		"-p", `[{"op":"remove","path":"/spec/template/metadata/labels/fanout.dev~1inject"}]`); err != nil {
		t.Fatal(err)
	}
	if err := e.cp.WaitDeploymentAvailable(ctx, ns, "toggle", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if pods, err = e.waitPodsReady(ctx, ns, "app=toggle", 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if sidecar(&pods[0]) != nil || pods[0].Annotations["fanout.dev/injected"] != "" {
		t.Errorf("pod %s of the unlabelled template still has fanout", pods[0].Name)
	}
	// Without fanout the client talks to the kubernetes Service itself.
	if err := e.clientLogSays(ctx, ns, pods[0].Name, "talking to https://10.96.0.1:443"); err != nil {
		t.Error(err)
	}

	// Injector down: the webhook's Service has no endpoints.
	e.injectorDown(t, ctx)
	begin := time.Now()
	created, err := e.admin.CoreV1().Pods(ns).Create(ctx, podClientPod("while-injector-down", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a labelled pod with the injector down: %v (failurePolicy Ignore should admit it)", err)
	}
	t.Logf("labelled pod admitted in %s with the injector down", time.Since(begin).Round(time.Millisecond))
	if sidecar(created) != nil || created.Annotations["fanout.dev/injected"] != "" {
		t.Errorf("pod %s was mutated although the injector is down", created.Name)
	}
	if _, err := e.waitPodsReady(ctx, ns, "app=while-injector-down", 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// clientLogSays waits until the podclient's log of pod contains want.
func (e *nodeEnv) clientLogSays(ctx context.Context, ns, pod, want string) error {
	deadline := time.Now().Add(time.Minute)
	var raw []byte
	for time.Now().Before(deadline) {
		var err error
		raw, err = e.admin.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err == nil && bytes.Contains(raw, []byte(want)) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("the log of %s/%s does not say %q:\n%s", ns, pod, want, raw)
}

// Gardener wires most shoot control-plane components like this: a
// kubeconfig Secret (generic-token-kubeconfig) whose user names a tokenFile,
// and the token in a second Secret, mounted on its own and rewritten by a
// token requestor when it rotates.
const (
	gardenerKubeconfigDir = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig"
	gardenerTokenDir      = "/var/run/secrets/gardener.cloud/shoot/token"
)

// TestNodeGardenerTokenRotation: a Gardener-style client behind its sidecar
// keeps working when its token Secret is rewritten with a new
// ServiceAccount's token and the old ServiceAccount is deleted (so the old
// token is dead), without a restart of either container.
func TestNodeGardenerTokenRotation(t *testing.T) {
	ctx, e := realNode(t, 8*time.Minute)
	const ns = "e2e-node-gardener"
	e.namespace(t, ctx, ns)
	sas := []string{"shoot-access-a", "shoot-access-b"}
	var subjects []rbacv1.Subject
	for _, sa := range sas {
		if _, err := e.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns})
	}
	e.allowDiscovery(t, ctx, "e2e-node-gardener", subjects...)
	token := func(sa string) []byte {
		t.Helper()
		tr, err := e.admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return []byte(tr.Status.Token)
	}

	kubeconfig := harness.TokenFileKubeconfig(e.cp.Endpoints()[0], e.cp.PKI.CA.CertPEM, gardenerTokenDir+"/token")
	secrets := e.admin.CoreV1().Secrets(ns)
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "generic-token-kubeconfig"}, Data: map[string][]byte{"kubeconfig": []byte(kubeconfig)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shoot-access-client"}, Data: map[string][]byte{"token": token(sas[0])}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podClientPod("gardener-client", nil)
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	c := &pod.Spec.Containers[0]
	c.Args = []string{"run", "--kubeconfig=" + gardenerKubeconfigDir + "/kubeconfig"}
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: "kubeconfig", MountPath: gardenerKubeconfigDir, ReadOnly: true},
		{Name: "token", MountPath: gardenerTokenDir, ReadOnly: true},
	}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "generic-token-kubeconfig"}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "shoot-access-client"}}},
	}
	running := e.nodeClientPod(t, ctx, ns, pod)
	if sidecar(running) == nil {
		t.Fatalf("pod %s was not injected", running.Name)
	}
	podIP := running.Status.PodIP
	servedAs := func(sa string, since time.Time) int {
		counts, err := e.cp.ServedPerAPIServerNow(func(ev *harness.AuditEvent) bool {
			return ev.User.Username == "system:serviceaccount:"+ns+":"+sa && slices.Contains(ev.SourceIPs, podIP) &&
				!ev.StageTimestamp.Before(since) && ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300
		})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range counts {
			n += c
		}
		return n
	}
	waitServedAs := func(sa string, since time.Time) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for servedAs(sa, since) < 10 {
			if time.Now().After(deadline) {
				t.Fatalf("no 10 requests served as %s from the pod since %s; pod:\n%s", sa, since.Format(time.RFC3339), e.cp.DescribePods(ctx, ns))
			}
			time.Sleep(time.Second)
		}
	}
	waitServedAs(sas[0], time.Time{})

	rotated := time.Now()
	if _, err := secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shoot-access-client"}, Data: map[string][]byte{"token": token(sas[1])}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServedAs(sas[1], rotated)
	pickedUp := time.Since(rotated)
	// The old token dies with its ServiceAccount.
	if err := e.admin.CoreV1().ServiceAccounts(ns).Delete(ctx, sas[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	afterDelete := time.Now()
	waitServedAs(sas[1], afterDelete)
	if n := servedAs(sas[0], afterDelete.Add(2*time.Second)); n != 0 {
		t.Errorf("%d requests were still served with the deleted ServiceAccount's token", n)
	}

	raw, err := e.admin.CoreV1().Pods(ns).GetLogs(running.Name, &corev1.PodLogOptions{Container: "client"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("failed")); n > 0 {
		t.Errorf("the client saw %d failed requests across the rotation:\n%s", n, raw)
	}
	cur, err := e.admin.CoreV1().Pods(ns).Get(ctx, running.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(cur.Status.InitContainerStatuses, cur.Status.ContainerStatuses...) {
		if s.RestartCount != 0 {
			t.Errorf("container %s restarted %d times", s.Name, s.RestartCount)
		}
	}
	t.Logf("the new token was in use %s after the Secret was rewritten; %d ok requests in the client's log, none failed",
		pickedUp.Round(time.Second), bytes.Count(raw, []byte(" ok")))
}
