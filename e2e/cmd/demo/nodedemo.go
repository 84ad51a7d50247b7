package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fanout-dev/fanout/e2e/harness"
)

func init() { newNodeDemo = func() nodeDemo { return realNode{} } }

// realNode is -node: the e2e suite's real node (harness.StartNode) with
// fanout installed on it as the TestNode* tests install it
// (harness.Node.InstallFanout): the injector from manifests/injector, then
// the example kube-controller-manager and kube-scheduler Deployments from
// manifests/examples/injected, each pod getting its fanout sidecar from the
// injector.
type realNode struct{}

// Options leaves out the fake nodes: every pod is to land on the real one.
func (realNode) Options(o *harness.Options) { o.Nodes = -1 }

func (realNode) Start(ctx context.Context, cp *harness.ControlPlane, logf func(string, ...any)) (nodePanel, error) {
	logf("starting a real node: images built offline (make image and the Kubernetes components), containerd, kubelet, kube-proxy, a CNI bridge")
	n, err := cp.StartNode(ctx, nil, harness.NodeOptions{})
	if err != nil {
		return nil, err
	}
	logf("installing fanout as a user would: kubectl apply -k manifests/injector (through an overlay with the image and certificates), then manifests/examples/injected")
	if err := n.InstallFanout(ctx); err != nil {
		return nil, err
	}
	return &nodeView{client: cp.AdminClient, node: n.Name}, nil
}

// nodeView draws the node's panel from the apiserver's view of its pods.
type nodeView struct {
	client kubernetes.Interface
	node   string
}

func (v *nodeView) Clients() []auditClient {
	return []auditClient{
		{label: "controller-manager", note: "(in-pod kube-controller-manager, each pod with its fanout)", match: harness.ControllerManagerUsers},
		{label: "scheduler", note: "(in-pod kube-scheduler, each pod with its fanout)", match: harness.UserIs("system:kube-scheduler")},
	}
}

// injectedSelector finds the pods the injector was asked to change.
const injectedSelector = "fanout.dev/inject=true"

func (v *nodeView) Lines(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	out := []string{fmt.Sprintf("real node %s: pods labelled %s", v.node, injectedSelector)}
	pods, err := v.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: injectedSelector})
	if err != nil {
		// The admin client talks to apiserver 1, which a rolling restart
		// takes down for a while.
		return append(out, " (cannot list them now: "+firstLine(err.Error())+")")
	}
	leaders := map[string]bool{}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		l, err := v.client.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			// Holder identities are "<hostname>_<uid>"; a pod's hostname is
			// its name.
			pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
			leaders[pod] = true
		}
	}
	out = append(out, fmt.Sprintf(" %-40s %-11s %-9s %s", "pod", "phase", "fanout", "client"))
	for i := range pods.Items {
		out = append(out, podLine(&pods.Items[i], leaders[pods.Items[i].Name]))
	}
	if len(pods.Items) == 0 {
		out = append(out, " (none)")
	}
	inj, err := v.client.AppsV1().Deployments("fanout-system").Get(ctx, "fanout-injector", metav1.GetOptions{})
	if err == nil {
		out = append(out, fmt.Sprintf(" fanout-injector: %d of %d replicas ready", inj.Status.ReadyReplicas, inj.Status.Replicas))
	}
	return out
}

// podLine is one pod: its phase, whether its fanout sidecar (an init
// container that keeps running) is ready, and whether its client
// containers are.
func podLine(p *corev1.Pod, leader bool) string {
	name := p.Name
	if p.Namespace != "kube-system" {
		name = p.Namespace + "/" + name
	}
	phase := string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	fanout := "none"
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "fanout" {
			fanout = containerState(s)
		}
	}
	if fanout == "none" && p.Annotations["fanout.dev/injected"] != "" {
		fanout = "waiting"
	}
	var clients []string
	restarts := int32(0)
	for _, s := range p.Status.InitContainerStatuses {
		restarts += s.RestartCount
	}
	for _, s := range p.Status.ContainerStatuses {
		clients = append(clients, containerState(s))
		restarts += s.RestartCount
	}
	client := strings.Join(clients, ",")
	if client == "" {
		client = "waiting"
	}
	if leader {
		client += " (leader)"
	}
	line := fmt.Sprintf(" %-40s %-11s %-9s %s", name, phase, fanout, client)
	if restarts > 0 {
		line += fmt.Sprintf(", %d restarts", restarts)
	}
	return line
}

func containerState(s corev1.ContainerStatus) string {
	st := "not ready"
	switch {
	// Ready first: a sidecar is ready while it runs; a waiting reason
	// (PodInitializing, CrashLoopBackOff) says why a container is not.
	case s.Ready:
		st = "ready"
	case s.State.Waiting != nil && s.State.Waiting.Reason != "":
		st = s.State.Waiting.Reason
	case s.State.Terminated != nil:
		st = "exited"
	}
	return st
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
