package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSidecarZoneFromDownwardAPI: the sidecar gets the pod's
// topology.kubernetes.io/zone label (copied from the node at binding)
// through the downward API into --zone, before --sidecar-extra-args so
// that an explicit --zone there wins.
func TestSidecarZoneFromDownwardAPI(t *testing.T) {
	cfg := testConfig()
	cfg.ExtraArgs = []string{"--zone-policy=spill-over"}
	for _, pod := range []*corev1.Pod{kcmPod(), operatorPod()} {
		out, d := cfg.Mutate(pod)
		if !d.Mutated {
			t.Fatalf("not mutated: %+v", d)
		}
		sc := sidecarOf(t, out)
		want := []corev1.EnvVar{{Name: "FANOUT_ZONE", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['topology.kubernetes.io/zone']"},
		}}}
		if len(sc.Env) != 1 || sc.Env[0].Name != want[0].Name || sc.Env[0].Value != "" || sc.Env[0].ValueFrom == nil ||
			sc.Env[0].ValueFrom.FieldRef == nil || *sc.Env[0].ValueFrom.FieldRef != *want[0].ValueFrom.FieldRef {
			t.Errorf("sidecar env %+v, want %+v", sc.Env, want)
		}
		zone := slices.Index(sc.Args, "--zone=$(FANOUT_ZONE)")
		extra := slices.Index(sc.Args, "--zone-policy=spill-over")
		if zone < 0 || extra < zone {
			t.Errorf("args %q: want --zone=$(FANOUT_ZONE) before --sidecar-extra-args", sc.Args)
		}
		// The client's containers are left without it.
		for _, c := range out.Spec.Containers {
			for _, e := range c.Env {
				if strings.Contains(e.Name, "FANOUT_ZONE") {
					t.Errorf("client container %s got %s", c.Name, e.Name)
				}
			}
		}
	}
}
