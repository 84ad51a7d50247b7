package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// warnings collects the admission warnings the apiserver returns.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// examplePodSpec returns the pod template of a Deployment under
// manifests/examples/injected, so the test runs exactly what the examples
// ship.
func examplePodSpec(t *testing.T, file string) corev1.PodTemplateSpec {
	t.Helper()
	root, err := harness.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(filepath.Dir(root), "manifests", "examples", "injected", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d appsv1.Deployment
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&d); err != nil {
		t.Fatalf("decoding %s: %v", file, err)
	}
	tmpl := d.Spec.Template
	// system-cluster-critical is for kube-system; the test pods live in a
	// namespace of their own.
	tmpl.Spec.PriorityClassName = ""
	return tmpl
}

// kubeletExpand replaces $(NAME) in arg with the container's env var
// NAME as the kubelet resolves it: a literal value, or a downward-API
// label of the pod ("" when the pod has no such label). Any other
// reference fails the test, since the pod could not start either.
func kubeletExpand(t *testing.T, pod *corev1.Pod, c *corev1.Container, arg string) string {
	t.Helper()
	for _, e := range c.Env {
		ref := "$(" + e.Name + ")"
		if !strings.Contains(arg, ref) {
			continue
		}
		v := e.Value
		if e.ValueFrom != nil {
			fr := e.ValueFrom.FieldRef
			if fr == nil || !strings.HasPrefix(fr.FieldPath, "metadata.labels['") {
				t.Fatalf("env %s: only labels are resolved here, got %+v", e.Name, e.ValueFrom)
			}
			key := strings.TrimSuffix(strings.TrimPrefix(fr.FieldPath, "metadata.labels['"), "']")
			v = pod.Labels[key]
		}
		arg = strings.ReplaceAll(arg, ref, v)
	}
	if strings.Contains(arg, "$(") {
		t.Fatalf("argument %q names a variable the container does not set", arg)
	}
	return arg
}

func sidecar(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == "fanout" {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// TestInjector registers fanout-injector with the real apiservers through
// a MutatingWebhookConfiguration with a URL, and checks that labelled pods
// (the kube-controller-manager and kube-scheduler examples, an in-cluster
// client) come out with fanout as a native sidecar and their kubeconfig
// pointed at it, and are accepted; that an unlabelled pod is untouched;
// and that a hostNetwork pod is admitted unmutated with a warning and
// counted.
func TestInjector(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)

	endpoints := strings.Join(cp.Endpoints(), ",")
	inj, err := cp.StartInjector(ctx, t, "--sidecar-image=fanout:e2e", "--default-endpoints="+endpoints)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "e2e-injector"
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	// The ServiceAccount admission plugin mounts a token only when the
	// service account exists; kube-controller-manager may not be running
	// to create it.
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	const whName = "fanout-injector-e2e"
	wh := podWebhook(whName, "inject.fanout.dev", ns, "fanout.dev/inject", admissionregistrationv1.Ignore, admissionregistrationv1.IfNeededReinvocationPolicy, inj.URL, inj.CABundle)
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, wh, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering the webhook: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, whName, metav1.DeleteOptions{}); err != nil {
			t.Errorf("removing the webhook configuration: %v", err)
		}
		pods, _ := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			_ = admin.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		_ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})

	// Pods go through each apiserver in turn, so every one of them has
	// picked up the webhook and accepts the mutated specs.
	var clients []kubernetes.Interface
	var warns []*warnings
	for _, ep := range cp.Endpoints() {
		cfg := rest.CopyConfig(cp.Admin)
		cfg.Host = ep
		w := &warnings{}
		cfg.WarningHandler = w
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients, warns = append(clients, c), append(warns, w)
	}
	seq := 0
	create := func(name string, tmpl corev1.PodTemplateSpec) (*corev1.Pod, []string) {
		t.Helper()
		i := seq % len(clients)
		seq++
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		pod.Name, pod.Namespace = name, ns
		got, err := clients[i].CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s through apiserver %d: %v", name, i, err)
		}
		return got, warns[i].take()
	}

	kcm := examplePodSpec(t, "kube-controller-manager.yaml")
	// Webhook configurations reach each apiserver through an informer:
	// wait until a labelled pod comes back mutated from every one.
	deadline := time.Now().Add(time.Minute)
	for ready := 0; ready < len(clients); {
		name := "probe-" + time.Now().Format("150405.000000")
		name = strings.ReplaceAll(name, ".", "-")
		pod, _ := create(name, kcm)
		_ = admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if sidecar(pod) != nil {
			ready++
			continue
		}
		ready = 0
		if time.Now().After(deadline) {
			t.Fatalf("a labelled pod still comes back unmutated a minute after registering the webhook; injector log:\n%s", harness.Tail(inj.LogPath, 20))
		}
		time.Sleep(500 * time.Millisecond)
	}

	t.Run("kube-controller-manager", func(t *testing.T) {
		pod, w := create("kube-controller-manager", kcm)
		if len(w) != 0 {
			t.Errorf("warnings: %v", w)
		}
		sc := sidecar(pod)
		if sc == nil {
			t.Fatalf("no fanout sidecar: %+v", pod.Spec.InitContainers)
		}
		if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways || sc.StartupProbe == nil || sc.StartupProbe.HTTPGet.Path != "/startupz" {
			t.Errorf("sidecar is not a native sidecar with a /startupz startup probe: %+v", sc)
		}
		for _, want := range []string{"--kubeconfig=/etc/kubernetes/kcm/kubeconfig", "--endpoints=" + endpoints, "--write-kubeconfig=/var/run/fanout/kubeconfig"} {
			if !slices.Contains(sc.Args, want) {
				t.Errorf("sidecar args %q lack %q", sc.Args, want)
			}
		}
		cmd := pod.Spec.Containers[0].Command
		for _, flag := range []string{"--kubeconfig", "--authentication-kubeconfig", "--authorization-kubeconfig"} {
			if !slices.Contains(cmd, flag+"=/var/run/fanout/kubeconfig") {
				t.Errorf("client command %q: %s not pointed at fanout", cmd, flag)
			}
		}
		if pod.Annotations["fanout.dev/injected"] != "kube-controller-manager" {
			t.Errorf("annotations %v", pod.Annotations)
		}
	})

	// There is no kubelet: run the injected sidecar's own arguments on the
	// test host, with the pod's paths and ports mapped, and check that
	// /startupz passes and the kubeconfig it writes reaches the cluster as
	// kube-controller-manager.
	t.Run("injected sidecar arguments run", func(t *testing.T) {
		pod, err := admin.CoreV1().Pods(ns).Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sc := sidecar(pod)
		if sc == nil {
			t.Fatal("no sidecar")
		}
		kcmKubeconfig, err := cp.ControllerManagerKubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		listen, err := harness.FreeLoopbackPort()
		if err != nil {
			t.Fatal(err)
		}
		adminPort, err := harness.FreeLoopbackPort()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		written := filepath.Join(dir, "kubeconfig")
		var args []string
		for _, a := range sc.Args {
			a = kubeletExpand(t, pod, sc, a)
			switch {
			case a == "--kubeconfig=/etc/kubernetes/kcm/kubeconfig":
				a = "--kubeconfig=" + kcmKubeconfig
			case a == "--write-kubeconfig=/var/run/fanout/kubeconfig":
				a = "--write-kubeconfig=" + written
			case strings.HasPrefix(a, "--listen-address="):
				a = fmt.Sprintf("--listen-address=127.0.0.1:%d", listen)
			case strings.HasPrefix(a, "--admin-address="):
				a = fmt.Sprintf("--admin-address=127.0.0.1:%d", adminPort)
			}
			args = append(args, a)
		}
		// The pod's network namespace is the test host's here.
		args = append(args, "--allow-shared-loopback")
		f, err := cp.RunFanout(ctx, t, "injected-kcm", args)
		if err != nil {
			t.Fatal(err)
		}
		startupz := fmt.Sprintf("http://127.0.0.1:%d%s", adminPort, sc.StartupProbe.HTTPGet.Path)
		deadline := time.Now().Add(time.Minute)
		for {
			resp, err := http.Get(startupz)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if !f.Running() || time.Now().After(deadline) {
				t.Fatalf("%s not passing (running %v, last error %v); log:\n%s", startupz, f.Running(), err, harness.Tail(f.LogPath, 20))
			}
			time.Sleep(200 * time.Millisecond)
		}
		cfg, err := harness.RESTConfig(written)
		if err != nil {
			t.Fatalf("the kubeconfig fanout wrote once /startupz passed: %v", err)
		}
		if cfg.Host != fmt.Sprintf("http://127.0.0.1:%d", listen) {
			t.Errorf("written kubeconfig points at %s", cfg.Host)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// kube-controller-manager may get its leader-election lease: found
		// or not found proves the request arrived with its identity
		// (anonymous would be forbidden).
		if _, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("getting the kube-controller-manager lease through the injected sidecar: %v", err)
		}
	})

	t.Run("kube-scheduler", func(t *testing.T) {
		pod, _ := create("kube-scheduler", examplePodSpec(t, "kube-scheduler.yaml"))
		sc := sidecar(pod)
		if sc == nil {
			t.Fatalf("no fanout sidecar")
		}
		if !slices.Contains(sc.Args, "--endpoints=endpointslice:///default/kubernetes") {
			t.Errorf("the fanout.dev/endpoints annotation did not override the default: %q", sc.Args)
		}
		if !slices.Contains(pod.Spec.Containers[0].Command, "--kubeconfig=/var/run/fanout/kubeconfig") {
			t.Errorf("client command %q", pod.Spec.Containers[0].Command)
		}
	})

	t.Run("in-cluster client", func(t *testing.T) {
		tmpl := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"fanout.dev/inject": "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "manager", Image: "example.com/operator:1", Args: []string{"--leader-elect"},
			}}},
		}
		pod, w := create("operator", tmpl)
		sc := sidecar(pod)
		if sc == nil {
			t.Fatalf("no fanout sidecar (warnings %v); volumes %+v", w, pod.Spec.Volumes)
		}
		if sc.Args[0] != "--in-cluster" {
			t.Errorf("sidecar args %q, want --in-cluster first", sc.Args)
		}
		var env string
		for _, e := range pod.Spec.Containers[0].Env {
			if e.Name == "KUBECONFIG" {
				env = e.Value
			}
		}
		if env != "/var/run/fanout/kubeconfig" {
			t.Errorf("client KUBECONFIG %q", env)
		}
	})

	t.Run("unlabelled pod untouched", func(t *testing.T) {
		tmpl := *kcm.DeepCopy()
		delete(tmpl.Labels, "fanout.dev/inject")
		pod, w := create("unlabelled", tmpl)
		if sidecar(pod) != nil || len(pod.Spec.InitContainers) != 0 || len(w) != 0 {
			t.Errorf("unlabelled pod was mutated: init containers %+v, warnings %v", pod.Spec.InitContainers, w)
		}
		if !slices.Equal(pod.Spec.Containers[0].Command, kcm.Spec.Containers[0].Command) {
			t.Errorf("unlabelled pod's command changed: %q", pod.Spec.Containers[0].Command)
		}
		if _, ok := pod.Annotations["fanout.dev/injected"]; ok {
			t.Error("unlabelled pod has the injected annotation")
		}
	})

	t.Run("hostNetwork pod skipped with a warning", func(t *testing.T) {
		tmpl := *kcm.DeepCopy()
		tmpl.Spec.HostNetwork = true
		pod, w := create("host-network", tmpl)
		if sidecar(pod) != nil {
			t.Error("hostNetwork pod was mutated")
		}
		if len(w) != 1 || !strings.Contains(w[0], "hostNetwork") {
			t.Errorf("warnings %v, want one about hostNetwork", w)
		}
		metrics := scrape(t, inj.MetricsURL)
		if !strings.Contains(metrics, `fanout_injector_skipped_total{reason="host-network"} 1`) {
			t.Errorf("skipped metric missing:\n%s", metrics)
		}
	})

	// A webhook after the injector (its configuration's name sorts after
	// the injector's) makes the pod hostNetwork; kube-apiserver re-invokes
	// the injector (reinvocationPolicy IfNeeded), which must take fanout
	// out again: the pod ends with its own kubeconfig and no sidecar.
	t.Run("pod made hostNetwork by a later webhook loses fanout", func(t *testing.T) {
		url, ca := hostNetworkWebhook(t, cp.Net.BridgeIP)
		const later = "zz-e2e-make-host-network"
		cfg := podWebhook(later, "make-host-network.e2e.fanout.dev", ns, labelMakeHostNetwork, admissionregistrationv1.Fail, admissionregistrationv1.NeverReinvocationPolicy, url, ca)
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatalf("registering the later webhook: %v", err)
		}
		t.Cleanup(func() {
			_ = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), later, metav1.DeleteOptions{})
		})
		tmpl := *kcm.DeepCopy()
		tmpl.Labels[labelMakeHostNetwork] = "true"
		// One pod through each apiserver, once that apiserver has the
		// later webhook (its informer may lag): until then pods come back
		// injected and not hostNetwork, and are deleted.
		for i := range clients {
			deadline := time.Now().Add(time.Minute)
			for {
				name := fmt.Sprintf("made-host-network-%d-%s", i, strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "-"))
				seq = i // create uses apiserver seq % len(clients)
				pod, w := create(name, tmpl)
				if !pod.Spec.HostNetwork {
					_ = admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
					if time.Now().After(deadline) {
						t.Fatalf("apiserver %d: pods still come back without hostNetwork a minute after registering the later webhook", i)
					}
					time.Sleep(500 * time.Millisecond)
					continue
				}
				if sc := sidecar(pod); sc != nil {
					t.Errorf("apiserver %d: hostNetwork pod kept its fanout sidecar %q; injector log:\n%s", i, sc.Args, harness.Tail(inj.LogPath, 20))
				}
				if !slices.Equal(pod.Spec.Containers[0].Command, kcm.Spec.Containers[0].Command) {
					t.Errorf("apiserver %d: client command %q, want the example's own %q", i, pod.Spec.Containers[0].Command, kcm.Spec.Containers[0].Command)
				}
				if !slices.EqualFunc(pod.Spec.Containers[0].VolumeMounts, kcm.Spec.Containers[0].VolumeMounts, func(a, b corev1.VolumeMount) bool { return a.Name == b.Name && a.MountPath == b.MountPath }) || !slices.EqualFunc(pod.Spec.Volumes, kcm.Spec.Volumes, func(a, b corev1.Volume) bool { return a.Name == b.Name }) {
					t.Errorf("apiserver %d: mounts %+v volumes %+v, want the example's", i, pod.Spec.Containers[0].VolumeMounts, pod.Spec.Volumes)
				}
				if _, ok := pod.Annotations["fanout.dev/injected"]; ok {
					t.Errorf("apiserver %d: annotations %v still mark the pod injected", i, pod.Annotations)
				}
				if !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "removed the fanout sidecar") }) {
					t.Errorf("apiserver %d: warnings %v, want one saying the sidecar was removed", i, w)
				}
				break
			}
		}
	})
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestManifestsDryRun: `kubectl apply --dry-run=server -k` of manifests/
// and of the injector base succeeds against the real apiservers and
// installs no example client, the examples apply on their own, and so does
// an overlay with the networkpolicy component. The
// fanout-system namespace is created for real first: a server-side dry run
// of a namespaced object needs its namespace to exist, and the Namespace in
// the same apply is not persisted.
func TestManifestsDryRun(t *testing.T) {
	ctx, cp := controlPlane(t, 5*time.Minute)
	root, err := harness.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(filepath.Dir(root), "manifests")
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fanout-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), "fanout-system", metav1.DeleteOptions{})
	})
	dir := t.TempDir()
	dryRun := func(k string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, cp.Bins.Kubectl, "--kubeconfig", cp.AdminKubeconfig, "--cache-dir", filepath.Join(dir, "cache"),
			"apply", "--dry-run=server", "-k", k)
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
		return cmd.CombinedOutput()
	}
	for _, k := range []string{manifests, filepath.Join(manifests, "injector")} {
		out, err := dryRun(k)
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server -k %s: %v\n%s", k, err, out)
		}
		for _, want := range []string{"mutatingwebhookconfiguration.admissionregistration.k8s.io/fanout-injector", "deployment.apps/fanout-injector", "poddisruptionbudget.policy/fanout-injector"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("-k %s: output lacks %s:\n%s", k, want, out)
			}
		}
		if strings.Contains(string(out), "kube-controller-manager") || strings.Contains(string(out), "kube-scheduler") || strings.Contains(string(out), "example-controller") {
			t.Errorf("-k %s installs an example client:\n%s", k, out)
		}
		t.Logf("kubectl apply --dry-run=server -k %s:\n%s", k, out)
	}
	// The opt-in NetworkPolicy component, in an overlay as
	// docs/injector.md tells operators to add it. The harness's bridge CNI
	// enforces no NetworkPolicy, so a dry run is what can be checked
	// (docs/security.md).
	overlay := filepath.Join(dir, "networkpolicy-overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	injector, err := filepath.Rel(overlay, filepath.Join(manifests, "injector"))
	if err != nil {
		t.Fatal(err)
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%[1]s]\ncomponents: [%[1]s/networkpolicy]\n", injector)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := dryRun(overlay)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k (manifests/injector with the networkpolicy component): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "networkpolicy.networking.k8s.io/fanout-injector") {
		t.Errorf("the networkpolicy component's overlay applies no NetworkPolicy fanout-injector:\n%s", out)
	}
	// The examples apply apart from it.
	for _, k := range []string{filepath.Join(manifests, "examples", "sidecar"), filepath.Join(manifests, "examples", "injected")} {
		out, err := dryRun(k)
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server -k %s: %v\n%s", k, err, out)
		}
		if !strings.Contains(string(out), "deployment.apps/") {
			t.Errorf("-k %s: output lacks the example Deployment:\n%s", k, out)
		}
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fanout-injector", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run persisted the webhook configuration (err %v)", err)
	}
}

// podWebhook is a MutatingWebhookConfiguration (name) with one webhook
// (hook), served at url, on the creation of the pods labelled label=true
// in namespace ns: the control plane is shared, so only the test's own.
func podWebhook(name, hook, ns, label string, failure admissionregistrationv1.FailurePolicyType, reinvoke admissionregistrationv1.ReinvocationPolicyType, url string, ca []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    hook,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(failure),
			TimeoutSeconds:          ptr.To[int32](5),
			ReinvocationPolicy:      ptr.To(reinvoke),
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
		}},
	}
}
