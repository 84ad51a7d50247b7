package admin

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

func TestDebugCost(t *testing.T) {
	_, inner := newTestHandler(t)
	tab, err := cost.New(cost.Config{Size: 10, MetricsTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/apis/apps/v1/namespaces/ns/replicasets", nil)
	info := reqinfo.New(r)
	tab.Short(&info, "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/replicaset-controller", &cost.Outcome{Code: 200, Elapsed: time.Millisecond})

	for _, tc := range []struct {
		name, remote string
		c            Cost
		want         int
		rows         int
	}{
		{"loopback", "127.0.0.1:4000", tab, http.StatusOK, 1},
		{"table off", "127.0.0.1:4000", (*cost.Table)(nil), http.StatusOK, 0},
		{"pod network", "10.1.2.3:4000", tab, http.StatusForbidden, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/debug/cost", nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			WithCost(inner, tc.c).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("/debug/cost from %s: %d, want %d", tc.remote, rec.Code, tc.want)
			}
			if tc.want != http.StatusOK {
				return
			}
			var s cost.Snapshot
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
				t.Fatalf("%v in %s", err, rec.Body)
			}
			if len(s.Rows) != tc.rows {
				t.Fatalf("%d rows, want %d: %s", len(s.Rows), tc.rows, rec.Body)
			}
			if tc.rows > 0 && (s.Rows[0].Component != "kube-controller-manager/replicaset-controller" || s.Rows[0].Verb != "list" || s.Rows[0].Requests != 1 || s.Capacity != 10) {
				t.Errorf("snapshot %+v", s)
			}
		})
	}
}

// TestFetchCost reads the table back through WithCost, and each failure
// says what to do.
func TestFetchCost(t *testing.T) {
	_, inner := newTestHandler(t)
	tab, err := cost.New(cost.Config{Size: 10, MetricsTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/pods", nil)
	info := reqinfo.New(r)
	tab.Short(&info, "kubectl/v1.37.2 (linux/amd64) kubernetes/0123abc", &cost.Outcome{Code: 200, Elapsed: time.Millisecond})
	srv := httptest.NewServer(WithCost(inner, tab))
	defer srv.Close()
	got, err := FetchCost(context.Background(), srv.Client(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != 1 || got.Rows[0].Key() != (cost.Key{Component: "kubectl", Verb: "list", Resource: "pods", Scope: cost.ScopeNamespaced}) ||
		got.Rows[0].Requests != 1 || !math.IsInf(got.Rows[0].Latency.Buckets[len(got.Rows[0].Latency.Buckets)-1].LE, 1) {
		t.Errorf("FetchCost = %+v, want kubectl's one list of pods, the last bucket +Inf", got)
	}

	for code, want := range map[int]string{
		http.StatusForbidden: "the cost table answers loopback clients only; run fanout top in the pod: kubectl exec -it POD -c fanout -- fanout top",
		http.StatusNotFound:  "this fanout has no cost table",
		http.StatusTeapot:    "418 I'm a teapot: no",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", code) }))
		_, err := FetchCost(context.Background(), srv.Client(), strings.TrimPrefix(srv.URL, "http://"))
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("answer %d: err = %v, want %q", code, err, want)
		}
	}
}
