package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestDiscovery runs fanout with --endpoints endpointslice:///default/kubernetes
// and the user's own credentials for discovery: it must find every
// apiserver from the lease reconciler's EndpointSlice, see one that stops
// gracefully leave (or turn draining), and see it come back when it starts
// again. A client workload runs through fanout all along: it must see no
// failed request, the stopped apiserver must get none of its requests once
// discovery dropped it, and must get them again once it is back.
func TestDiscovery(t *testing.T) {
	// Its own control plane: this test stops an apiserver.
	ctx, cp := ownControlPlane(t, 10*time.Minute, harness.Options{})
	const user = "e2e-discovery-client"
	grantDiscovery(ctx, t, cp, user)
	const namespace = "e2e-discovery"
	userNamespace(ctx, t, cp, namespace, user)
	sidecar := userFanout(ctx, t, cp, user, "--endpoints", "endpointslice:///default/kubernetes")
	var all []string
	for _, u := range cp.Endpoints() {
		all = append(all, strings.TrimPrefix(u, "https://"))
	}
	slices.Sort(all)

	waitEndpoints(t, sidecar.AdminAddress, 10*time.Second, "all apiservers discovered", func(usable, _ []string) bool {
		return slices.Equal(usable, all)
	})
	client, err := kubernetes.NewForConfig(rest.CopyConfig(sidecar.Config))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("GET /version through fanout: %v", err)
	}

	// A client keeps working through fanout for the whole stop and
	// restart; every failed cycle is an error it saw.
	load := startLoad(ctx, t, sidecar.Config, namespace, "d")
	victim := cp.APIServers[len(cp.APIServers)-1]
	gone := strings.TrimPrefix(victim.URL, "https://")
	time.Sleep(3 * time.Second)
	if n := servedBetween(t, cp, victim, user, time.Now().Add(-3*time.Second), time.Now()); n == 0 {
		t.Fatalf("apiserver %d served none of the workload's requests before its stop: the test would prove nothing", victim.Index+1)
	}

	// Stop blocks until the process has exited, and what matters is what
	// the apiserver receives while it shuts down: watch discovery meanwhile.
	stopStart := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- victim.Stop() }()
	// Its failing readiness probe takes it out of rotation too; what is
	// checked here is that discovery dropped it: no longer known, or
	// known as draining.
	waitEndpoints(t, sidecar.AdminAddress, 15*time.Second, gone+" left or draining", func(usable, draining []string) bool {
		return len(usable) == len(all)-1 && !slices.Contains(usable, gone)
	}, func(known []string, draining []string) bool {
		return !slices.Contains(known, gone) || slices.Contains(draining, gone)
	})
	dropped := time.Now()
	t.Logf("discovery dropped %s %s after its stop began", gone, dropped.Sub(stopStart).Round(time.Millisecond))
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	stopDone := time.Now()
	t.Logf("apiserver %d (%s) stopped gracefully in %s", victim.Index+1, gone, stopDone.Sub(stopStart).Round(time.Millisecond))
	if _, err := client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("GET /version through fanout with one apiserver down: %v", err)
	}
	time.Sleep(3 * time.Second)

	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitEndpoints(t, sidecar.AdminAddress, 30*time.Second, gone+" back", func(usable, _ []string) bool {
		return slices.Equal(usable, all)
	})
	t.Logf("fanout uses %s again %s after it was ready", gone, time.Since(back).Round(time.Millisecond))
	// Let traffic flow back to it before the load stops.
	time.Sleep(10 * time.Second)
	load.Stop()

	// dropped is when the poll above saw the drop, at or after the real
	// one; requests already on their way then complete within
	// milliseconds, which 100 ms of slack covers. The window ends when the
	// process had exited: a stopped apiserver serves nothing anyway.
	afterDrop := servedBetween(t, cp, victim, user, dropped.Add(100*time.Millisecond), stopDone)
	late := servedBetween(t, cp, victim, user, victim.ReadyAt(), time.Now())
	// For the record only: whether it still served between SIGTERM and the
	// drop, i.e. whether the zero above is fanout's doing.
	beforeDrop := servedBetween(t, cp, victim, user, stopStart, dropped)
	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests sent, %d cycles failed; served overall: %s; apiserver %d served %d between its SIGTERM and the drop, %d in the %s it still ran after discovery dropped it, and %d after it was ready again",
		load.sent.Load(), load.failed.Load(), harness.FormatShares(counts), victim.Index+1, beforeDrop, afterDrop, stopDone.Sub(dropped).Round(time.Millisecond), late)
	load.reportErrors(t)
	if afterDrop > 0 {
		t.Errorf("apiserver %d served %d of %s's requests after discovery dropped it: fanout must send nothing new to an apiserver that left the EndpointSlice or is draining",
			victim.Index+1, afterDrop, user)
	}
	if late == 0 {
		t.Errorf("apiserver %d served nothing in the 10 s after fanout used it again: fanout did not take it back", victim.Index+1)
	}
}

// grantDiscovery binds the role of manifests/rbac to user in default and
// waits until every apiserver honours it.
func grantDiscovery(ctx context.Context, t *testing.T, cp *harness.ControlPlane, user string) {
	t.Helper()
	admin := cp.AdminClient
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fanout-endpointslice-discovery"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"},
			Verbs: []string{"get", "list", "watch"},
		}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the discovery ClusterRole: %v", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fanout-endpointslice-discovery", Namespace: metav1.NamespaceDefault},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(metav1.NamespaceDefault).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding %s to the discovery ClusterRole: %v", user, err)
	}
	for _, verb := range []string{"list", "watch"} {
		if err := cp.WaitAuthorized(ctx, user, verb, "endpointslices.discovery.k8s.io", metav1.NamespaceDefault); err != nil {
			t.Fatal(err)
		}
	}
}

// waitEndpoints polls fanout's /debug/endpoints until ok accepts the
// addresses that take new requests (state ready) and those draining.
// Further conditions, if given, see every known address instead of the
// ready ones.
func waitEndpoints(t *testing.T, admin string, within time.Duration, what string, ok func(usable, draining []string) bool, known ...func(known, draining []string) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		usable, draining, all, err := debugEndpoints(admin)
		if err == nil && ok(usable, draining) && allOK(known, all, draining) {
			return
		}
		last = fmt.Sprintf("known %v, ready %v, draining %v, error %v", all, usable, draining, err)
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; /debug/endpoints: %s", what, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func allOK(conds []func(known, draining []string) bool, known, draining []string) bool {
	for _, c := range conds {
		if !c(known, draining) {
			return false
		}
	}
	return true
}

func debugEndpoints(admin string) (usable, draining, known []string, err error) {
	resp, err := http.Get("http://" + admin + "/debug/endpoints")
	if err != nil {
		return nil, nil, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Endpoints []struct {
			Address  string `json:"address"`
			State    string `json:"state"`
			Draining bool   `json:"draining"`
		} `json:"endpoints"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, nil, nil, err
	}
	for _, e := range body.Endpoints {
		known = append(known, e.Address)
		switch {
		case e.Draining:
			draining = append(draining, e.Address)
		case e.State == "ready":
			usable = append(usable, e.Address)
		}
	}
	slices.Sort(usable)
	return usable, draining, known, nil
}
