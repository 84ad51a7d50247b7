package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
)

// The environment that names the injector's own pod and container when
// --sidecar-image is empty. The downward API gives the pod's name and
// namespace but no container's image or name, so CONTAINER_NAME is
// written in the manifest; a pod with one container may leave it out.
const (
	envPodName       = "POD_NAME"
	envPodNamespace  = "POD_NAMESPACE"
	envContainerName = "CONTAINER_NAME"
)

// ownPod names the container the injector runs in.
type ownPod struct {
	namespace, name, container string
}

// ownPodFromEnv reads ownPod from the environment; it fails when the pod's
// name or namespace is missing.
func ownPodFromEnv(getenv func(string) string) (ownPod, error) {
	p := ownPod{namespace: getenv(envPodNamespace), name: getenv(envPodName), container: getenv(envContainerName)}
	if p.namespace == "" || p.name == "" {
		return p, fmt.Errorf("--sidecar-image is empty and %s and %s are not both set: pass --sidecar-image, "+
			"or set them from the downward API (metadata.namespace, metadata.name) as manifests/injector does, and the sidecar gets the injector's own image", envPodNamespace, envPodName)
	}
	return p, nil
}

// ownImageTimeout bounds how long the start waits for the injector's own
// pod to be read: the API may be unreachable for a few seconds while the
// node's Service routes are written.
const ownImageTimeout = 30 * time.Second

// sidecarConfig is the webhook's Config: --sidecar-image, or else the
// image of the injector's own container, read once at start from its Pod
// with the ServiceAccount token (manifests/injector/own-pod-rbac.yaml).
// The spec's image is taken, not the status's, so that the sidecar runs
// the reference the manifest names (a kustomize images: entry, a Helm
// value, a mirror registry, a digest), resolved by the node like the
// injector's own.
func sidecarConfig(o *options, log *slog.Logger) (webhook.Config, error) {
	c := o.sidecar
	if c.Image != "" {
		return c, nil
	}
	cfg, err := inClusterConfig("--sidecar-image empty (the injector's own image)")
	if err != nil {
		return c, err
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ownImageTimeout)
	defer cancel()
	if c.Image, err = ownImage(ctx, core, o.ownPod, time.Second); err != nil {
		return c, err
	}
	log.Info("sidecar image is the injector's own", "image", c.Image, "pod", o.ownPod.namespace+"/"+o.ownPod.name)
	return c, nil
}

// inClusterConfig is the pod's ServiceAccount client configuration; the
// error names what, the feature that needs it.
func inClusterConfig(what string) (*rest.Config, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("%s needs the pod's ServiceAccount token (automountServiceAccountToken: true, as manifests/injector sets it): %w", what, err)
	}
	cfg.UserAgent = "fanout-injector"
	return cfg, nil
}

// ownImage reads the pod p and returns the image of its container: the one
// named p.container, else the only one. Errors that a retry cannot fix
// (not found, forbidden, no such container) fail at once; others are
// retried every interval until ctx ends.
func ownImage(ctx context.Context, pods corev1client.PodsGetter, p ownPod, interval time.Duration) (string, error) {
	var image string
	var last error
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		pod, err := pods.Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, fmt.Errorf("pod %s/%s (%s, %s) not found: they must name the injector's own pod: %w", p.namespace, p.name, envPodNamespace, envPodName, err)
		case apierrors.IsForbidden(err):
			return false, fmt.Errorf("reading its own pod %s/%s: %w; give the injector get on pods in its namespace (manifests/injector/own-pod-rbac.yaml) or pass --sidecar-image", p.namespace, p.name, err)
		case err != nil:
			last = err
			return false, nil
		}
		var names []string
		for _, c := range pod.Spec.Containers {
			names = append(names, c.Name)
		}
		i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == p.container })
		switch {
		case p.container == "" && len(names) == 1:
			i = 0
		case p.container == "":
			return false, fmt.Errorf("pod %s/%s has containers %s: set %s to the injector's, or pass --sidecar-image", p.namespace, p.name, strings.Join(names, ", "), envContainerName)
		case i < 0:
			return false, fmt.Errorf("pod %s/%s has no container %s=%q, only %s", p.namespace, p.name, envContainerName, p.container, strings.Join(names, ", "))
		}
		image = pod.Spec.Containers[i].Image
		return true, nil
	})
	if err != nil && last != nil && ctx.Err() != nil {
		return "", fmt.Errorf("reading its own pod %s/%s for the sidecar image (--sidecar-image is empty): %w (still failing when the start gave up: %v)", p.namespace, p.name, last, err)
	}
	return image, err
}
