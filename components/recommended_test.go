package components

import (
	"reflect"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/proxy"
)

// TestFlagDefaultsAreTheLibrarys: the sidecar's resilience flag defaults
// are balancer.Recommended, the proxy's retry-budget defaults and the
// prober's rise and fall defaults, which is what the library (package
// client) runs with; its own tests check its side.
func TestFlagDefaultsAreTheLibrarys(t *testing.T) {
	r := defaultResilience()
	for _, policy := range []string{balancer.PolicyLeastRequest, balancer.PolicyRoundRobin} {
		if got, want := r.balancer(policy), balancer.Recommended(policy); !reflect.DeepEqual(got, want) {
			t.Errorf("flag defaults give balancer config %+v, balancer.Recommended(%q) is %+v", got, policy, want)
		}
	}
	if ratio, minimum := r.retryBudget(); ratio != proxy.DefaultRetryBudgetRatio || minimum != proxy.DefaultRetryBudgetMin {
		t.Errorf("flag defaults give retry budget %v + %d, the proxy's zero Config %v + %d", ratio, minimum, proxy.DefaultRetryBudgetRatio, proxy.DefaultRetryBudgetMin)
	}
	if r.ProbeRise != health.DefaultRise || r.ProbeFall != health.DefaultFall {
		t.Errorf("flag defaults give probe rise/fall %d/%d, the prober's zero Config %d/%d", r.ProbeRise, r.ProbeFall, health.DefaultRise, health.DefaultFall)
	}
}
