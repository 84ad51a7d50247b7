package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Image references of the real node. The example Deployments in
// manifests/examples/injected name the upstream kube-controller-manager and
// kube-scheduler images; the harness builds images of that name from the
// same version's sources, so the manifests apply as shipped and nothing is
// pulled.
const (
	FanoutImage            = "ghcr.io/fanout-dev/fanout:dev"
	PauseImage             = "localhost/fanout-e2e/pause:v1"
	PodClientImage         = "localhost/fanout-e2e/podclient:v1"
	ControllerManagerImage = "registry.k8s.io/kube-controller-manager:" // + version
	SchedulerImage         = "registry.k8s.io/kube-scheduler:"          // + version
	// APIServerImage and EtcdImage run a hosted control plane's
	// kube-apiserver replicas and its etcd as pods (StartHosted).
	APIServerImage = "localhost/fanout-e2e/kube-apiserver:" // + version
	EtcdImage      = "localhost/fanout-e2e/etcd:v1"
)

// Image is an OCI image layout tarball and the reference it is imported as.
type Image struct {
	Ref string
	Tar string
}

// NodeImages are the images a real node gets.
type NodeImages struct {
	// Fanout is `make image`: /fanout (the entrypoint) and
	// /fanout-injector, user 65532:65532.
	Fanout Image
	// Pause is containerd's sandbox image.
	Pause Image
	// PodClient is e2e/cmd/podclient at /podclient.
	PodClient Image
	// ControllerManager and Scheduler hold static builds of the cached
	// Kubernetes version in /usr/local/bin, run as root unless the pod says
	// otherwise, like the upstream images.
	ControllerManager Image
	Scheduler         Image
	// APIServer is kube-apiserver like the two above; Etcd is
	// e2e/cmd/etcd at /etcd.
	APIServer Image
	Etcd      Image
}

// All lists the images.
func (im *NodeImages) All() []Image {
	return []Image{im.Fanout, im.Pause, im.PodClient, im.ControllerManager, im.Scheduler, im.APIServer, im.Etcd}
}

var nodeImages struct {
	once sync.Once
	im   *NodeImages
	err  error
}

// BuildNodeImages builds the node's images once per process into a
// directory removed at the end of Main: fanout's with `make image` (exactly
// what users and CI build), the others with hack/image from static builds.
func BuildNodeImages(ctx context.Context, bins *Bins, progress io.Writer) (*NodeImages, error) {
	nodeImages.once.Do(func() {
		nodeImages.im, nodeImages.err = buildNodeImages(ctx, bins, progress)
	})
	return nodeImages.im, nodeImages.err
}

func buildNodeImages(ctx context.Context, bins *Bins, progress io.Writer) (*NodeImages, error) {
	if progress == nil {
		progress = os.Stderr
	}
	begin := time.Now()
	modDir, err := ModuleDir()
	if err != nil {
		return nil, err
	}
	root := filepath.Dir(modDir)
	dir, err := os.MkdirTemp("", "fanout-e2e-"+runID()+"-")
	if err != nil {
		return nil, err
	}
	register(func() { os.RemoveAll(dir) })

	im := &NodeImages{
		Fanout:            Image{Ref: FanoutImage, Tar: filepath.Join(dir, "fanout-image.tar")},
		Pause:             Image{Ref: PauseImage, Tar: filepath.Join(dir, "pause.tar")},
		PodClient:         Image{Ref: PodClientImage, Tar: filepath.Join(dir, "podclient.tar")},
		ControllerManager: Image{Ref: ControllerManagerImage + bins.Version, Tar: filepath.Join(dir, "kube-controller-manager.tar")},
		Scheduler:         Image{Ref: SchedulerImage + bins.Version, Tar: filepath.Join(dir, "kube-scheduler.tar")},
		APIServer:         Image{Ref: APIServerImage + bins.Version, Tar: filepath.Join(dir, "kube-apiserver.tar")},
		Etcd:              Image{Ref: EtcdImage, Tar: filepath.Join(dir, "etcd.tar")},
	}
	if err := runCmdWithProgress(ctx, root, "make", []string{"image", "BIN=" + filepath.Join(dir, "bin"), "IMAGE_TAR=" + im.Fanout.Tar, "IMAGE_REF=" + FanoutImage}, nil, progress, "make image"); err != nil {
		return nil, err
	}
	tool := filepath.Join(dir, "image-tool")
	if err := runWithProgress(ctx, filepath.Join(root, "hack", "image"), []string{"build", "-o", tool, "."}, progress, "building hack/image"); err != nil {
		return nil, err
	}
	static := []string{"CGO_ENABLED=0"}
	for _, c := range []struct{ name, pkg string }{{"pause", "./cmd/pause"}, {"podclient", "./cmd/podclient"}, {"etcd", "./cmd/etcd"}} {
		if err := runWithProgressEnv(ctx, modDir, []string{"build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bin", c.name), c.pkg}, static, progress, "building "+c.name); err != nil {
			return nil, err
		}
	}
	staticDir, err := bins.StaticBinaries(ctx, progress)
	if err != nil {
		return nil, err
	}
	builds := []struct {
		img                   Image
		bin, user, entry, dir string
	}{
		{im.Pause, filepath.Join(dir, "bin", "pause"), "65535:65535", "/pause", "/"},
		{im.PodClient, filepath.Join(dir, "bin", "podclient"), "65532:65532", "/podclient", "/"},
		{im.ControllerManager, filepath.Join(staticDir, "kube-controller-manager"), "0:0", "/usr/local/bin/kube-controller-manager", "/usr/local/bin"},
		{im.Scheduler, filepath.Join(staticDir, "kube-scheduler"), "0:0", "/usr/local/bin/kube-scheduler", "/usr/local/bin"},
		{im.APIServer, filepath.Join(staticDir, "kube-apiserver"), "0:0", "/usr/local/bin/kube-apiserver", "/usr/local/bin"},
		{im.Etcd, filepath.Join(dir, "bin", "etcd"), "0:0", "/etcd", "/"},
	}
	for _, b := range builds {
		args := []string{"-o", b.img.Tar, "-tag", b.img.Ref, "-user", b.user, "-entrypoint", b.entry, "-dir", b.dir, b.bin}
		if err := runCmdWithProgress(ctx, root, tool, append([]string{"build"}, args...), nil, progress, "building image "+b.img.Ref); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(progress, "harness: node images built in %s\n", time.Since(begin).Round(time.Second))
	return im, nil
}
