package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	fanoutclient "github.com/fanout-dev/fanout/client"
	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestLibrary is fanout linked into a client-go program (package client)
// instead of run as a sidecar: the program's own rest.Config, wrapped
// once. Its requests spread evenly over the three apiservers, and it sees
// no error while one of them restarts gracefully under load, with an
// informer watching throughout. The controller-runtime example, built and
// run as a program of its own, spreads its reconciles' requests too.
func TestLibrary(t *testing.T) {
	// Its own control plane: the restart would skew the spread tests'
	// shares on the shared one.
	ctx, cp := ownControlPlane(t, 15*time.Minute, harness.Options{})
	const user, ns = "e2e-library-client", "e2e-library"
	// 1. Spread: the sidecar tests' workload, 33% ± 5 points each.
	librarySpread(ctx, t, cp, user, ns)
	kubeconfig, err := cp.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := harness.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The kubeconfig names the first apiserver; the library learns the
	// others from the same --endpoints list the sidecar tests use.
	b, err := fanoutclient.New(direct, fanoutclient.WithEndpoints(strings.Join(cp.Endpoints(), ",")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := b.Config()

	// 2. A controller-runtime manager (examples/controller-runtime) that
	// opted in with one call, as its own user.
	runControllerRuntimeExample(ctx, t, cp)

	// 3. Graceful restart under load, as TestGracefulRestartUnderLoad
	// does through the sidecar, with an informer on the same config.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lastEvent atomic.Int64 // UnixNano of the informer's latest event
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	mark := func(any) { lastEvent.Store(time.Now().UnixNano()) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: mark, UpdateFunc: func(_, n any) { mark(n) }, DeleteFunc: mark,
	}); err != nil {
		t.Fatal(err)
	}
	stopInformer := make(chan struct{})
	factory.Start(stopInformer)
	defer func() { close(stopInformer); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer through the library did not sync")
	}

	load := startLoad(ctx, t, cfg, ns, "lib")
	victim := cp.APIServers[len(cp.APIServers)-1]
	time.Sleep(5 * time.Second)
	restartGracefully(ctx, t, victim)
	// The prober checks /readyz every 2s; give traffic time to come back.
	time.Sleep(15 * time.Second)
	load.Stop()
	ready := victim.ReadyAt()
	early := servedBetween(t, cp, victim, user, victim.StartedAt(), ready.Add(-time.Second))
	late := servedBetween(t, cp, victim, user, ready, time.Now())
	t.Logf("%d requests sent, %d cycles failed; after its restart apiserver %d served %d of the library's requests before ready and %d after; endpoints: %+v",
		load.sent.Load(), load.failed.Load(), victim.Index+1, early, late, b.Endpoints())
	load.reportErrors(t)
	if early > 0 {
		t.Errorf("apiserver %d served %d requests after its restart but before its /readyz passed", victim.Index+1, early)
	}
	if late == 0 {
		t.Errorf("apiserver %d served nothing in the 15 s after it was ready again: the library did not take it back", victim.Index+1)
	}
	if last := time.Unix(0, lastEvent.Load()); !last.After(ready) {
		t.Errorf("the informer's last event came at %s, before apiserver %d was back (%s): its watch did not survive the restart",
			last.Format(time.RFC3339Nano), victim.Index+1, ready.Format(time.RFC3339Nano))
	}
	// The load stopped, possibly mid-cycle: the informer must converge on
	// what the apiserver holds.
	want := map[string]bool{}
	list, err := cp.AdminClient.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		want[cm.Name] = true
	}
	var got map[string]bool
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got = map[string]bool{}
		for _, o := range inf.GetStore().List() {
			got[o.(*corev1.ConfigMap).Name] = true
		}
		if maps.Equal(got, want) || time.Now().After(deadline) {
			break
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the informer holds ConfigMaps %v, the apiserver %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
}

// runControllerRuntimeExample builds examples/controller-runtime (a module
// of its own), runs it as user e2e-library-manager on a namespace, creates
// ConfigMaps for it to reconcile (each reconcile is one live GET) and checks
// that every apiserver served a fair share of the program's requests and
// that it exits cleanly on SIGTERM.
func runControllerRuntimeExample(ctx context.Context, t *testing.T, cp *harness.ControlPlane) {
	t.Helper()
	const user, ns, objects = "e2e-library-manager", "e2e-library-cr", 90
	modDir, err := harness.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "controller-runtime-example")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(filepath.Dir(modDir), "examples", "controller-runtime")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/controller-runtime: %v\n%s", err, out)
	}
	kubeconfig, err := cp.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	userNamespace(ctx, t, cp, ns, user)
	logPath := filepath.Join(dir, "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--namespace", ns, "--metrics-address", "0",
		"--endpoints", strings.Join(cp.Endpoints(), ","))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("last lines of the manager's log:\n%s", harness.Tail(logPath, 30))
		}
	}()
	reconciled := func() int {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), `"reconciled"`)
	}
	started := func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "Starting workers")
	}
	for deadline := time.Now().Add(2 * time.Minute); !started(); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("the controller-runtime example exited before starting its workers: %v\n%s", err, harness.Tail(logPath, 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the controller-runtime example did not start its workers within 2 minutes")
		}
	}
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cr-%d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cp.AdminClient.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); reconciled() < objects; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the controller-runtime example reconciled %d of %d ConfigMaps within a minute", reconciled(), objects)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the controller-runtime example exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the controller-runtime example did not exit within a minute of SIGTERM")
	}
	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("controller-runtime example: %d reconciles; served: %s", reconciled(), harness.FormatShares(counts))
	checkServedAll(t, counts, objects)
	for i, s := range harness.Shares(counts) {
		if s < 0.2 {
			t.Errorf("apiserver %d served %.1f%% of the controller-runtime example's requests, want at least 20%% (%s)", i+1, 100*s, harness.FormatShares(counts))
		}
	}
}
