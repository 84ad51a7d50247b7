package webhook

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// settings are what one pod's sidecar is built with: the injector's
// flags, the scope's defaults, then the pod's annotations.
type settings struct {
	endpoints     string // --endpoints; "" leaves fanout's default
	discovery     string // --discovery-kubeconfig; "" leaves fanout's default
	tlsServerName string // --tls-server-name; "" leaves the kubeconfig's
	resources     corev1.ResourceRequirements
	hold          bool
}

// settings reads the pod's annotations over the defaults of c and scope;
// msg says what in them is wrong.
func (c Config) settings(pod *corev1.Pod, t target, scope Scope) (settings, string) {
	s := settings{endpoints: c.Endpoints, resources: *c.Resources.DeepCopy()}
	if scope == ScopeHosted && t.path != "" {
		// A kubeconfig client of a hosted control plane: its
		// kube-apiserver replicas are pods beside it in the hosting
		// cluster, where only the pod's own service account can look.
		s.endpoints, s.discovery = HostedEndpoints, DiscoveryInCluster
	}
	a := pod.Annotations
	if v, ok := a[AnnotationEndpoints]; ok {
		v = strings.TrimSpace(v)
		if v == "" || strings.ContainsAny(v, " \t\r\n") {
			return s, fmt.Sprintf("annotation %s=%q is not a fanout --endpoints value (no spaces; e.g. https://10.0.0.11:6443,https://10.0.0.12:6443)", AnnotationEndpoints, v)
		}
		s.endpoints = v
	}
	if v, ok := a[AnnotationDiscoveryKubeconfig]; ok {
		if v != DiscoveryInCluster && (!path.IsAbs(v) || path.Clean(v) != v) {
			return s, fmt.Sprintf("annotation %s=%q: want %q or a clean absolute path to a kubeconfig on a volume the sidecar mounts", AnnotationDiscoveryKubeconfig, v, DiscoveryInCluster)
		}
		s.discovery = v
	}
	if _, ok := a[AnnotationDiscoveryKubeconfig]; !ok && !strings.HasPrefix(s.endpoints, "endpointslice://") {
		// The hosted default, with endpoints the pod chose otherwise.
		s.discovery = ""
	}
	if s.discovery != "" && !strings.HasPrefix(s.endpoints, "endpointslice://") {
		return s, fmt.Sprintf("annotation %s is only used with --endpoints endpointslice:///…, and this pod's are %q", AnnotationDiscoveryKubeconfig, s.endpoints)
	}
	if v, ok := a[AnnotationTLSServerName]; ok {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return s, fmt.Sprintf("annotation %s=%q is not a DNS name: %s", AnnotationTLSServerName, v, strings.Join(errs, "; "))
		}
		s.tlsServerName = v
	}
	for _, q := range []struct {
		key   string
		name  corev1.ResourceName
		limit bool
	}{
		{AnnotationCPURequest, corev1.ResourceCPU, false},
		{AnnotationCPULimit, corev1.ResourceCPU, true},
		{AnnotationMemoryRequest, corev1.ResourceMemory, false},
		{AnnotationMemoryLimit, corev1.ResourceMemory, true},
	} {
		v, ok := a[q.key]
		if !ok {
			continue
		}
		list := &s.resources.Requests
		if q.limit {
			list = &s.resources.Limits
		}
		if v == "" {
			// Empty: none, whatever the injector's flag says.
			delete(*list, q.name)
			continue
		}
		n, err := resource.ParseQuantity(v)
		if err != nil || n.Sign() < 0 {
			return s, fmt.Sprintf("annotation %s=%q is not a quantity such as 20m or 64Mi", q.key, v)
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[q.name] = n
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okR := s.resources.Requests[name]
		lim, okL := s.resources.Limits[name]
		if okR && okL && req.Cmp(lim) > 0 {
			return s, fmt.Sprintf("the sidecar's %s request %s exceeds its limit %s (annotations %s and the injector's --sidecar-* flags)", name, req.String(), lim.String(), "fanout.dev/sidecar-*")
		}
	}
	hold, msg := c.wantsHolder(pod)
	s.hold = hold
	return s, msg
}

// isClient says whether a pod in a namespace that opted in is a
// control-plane client to inject: it names a kubeconfig (annotation,
// flag or KUBECONFIG), or it is labelled fanout.dev/inject=true and
// mounts a service account token. A token alone is no sign: most pods
// mount one (automountServiceAccountToken defaults to true), etcd and
// monitoring among them.
func isClient(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[AnnotationKubeconfig]; ok {
		return true
	}
	for i := range pod.Spec.Containers {
		r := refsOf(&pod.Spec.Containers[i])
		if len(r.kubeconfig) > 0 || r.env != nil && (r.env.Value != "" || r.env.ValueFrom != nil) {
			return true
		}
		if r.sa && pod.Labels[LabelInject] == "true" {
			return true
		}
	}
	return false
}

// discoveryVolume is the pod's own service account token (audience: the
// hosting cluster's kube-apiserver, the default), the cluster's CA and the
// namespace, as the kubelet projects them for in-cluster clients, for the
// sidecar's discovery only.
func discoveryVolume() corev1.Volume {
	return corev1.Volume{Name: DiscoveryVolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](DiscoveryTokenSeconds)}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}}
}

// sidecarEnv is the sidecar's environment: its zone, and the pod's
// namespace where its --endpoints name it.
func sidecarEnv(endpoints string) []corev1.EnvVar {
	env := []corev1.EnvVar{zoneEnv()}
	if strings.Contains(endpoints, "$("+PodNamespaceEnv+")") {
		env = append(env, corev1.EnvVar{Name: PodNamespaceEnv, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
		}})
	}
	return env
}
