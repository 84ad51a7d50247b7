package balancer

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// servedBy is a fake APIs: the addresses that do not serve an API, keyed
// by its group/version/resource; an address absent from every entry
// serves everything.
type servedBy struct {
	differ bool
	not    map[API][]string
}

func (s servedBy) Differ() bool { return s.differ }

func (s servedBy) Version(address string) string { return "v1.37.2+" + address }

func (s servedBy) Serves(address string, api API) bool {
	for _, a := range s.not[api] {
		if a == address {
			return false
		}
	}
	return true
}

var (
	alpha = API{Group: "storage.k8s.io", Version: "v1alpha1", Resource: "volumeattributesclasses"}
	pods  = API{Version: "v1", Resource: "pods"}
)

// TestPickKeepsToServingEndpoints: while the endpoints serve different
// APIs, a request for an API goes only to those that serve it, short and
// long alike, and every such pick is counted; requests for other APIs and
// non-resource requests spread over all.
func TestPickKeepsToServingEndpoints(t *testing.T) {
	for _, policy := range []string{PolicyLeastRequest, PolicyRoundRobin} {
		t.Run(policy, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{Policy: policy}, 7, "a:1", "b:1", "c:1")
				b.SetAPIs(servedBy{differ: true, not: map[API][]string{alpha: {"c:1"}}})
				for _, kind := range []Kind{Short, Long} {
					got := map[string]int{}
					for range 300 {
						p, err := b.Pick(PickInfo{Kind: kind, API: alpha})
						if err != nil {
							t.Fatal(err)
						}
						got[p.Endpoint.Address()]++
						if kind == Short {
							p.Done(DoneInfo{StatusCode: 200})
						} // long ones stay open: the fewest-open scan must still skip c
					}
					if got["c:1"] != 0 || got["a:1"] == 0 || got["b:1"] == 0 {
						t.Errorf("%s picks for %v: %v, want a:1 and b:1 only", kind, alpha, got)
					}
				}
				if n := b.SkewRouted(); n != 600 {
					t.Errorf("SkewRouted = %d, want 600", n)
				}
				for _, api := range []API{pods, {}} {
					got := map[string]int{}
					for range 300 {
						p, err := b.Pick(PickInfo{API: api})
						if err != nil {
							t.Fatal(err)
						}
						got[p.Endpoint.Address()]++
						p.Done(DoneInfo{StatusCode: 200})
					}
					if got["c:1"] == 0 {
						t.Errorf("picks for %+v: %v, want c:1 too", api, got)
					}
				}
				if n := b.SkewRouted(); n != 600 {
					t.Errorf("SkewRouted = %d after unfiltered picks, want still 600", n)
				}
			})
		})
	}
}

// TestPickIgnoresAPIsWithoutSkew: a table that says the endpoints agree is
// not consulted, and when no endpoint that serves the API is up, the pick
// goes on as before: the apiserver answers for itself.
func TestPickIgnoresAPIsWithoutSkew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 3, "a:1", "b:1")
		// A table that would exclude b, but says the endpoints agree.
		b.SetAPIs(servedBy{differ: false, not: map[API][]string{alpha: {"b:1"}}})
		if got := picks(t, b, PickInfo{API: alpha}, 200); got["b:1"] == 0 {
			t.Errorf("no skew: picks %v, want b:1 too", got)
		}
		// Only b serves it, and b is down: the request still goes somewhere.
		b.SetAPIs(servedBy{differ: true, not: map[API][]string{alpha: {"a:1"}}})
		b.SetReady("b:1", false)
		if got := picks(t, b, PickInfo{API: alpha}, 50); got["a:1"] != 50 {
			t.Errorf("the only serving endpoint is down: picks %v, want a:1 (usable) every time", got)
		}
		if n := b.SkewRouted(); n != 0 {
			t.Errorf("SkewRouted = %d, want 0", n)
		}
	})
}

// TestPickServed: the retry after "no such path" goes to another usable
// endpoint that serves the path, or nowhere.
func TestPickServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 5, "a:1", "b:1", "c:1")
		if _, err := b.Pick(PickInfo{API: alpha, Served: true, Avoid: "a:1"}); !errors.Is(err, ErrNoAlternative) {
			t.Errorf("no table: err %v, want ErrNoAlternative", err)
		}
		// Uniform as far as known, c's discovery not known yet: b and c
		// count as serving it.
		b.SetAPIs(servedBy{not: map[API][]string{}})
		if got := picks(t, b, PickInfo{API: alpha, Served: true, Avoid: "a:1"}, 100); got["a:1"] != 0 || got["b:1"] == 0 || got["c:1"] == 0 {
			t.Errorf("picks %v, want b:1 and c:1", got)
		}
		b.SetAPIs(servedBy{differ: true, not: map[API][]string{alpha: {"b:1"}}})
		if got := picks(t, b, PickInfo{API: alpha, Served: true, Avoid: "a:1"}, 100); got["c:1"] != 100 {
			t.Errorf("picks %v, want c:1 only", got)
		}
		b.SetReady("c:1", false)
		if _, err := b.Pick(PickInfo{API: alpha, Served: true, Avoid: "a:1"}); !errors.Is(err, ErrNoAlternative) {
			t.Errorf("the only other serving endpoint is down: err %v, want ErrNoAlternative", err)
		}
		if !b.Serves("a:1", alpha) || b.Serves("b:1", alpha) || !b.Serves("b:1", pods) {
			t.Error("Serves disagrees with the table")
		}
		if v := b.Endpoints()[1].Version; v != "v1.37.2+b:1" {
			t.Errorf("b's status has version %q, want the table's", v)
		}
	})
}

func TestSkewRoutedMetric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1")
		want := "# HELP fanout_skew_routed_total " + `Requests routed away from an endpoint that does not serve their group/version and resource while the endpoints serve different APIs (version skew); requests sent again after a 404 "no such path" are counted in fanout_retries_total{reason="skew"}.` + "\n# TYPE fanout_skew_routed_total counter\nfanout_skew_routed_total %d\n"
		if err := testutil.CollectAndCompare(b.Collector(), strings.NewReader(strings.ReplaceAll(want, "%d", "0")), "fanout_skew_routed_total"); err != nil {
			t.Error(err)
		}
		b.SetAPIs(servedBy{differ: true, not: map[API][]string{alpha: {"b:1"}}})
		picks(t, b, PickInfo{API: alpha}, 3)
		if err := testutil.CollectAndCompare(b.Collector(), strings.NewReader(strings.ReplaceAll(want, "%d", "3")), "fanout_skew_routed_total"); err != nil {
			t.Error(err)
		}
	})
}

func picks(t *testing.T, b *Balancer, info PickInfo, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		p, err := b.Pick(info)
		if err != nil {
			t.Fatal(err)
		}
		got[p.Endpoint.Address()]++
		p.Done(DoneInfo{StatusCode: 200})
	}
	return got
}
