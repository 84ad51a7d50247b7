package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
	"github.com/fanout-dev/fanout/components/admin"
)

// The kinds of finding, a column of the table and a JSON field.
const (
	// findNotInjected: a pod opted in (its label, or its namespace's)
	// that runs without fanout although the injector would inject it, or
	// that the injector refused with a warning.
	findNotInjected = "not-injected"
	// findBypass: an injected pod whose client reaches kube-apiserver
	// around fanout (webhook.Bypasses), or whose sidecar has served no
	// request for --idle.
	findBypass = "bypass"
	// findOneEndpoint: a sidecar that knows one kube-apiserver endpoint,
	// or none: it cannot spread load or fail over.
	findOneEndpoint = "one-endpoint"
	// findSidecarDown: a sidecar not running, or whose admin server
	// does not answer.
	findSidecarDown = "sidecar-down"
)

// finding is one line of kubectl fanout check's report.
type finding struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Kind      string `json:"kind"`
	Detail    string `json:"detail"`
}

// report is kubectl fanout check -o json.
type report struct {
	// Pods is how many pods opted in to fanout were looked at; Injected
	// how many of them run it.
	Pods     int       `json:"pods"`
	Injected int       `json:"injected"`
	Findings []finding `json:"findings"`
}

// checker finds drift in the pods of a cluster.
type checker struct {
	cs kubernetes.Interface
	// injector decides as the injector would, for pods that run without
	// fanout (webhook.Config.MutateIn); its ports are what the
	// conflicts it reports are about.
	injector webhook.Config
	// injectorNamespace is left out, as the webhook leaves it out.
	injectorNamespace string
	// snapshot reads the endpoints of the sidecar of a running pod.
	snapshot func(ctx context.Context, pod *corev1.Pod) (admin.Snapshot, error)
	// idle is how long a sidecar may run without serving a request
	// before its clients count as bypassing it.
	idle time.Duration
	now  func() time.Time
}

// run checks the pods of namespace ("" for all) and returns the report,
// or an error when the namespaces or pods cannot be listed.
func (c *checker) run(ctx context.Context, namespace string) (report, error) {
	r := report{Findings: []finding{}}
	var namespaces []corev1.Namespace
	if namespace != "" {
		ns, err := c.cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return r, fmt.Errorf("reading namespace %s (its fanout.dev/inject label): %w", namespace, err)
		}
		namespaces = []corev1.Namespace{*ns}
	} else {
		l, err := c.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return r, fmt.Errorf("listing namespaces (their fanout.dev/inject labels): %w", err)
		}
		namespaces = l.Items
	}
	for _, ns := range namespaces {
		if ns.Name == c.injectorNamespace {
			continue
		}
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := c.cs.CoreV1().Pods(ns.Name).List(ctx, opts)
			if err != nil {
				return r, fmt.Errorf("listing the pods of %s: %w", ns.Name, err)
			}
			for i := range l.Items {
				c.checkPod(ctx, &r, ns.Labels[webhook.LabelInject], &l.Items[i])
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
	}
	return r, nil
}

// scopeOf is the webhook entry that reviews a pod, from its namespace's
// and its own fanout.dev/inject labels, as the MutatingWebhookConfiguration
// selects them; ok is false for a pod no entry reviews.
func scopeOf(nsLabel, podLabel string) (s webhook.Scope, ok bool) {
	switch {
	case nsLabel == webhook.NamespaceEnabled:
		return webhook.ScopeNamespace, true
	case nsLabel == webhook.NamespaceHosted:
		return webhook.ScopeHosted, true
	case podLabel == "true":
		return webhook.ScopePod, true
	}
	return "", false
}

func (c *checker) checkPod(ctx context.Context, r *report, nsLabel string, pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	add := func(kind, detail string) {
		r.Findings = append(r.Findings, finding{Namespace: pod.Namespace, Pod: pod.Name, Kind: kind, Detail: detail})
	}
	sidecar := sidecarOf(pod)
	_, annotated := pod.Annotations[webhook.AnnotationInjected]
	scope, optedIn := scopeOf(nsLabel, pod.Labels[webhook.LabelInject])
	if !optedIn && sidecar == nil {
		return
	}
	r.Pods++
	if sidecar == nil {
		// The injector's own decision on the pod as it runs: the same
		// spec it would have reviewed at creation.
		_, d := c.injector.MutateIn(pod.DeepCopy(), scope)
		switch {
		case d.Mutated:
			add(findNotInjected, fmt.Sprintf("opted in (%s) and the injector would inject it now: it was created while no injector answered or the injector refused the review (the webhook fails open); recreate the pod", scope))
		case d.Warning != "":
			add(findNotInjected, fmt.Sprintf("%s: %s", d.Reason, strings.TrimPrefix(d.Warning, "fanout-injector did not inject this pod: ")))
		}
		return
	}
	r.Injected++
	if annotated {
		for _, b := range webhook.Bypasses(pod) {
			add(findBypass, fmt.Sprintf("container %s %s", b.Container, b.Detail))
		}
	}
	if pod.Status.Phase != corev1.PodRunning {
		return
	}
	started, running, why := sidecarState(pod)
	if !running {
		add(findSidecarDown, "the fanout container is not running: "+why)
		return
	}
	snap, err := c.snapshot(ctx, pod)
	if err != nil {
		add(findSidecarDown, "its admin server did not answer: "+err.Error())
		return
	}
	var served uint64
	var addrs []string
	for _, e := range snap.Endpoints {
		served += e.RequestsTotal
		addrs = append(addrs, e.Address)
	}
	switch len(addrs) {
	case 0:
		add(findOneEndpoint, "the sidecar knows no kube-apiserver endpoint: check its log, its --endpoints (annotation fanout.dev/endpoints) and the EndpointSlices it reads")
	case 1:
		add(findOneEndpoint, fmt.Sprintf("the sidecar knows one kube-apiserver endpoint (%s), so it can neither spread load nor fail over: --endpoints (annotation fanout.dev/endpoints) or the Service it reads names one apiserver", addrs[0]))
	}
	// Requests are counted per endpoint: with none known, none is served
	// either, and one-endpoint says so.
	if up := c.now().Sub(started); annotated && len(addrs) > 0 && served == 0 && up >= c.idle {
		add(findBypass, fmt.Sprintf("the sidecar has served no request in %s up: the clients (%s) reach kube-apiserver another way, such as client-go's rest.InClusterConfig, which ignores KUBECONFIG", up.Round(time.Second), pod.Annotations[webhook.AnnotationInjected]))
	}
}

// sidecarState reads the fanout container's status: when it started and
// whether it runs, else why not.
func sidecarState(pod *corev1.Pod) (started time.Time, running bool, why string) {
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if s.Name != webhook.SidecarName {
			continue
		}
		switch {
		case s.State.Running != nil:
			return s.State.Running.StartedAt.Time, true, ""
		case s.State.Waiting != nil:
			return time.Time{}, false, fmt.Sprintf("waiting (%s) after %d restarts", s.State.Waiting.Reason, s.RestartCount)
		case s.State.Terminated != nil:
			return time.Time{}, false, fmt.Sprintf("terminated (%s, exit code %d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
	}
	return time.Time{}, false, "no status yet"
}

// write prints the report as a table or JSON.
func (r report) write(w io.Writer, output string) error {
	if output == "json" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Findings) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tPOD\tFINDING\tDETAIL")
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Namespace, f.Pod, f.Kind, f.Detail)
		}
	}
	fmt.Fprintf(tw, "%d pods opted in to fanout or running it, %d of them with the sidecar; %d findings\n", r.Pods, r.Injected, len(r.Findings))
	return tw.Flush()
}

func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl fanout check", pflag.ContinueOnError)
	fs.SetOutput(stdout)
	k := addKubeFlags(fs)
	all := fs.BoolP("all-namespaces", "A", false, "check every namespace (RBAC: list namespaces and pods cluster-wide)")
	output := fs.StringP("output", "o", "table", "table, or json: {pods, injected, findings: [{namespace, pod, kind, detail}]}")
	idle := fs.Duration("idle", 5*time.Minute, "a sidecar up this long that has served no request counts as bypassed by its clients")
	injectorNS := fs.String("injector-namespace", "fanout-system", "fanout-injector's namespace, which the webhook and this check leave out")
	listenPort := fs.Int32("sidecar-listen-port", webhook.DefaultConfig().ListenPort, "the injector's --sidecar-listen-port, for its decision on pods that run without fanout")
	adminPortFlag := fs.Int32("sidecar-admin-port", webhook.DefaultConfig().AdminPort, "the injector's --sidecar-admin-port, likewise")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: kubectl fanout check [-n NAMESPACE | -A] [-o table|json]\n\n"+
			"Lists, in the namespace (or all of them), what drifted from what fanout's injector set up:\n"+
			"  not-injected   a pod its label or its namespace's opted in, running without fanout although\n"+
			"                 the injector would inject it (it was created while the injector was down:\n"+
			"                 the webhook fails open), or that the injector refused with a warning;\n"+
			"  bypass         an injected pod whose client names its own kubeconfig, or whose sidecar has\n"+
			"                 served no request for --idle (an in-cluster client ignoring KUBECONFIG);\n"+
			"  one-endpoint   a sidecar that knows a single kube-apiserver (or none);\n"+
			"  sidecar-down   a sidecar not running, or whose admin server does not answer.\n"+
			"Sidecars are read through the API server's port-forward (RBAC: create pods/portforward).\n"+
			"Exit codes: 0 nothing found, 1 findings, 2 bad flags, 3 the pods or namespaces could not be listed.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if _, code, done := parse(fs, args, false, stderr); done {
		return code
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "kubectl fanout check: --output %q: expected table or json\n", *output)
		return 2
	}
	cfg, cs, ns, err := k.client()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl fanout check: %v\n", err)
		return 3
	}
	if *all {
		ns = ""
	}
	inj := webhook.DefaultConfig()
	inj.Image = "unused" // the decision does not depend on it
	inj.ListenPort, inj.AdminPort = *listenPort, *adminPortFlag
	c := &checker{
		cs: cs, injector: inj, injectorNamespace: *injectorNS, idle: *idle, now: time.Now,
		snapshot: func(ctx context.Context, pod *corev1.Pod) (admin.Snapshot, error) {
			port, err := adminPort(pod)
			if err != nil {
				return admin.Snapshot{}, err
			}
			ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			addr, stop, err := forward(ctx, cfg, cs, pod, port)
			if err != nil {
				return admin.Snapshot{}, fmt.Errorf("port-forward to port %d: %w", port, err)
			}
			defer stop()
			return admin.FetchSnapshot(ctx, httpClient(), addr)
		},
	}
	r, err := c.run(ctx, ns)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl fanout check: %v\n", err)
		return 3
	}
	if err := r.write(stdout, *output); err != nil {
		return 3
	}
	if len(r.Findings) > 0 {
		return 1
	}
	return 0
}
