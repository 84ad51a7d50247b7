package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func holdPod(v string) *corev1.Pod {
	p := kcmPod()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationHoldListener] = v
	return p
}

func indexOf(list []corev1.Container, name string) int {
	return slices.IndexFunc(list, func(c corev1.Container) bool { return c.Name == name })
}

// TestMutateHoldListener: the annotation adds `fanout hold` as a native
// sidecar before fanout, on fanout's listen address and user, sharing an
// emptyDir with fanout only, and fanout gets --listen-from; without it
// nothing of that is added; a later hostNetwork removes both sidecars.
func TestMutateHoldListener(t *testing.T) {
	cfg := testConfig()
	out := checkMutation(t, cfg, holdPod("true"), ScopePod)
	if out == nil {
		t.Fatal("a pod asking for the holder was not injected")
	}
	h, s := indexOf(out.Spec.InitContainers, HolderName), indexOf(out.Spec.InitContainers, SidecarName)
	if h < 0 || h > s {
		t.Fatalf("init containers %v: want %s before %s", out.Spec.InitContainers, HolderName, SidecarName)
	}
	holder, sc := out.Spec.InitContainers[h], out.Spec.InitContainers[s]
	wantArgs := []string{"hold", "--socket-dir=" + HoldMountPath, "--listen-address=127.0.0.1:7080"}
	if !slices.Equal(holder.Args, wantArgs) || holder.Image != sc.Image {
		t.Errorf("holder %s %q, want the sidecar's image and %q", holder.Image, holder.Args, wantArgs)
	}
	if holder.RestartPolicy == nil || *holder.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("holder restartPolicy %v, want Always (native sidecar)", holder.RestartPolicy)
	}
	if *holder.SecurityContext.RunAsUser != *sc.SecurityContext.RunAsUser {
		t.Errorf("holder runs as %d, fanout as %d: the hand-over needs one user", *holder.SecurityContext.RunAsUser, *sc.SecurityContext.RunAsUser)
	}
	if !slices.Contains(sc.Args, "--listen-from="+HoldMountPath) {
		t.Errorf("fanout args %q lack --listen-from=%s", sc.Args, HoldMountPath)
	}
	mountsHold := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == HoldVolumeName && m.MountPath == HoldMountPath })
	}
	if !mountsHold(holder) || !mountsHold(sc) {
		t.Errorf("holder and fanout must both mount %s at %s", HoldVolumeName, HoldMountPath)
	}
	for _, c := range out.Spec.Containers {
		if mountsHold(c) {
			t.Errorf("client container %s mounts the holder's socket directory", c.Name)
		}
	}
	if !slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == HoldVolumeName && v.EmptyDir != nil }) {
		t.Errorf("no emptyDir volume %s", HoldVolumeName)
	}

	// A later webhook makes it hostNetwork: both sidecars and the volume go.
	out.Spec.HostNetwork = true
	checkMutation(t, cfg, out, ScopePod) // the patch and Mutate agree
	removed, d := cfg.Mutate(out)
	if !d.Removed || indexOf(removed.Spec.InitContainers, HolderName) >= 0 ||
		slices.ContainsFunc(removed.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == HoldVolumeName }) {
		t.Errorf("after removal: %+v, want no %s container or volume", removed, HolderName)
	}
	if _, ok := removed.Labels[LabelSidecar]; ok {
		t.Errorf("after removal the pod still has label %s: the PodMonitor would scrape a sidecar that is gone", LabelSidecar)
	}

	for _, v := range []string{"", "false"} {
		pod := kcmPod()
		if v != "" {
			pod = holdPod(v)
		}
		got, _ := cfg.Mutate(pod)
		if indexOf(got.Spec.InitContainers, HolderName) >= 0 || slices.ContainsFunc(sidecarOf(t, got).Args, func(a string) bool { return strings.HasPrefix(a, "--listen-from") }) {
			t.Errorf("annotation %q: holder added, want none", v)
		}
	}
	if _, d := cfg.Mutate(holdPod("yes")); d.Mutated || d.Reason != ReasonConflict || !strings.Contains(d.Warning, AnnotationHoldListener) {
		t.Errorf("annotation \"yes\": %+v, want skipped as a conflict naming the annotation", d)
	}
}
