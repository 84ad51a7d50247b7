package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func auditLine(id, stage, verb, user string, at time.Time) string {
	return fmt.Sprintf(`{"auditID":%q,"stage":%q,"verb":%q,"requestURI":"/api/v1/namespaces/x/configmaps","user":{"username":%q},"stageTimestamp":%q}`+"\n",
		id, stage, verb, user, at.UTC().Format(time.RFC3339Nano))
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestServerLog feeds an audit log in pieces, including a line cut in
// the middle, and checks totals, the recent window and open watches.
func TestServerLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := newServerLog(path)
	now := time.Now()
	if err := l.update(now); err != nil {
		t.Fatalf("a log not written yet: %v", err)
	}
	old := now.Add(-2 * window)
	appendFile(t, path, auditLine("1", "ResponseComplete", "get", "alice", old)+
		auditLine("2", "ResponseComplete", "list", "alice", now)+
		auditLine("3", "ResponseComplete", "get", "bob", now)+
		// A health probe is not the client's request.
		`{"auditID":"p","stage":"ResponseComplete","verb":"get","requestURI":"/readyz","user":{"username":"alice"},"stageTimestamp":"`+now.UTC().Format(time.RFC3339Nano)+`"}`+"\n")
	w := auditLine("w1", "ResponseStarted", "watch", "alice", now)
	appendFile(t, path, w[:len(w)/2])
	if err := l.update(now); err != nil {
		t.Fatal(err)
	}
	alice := func(u string) bool { return u == "alice" }
	if got, want := l.stats(alice, time.Time{}), (userStats{total: 2, recent: 1}); got != want {
		t.Errorf("before the watch's line is complete: %+v, want %+v", got, want)
	}
	appendFile(t, path, w[len(w)/2:]+auditLine("w2", "ResponseStarted", "watch", "alice", now))
	if err := l.update(now); err != nil {
		t.Fatal(err)
	}
	if got, want := l.stats(alice, time.Time{}), (userStats{total: 4, recent: 3, watches: 2}); got != want {
		t.Errorf("with two watches started: %+v, want %+v", got, want)
	}
	// A watch from before the apiserver's restart is gone, whether or not
	// its last event was written.
	if got := l.stats(alice, now.Add(time.Second)).watches; got != 0 {
		t.Errorf("watches started before the restart: %d open, want 0", got)
	}
	appendFile(t, path, auditLine("w1", "ResponseComplete", "watch", "alice", now))
	if err := l.update(now.Add(window + time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, want := l.stats(alice, time.Time{}), (userStats{total: 4, recent: 0, watches: 1}); got != want {
		t.Errorf("after one watch ended and the window passed: %+v, want %+v", got, want)
	}

	// A new, shorter file at the same path is read from its start, not
	// added to the old counts.
	if err := os.WriteFile(path, []byte(auditLine("9", "ResponseComplete", "get", "alice", now)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.update(now); err != nil {
		t.Fatal(err)
	}
	if got, want := l.stats(alice, time.Time{}), (userStats{total: 1, recent: 1}); got != want {
		t.Errorf("after the log was replaced: %+v, want %+v", got, want)
	}
}

func TestRender(t *testing.T) {
	v := view{
		elapsed: 83 * time.Second,
		keys:    true,
		status:  "rolling restart 2/3: apiserver 2 is down",
		servers: []serverView{
			{addr: "10.1.0.2:6443", phase: "up", fanout: "ready"},
			{addr: "10.1.0.3:6443", phase: "down", fanout: "not_ready"},
			{addr: "10.1.0.4:6443", phase: "up", fanout: "ready"},
		},
		clients: []clientView{
			{label: "via fanout", per: []userStats{{recent: 100, watches: 5}, {}, {recent: 100, watches: 5}}, counts: &counts{sent: 1000}},
			{label: "via L4 proxy", per: []userStats{{}, {}, {recent: 200, watches: 10}}, counts: &counts{sent: 990, failed: 3, relists: 10, watchErrors: 10}},
		},
		events: []event{{at: time.Date(2026, 1, 1, 9, 1, 2, 0, time.UTC), text: "via L4 proxy: request failed", repeats: 2}},
	}
	out := strings.Join(render(v), "\n")
	for _, want := range []string{
		"fanout demo · 1m23s · r: rolling restart",
		"rolling restart 2/3: apiserver 2 is down",
		"process               up                down              up",
		" requests, last 30s     100  50% ###..      0   0% .....    100  50% ###..",
		fmt.Sprintf("%-22s%-18s%-18s%s", " watches open", "    5", "    0", "    5"),
		" 1000 requests sent · 0 failed · 0 re-lists · 0 watch errors",
		" requests, last 30s       0   0% .....      0   0% .....    200 100% #####",
		" 990 requests sent · 3 failed · 10 re-lists · 10 watch errors",
		"09:01:02 via L4 proxy: request failed (and 2 more like it)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q:\n%s", want, out)
		}
	}
	for _, l := range render(v) {
		if n := len([]rune(l)); n > 90 {
			t.Errorf("line of %d columns, want at most 90: %q", n, l)
		}
	}
}

func TestEventsFoldRepeats(t *testing.T) {
	var l events
	l.addKeyed("a", "first")
	l.add("other")
	l.repeat("a")
	l.repeat("a")
	got := l.last()
	if len(got) != 2 || got[0].repeats != 2 || got[1].repeats != 0 {
		t.Errorf("events %+v, want the keyed one to hold 2 repeats", got)
	}
	for i := range 200 {
		l.add("e%d", i)
	}
	if got := l.last(); len(got) != shown || got[shown-1].text != "e199" {
		t.Errorf("last %d events end with %q, want %d ending with e199", len(got), got[len(got)-1].text, shown)
	}
}

func TestScreen(t *testing.T) {
	var b strings.Builder
	s := &screen{w: &b, tty: true}
	s.open()
	s.draw([]string{"one", "two"})
	s.close()
	if want := enterAltScreen + cursorHome + "one" + clearToEOL + "\ntwo" + clearToEOL + "\n" + clearToEnd + leaveAltScreen; b.String() != want {
		t.Errorf("on a terminal wrote %q, want %q", b.String(), want)
	}
	b.Reset()
	s = &screen{w: &b}
	s.open()
	s.draw([]string{"one"})
	s.close()
	if b.String() != "one\n\n" || strings.Contains(b.String(), "\033") {
		t.Errorf("without a terminal wrote %q, want plain lines", b.String())
	}
}

// TestScreenFit checks that a frame on a small terminal drops its oldest
// events rather than scroll, and that long lines are cut rather than wrap.
func TestScreenFit(t *testing.T) {
	v := view{servers: []serverView{{addr: "a"}}, clients: []clientView{{label: "c", per: []userStats{{}}}}}
	for i := range shown {
		v.events = append(v.events, event{text: fmt.Sprintf("event %d %s", i, strings.Repeat("x", 100))})
	}
	full := len(render(v))
	s := &screen{w: &strings.Builder{}, tty: true, size: func() (int, int) { return full - 2, 40 }}
	s.open()
	lines := s.fit(v)
	if len(lines) >= full-2 {
		t.Fatalf("frame of %d lines on a terminal of %d rows", len(lines), full-2)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, fmt.Sprintf("event %d", shown-1)) {
		t.Errorf("last line %q, want the newest event kept", last)
	}
	var b strings.Builder
	s.w = &b
	s.draw(lines)
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.NewReplacer(cursorHome, "", clearToEOL, "", clearToEnd, "").Replace(l)
		if n := len([]rune(l)); n >= 40 {
			t.Errorf("line of %d columns on a terminal of 40: %q", n, l)
		}
	}
}

// TestNodeLines draws the -node panel from a fake apiserver: each labelled
// pod's phase, its fanout sidecar's and its client's readiness, the lease
// holder, and the injector's replicas.
func TestNodeLines(t *testing.T) {
	ready := func(name string, ok bool, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: ok, RestartCount: restarts, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	labels := map[string]string{"fanout.dev/inject": "true"}
	kcm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-6d5f8b7c9-abcde", Namespace: "kube-system", Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{ready("fanout", true, 0)},
			ContainerStatuses:     []corev1.ContainerStatus{ready("kube-controller-manager", true, 1)}},
	}
	starting := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "apps", Labels: labels, Annotations: map[string]string{"fanout.dev/injected": "client"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{ready("fanout", false, 0)},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "client",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}},
	}
	unlabelled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "kube-system"}}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: "kube-system"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(kcm.Name + "_0b6a")},
	}
	injector := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fanout-injector", Namespace: "fanout-system"},
		Status:     appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 1},
	}
	v := &nodeView{client: fake.NewClientset(kcm, starting, unlabelled, lease, injector), node: "node-1"}
	lines := v.Lines(context.Background())
	out := strings.Join(lines, "\n")
	for _, want := range []string{
		"real node node-1: pods labelled fanout.dev/inject=true",
		fmt.Sprintf(" %-40s %-11s %-9s %s", kcm.Name, "Running", "ready", "ready (leader), 1 restarts"),
		fmt.Sprintf(" %-40s %-11s %-9s %s", "apps/client", "Pending", "not ready", "PodInitializing"),
		" fanout-injector: 1 of 2 replicas ready",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("panel lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "other") {
		t.Errorf("panel shows an unlabelled pod:\n%s", out)
	}
	for _, l := range lines {
		if n := len([]rune(l)); n > 90 {
			t.Errorf("line of %d columns, want at most 90: %q", n, l)
		}
	}
}
