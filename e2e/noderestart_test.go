package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The restart-gap test's load and size. podclient sends one discovery
// request every restartGapInterval, one at a time, through client-go
// (which retries a GET that broke on a connection, not a refused one).
const (
	restartGapInterval = 50 * time.Millisecond
	restartGapKills    = 3 // per case: one kill per pod (see TestNodeRestartGap)
)

// TestNodeRestartGap measures, on the real node, what a client meets when
// its fanout sidecar is SIGKILLed and the kubelet restarts it (issue 33),
// without and with `fanout hold` (annotation fanout.dev/hold-listener):
// the failed requests per restart of each, and the refused ones. Each
// fanout container is killed once: the kubelet restarts a container at
// once the first time only, and makes it wait its crash-loop back-off
// (10 s, doubling) on the next ones, which is another figure
// (docs/resilience.md).
//
// Without the holder nothing listens until fanout is back: every request
// in that gap is refused. With it, connections wait in the socket's
// backlog, and only requests in flight on the killed fanout's connections
// may fail; client-go resends those that are GETs, and podclient sends
// only GETs. The test wants, with the holder, none refused and at most one
// failed a restart (and a fifth of the other case's), and without it some
// refused: the kills opened a gap. Measured: docs/resilience.md.
func TestNodeRestartGap(t *testing.T) {
	ctx, e := realNode(t, 6*time.Minute)
	begin := time.Now() // the node is up: what the test itself takes
	const ns = "e2e-node-restart"
	e.namespace(t, ctx, ns)
	e.allowDiscovery(t, ctx, "e2e-node-restart", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})

	type gapPod struct {
		name string
		hold bool
		pod  *corev1.Pod
	}
	var pods []*gapPod
	for i := range restartGapKills {
		for _, hold := range []bool{false, true} {
			name := fmt.Sprintf("gap-own-%d", i)
			if hold {
				name = fmt.Sprintf("gap-hold-%d", i)
			}
			p := podClientPod(name, nil)
			p.Spec.Containers[0].Args = []string{"run", "--interval=" + restartGapInterval.String()}
			if hold {
				p.Annotations = map[string]string{"fanout.dev/hold-listener": "true"}
			}
			if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, &gapPod{name: name, hold: hold})
		}
	}
	for _, gp := range pods {
		ready, err := e.waitPodsReady(ctx, ns, "app="+gp.name, 1, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		gp.pod = &ready[0]
		hasHolder := slices.ContainsFunc(gp.pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "fanout-hold" })
		if sidecar(gp.pod) == nil || hasHolder != gp.hold {
			t.Fatalf("pod %s: fanout injected %v, holder %v; want fanout, and the holder %v", gp.name, sidecar(gp.pod) != nil, hasHolder, gp.hold)
		}
	}

	var own, held []restartGap
	for _, gp := range pods {
		killed, err := e.killFanout(ctx, gp.pod)
		if err != nil {
			t.Fatal(err)
		}
		back, err := e.waitRestarted(ctx, gp.pod, killed, 1)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := e.clientLinesAfter(ctx, gp.pod, back, 10)
		if err != nil {
			t.Fatal(err)
		}
		r := measureGap(lines, killed, back)
		if gp.hold {
			held = append(held, r)
			raw, err := e.sidecarMetrics(ctx, gp.pod)
			if err != nil {
				t.Errorf("%s: reading fanout's /metrics after its restart: %v", gp.name, err)
			} else if !bytes.Contains(raw, []byte("\nfanout_listener_inherited 1\n")) {
				t.Errorf("%s: the restarted fanout does not serve the holder's socket (fanout_listener_inherited is not 1)", gp.name)
			}
		} else {
			own = append(own, r)
		}
		t.Logf("%s: SIGKILL at %s; from 1 s before it: %d requests, %d failed (%d refused); longest wait between two requests %s, ended %s after the kill; fanout seen Ready again %s after it; the new fanout's log after the kill: %s; %v",
			gp.name, killed.Format("15:04:05.000"), r.requests, r.failed, r.refused, r.longest.Round(time.Millisecond), r.longestEnd.Round(time.Millisecond),
			back.Sub(killed).Round(100*time.Millisecond), e.fanoutStartLog(ctx, gp.pod, killed), r.errs)
	}

	sum := func(rs []restartGap) (failed, refused int) {
		for _, r := range rs {
			failed += r.failed
			refused += r.refused
		}
		return failed, refused
	}
	ownFailed, ownRefused := sum(own)
	heldFailed, heldRefused := sum(held)
	t.Logf("failed requests per restart (client-go, one request every %s, %d restarts each): fanout's own socket %.1f (%d refused in all), with fanout hold %.1f (%d refused); %s on the node",
		restartGapInterval, restartGapKills, float64(ownFailed)/restartGapKills, ownRefused, float64(heldFailed)/restartGapKills, heldRefused,
		time.Since(begin).Round(time.Second))
	if ownRefused == 0 {
		t.Errorf("no request was refused during fanout's restarts without the holder: the kills did not open a gap, and the comparison shows nothing")
	}
	if heldRefused > 0 {
		t.Errorf("%d requests were refused with fanout hold: the socket was not held while fanout restarted", heldRefused)
	}
	// Measured: 24 to 30 failed per restart without the holder, none
	// with it. A request in flight at the kill may break (client-go
	// resends a GET, and podclient sends only GETs): at most one a
	// restart, and a fifth of the other case's.
	if heldFailed > restartGapKills || heldFailed*5 > ownFailed {
		t.Errorf("with fanout hold %d requests failed in %d restarts, without %d: want at most one a restart, and a fifth of those without", heldFailed, restartGapKills, ownFailed)
	}
}

// TestNodeCrashLoopGap measures a second SIGKILL of the same fanout
// container soon after the first, which the kubelet answers with its
// crash-loop back-off instead of an immediate restart: how long fanout
// is away then, and what its client meets, without and with `fanout hold`.
// The holder keeps the socket through the back-off, so nothing is
// refused, but a request waits in the backlog until fanout is back, and
// the client's own timeout (podclient: 5 s) ends those that wait longer.
// It wants some refused without the holder in the second restart, none
// with it. Measured: docs/resilience.md. About a minute on the node; left
// out of make test (FANOUT_E2E_LONG=1) for CI's time budget.
func TestNodeCrashLoopGap(t *testing.T) {
	skipUnlessLong(t, "TestNodeRestartGap checks the held socket across a restart")
	ctx, e := realNode(t, 8*time.Minute)
	begin := time.Now()
	const ns = "e2e-node-crashloop"
	e.namespace(t, ctx, ns)
	e.allowDiscovery(t, ctx, "e2e-node-crashloop", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})

	names := map[bool]string{false: "loop-own", true: "loop-hold"}
	for _, hold := range []bool{false, true} {
		p := podClientPod(names[hold], nil)
		p.Spec.Containers[0].Args = []string{"run", "--interval=" + restartGapInterval.String()}
		if hold {
			p.Annotations = map[string]string{"fanout.dev/hold-listener": "true"}
		}
		if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	second := map[bool]restartGap{}
	for _, hold := range []bool{false, true} {
		name := names[hold]
		ready, err := e.waitPodsReady(ctx, ns, "app="+name, 1, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		pod := &ready[0]
		if hasHolder := slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "fanout-hold" }); hasHolder != hold {
			t.Fatalf("pod %s: the holder injected %v, want %v", name, hasHolder, hold)
		}
		var gaps [2]restartGap
		for i := range gaps {
			killed, err := e.killFanout(ctx, pod)
			if err != nil {
				t.Fatal(err)
			}
			back, err := e.waitRestarted(ctx, pod, killed, int32(i+1))
			if err != nil {
				t.Fatal(err)
			}
			lines, err := e.clientLinesAfter(ctx, pod, back, 10)
			if err != nil {
				t.Fatal(err)
			}
			gaps[i] = measureGap(lines, killed, back)
			g := gaps[i]
			t.Logf("%s, kill %d at %s: fanout Ready again %s after it; %d requests from 1 s before it, %d failed (%d refused); longest wait between two requests %s; the new fanout's log after the kill: %s; %v",
				name, i+1, killed.Format("15:04:05.000"), g.back.Round(100*time.Millisecond), g.requests, g.failed, g.refused,
				g.longest.Round(time.Millisecond), e.fanoutStartLog(ctx, pod, killed), g.errs)
		}
		second[hold] = gaps[1]
		if hold {
			raw, err := e.sidecarMetrics(ctx, pod)
			if err != nil {
				t.Errorf("%s: reading fanout's /metrics after its second restart: %v", name, err)
			} else if !bytes.Contains(raw, []byte("\nfanout_listener_inherited 1\n")) {
				t.Errorf("%s: the twice restarted fanout does not serve the holder's socket (fanout_listener_inherited is not 1)", name)
			}
		}
	}
	own, held := second[false], second[true]
	t.Logf("second restart (crash-loop back-off), client-go one request every %s with a 5 s timeout: fanout's own socket away %s, %d failed (%d refused); with fanout hold away %s, %d failed (%d refused), longest wait %s; %s on the node",
		restartGapInterval, own.back.Round(100*time.Millisecond), own.failed, own.refused,
		held.back.Round(100*time.Millisecond), held.failed, held.refused, held.longest.Round(time.Millisecond), time.Since(begin).Round(time.Second))
	if own.refused == 0 {
		t.Errorf("no request was refused in the second restart without the holder: the kill opened no gap, and the comparison shows nothing")
	}
	if held.refused > 0 {
		t.Errorf("%d requests were refused in the second restart with fanout hold: the socket was not held through the kubelet's back-off", held.refused)
	}
}

// killFanout SIGKILLs p's fanout container through the node's containerd,
// as a crash would end it, and returns when.
func (e *nodeEnv) killFanout(ctx context.Context, p *corev1.Pod) (time.Time, error) {
	cur, err := e.admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	st := initStatus(cur, "fanout")
	if st == nil || st.State.Running == nil {
		return time.Time{}, fmt.Errorf("%s: fanout is not running: %+v", p.Name, st)
	}
	_, id, ok := strings.Cut(st.ContainerID, "://")
	if !ok {
		return time.Time{}, fmt.Errorf("%s: fanout's container ID %q is not runtime://id", p.Name, st.ContainerID)
	}
	killed := time.Now()
	out, err := exec.CommandContext(ctx, "ctr", "--address", e.node.ContainerdSocket, "--namespace", "k8s.io",
		"tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return time.Time{}, fmt.Errorf("ctr tasks kill %s: %v: %s", id, err, out)
	}
	return killed, nil
}

// restartGap is what one client met around one kill of its fanout.
type restartGap struct {
	failed, refused, requests int
	// The longest time between two of the client's requests around the
	// kill, and when it ended: the request that waited for the new
	// fanout was answered.
	longest, longestEnd time.Duration
	back                time.Duration // from the kill to fanout seen Ready again
	errs                []string
}

// measureGap reads the client's log lines from 1 s before killed on:
// its requests, those that failed and were refused, and the longest time
// between two of them. back is when fanout was seen Ready again.
func measureGap(lines []logLine, killed, back time.Time) restartGap {
	r := restartGap{back: back.Sub(killed)}
	var prev time.Time
	for _, l := range lines {
		if l.at.Before(killed.Add(-time.Second)) || !strings.Contains(l.text, "request ") {
			continue
		}
		r.requests++
		if !prev.IsZero() && l.at.Sub(prev) > r.longest {
			r.longest, r.longestEnd = l.at.Sub(prev), l.at.Sub(killed)
		}
		prev = l.at
		if strings.Contains(l.text, " failed: ") {
			r.failed++
			if strings.Contains(l.text, "connection refused") {
				r.refused++
			}
			if len(r.errs) < 3 {
				r.errs = append(r.errs, l.at.Format("15:04:05.000")+" "+l.text)
			}
		}
	}
	return r
}

// waitRestarted waits until p's fanout has been restarted restarts times
// in all, the last after a kill at killed, and is Ready again, and
// returns when it saw it so.
func (e *nodeEnv) waitRestarted(ctx context.Context, p *corev1.Pod, killed time.Time, restarts int32) (time.Time, error) {
	deadline := killed.Add(2 * time.Minute)
	for {
		cur, err := e.admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil {
			st := initStatus(cur, "fanout")
			if st != nil && st.RestartCount == restarts && st.Ready && st.State.Running != nil {
				if h := initStatus(cur, "fanout-hold"); h != nil && h.RestartCount != 0 {
					return time.Time{}, fmt.Errorf("%s: fanout hold restarted too (%d times)", p.Name, h.RestartCount)
				}
				if c := containerStatus(cur, "client"); c == nil || c.RestartCount != 0 {
					return time.Time{}, fmt.Errorf("%s: the client restarted: %+v", p.Name, c)
				}
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: fanout not restarted (%d in all) and Ready 2 minutes after its SIGKILL (%v):\n%s", p.Name, restarts, err, e.cp.DescribePods(ctx, p.Namespace))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clientLinesAfter returns the client's log once it has logged n requests
// after t: the client is past the restart.
func (e *nodeEnv) clientLinesAfter(ctx context.Context, p *corev1.Pod, t time.Time, n int) ([]logLine, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		raw, err := e.admin.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "client", Timestamps: true}).DoRaw(ctx)
		if err == nil {
			var lines []logLine
			after := 0
			for _, l := range bytes.Split(raw, []byte("\n")) {
				ts, text, ok := strings.Cut(string(l), " ")
				if !ok {
					continue
				}
				at, err := time.Parse(time.RFC3339Nano, ts)
				if err != nil {
					continue
				}
				lines = append(lines, logLine{at, text})
				if at.After(t) && strings.Contains(text, "request ") {
					after++
				}
			}
			if after >= n {
				return lines, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: the client did not log %d requests in the minute after %s (%v)", p.Name, n, t.Format(time.RFC3339Nano), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fanoutStartLog says when the restarted fanout's log (the kubelet's
// timestamps) reached the steps of its start, after killed: where the time
// until it serves again goes.
func (e *nodeEnv) fanoutStartLog(ctx context.Context, p *corev1.Pod, killed time.Time) string {
	raw, err := e.admin.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "fanout", Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	steps := []string{"first line", "socket taken from fanout hold", "endpoints updated", "proxy listening", "wrote client kubeconfig"}
	at := map[string]time.Duration{}
	for i, l := range bytes.Split(raw, []byte("\n")) {
		ts, text, _ := strings.Cut(string(l), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		for _, step := range steps {
			if _, seen := at[step]; !seen && (step == "first line" && i == 0 || strings.Contains(text, step)) {
				at[step] = t.Sub(killed).Round(time.Millisecond)
			}
		}
	}
	var out []string
	for _, step := range steps {
		if d, ok := at[step]; ok {
			out = append(out, fmt.Sprintf("%s +%s", step, d))
		}
	}
	return strings.Join(out, ", ")
}
