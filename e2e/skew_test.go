package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// skewGV is disabled by default in kube-apiserver v1.37.2
// (k8s.io/kubernetes pkg/controlplane betaAPIGroupVersionsDisabledByDefault)
// and enabled on two apiservers of three, as during an upgrade that adds
// a group/version: its deviceclasses are served by those two only; the
// third answers 404 for the path. (storage.k8s.io/v1beta1, in the same
// list, serves nothing in v1.37: its volumeattributesclasses were removed
// in 1.37.)
const (
	skewGV       = "resource.k8s.io/v1beta2"
	skewResource = "/apis/" + skewGV + "/deviceclasses"
	skewObject   = "e2e-skew"
)

// TestSkewRoutesToServingAPIServers: through fanout, 50 GETs, 50 LISTs and
// 50 WATCHes of a group/version that only 2 of 3 apiservers serve all
// succeed; discovery answers the same every time and lists that version;
// a real kube-controller-manager through fanout keeps the dependents of an
// owner named through it and deletes a namespace holding objects of it;
// with --skew-routing=false, some of the same GETs are answered 404 by the
// third (the check that the skew is real). It logs what the discovery
// reads cost.
func TestSkewRoutesToServingAPIServers(t *testing.T) {
	enable := []string{"--runtime-config=" + skewGV + "=true"}
	ctx, cp := ownControlPlane(t, 10*time.Minute, harness.Options{PerAPIServerArgs: [][]string{enable, enable, nil}})
	// Created through resource.k8s.io/v1, which every apiserver serves.
	if _, err := cp.AdminClient.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: skewObject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkSkewedDiscovery(ctx, t, cp)
	kubeconfig, err := cp.UserKubeconfig("e2e-skew", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	// A short interval, to see the 304 rounds within the test.
	f, err := cp.StartFanout(ctx, t, "skew", kubeconfig, "--discovery-interval=5s")
	if err != nil {
		t.Fatal(err)
	}
	// Every endpoint's discovery read, and the skew seen.
	waitMetric(ctx, t, f, "fanout_discovery_reads_total", map[string]string{"result": "changed"}, 3)
	if v := metric(t, f, "fanout_apis_differ", nil); v != 1 {
		t.Fatalf("fanout_apis_differ = %v after every endpoint's discovery was read, want 1; %s", v, fanoutMetricLines(t, f.AdminAddress, "fanout_discovery"))
	}

	client := &http.Client{Timeout: 30 * time.Second}
	base := "http://" + f.ListenAddress
	const n = 50
	get := func(path string, watch bool) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if !watch || resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		// A watch from now sends the existing object as ADDED first.
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil {
			t.Fatalf("watch: reading the first event: %v", err)
		}
		return resp.StatusCode, line
	}
	failed := map[string]int{}
	for range n {
		if code, body := get(skewResource+"/"+skewObject, false); code != http.StatusOK {
			failed["get"]++
			t.Logf("GET: %d %s", code, body)
		}
		if code, body := get(skewResource, false); code != http.StatusOK || !strings.Contains(body, skewObject) {
			failed["list"]++
			t.Logf("LIST: %d %.200s", code, body)
		}
		if code, first := get(skewResource+"?watch=true&timeoutSeconds=30", true); code != http.StatusOK || !strings.Contains(first, `"ADDED"`) {
			failed["watch"]++
			t.Logf("WATCH: %d %.200s", code, first)
		}
	}
	routed := metric(t, f, "fanout_skew_routed_total", nil)
	retried := metric(t, f, "fanout_retries_total", map[string]string{"reason": "skew"})
	t.Logf("skew routing on: %d GETs, %d LISTs, %d WATCHes of %s: failed %v; fanout_skew_routed_total %v, fanout_retries_total{reason=skew} %v",
		n, n, n, skewGV, failed, routed, retried)
	if len(failed) > 0 {
		t.Errorf("with skew routing, requests failed: %v; fanout log:\n%s", failed, harness.Tail(f.LogPath, 30))
	}
	if routed < 3*n {
		t.Errorf("fanout_skew_routed_total = %v, want at least %d (every request)", routed, 3*n)
	}
	if !strings.Contains(harness.Tail(f.LogPath, 200), "endpoints serve different APIs") {
		t.Errorf("no log line about the skew; fanout log:\n%s", harness.Tail(f.LogPath, 30))
	}

	checkMergedDiscovery(ctx, t, f)
	checkControllersUnderSkew(ctx, t, cp, f)

	// What discovery costs: one full read per endpoint, then rounds of
	// two 304s each.
	changed := metric(t, f, "fanout_discovery_reads_total", map[string]string{"result": "changed"})
	fullBytes := metric(t, f, "fanout_discovery_received_bytes_total", nil)
	rounds := metric(t, f, "fanout_discovery_reads_total", map[string]string{"result": "unchanged"})
	waitMetric(ctx, t, f, "fanout_discovery_reads_total", map[string]string{"result": "unchanged"}, rounds+3)
	later := metric(t, f, "fanout_discovery_reads_total", map[string]string{"result": "unchanged"})
	laterBytes := metric(t, f, "fanout_discovery_received_bytes_total", nil)
	t.Logf("discovery cost: %v full reads (GET /api, /apis, /version) received %v bytes in all (%.0f per endpoint) before the first 304 round; "+
		"%v more unchanged reads (two 304s each) received %v bytes; changed reads in all %v",
		changed, fullBytes, fullBytes/changed, later-rounds, laterBytes-fullBytes, metric(t, f, "fanout_discovery_reads_total", map[string]string{"result": "changed"}))

	// The control: routing off, the third apiserver answers its 404.
	off, err := cp.StartFanout(ctx, t, "skew-off", kubeconfig, "--skew-routing=false")
	if err != nil {
		t.Fatal(err)
	}
	base = "http://" + off.ListenAddress
	notFound := 0
	for range n {
		code, body := get(skewResource+"/"+skewObject, false)
		switch {
		case code == http.StatusNotFound:
			notFound++
			if notFound == 1 {
				t.Logf("routing off, the third apiserver answers: %d %q", code, body)
			}
		case code != http.StatusOK:
			t.Errorf("routing off: %d %s", code, body)
		}
	}
	t.Logf("skew routing off: %d of %d GETs answered 404", notFound, n)
	if notFound == 0 {
		t.Errorf("with --skew-routing=false no GET of %s was answered 404: the apiservers do not differ, and the test proves nothing", fmt.Sprint(skewGV))
	}
}

// checkSkewedDiscovery asks each apiserver directly, as kubernetes-admin,
// for its aggregated discovery and for the skewed resource, and logs
// what each says: the first two must list and serve it, the third
// neither.
func checkSkewedDiscovery(ctx context.Context, t *testing.T, cp *harness.ControlPlane) {
	t.Helper()
	for i, ep := range cp.Endpoints() {
		cfg := rest.CopyConfig(cp.Admin)
		cfg.Host = ep
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		do := func(path, accept string) (int, []byte) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", accept)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		_, body := do("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		var l apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("apiserver %d: /apis: %v", i+1, err)
		}
		listed := false
		for _, g := range l.Items {
			for _, v := range g.Versions {
				if g.Name+"/"+v.Version == skewGV {
					for _, r := range v.Resources {
						listed = listed || "/apis/"+skewGV+"/"+r.Resource == skewResource
					}
				}
			}
		}
		code, answer := do(skewResource, "application/json")
		t.Logf("apiserver %d (%s): discovery lists %s: %v; GET %s: %d %.160q", i+1, ep, skewResource, listed, skewResource, code, answer)
		if want := i < 2; listed != want || (code == http.StatusOK) != want {
			t.Errorf("apiserver %d: lists the resource %v, answers %d; want listed and served %v", i+1, listed, code, want)
		}
	}
}

// clientGoAccept is what client-go's discovery client asks for.
const clientGoAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

// checkMergedDiscovery asks fanout 30 times for the aggregated /apis and
// for the legacy /apis/resource.k8s.io: each answer must be the same every
// time and list the skewed version, although one apiserver of three does
// not serve it.
func checkMergedDiscovery(ctx context.Context, t *testing.T, f *harness.Fanout) {
	t.Helper()
	const n = 30
	client := &http.Client{Timeout: 30 * time.Second}
	group, version, _ := strings.Cut(skewGV, "/")
	for _, c := range []struct{ path, accept, want string }{
		{"/apis", clientGoAccept, `"version":"` + version + `"`},
		{"/apis/" + group, "application/json", `"groupVersion":"` + skewGV + `"`},
	} {
		bodies := map[string]int{}
		etags := map[string]int{}
		for range n {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.ListenAddress+c.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", c.accept)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %.200s", c.path, resp.StatusCode, b)
			}
			bodies[string(b)]++
			etags[resp.Header.Get("ETag")]++
		}
		listed := 0
		for b := range bodies {
			if strings.Contains(b, c.want) {
				listed++
			}
		}
		t.Logf("GET %s (Accept %s) %d times through fanout: %d distinct bodies, %d distinct ETags, %d of them list %s", c.path, c.accept, n, len(bodies), len(etags), listed, skewGV)
		if len(bodies) != 1 || len(etags) != 1 || listed != 1 {
			t.Errorf("GET %s: %d distinct answers (%d listing %s), want one that lists it", c.path, len(bodies), listed, skewGV)
		}
	}
	t.Logf("fanout_discovery_merged_total: aggregated %v, legacy %v",
		metric(t, f, "fanout_discovery_merged_total", map[string]string{"form": "aggregated"}),
		metric(t, f, "fanout_discovery_merged_total", map[string]string{"form": "legacy"}))
}

// checkControllersUnderSkew runs a real kube-controller-manager through a
// fanout sidecar of its own and checks two controllers that discovery and
// a 404 mislead during an upgrade:
//   - the garbage collector keeps ConfigMaps whose ownerReference names
//     the DeviceClass through the skewed version (it GETs the owner
//     through that version to check that it exists; a 404 would make it
//     delete them);
//   - the namespace controller deletes a namespace holding ResourceClaims
//     created through the skewed version, completely.
func checkControllersUnderSkew(ctx context.Context, t *testing.T, cp *harness.ControlPlane, client *harness.Fanout) {
	t.Helper()
	owner, err := cp.AdminClient.ResourceV1().DeviceClasses().Get(ctx, skewObject, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(client.Config)
	if err != nil {
		t.Fatal(err)
	}
	const gcNamespace, claimNamespace, dependents, claims = "e2e-skew-gc", "e2e-skew-ns", 20, 5
	for _, ns := range []string{gcNamespace, claimNamespace} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ref := metav1.OwnerReference{APIVersion: skewGV, Kind: "DeviceClass", Name: owner.Name, UID: owner.UID}
	for i := range dependents {
		if _, err := cs.CoreV1().ConfigMaps(gcNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("dependent-%d", i), OwnerReferences: []metav1.OwnerReference{ref},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range claims {
		if _, err := cs.ResourceV1beta2().ResourceClaims(claimNamespace).Create(ctx, &resourcev1beta2.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a ResourceClaim through %s: %v", skewGV, err)
		}
	}

	kcmKubeconfig, err := cp.ControllerManagerKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := cp.StartFanout(ctx, t, "skew-kcm", kcmKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The controllers' first discovery is merged only once every
	// endpoint's is known.
	waitMetric(ctx, t, sidecar, "fanout_discovery_reads_total", map[string]string{"result": "changed"}, 3)
	start := time.Now()
	kcm, err := cp.StartControllerManager(t, sidecar.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the kube-controller-manager log %s:\n%s", kcm.LogPath, harness.Tail(kcm.LogPath, 40))
			t.Logf("last lines of its sidecar's log %s:\n%s", sidecar.LogPath, harness.Tail(sidecar.LogPath, 20))
		}
	})

	// The garbage collector checks each dependent's owner with a GET
	// through the version its ownerReference names: wait for one per
	// dependent, in the apiservers' audit logs, then read their answers.
	ownerPath := skewResource + "/" + owner.Name
	var codes map[int]int
	deadline := time.Now().Add(2 * time.Minute)
	for {
		codes = map[int]int{}
		gets := 0
		for _, a := range cp.APIServers {
			events, err := harness.ReadAuditLog(a.AuditLog)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range events {
				if e.Stage == "ResponseComplete" && e.Verb == "get" && e.User.Username == gcUser &&
					strings.HasPrefix(e.RequestURI, ownerPath) && e.ResponseStatus != nil {
					codes[e.ResponseStatus.Code]++
					gets++
				}
			}
		}
		if gets >= dependents || gets > codes[http.StatusOK] {
			break // every dependent checked, or an answer that was not 200
		}
		if time.Now().After(deadline) {
			t.Fatalf("the garbage collector asked for the owner through %s %d times in 2 minutes, want at least %d (one per dependent); answers %v", skewGV, gets, dependents, codes)
		}
		time.Sleep(500 * time.Millisecond)
	}
	left, err := cs.CoreV1().ConfigMaps(gcNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, c := range left.Items {
		if len(c.OwnerReferences) > 0 {
			kept++
		}
	}
	t.Logf("garbage collector: GETs of its owner through %s answered %v; %d of %d dependents kept, %.1f s after kube-controller-manager started",
		skewGV, codes, kept, dependents, time.Since(start).Seconds())
	if allOK := len(codes) == 1 && codes[http.StatusOK] > 0; !allOK || kept != dependents {
		t.Errorf("the garbage collector's GETs of the owner were answered %v and it kept %d of %d dependents; want every GET 200 and every dependent kept", codes, kept, dependents)
	}

	// The namespace controller empties and deletes the namespaces.
	for _, ns := range []string{claimNamespace, gcNamespace} {
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleting := time.Now()
	for _, ns := range []string{claimNamespace, gcNamespace} {
		for {
			got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(deleting) > 2*time.Minute {
				t.Fatalf("namespace %s not deleted after 2 minutes: %+v", ns, got.Status)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Logf("namespace controller: %s (%d ResourceClaims created through %s) and %s deleted completely in %.1f s",
		claimNamespace, claims, skewGV, gcNamespace, time.Since(deleting).Seconds())
}

// gcUser is the garbage collector's user: kube-controller-manager runs
// each controller with its own service account.
const gcUser = "system:serviceaccount:kube-system:generic-garbage-collector"
