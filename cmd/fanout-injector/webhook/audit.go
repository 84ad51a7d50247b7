package webhook

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Bypass is a container of an injected pod whose spec sends it to
// kube-apiserver without fanout.
type Bypass struct {
	Container string
	Detail    string
}

// Bypasses reads an injected pod (AnnotationInjected set) as the injector
// left it and reports the containers that reach kube-apiserver around
// fanout, as far as their spec tells: one that names a kubeconfig other
// than KubeconfigPath (in a flag or KUBECONFIG), and a client the injector
// pointed at fanout (listed in the annotation) that no longer names
// KubeconfigPath, because something after the injector changed it. A
// client that ignores KUBECONFIG and uses its service account directly
// (client-go's rest.InClusterConfig reads KUBERNETES_SERVICE_HOST, set in
// every container) looks right here; only the sidecar's own request count
// tells it apart.
func Bypasses(pod *corev1.Pod) []Bypass {
	clients := strings.Split(pod.Annotations[AnnotationInjected], ",")
	var out []Bypass
	for i := range pod.Spec.Containers {
		ct := &pod.Spec.Containers[i]
		r := refsOf(ct)
		var own []string
		fanout := false
		for _, v := range r.any {
			if v == KubeconfigPath {
				fanout = true
			} else {
				own = append(own, v)
			}
		}
		if r.env != nil {
			switch {
			case r.env.ValueFrom == nil && r.env.Value == KubeconfigPath:
				fanout = true
			case r.env.ValueFrom != nil:
				own = append(own, "KUBECONFIG from a reference")
			case r.env.Value != "":
				own = append(own, r.env.Value)
			}
		}
		switch {
		case len(own) > 0:
			out = append(out, Bypass{ct.Name, fmt.Sprintf("names kubeconfig %s, not fanout's %s: its requests go to kube-apiserver directly", strings.Join(slices.Compact(own), ", "), KubeconfigPath)})
		case slices.Contains(clients, ct.Name) && !fanout:
			out = append(out, Bypass{ct.Name, fmt.Sprintf("was pointed at fanout, but neither its flags nor KUBECONFIG name %s any more: it uses its service account or a default", KubeconfigPath)})
		}
	}
	return out
}
