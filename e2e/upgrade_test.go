package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/fanout-dev/fanout/e2e/harness"
)

const (
	upgradeNS   = "e2e-upgrade"
	upgradePod  = "streams"
	upgradeUser = "e2e-upgrade"
	// forwardBytes is what port-forward carries each way.
	forwardBytes = 12 << 20
)

// upgradeEnv is one kubelet stand-in, a Running pod on it, and a fanout
// sidecar for kubectl.
type upgradeEnv struct {
	cp      *harness.ControlPlane
	kubelet *harness.Kubelet
	sidecar *harness.Fanout
	dir     string
}

func newUpgradeEnv(t *testing.T) (context.Context, *upgradeEnv) {
	t.Helper()
	ctx, cp := controlPlane(t, 15*time.Minute)
	kl, err := cp.StartKubelet(ctx, t, "e2e-kubelet-1")
	if err != nil {
		t.Fatal(err)
	}
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upgradeNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller-manager may be running to create it, and the
	// ServiceAccount admission wants it.
	if _, err := admin.CoreV1().ServiceAccounts(upgradeNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: upgradePod, Namespace: upgradeNS},
		Spec: corev1.PodSpec{
			NodeName:                     kl.NodeName,
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "main", Image: "registry.invalid/fake:1", Stdin: true}},
			// Nothing may evict it from a node whose heartbeat never comes.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	created, err := admin.CoreV1().Pods(upgradeNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	created.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "main", Ready: true, Image: "registry.invalid/fake:1", ImageID: "fake",
		ContainerID: "fake://main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	if _, err := admin.CoreV1().Pods(upgradeNS).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), upgradeNS, metav1.DeleteOptions{})
	})

	kubeconfig, err := cp.UserKubeconfig(upgradeUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := cp.StartFanout(ctx, t, upgradeUser, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, &upgradeEnv{cp: cp, kubelet: kl, sidecar: sidecar, dir: t.TempDir()}
}

// kubectl builds a kubectl command through the sidecar with env added to a
// clean environment.
func (e *upgradeEnv) kubectl(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.cp.Bins.Kubectl, append([]string{
		"--kubeconfig", e.sidecar.Kubeconfig, "--cache-dir", filepath.Join(e.dir, "cache"), "-n", upgradeNS,
	}, args...)...)
	cmd.Env = append([]string{"HOME=" + e.dir, "PATH=" + os.Getenv("PATH")}, env...)
	return cmd
}

// protocolCounts are the counters that tell which protocol a stream used.
type protocolCounts struct {
	fanoutSPDY, fanoutWS float64 // fanout_upgrades_total{result="upgraded"}
	translator, tunnel   float64 // summed over every apiserver
	fanoutLong           float64 // fanout_requests_total{kind="long"}
}

func (e *upgradeEnv) counts(ctx context.Context, t *testing.T) protocolCounts {
	t.Helper()
	body := httpGet(ctx, t, "http://"+e.sidecar.AdminAddress+"/metrics")
	c := protocolCounts{
		fanoutSPDY: metricSum(body, "fanout_upgrades_total", `protocol="spdy"`, `result="upgraded"`),
		fanoutWS:   metricSum(body, "fanout_upgrades_total", `protocol="websocket"`, `result="upgraded"`),
		fanoutLong: metricSum(body, "fanout_requests_total", `kind="long"`),
	}
	for _, a := range e.cp.APIServers {
		cfg := rest.CopyConfig(e.cp.Admin)
		cfg.Host = a.URL
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatalf("apiserver %d /metrics: %v", a.Index+1, err)
		}
		c.translator += metricSum(string(raw), "apiserver_stream_translator_requests_total")
		c.tunnel += metricSum(string(raw), "apiserver_stream_tunnel_requests_total")
	}
	return c
}

func (c protocolCounts) minus(o protocolCounts) protocolCounts {
	return protocolCounts{
		fanoutSPDY: c.fanoutSPDY - o.fanoutSPDY, fanoutWS: c.fanoutWS - o.fanoutWS,
		translator: c.translator - o.translator, tunnel: c.tunnel - o.tunnel,
		fanoutLong: c.fanoutLong - o.fanoutLong,
	}
}

func httpGet(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricSum adds the values of every sample of name whose labels contain
// all of labels, from Prometheus text exposition.
func metricSum(body, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// protocols are kubectl's two stream protocols, chosen by environment.
var protocols = []struct {
	name      string
	websocket bool
}{{"spdy", false}, {"websocket", true}}

func protocolEnv(websocket bool) []string {
	v := strconv.FormatBool(websocket)
	return []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + v, "KUBECTL_PORT_FORWARD_WEBSOCKETS=" + v}
}

// checkProtocol fails t unless exactly the upgrades of the wanted protocol
// went through fanout, and the apiservers' own counter (translator for
// exec, tunnel for port-forward) moved only for WebSocket: kubectl falls
// back to SPDY silently when a WebSocket upgrade fails.
func checkProtocol(t *testing.T, d protocolCounts, websocket bool, upgrades float64, apiserver func(protocolCounts) float64) {
	t.Helper()
	t.Logf("through fanout: %v SPDY, %v WebSocket upgrades; apiservers' WebSocket counter +%v", d.fanoutSPDY, d.fanoutWS, apiserver(d))
	wantSPDY, wantWS, wantAPI := upgrades, 0.0, 0.0
	if websocket {
		wantSPDY, wantWS, wantAPI = 0, upgrades, 1
	}
	if d.fanoutSPDY != wantSPDY || d.fanoutWS != wantWS {
		t.Errorf("fanout upgraded %v SPDY and %v WebSocket connections, want %v and %v", d.fanoutSPDY, d.fanoutWS, wantSPDY, wantWS)
	}
	if got := apiserver(d); (got > 0) != (wantAPI > 0) {
		t.Errorf("the apiservers' WebSocket counter moved by %v; want it to move only for WebSocket (websocket=%v)", got, websocket)
	}
}

func TestUpgradesThroughFanout(t *testing.T) {
	ctx, e := newUpgradeEnv(t)

	for _, p := range protocols {
		t.Run("exec/"+p.name, func(t *testing.T) {
			before := e.counts(ctx, t)
			input := strings.Repeat("hello through fanout\n", 1000)
			e.execCat(ctx, t, p.websocket, input, "main", "cat")

			cmd := e.kubectl(ctx, protocolEnv(p.websocket), "exec", upgradePod, "-c", "main", "--", "exit", "3")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Errorf("kubectl exec exit 3: %v, want exit code 3\n%s", err, out)
			}
			// attach: the stand-in's container echoes stdin too.
			cmd = e.kubectl(ctx, protocolEnv(p.websocket), "attach", "-i", upgradePod, "-c", "main")
			cmd.Stdin = strings.NewReader(input)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err = cmd.Output()
			if err != nil {
				t.Fatalf("kubectl attach -i: %v\n%s", err, stderr.String())
			}
			if string(out) != input {
				t.Errorf("kubectl attach echoed %d bytes, want the %d sent back unchanged", len(out), len(input))
			}
			checkProtocol(t, e.counts(ctx, t).minus(before), p.websocket, 3, func(c protocolCounts) float64 { return c.translator })
		})
	}

	for _, p := range protocols {
		t.Run("port-forward/"+p.name, func(t *testing.T) {
			before := e.counts(ctx, t)
			sumsBefore := len(e.kubelet.EchoSums())
			local := startPortForward(t, e.kubectl(ctx, protocolEnv(p.websocket), "port-forward", "pod/"+upgradePod, ":8080"))

			start := time.Now()
			sent, got := transferEcho(t, local, forwardBytes)
			took := time.Since(start)
			if sent != got {
				t.Fatalf("port-forward echoed sha256 %s, sent %s", got, sent)
			}
			t.Logf("port-forward over %s: %d MiB each way in %v (%.1f MiB/s each way)",
				p.name, forwardBytes>>20, took.Round(time.Millisecond), float64(forwardBytes>>20)/took.Seconds())
			// The far side's own sums: what reached the pod's port is
			// what was sent, and it sent the same back.
			deadline := time.Now().Add(30 * time.Second)
			for len(e.kubelet.EchoSums()) == sumsBefore && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			sums := e.kubelet.EchoSums()
			if len(sums) != sumsBefore+1 {
				t.Fatalf("the pod's port saw %d new connections, want 1", len(sums)-sumsBefore)
			}
			if s := sums[len(sums)-1]; s.Bytes != forwardBytes || s.SHA256 != sent {
				t.Errorf("the pod's port received %d bytes with sha256 %s, want %d with %s", s.Bytes, s.SHA256, forwardBytes, sent)
			}
			checkProtocol(t, e.counts(ctx, t).minus(before), p.websocket, 1, func(c protocolCounts) float64 { return c.tunnel })

			// For comparison only: the same transfer with kubectl talking
			// to the first apiserver directly.
			direct := exec.CommandContext(ctx, e.cp.Bins.Kubectl, "--kubeconfig", e.cp.AdminKubeconfig, "--cache-dir", filepath.Join(e.dir, "cache-direct"),
				"-n", upgradeNS, "port-forward", "pod/"+upgradePod, ":8080")
			direct.Env = append([]string{"HOME=" + e.dir, "PATH=" + os.Getenv("PATH")}, protocolEnv(p.websocket)...)
			local = startPortForward(t, direct)
			start = time.Now()
			if sent, got := transferEcho(t, local, forwardBytes); sent != got {
				t.Fatalf("direct port-forward echoed sha256 %s, sent %s", got, sent)
			}
			took = time.Since(start)
			t.Logf("port-forward over %s without fanout: %d MiB each way in %v (%.1f MiB/s each way)",
				p.name, forwardBytes>>20, took.Round(time.Millisecond), float64(forwardBytes>>20)/took.Seconds())
		})
	}

	t.Run("exec/passthrough-token", func(t *testing.T) { testExecWithOwnToken(ctx, t, e) })

	t.Run("exec-outlives-shutdown-start", func(t *testing.T) { testExecOutlivesShutdownStart(ctx, t, e) })

	t.Run("logs-follow", func(t *testing.T) {
		before := e.counts(ctx, t)
		e.kubelet.Log("line 0")
		lines, stderr, exited := startLines(t, e.kubectl(ctx, nil, "logs", "-f", upgradePod, "-c", "main"))
		next := func(want string) {
			t.Helper()
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl logs -f ended before %q; stderr:\n%s", want, stderr.String())
				}
				if l != want {
					t.Fatalf("kubectl logs -f printed %q, want %q", l, want)
				}
			case <-time.After(time.Minute):
				t.Fatalf("%q did not arrive within a minute while the stream stayed open: not streamed", want)
			}
		}
		next("line 0")
		for i := 1; i <= 3; i++ {
			// Each line is written only after the previous one arrived:
			// a proxy that buffered the stream would never show it.
			time.Sleep(500 * time.Millisecond)
			e.kubelet.Log(fmt.Sprintf("line %d", i))
			next(fmt.Sprintf("line %d", i))
		}
		select {
		case <-exited:
			t.Errorf("kubectl logs -f exited while following; stderr:\n%s", stderr.String())
		default:
		}
		if d := e.counts(ctx, t).minus(before); d.fanoutLong < 1 {
			t.Errorf("fanout_requests_total{kind=\"long\"} moved by %v: the log stream did not go through fanout", d.fanoutLong)
		}
	})
}

// testExecWithOwnToken runs kubectl exec with a service account's token
// through the sidecar of a system:masters user: fanout must pass the
// token on without its own client certificate (passthrough), so the
// apiserver judges the service account, not the sidecar's identity.
func testExecWithOwnToken(ctx context.Context, t *testing.T, e *upgradeEnv) {
	admin := e.cp.AdminClient
	token := func(name string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts(upgradeNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		exp := int64(3600)
		tr, err := admin.CoreV1().ServiceAccounts(upgradeNS).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: upgradeNS},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
		},
	}
	if _, err := admin.RbacV1().Roles(upgradeNS).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: upgradeNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "exec"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "execer", Namespace: upgradeNS}},
	}
	if _, err := admin.RbacV1().RoleBindings(upgradeNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	allowed, denied := token("execer"), token("nobody")
	if err := e.cp.WaitAuthorized(ctx, "system:serviceaccount:"+upgradeNS+":execer", "get", "pods", upgradeNS); err != nil {
		t.Fatal(err)
	}

	// kubectl never sends a token to an http:// server (clientcmd reads
	// credentials only for TLS), so the client here is client-go itself,
	// as a controller with its own rest.Config would be.
	execAs := func(token string, websocket bool, cmd ...string) (string, error) {
		cfg := &rest.Config{Host: "http://" + e.sidecar.ListenAddress, BearerToken: token}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return "", err
		}
		req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(upgradeNS).Name(upgradePod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "main", Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		var ex remotecommand.Executor
		if websocket {
			ex, err = remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		} else {
			ex, err = remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
		}
		if err != nil {
			return "", err
		}
		var out, errb bytes.Buffer
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
		return out.String(), err
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			before := e.counts(ctx, t)
			rejectedBefore := metricSum(httpGet(ctx, t, "http://"+e.sidecar.AdminAddress+"/metrics"),
				"fanout_upgrades_total", `protocol="`+p.name+`"`, `result="rejected"`)
			// The service account without rights: the apiserver's 403
			// comes back through fanout. Had fanout sent its client
			// certificate, the system:masters sidecar user would have
			// been let in.
			out, err := execAs(denied, p.websocket, "echo", "hi")
			if err == nil {
				t.Errorf("exec with a token without rights ran (%q); want it forbidden", out)
			} else if !p.websocket && !strings.Contains(err.Error(), "system:serviceaccount:"+upgradeNS+":nobody") {
				t.Errorf("exec with a token without rights: %v; want forbidden for the service account", err)
			}
			// The one with rights; RBAC reaches each apiserver in its own
			// time.
			deadline := time.Now().Add(time.Minute)
			for {
				out, err = execAs(allowed, p.websocket, "echo", "as", "execer")
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil || out != "as execer\n" {
				t.Fatalf("exec with the service account's token: %q, %v", out, err)
			}
			rejected := func() float64 {
				body := httpGet(ctx, t, "http://"+e.sidecar.AdminAddress+"/metrics")
				return metricSum(body, "fanout_upgrades_total", `protocol="`+p.name+`"`, `result="rejected"`)
			}
			if got := rejected() - rejectedBefore; got != 1 {
				t.Errorf("fanout counted %v rejected %s upgrades, want the forbidden one", got, p.name)
			}
			d := e.counts(ctx, t).minus(before)
			if got := map[bool]float64{false: d.fanoutSPDY, true: d.fanoutWS}[p.websocket]; got < 1 {
				t.Errorf("fanout counted %v %s upgrades, want the exec's", got, p.name)
			}
		})
	}
}

// testExecOutlivesShutdownStart holds an exec open through a sidecar
// that gets SIGTERM: ending long-running responses (what fanout does to
// watches at once) must not cut it; it gets the shutdown grace, then is
// closed.
func testExecOutlivesShutdownStart(ctx context.Context, t *testing.T, e *upgradeEnv) {
	const grace = 6 * time.Second
	kubeconfig, err := e.cp.UserKubeconfig(upgradeUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := e.cp.StartFanout(ctx, t, upgradeUser+"-grace", kubeconfig, "--shutdown-grace", grace.String())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, e.cp.Bins.Kubectl, "--kubeconfig", sidecar.Kubeconfig, "--cache-dir", filepath.Join(e.dir, "cache-grace"),
		"-n", upgradeNS, "exec", "-i", upgradePod, "-c", "main", "--", "cat")
	cmd.Env = []string{"HOME=" + e.dir, "PATH=" + os.Getenv("PATH")}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	lines, stderr, exited := startLines(t, cmd)
	roundTrip := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
			t.Fatalf("writing %q to kubectl exec: %v; stderr:\n%s", msg, err, stderr.String())
		}
		select {
		case l, ok := <-lines:
			if !ok || l != msg {
				t.Fatalf("kubectl exec cat gave %q (open %v), want %q; stderr:\n%s", l, ok, msg, stderr.String())
			}
		case <-time.After(time.Minute):
			t.Fatalf("no echo of %q within a minute; stderr:\n%s", msg, stderr.String())
		}
	}
	roundTrip("before SIGTERM")

	stopped := make(chan error, 1)
	sigterm := time.Now()
	go func() { stopped <- sidecar.Stop() }()
	// The sidecar has begun its shutdown (and ended its long-running
	// responses) once its listener refuses connections.
	for {
		c, err := net.DialTimeout("tcp", sidecar.ListenAddress, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Since(sigterm) > grace/2 {
			t.Fatalf("the sidecar still accepts connections %v after SIGTERM", time.Since(sigterm))
		}
		time.Sleep(20 * time.Millisecond)
	}
	roundTrip("during the grace")

	select {
	case at := <-exited:
		took := at.Sub(sigterm)
		t.Logf("the exec ended %v after SIGTERM (grace %v)", took.Round(time.Millisecond), grace)
		if took < grace-time.Second {
			t.Errorf("the exec ended %v after SIGTERM, before the %v grace", took, grace)
		}
	case <-time.After(grace + time.Minute):
		t.Fatalf("the exec still runs %v after SIGTERM; the grace was %v", time.Since(sigterm), grace)
	}
	if err := <-stopped; err != nil {
		t.Logf("sidecar exit: %v", err)
	}
}

// startLines starts cmd, a kubectl that streams, and returns the lines it
// prints (closed when its output ends), its stderr, and the time it exits.
// It kills cmd when the test ends.
func startLines(t *testing.T, cmd *exec.Cmd) (lines <-chan string, stderr *bytes.Buffer, exited <-chan time.Time) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Buffered beyond the lines a test writes, so the scanner never blocks
	// once the test stops reading.
	out := make(chan string, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	at, done := make(chan time.Time, 1), make(chan struct{})
	go func() { _ = cmd.Wait(); at <- time.Now(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return out, stderr, at
}

// startPortForward starts a kubectl port-forward and returns its local
// address; it is killed when t ends.
func startPortForward(t *testing.T, pf *exec.Cmd) string {
	t.Helper()
	stdout, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &bytes.Buffer{}
	pf.Stderr = stderr
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pf.Process.Kill()
		_ = pf.Wait()
	})
	return forwardedPort(t, stdout, stderr)
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

// forwardedPort waits for kubectl port-forward to name its local port.
func forwardedPort(t *testing.T, stdout io.Reader, stderr *bytes.Buffer) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case port := <-found:
		return "127.0.0.1:" + port
	case <-time.After(time.Minute):
		t.Fatalf("kubectl port-forward named no local port within a minute; stderr:\n%s", stderr.String())
		return ""
	}
}

// transferEcho sends n pseudo-random bytes to addr while reading the echo,
// and returns the sha256 of what it sent and of what came back.
func transferEcho(t *testing.T, addr string, n int) (sent, got string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	data := make([]byte, n)
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(data)
	writeErr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		writeErr <- err
	}()
	h := sha256.New()
	m, err := io.Copy(h, io.LimitReader(c, int64(n)))
	if err != nil {
		t.Fatalf("reading the echo after %d bytes: %v", m, err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("sending: %v", err)
	}
	if m != int64(n) {
		t.Fatalf("echo carried %d bytes, want %d", m, n)
	}
	return fmt.Sprintf("%x", sum), fmt.Sprintf("%x", h.Sum(nil))
}

// execCat runs `kubectl exec -i` of cat (the command after the container)
// in upgradePod and checks that input comes back unchanged.
func (e *upgradeEnv) execCat(ctx context.Context, t *testing.T, websocket bool, input, container string, cat ...string) {
	t.Helper()
	args := append([]string{"exec", "-i", upgradePod, "-c", container, "--"}, cat...)
	cmd := e.kubectl(ctx, protocolEnv(websocket), args...)
	cmd.Stdin = strings.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl exec cat: %v\n%s", err, stderr.String())
	}
	if string(out) != input {
		t.Errorf("kubectl exec cat echoed %d bytes, want the %d sent back unchanged", len(out), len(input))
	}
}
