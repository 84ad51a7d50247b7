package harness

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// A hosted control plane, as Gardener runs a shoot's: etcd and the
// kube-apiserver replicas are pods in a namespace of the hosting cluster
// (the e2e control plane, on the real node), behind a Service
// kube-apiserver; kube-controller-manager and kube-scheduler are
// Deployments beside them, reaching https://kube-apiserver with a
// generic-token-kubeconfig (a kubeconfig Secret naming a tokenFile, the
// token in a second Secret, both in one projected volume), without a
// service account token of the hosting cluster and without a fanout label.
const (
	// HostedAPIServerService is the Service of the replicas, the host the
	// clients' kubeconfig names.
	HostedAPIServerService = "kube-apiserver"
	// HostedKubeconfigDir is where the clients mount their
	// generic-token-kubeconfig (Gardener's path).
	HostedKubeconfigDir = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig"
	// HostedControllerManagerUser and its rotated sibling are the static
	// token users of the hosted kube-controller-manager; HostedSchedulerUser
	// the hosted kube-scheduler's.
	HostedControllerManagerUser        = "system:kube-controller-manager"
	HostedControllerManagerRotatedUser = "e2e-hosted-kcm-rotated"
	HostedSchedulerUser                = "system:kube-scheduler"
	hostedAuditDir                     = "/var/log/kube-apiserver"
	// HostedMinReadySeconds is the kube-apiserver Deployment's
	// minReadySeconds.
	HostedMinReadySeconds = 60
)

// HostedOptions configure StartHosted.
type HostedOptions struct {
	// Namespace is the hosting namespace, e.g. shoot--e2e--hosted.
	Namespace string
	// NamespaceLabels are set on it when it is created (the opt-in).
	NamespaceLabels map[string]string
	// Replicas of kube-apiserver; default 3.
	Replicas int32
	// BeforeClients runs once the replicas are Available and before the
	// client Deployments are created: what an operator sets up for fanout
	// in the namespace (its RoleBinding).
	BeforeClients func(ctx context.Context) error
}

// Hosted is a running hosted control plane.
type Hosted struct {
	Namespace string
	// ServiceIP is the ClusterIP of the kube-apiserver Service.
	ServiceIP string
	// Client is the hosted cluster's admin (O=system:masters), talking to
	// the Service from a test host's network namespace: the test process
	// has no route to the pod or service networks of its own.
	Client kubernetes.Interface
	Config *rest.Config
	// AuditDir holds one JSON audit log per kube-apiserver pod, named
	// <pod>.log: rolled replicas keep theirs.
	AuditDir string
	// Tokens are the static tokens of the hosted apiservers, by user.
	Tokens map[string]string

	cp   *ControlPlane
	node *Node
}

// StartHosted builds a hosted control plane in a new namespace of the
// hosting cluster and waits until its kube-apiserver replicas, its
// kube-controller-manager and its kube-scheduler are Available.
func (n *Node) StartHosted(ctx context.Context, opts HostedOptions) (_ *Hosted, err error) {
	cp := n.cp
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	begin, step := time.Now(), time.Now()
	took := func(what string) {
		cp.logf("harness: hosted control plane: %s (%s)", what, time.Since(step).Round(time.Second))
		step = time.Now()
	}
	h := &Hosted{Namespace: opts.Namespace, cp: cp, node: n, AuditDir: filepath.Join(n.Dir, "hosted-audit-"+opts.Namespace)}
	ns := opts.Namespace
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: opts.NamespaceLabels}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	svcs := admin.CoreV1().Services(ns)
	etcdSvc, err := svcs.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-main-client"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "etcd"},
			Ports: []corev1.ServicePort{{Name: "client", Port: 2379, TargetPort: intstr.FromInt32(2379)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	apiSvc, err := svcs.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: HostedAPIServerService},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "kubernetes", "role": "apiserver"},
			Ports: []corev1.ServicePort{{Name: "kube-apiserver", Port: 443, TargetPort: intstr.FromInt32(443)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	h.ServiceIP = apiSvc.Spec.ClusterIP

	pki, err := h.writePKI(ctx)
	if err != nil {
		return nil, err
	}
	took("namespace, Services and PKI")
	if err := h.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := h.startAPIServers(ctx, etcdSvc.Spec.ClusterIP, opts.Replicas); err != nil {
		return nil, err
	}
	took("etcd and kube-apiserver replicas Available")
	h.Config = &rest.Config{
		Host: "https://" + net.JoinHostPort(h.ServiceIP, "443"),
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: HostedAPIServerService,
			CAData:     pki.ca.CertPEM, CertData: pki.admin.CertPEM, KeyData: pki.admin.KeyPEM,
		},
		// From the first apiserver's test host, which routes the service
		// network to the node (where kube-proxy's rules are): the node's
		// own namespace has no route to ClusterIPs for locally made
		// connections.
		Dial:  DialInNetns(cp.Net.Hosts[0].NS),
		QPS:   200,
		Burst: 400,
	}
	if h.Client, err = kubernetes.NewForConfig(h.Config); err != nil {
		return nil, err
	}
	if opts.BeforeClients != nil {
		if err := opts.BeforeClients(ctx); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct{ name, user, image string }{
		{"kube-controller-manager", HostedControllerManagerUser, n.Images.ControllerManager.Ref},
		{"kube-scheduler", HostedSchedulerUser, n.Images.Scheduler.Ref},
	} {
		if err := h.startClient(ctx, c.name, c.user, c.image); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := cp.WaitDeploymentAvailable(ctx, ns, d, 5*time.Minute); err != nil {
			return nil, err
		}
	}
	took("kube-controller-manager and kube-scheduler Available")
	cp.logf("harness: hosted control plane %s up in %s", ns, time.Since(begin).Round(time.Second))
	return h, nil
}

type hostedPKI struct{ ca, admin *CertKey }

// writePKI makes the hosted cluster's own CA, serving certificate, service
// account key, admin certificate and static tokens, and stores them (with
// the clients' kubeconfig and token Secrets) in the hosting namespace.
func (h *Hosted) writePKI(ctx context.Context) (*hostedPKI, error) {
	dir := filepath.Join(h.node.Dir, "hosted-pki-"+h.Namespace)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := newCA(dir, "ca", "hosted-e2e-ca")
	if err != nil {
		return nil, err
	}
	svc := HostedAPIServerService
	serving, err := issue(dir, "serving", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: svc},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{svc, svc + "." + h.Namespace, svc + "." + h.Namespace + ".svc", svc + "." + h.Namespace + ".svc.cluster.local",
			"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP(h.ServiceIP)},
	})
	if err != nil {
		return nil, err
	}
	sa, err := newCA(dir, "service-account", "hosted-service-account-signer") // only its key is used
	if err != nil {
		return nil, err
	}
	admin, err := issue(dir, "admin", ca, clientTemplate("e2e-hosted-admin", []string{"system:masters"}))
	if err != nil {
		return nil, err
	}
	h.Tokens = map[string]string{}
	var csv strings.Builder
	for i, u := range []struct{ user, group string }{
		{HostedControllerManagerUser, "system:masters"},
		{HostedControllerManagerRotatedUser, "system:masters"},
		{HostedSchedulerUser, ""},
	} {
		tok := fmt.Sprintf("hosted-%d-%x", i, time.Now().UnixNano())
		h.Tokens[u.user] = tok
		fmt.Fprintf(&csv, "%s,%s,uid-%d", tok, u.user, i)
		if u.group != "" {
			fmt.Fprintf(&csv, ",%q", u.group)
		}
		csv.WriteString("\n")
	}
	kubeconfig := TokenFileKubeconfig("https://"+svc, ca.CertPEM, HostedKubeconfigDir+"/token")
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-tls"}, Data: map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Data: map[string][]byte{"ca.crt": ca.CertPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "service-account-key"}, Data: map[string][]byte{"id_rsa": sa.KeyPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-static-token"}, Data: map[string][]byte{"static_tokens.csv": []byte(csv.String())}},
		{ObjectMeta: metav1.ObjectMeta{Name: "generic-token-kubeconfig"}, Data: map[string][]byte{"kubeconfig": []byte(kubeconfig)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "shoot-access-kube-controller-manager"}, Data: map[string][]byte{"token": []byte(h.Tokens[HostedControllerManagerUser])}},
		{ObjectMeta: metav1.ObjectMeta{Name: "shoot-access-kube-scheduler"}, Data: map[string][]byte{"token": []byte(h.Tokens[HostedSchedulerUser])}},
	}
	for _, s := range secrets {
		if _, err := h.cp.AdminClient.CoreV1().Secrets(h.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if _, err := h.cp.AdminClient.CoreV1().ConfigMaps(h.Namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "audit-policy"},
		Data: map[string]string{"audit-policy.yaml": `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
`},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return &hostedPKI{ca: ca, admin: admin}, nil
}

func (h *Hosted) startEtcd(ctx context.Context) error {
	d := hostedDeployment("etcd-main", map[string]string{"app": "etcd"}, 1, corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{{
			Name: "etcd", Image: h.node.Images.Etcd.Ref, ImagePullPolicy: corev1.PullNever,
			Args: []string{"--data-dir=/var/etcd/data", "--listen-client-url=http://0.0.0.0:2379",
				"--advertise-client-url=http://etcd-main-client:2379"},
			Ports:        []corev1.ContainerPort{{Name: "client", ContainerPort: 2379}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/etcd"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(2379)}},
				PeriodSeconds: 1},
		}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	})
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	if _, err := h.cp.AdminClient.AppsV1().Deployments(h.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	return h.cp.WaitDeploymentAvailable(ctx, h.Namespace, "etcd-main", 3*time.Minute)
}

// startAPIServers runs the kube-apiserver Deployment: replicas rolled one
// at a time (maxSurge 1, maxUnavailable 0), each advertising the Service's
// ClusterIP so that the hosted cluster's own default/kubernetes holds that
// one address (in Gardener, the SNI gateway's), and writing its audit log
// to a host directory under its pod's name.
func (h *Hosted) startAPIServers(ctx context.Context, etcdIP string, replicas int32) error {
	if err := os.MkdirAll(h.AuditDir, 0o755); err != nil {
		return err
	}
	const pki = "/srv/kubernetes"
	args := []string{
		"--etcd-servers=http://" + net.JoinHostPort(etcdIP, "2379"),
		"--secure-port=443",
		"--advertise-address=" + h.ServiceIP,
		"--endpoint-reconciler-type=lease",
		"--tls-cert-file=" + pki + "/tls/tls.crt",
		"--tls-private-key-file=" + pki + "/tls/tls.key",
		"--client-ca-file=" + pki + "/ca/ca.crt",
		"--token-auth-file=" + pki + "/token/static_tokens.csv",
		"--service-account-issuer=https://" + HostedAPIServerService,
		"--service-account-key-file=" + pki + "/service-account-key/id_rsa",
		"--service-account-signing-key-file=" + pki + "/service-account-key/id_rsa",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--audit-policy-file=/etc/kubernetes/audit/audit-policy.yaml",
		"--audit-log-path=" + hostedAuditDir + "/$(POD_NAME).log",
		"--audit-log-mode=blocking",
		// Graceful, as a hosted control plane rolls: /readyz fails at
		// once (the EndpointSlice drops the replica), in-flight requests
		// and watches get 5 s, and a request arriving meanwhile is
		// answered 429 with Retry-After.
		"--shutdown-delay-duration=5s",
		"--shutdown-send-retry-after=true",
		"--profiling=false",
		"--v=1",
	}
	secretVol := func(name, secret string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(443), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: period, TimeoutSeconds: 5, FailureThreshold: 3}
	}
	liveness := probe("/livez", 10)
	// A replica is available only after minReadySeconds of readiness
	// without a break: one slow /readyz on the loaded node must not
	// restart that count. Shutting down, a replica leaves the
	// EndpointSlice's ready endpoints as terminating at once anyway.
	liveness.FailureThreshold, liveness.InitialDelaySeconds = 6, 30
	d := hostedDeployment("kube-apiserver", map[string]string{"app": "kubernetes", "role": "apiserver"}, replicas, corev1.PodSpec{
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		Containers: []corev1.Container{{
			Name: "kube-apiserver", Image: h.node.Images.APIServer.Ref, ImagePullPolicy: corev1.PullNever,
			Command: []string{"/usr/local/bin/kube-apiserver"},
			Args:    args,
			Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Ports:          []corev1.ContainerPort{{Name: "https", ContainerPort: 443}},
			ReadinessProbe: probe("/readyz", 1),
			LivenessProbe:  liveness,
			// Small requests: the node's 2 CPUs are mostly requested by
			// the suite's earlier pods, and a fourth replica (the roll's
			// surge) must still be scheduled.
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "tls", MountPath: pki + "/tls", ReadOnly: true},
				{Name: "ca", MountPath: pki + "/ca", ReadOnly: true},
				{Name: "token", MountPath: pki + "/token", ReadOnly: true},
				{Name: "service-account-key", MountPath: pki + "/service-account-key", ReadOnly: true},
				{Name: "audit-policy", MountPath: "/etc/kubernetes/audit", ReadOnly: true},
				{Name: "audit-log", MountPath: hostedAuditDir},
			},
		}},
		Volumes: []corev1.Volume{
			secretVol("tls", "kube-apiserver-tls"), secretVol("ca", "ca"), secretVol("token", "kube-apiserver-static-token"),
			secretVol("service-account-key", "service-account-key"),
			{Name: "audit-policy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "audit-policy"}}}},
			{Name: "audit-log", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: h.AuditDir, Type: ptr.To(corev1.HostPathDirectory)}}},
		},
	})
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
	}}
	// A replica counts as available a minute after it is ready, so a
	// roll waits that long before it takes the next old one down: an
	// informer whose watch sits on the old one needs a bookmark newer
	// than the new replica's watch cache before it moves, or it
	// re-lists (docs/resilience.md, "A roll paced on readiness alone").
	d.Spec.MinReadySeconds = HostedMinReadySeconds
	if _, err := h.cp.AdminClient.AppsV1().Deployments(h.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	return h.cp.WaitDeploymentAvailable(ctx, h.Namespace, "kube-apiserver", 5*time.Minute)
}

// startClient runs a Gardener-shaped client Deployment: no fanout label,
// automountServiceAccountToken false, the generic-token-kubeconfig and the
// client's token Secret in one projected volume, its own key material on
// the command line, https://kube-apiserver resolved through hostAliases to
// the Service (there is no cluster DNS on the node; Gardener's
// IstioTLSTermination webhook points the same host at its gateway the
// same way).
func (h *Hosted) startClient(ctx context.Context, name, user, image string) error {
	kc := HostedKubeconfigDir + "/kubeconfig"
	args := []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=true", "--v=1"}
	mounts := []corev1.VolumeMount{{Name: "kubeconfig", MountPath: HostedKubeconfigDir, ReadOnly: true}}
	volumes := []corev1.Volume{{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o644),
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "generic-token-kubeconfig"},
				Items: []corev1.KeyToPath{{Key: "kubeconfig", Path: "kubeconfig"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "shoot-access-" + name},
				Items: []corev1.KeyToPath{{Key: "token", Path: "token"}}}},
		},
	}}}}
	if name == "kube-controller-manager" {
		args = append(args,
			"--service-account-private-key-file=/srv/kubernetes/service-account-key/id_rsa",
			"--root-ca-file=/srv/kubernetes/ca/ca.crt",
			"--use-service-account-credentials=false",
			// No kubelet heartbeats from the hosted cluster's fake nodes.
			"--controllers=*,-nodelifecycle,-nodeipam",
			"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
			"--kube-api-qps=100", "--kube-api-burst=200")
		mounts = append(mounts,
			corev1.VolumeMount{Name: "service-account-key", MountPath: "/srv/kubernetes/service-account-key", ReadOnly: true},
			corev1.VolumeMount{Name: "ca", MountPath: "/srv/kubernetes/ca", ReadOnly: true})
		volumes = append(volumes,
			corev1.Volume{Name: "service-account-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "service-account-key", DefaultMode: ptr.To[int32](0o644)}}},
			corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ca"}}})
	} else {
		args = append(args, "--kube-api-qps=100", "--kube-api-burst=200")
	}
	d := hostedDeployment(name, map[string]string{"app": "kubernetes", "role": strings.TrimPrefix(name, "kube-"),
		"networking.resources.gardener.cloud/to-kube-apiserver-tcp-443": "allowed"}, 1, corev1.PodSpec{
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		HostAliases:                   []corev1.HostAlias{{IP: h.ServiceIP, Hostnames: []string{HostedAPIServerService}}},
		SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532)},
		Containers: []corev1.Container{{
			Name: name, Image: image, ImagePullPolicy: corev1.PullNever,
			Command:      []string{"/usr/local/bin/" + name},
			Args:         args,
			VolumeMounts: mounts,
		}},
		Volumes: volumes,
	})
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	_, err := h.cp.AdminClient.AppsV1().Deployments(h.Namespace).Create(ctx, d, metav1.CreateOptions{})
	return err
}

func hostedDeployment(name string, labels map[string]string, replicas int32, spec corev1.PodSpec) *appsv1.Deployment {
	sel := map[string]string{}
	for k, v := range labels {
		if k == "app" || k == "role" {
			sel[k] = v
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// AuditLogs returns the audit log of every kube-apiserver pod the hosted
// control plane has run, by pod name.
func (h *Hosted) AuditLogs() (map[string]string, error) {
	entries, err := os.ReadDir(h.AuditDir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".log"); ok {
			out[name] = filepath.Join(h.AuditDir, e.Name())
		}
	}
	return out, nil
}

// APIServerPods lists the kube-apiserver pods that are Running and not
// being deleted, by name.
func (h *Hosted) APIServerPods(ctx context.Context) ([]string, error) {
	pods, err := h.cp.AdminClient.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=kubernetes,role=apiserver"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// RegisterNodes registers n fake Ready nodes in the hosted cluster, so
// that its scheduler binds pods (the hosted kube-controller-manager runs
// without the node lifecycle controller, so they stay Ready).
func (h *Hosted) RegisterNodes(ctx context.Context, n int) error {
	nodes := h.Client.CoreV1().Nodes()
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("500")}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("hosted-node-%d", i)
		if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		// The hosted controllers write the new Node too (its TTL
		// annotation): read it afresh on a conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := nodes.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			node.Status.Capacity, node.Status.Allocatable = capacity, capacity
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}}
			_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return err
		}
		// The not-ready taint admission put on it; a patch, since the
		// hosted controllers may be writing the Node meanwhile.
		if _, err := nodes.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// DialInNetns returns a dialer whose sockets are made in the network
// namespace ns (a name under /run/netns): the test process reaches the
// node's pods and Services from there without a route of its own. Each
// dial locks its goroutine to an OS thread, moves that thread into ns,
// dials, and moves it back before unlocking it, so no other goroutine ever
// runs in ns.
//
// The thread must survive: the harness starts its processes (the
// kubelet among them) with Pdeathsig, which the kernel sends when the
// thread that forked them ends, and Go ends a thread whose goroutine
// exits while locked to it. An earlier version let the thread end and so
// killed the real node's kubelet in the middle of a test.
func DialInNetns(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			c, err, back := dialInNetns(ctx, ns, network, addr)
			if back {
				runtime.UnlockOSThread()
			}
			// Otherwise the thread could not be moved back and ends with
			// this goroutine: better than running others in ns.
			ch <- result{c, err}
		}()
		select {
		case r := <-ch:
			return r.c, r.err
		case <-ctx.Done():
			go func() {
				if r := <-ch; r.c != nil {
					r.c.Close()
				}
			}()
			return nil, ctx.Err()
		}
	}
}

// dialInNetns runs on a locked thread; back reports whether the thread is
// in its own network namespace again.
func dialInNetns(ctx context.Context, ns, network, addr string) (c net.Conn, err error, back bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err, true
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil, err, true
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("entering network namespace %s: %w", ns, err), true
	}
	var d net.Dialer
	c, err = d.DialContext(ctx, network, addr)
	return c, err, unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil
}

// TokenFileKubeconfig is a kubeconfig in the shape of Gardener's
// generic-token-kubeconfig: server, CA, and a tokenFile that another
// component keeps fresh.
func TokenFileKubeconfig(server string, caPEM []byte, tokenFile string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: shoot
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: shoot
  user:
    tokenFile: %s
contexts:
- name: shoot
  context: {cluster: shoot, user: shoot}
current-context: shoot
`, server, base64.StdEncoding.EncodeToString(caPEM), tokenFile)
}
