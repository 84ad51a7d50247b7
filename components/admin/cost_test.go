package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

func TestDebugCost(t *testing.T) {
	_, inner := newTestHandler(t)
	tab, err := cost.New(cost.Config{Size: 10, MetricsTop: 5}, nil)
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
