package webhook

import (
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig() Config {
	c := DefaultConfig()
	c.Image = "example.com/fanout:test"
	c.Endpoints = "endpointslice:///default/kubernetes"
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	return c
}

// kcmPod is a kube-controller-manager pod as in manifests/examples: its
// kubeconfig named three times, on a hostPath mount.
func kcmPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-controller-manager", Namespace: "kube-system",
			Labels: map[string]string{LabelInject: "true", "component": "kube-controller-manager"},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "kube-controller-manager",
				Image: "registry.k8s.io/kube-controller-manager:v1.37.2",
				// Its own key material, under /etc/kubernetes/pki: the
				// sidecar must not get that volume.
				Command: []string{"kube-controller-manager", "--service-account-private-key-file=/etc/kubernetes/pki/sa.key"},
				Args: []string{
					"--kubeconfig=/etc/kubernetes/controller-manager.conf",
					"--authentication-kubeconfig=/etc/kubernetes/controller-manager.conf",
					"--authorization-kubeconfig", "/etc/kubernetes/controller-manager.conf",
					"--leader-elect=true",
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "kubeconfig", MountPath: "/etc/kubernetes/controller-manager.conf"},
					{Name: "k8s-certs", MountPath: "/etc/kubernetes/pki", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "kcm-kubeconfig"}}},
				{Name: "k8s-certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "kcm-certs"}}},
			},
		},
	}
}

// edited makes base's pod and lets change alter it: a table row's variant
// of kcmPod or operatorPod.
func edited(base func() *corev1.Pod, change func(p *corev1.Pod)) func() *corev1.Pod {
	return func() *corev1.Pod {
		p := base()
		change(p)
		return p
	}
}

// operatorPod is an in-cluster client: no kubeconfig, a mounted token; a
// Secret at /config that tests name as its kubeconfig's volume.
func operatorPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: "ops", Labels: map[string]string{LabelInject: "true"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "manager",
				Image: "example.com/operator:1",
				Args:  []string{"--leader-elect"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "kube-api-access-abcde", MountPath: ServiceAccountDir, ReadOnly: true},
					{Name: "data", MountPath: "/data"},
					{Name: "config", MountPath: "/config"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "operator-kubeconfig"}}},
			},
		},
	}
}
