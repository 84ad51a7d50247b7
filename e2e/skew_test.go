package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// skewGV is disabled by default in kube-apiserver v1.37.2
// (k8s.io/kubernetes pkg/controlplane betaAPIGroupVersionsDisabledByDefault)
// and enabled on two apiservers of three, as during an upgrade that adds
// a group/version: its volumeattributesclasses are served by those two
// only; the third answers 404 for the path.
const (
	skewGV       = "storage.k8s.io/v1beta1"
	skewResource = "/apis/" + skewGV + "/volumeattributesclasses"
	skewObject   = "e2e-skew"
)

// TestSkewRoutesToServingAPIServers: through fanout, 50 GETs, 50 LISTs and
// 50 WATCHes of a group/version that only 2 of 3 apiservers serve all
// succeed; with --skew-routing=false, some of the same GETs are answered
// 404 by the third (the check that the skew is real). It logs what the
// discovery reads cost.
func TestSkewRoutesToServingAPIServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	enable := []string{"--runtime-config=" + skewGV + "=true"}
	cp, err := harness.Start(ctx, t, harness.Options{Nodes: 1, Logf: t.Logf, PerAPIServerArgs: [][]string{enable, enable, nil}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.AdminClient.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: skewObject}, DriverName: "e2e.example.com", Parameters: map[string]string{"iops": "100"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	waitMetric(ctx, t, f, "fanout_apis_differ", nil, 1)
	waitMetric(ctx, t, f, "fanout_discovery_reads_total", map[string]string{"result": "changed"}, 3)

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
