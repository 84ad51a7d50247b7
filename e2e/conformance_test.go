package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// conformanceAPIOnly selects, among upstream's [Conformance] specs (the
// Conformance label), the ones that need no running container: the control
// plane has no kubelet, so a spec that waits for a pod to run, serve, log or
// exit would only time out, the same way directly and through fanout. Each
// entry is matched against the spec's full name (a ginkgo focus regexp);
// entries are the API-object and API-machinery specs by SIG, and leave out
// webhooks and aggregated apiservers backed by pods, DNS, Services with
// endpoints, probes, volumes, kubectl commands against pods, and workload
// controllers whose specs wait for Ready replicas.
var conformanceAPIOnly = []string{
	// sig-api-machinery: everything but webhooks (CustomResourceFieldSelectors
	// deploys a conversion webhook too), the sample aggregated apiserver,
	// namespaces holding running pods, the continue-token expiry spec (it
	// waits for etcd compaction), and Discovery and Table transformation,
	// whose BeforeEach parses the server's version: the harness builds
	// kube-apiserver without version stamps, so it reports
	// v0.0.0-master+$Format:%H$ and they fail before their first request.
	`\[sig-api-machinery\] API priority and fairness`,
	`\[sig-api-machinery\] AggregatedDiscovery`,
	`\[sig-api-machinery\] CustomResourceDefinition`,
	`\[sig-api-machinery\] CustomResourcePublishOpenAPI`,
	`\[sig-api-machinery\] FieldValidation`,
	`\[sig-api-machinery\] Garbage collector`,
	`\[sig-api-machinery\] MutatingAdmissionPolicy`,
	`\[sig-api-machinery\] Namespaces should (apply|patch)`,
	`\[sig-api-machinery\] Namespaces should ensure that all services are removed`,
	`\[sig-api-machinery\] ResourceQuota`,
	`\[sig-api-machinery\] StorageVersionMigration`,
	`\[sig-api-machinery\] ValidatingAdmissionPolicy`,
	`\[sig-api-machinery\] Watchers`,
	`\[sig-api-machinery\] server version`,
	// sig-apps: API operations only.
	`\[sig-apps\] CronJob should support CronJob API operations`,
	`\[sig-apps\] DisruptionController Listing PodDisruptionBudgets`,
	`\[sig-apps\] DisruptionController should create a PodDisruptionBudget`,
	`\[sig-apps\] ReplicationController should surface a failure condition`,
	// sig-architecture: the 3 registered (fake, Ready) nodes.
	`\[sig-architecture\] Conformance Tests`,
	// sig-auth
	`\[sig-auth\] Certificates API`,
	`\[sig-auth\] ServiceAccounts should (allow opting out|create a serviceAccountToken|guarantee kube-root-ca.crt|run through the lifecycle|update a ServiceAccount)`,
	`\[sig-auth\] SubjectReview`,
	// sig-cli: kubectl commands that need no pod (but not kubectl version,
	// which parses the unstamped versions).
	`\[sig-cli\] Kubectl client Kubectl (api-versions|cluster-info)`,
	// sig-instrumentation
	`\[sig-instrumentation\] Events`,
	// sig-network: API objects and the apiservers' own Service.
	`\[sig-network\] API Server`,
	`\[sig-network\] EndpointSlice should (create and delete|support creating)`,
	`\[sig-network\] EndpointSliceMirroring`,
	`\[sig-network\] Endpoints should test the lifecycle`,
	`\[sig-network\] EndpointsController should create and delete`,
	`\[sig-network\] Ingress API`,
	`\[sig-network\] IngressClass API`,
	`\[sig-network\] ServiceCIDR and IPAddress API`,
	`\[sig-network\] Services should (complete a service status lifecycle|delete a collection of services|find a service from listing)`,
	// sig-node: API objects, admission and validation of pods.
	`\[sig-node\] ConfigMap should (fail to create|run through|update ConfigMap)`,
	`\[sig-node\] Lease`,
	`\[sig-node\] Node Lifecycle`,
	`\[sig-node\] PodTemplates`,
	`\[sig-node\] Pods Extended Pods Set QOS Class`,
	`\[sig-node\] RuntimeClass should (reject|support)`,
	`\[sig-node\] Secrets should (fail to create|patch a secret)`,
	`\[sig-node\] Sysctls \[LinuxOnly\] should reject invalid sysctls`,
	`\[sig-node\] \[DRA\] CRUD Tests`,
	// sig-scheduling
	`\[sig-scheduling\] LimitRange`,
	// sig-storage: API objects only.
	`\[sig-storage\] CSIInlineVolumes`,
	`\[sig-storage\] CSINodes`,
	`\[sig-storage\] CSIStorageCapacity`,
	`\[sig-storage\] (ConfigMap|Secrets) should be immutable`,
	`\[sig-storage\] PersistentVolumes CSI Conformance`,
	`\[sig-storage\] StorageClasses`,
	`\[sig-storage\] VolumeAttachment`,
	`\[sig-storage\] VolumeAttributesClass`,
}

// conformanceSlow are API-only specs left out because each spends 10 s or
// more waiting by design (a watch or a garbage collector given time to do
// something it must not, a controller resync): with "API chunking should
// return chunks" (21 s) and "PodCertificateRequest API" (10 s), left out of
// conformanceAPIOnly, together 251 of the 500 s a direct run of all 135
// API-only specs took (their durations from e2e.test's JUnit report).
var conformanceSlow = []string{
	`CustomResourceDefinition Watch`,                                                               // 63 s
	`Garbage collector should orphan pods created by rc`,                                           // 44 s
	`ResourceQuota should create a ResourceQuota and capture the life of a (configMap|secret)`,     // 26 s, 12 s
	`ResourceQuota should verify ResourceQuota with terminating scopes`,                            // 24 s
	`Garbage collector should not delete dependents`,                                               // 17 s
	`Garbage collector should keep the rc around`,                                                  // 13 s
	`CustomResourcePublishOpenAPI .* works for multiple CRDs of same group but different versions`, // 11 s
	`Garbage collector should delete pods created by rc`,                                           // 10 s
}

// conformanceMinPassed is the least number of selected specs that must pass
// directly: far fewer means the selection or the control plane broke, and a
// comparison of two nearly empty pass sets would prove nothing.
const conformanceMinPassed = 100

// conformanceRun is one run of e2e.test against one kubeconfig.
type conformanceRun struct {
	name     string
	start    time.Time
	duration time.Duration
	specs    []harness.SpecResult
	log      string
}

func (r *conformanceRun) passed() []string {
	return harness.SpecNames(r.specs, harness.SpecResult.Passed)
}

func (r *conformanceRun) failed() []string {
	return harness.SpecNames(r.specs, harness.SpecResult.Failed)
}

// ran are the specs the filters selected: ginkgo reports the others as
// skipped too, with the message "skipped" alone (a spec that skips itself
// at run time says why).
func (r *conformanceRun) ran() []harness.SpecResult {
	var out []harness.SpecResult
	for _, s := range r.specs {
		if s.Status != "skipped" || strings.TrimSpace(s.Message) != "skipped" {
			out = append(out, s)
		}
	}
	return out
}

// TestConformanceThroughFanout runs upstream's API-only conformance specs
// (conformanceAPIOnly) with e2e.test of the same Kubernetes version twice on
// a control plane of its own: directly against an apiserver as user
// e2e-conformance, then with the same credentials through a fanout
// sidecar. The specs that pass must be the same both ways.
//
// It runs only with FANOUT_CONFORMANCE=1 (`make conformance`): with the
// e2e.test build it adds about 14 minutes, which a cold `.ci/run` (make
// test) has no room for within its 70-minute budget.
func TestConformanceThroughFanout(t *testing.T) {
	if os.Getenv("FANOUT_CONFORMANCE") != "1" {
		t.Skip("set FANOUT_CONFORMANCE=1 to run it (make conformance)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	bin, err := harness.ConformanceBinary(ctx, testLogWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := harness.Start(ctx, t, harness.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	// Namespaces, service accounts, garbage collection, quotas and the
	// root CA ConfigMap are the controller manager's work; it talks to the
	// apiservers directly, so only the suite's own requests differ between
	// the runs. No scheduler: pods stay unbound, and unbound pods are
	// deleted at once, so namespaces empty without a kubelet.
	kcm, err := cp.ControllerManagerKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// A quota's status is reset on the controller's full resync, 5 min
	// by default; "should apply changes to a resourcequota status" waits
	// for it.
	if _, err := cp.StartControllerManager(t, kcm, "--resource-quota-sync-period=15s"); err != nil {
		t.Fatal(err)
	}
	const user = "e2e-conformance"
	kubeconfig, err := cp.UserKubeconfig(user, "system:masters")
	if err != nil {
		t.Fatal(err)
	}

	direct := runConformance(ctx, t, cp, bin, "direct", kubeconfig)
	sidecar, err := cp.StartFanout(ctx, t, user, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	through := runConformance(ctx, t, cp, bin, "fanout", sidecar.Kubeconfig)

	spread, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
		return e.User.Username == user && !e.RequestReceivedTimestamp.Before(through.start) &&
			e.RequestReceivedTimestamp.Before(through.start.Add(through.duration))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through fanout, the suite's requests (user %s) per apiserver: %s", user, harness.FormatShares(spread))
	// Proof that the second run went through fanout: the direct run's
	// kubeconfig names apiserver 1 only.
	for i, share := range harness.Shares(spread) {
		if share < 0.2 {
			t.Errorf("apiserver %d served %.1f%% of the requests of the run through fanout, want at least 20%% (each served 32.5–33.8%% when measured)", i+1, 100*share)
		}
	}

	if n := len(direct.passed()); n < conformanceMinPassed {
		t.Errorf("only %d selected specs passed directly, want at least %d: the selection or the control plane is broken; see %s", n, conformanceMinPassed, direct.log)
	}
	dp, fp := direct.passed(), through.passed()
	for _, name := range harness.Difference(dp, fp) {
		t.Errorf("passed directly, not through fanout: %s", name)
	}
	for _, name := range harness.Difference(fp, dp) {
		t.Errorf("passed through fanout, not directly: %s", name)
	}
	if t.Failed() {
		t.Logf("e2e.test output: %s (direct), %s (through fanout); fanout's log: %s", direct.log, through.log, sidecar.LogPath)
	}
}

// runConformance runs e2e.test once against kubeconfig and reads its JUnit
// report.
func runConformance(ctx context.Context, t *testing.T, cp *harness.ControlPlane, bin, name, kubeconfig string) *conformanceRun {
	t.Helper()
	dir := filepath.Join(cp.Dir, "conformance-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &conformanceRun{name: name, log: filepath.Join(dir, "e2e.test.log")}
	logFile, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	args := conformanceArgs(cp, kubeconfig, dir)
	fmt.Fprintf(logFile, "%s %s\n", bin, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	// Nothing from the developer's environment (KUBECONFIG, ~/.kube) may
	// leak in.
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t.Logf("conformance %s: running %d spec patterns with e2e.test against %s; output in %s", name, len(conformanceAPIOnly), kubeconfig, r.log)
	r.start = time.Now()
	runErr := runWithTicker(cmd, func(elapsed time.Duration) {
		t.Logf("conformance %s: still running (%s)", name, elapsed.Round(time.Second))
	})
	r.duration = time.Since(r.start)
	// e2e.test exits 1 when a spec fails; the report says which.
	r.specs, err = harness.ReadJUnit(filepath.Join(dir, "junit_01.xml"))
	if err != nil {
		t.Fatalf("conformance %s: e2e.test: %v; %v; last lines of %s:\n%s", name, runErr, err, r.log, tailFile(r.log, 30))
	}
	ran := r.ran()
	var skipped int
	for _, s := range ran {
		if s.Skipped() {
			skipped++
		}
	}
	t.Logf("conformance %s: %d of %d specs selected; %d passed, %d failed, %d skipped at run time, in %s (e2e.test: %v)",
		name, len(ran), len(r.specs), len(r.passed()), len(r.failed()), skipped, r.duration.Round(time.Second), runErr)
	for _, s := range ran {
		if s.Failed() {
			t.Logf("conformance %s: %s: %s", name, s.Status, s.Name)
		}
	}
	return r
}

// conformanceArgs are e2e.test's flags for a control plane without
// kubelets: no waiting for Ready nodes or system pods, the skeleton
// provider, no log dumps from nodes, and the JUnit report in dir.
func conformanceArgs(cp *harness.ControlPlane, kubeconfig, dir string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--provider=skeleton",
		"--kubectl-path=" + cp.Bins.Kubectl,
		"--report-dir=" + dir,
		"--e2e-output-dir=" + dir,
		"--allowed-not-ready-nodes=-1",
		"--minStartupPods=-1",
		"--system-pods-startup-timeout=10s",
		"--disable-log-dump",
		"--dump-logs-on-failure=false",
		"--ginkgo.label-filter=Conformance",
		// The same order both ways: a spec that leaves something behind
		// then affects the same specs in both runs.
		"--ginkgo.seed=1",
		"--ginkgo.timeout=30m",
		"--ginkgo.no-color",
	}
	for _, focus := range conformanceAPIOnly {
		args = append(args, "--ginkgo.focus="+focus)
	}
	for _, skip := range conformanceSlow {
		args = append(args, "--ginkgo.skip="+skip)
	}
	return args
}

// runWithTicker runs cmd, calling tick every 30 s until it ends: a run takes
// minutes, and go test -v shows t.Logf lines as they come.
func runWithTicker(cmd *exec.Cmd, tick func(elapsed time.Duration)) error {
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ticker := time.NewTicker(30 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-ticker.C:
			tick(time.Since(start))
		}
	}
}

// tailFile returns the last n lines of path.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testLogWriter sends the harness's progress lines to t.Logf.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
