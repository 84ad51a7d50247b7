package balancer

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy names accepted by Config.Policy (and the --balancer flag).
const (
	PolicyLeastRequest = "least-request"
	PolicyRoundRobin   = "round-robin"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultDecayTime          = 10 * time.Second
	DefaultEjectBase          = time.Second
	DefaultEjectMax           = 30 * time.Second
	DefaultMaxEjectedFraction = 1.0
	// DefaultConsecutiveFailures is how many failed results in a row
	// (DoneInfo.Failed) eject an endpoint, as Envoy's consecutive_5xx.
	DefaultConsecutiveFailures = 5
	DefaultDrainHold           = 10 * time.Second
	DefaultOverloadPenalty     = 5 * time.Second
	// DefaultSlowStartMinWeight is the weight a slow-starting endpoint
	// begins with (Envoy's min_weight_percent of 10%).
	DefaultSlowStartMinWeight = 0.1
)

// RecommendedMaxEjectedFraction is the --max-ejected-fraction default: at
// most a third of the endpoints, rounded up, may be passively ejected, so
// one apiserver of three, two of six.
const RecommendedMaxEjectedFraction = 1.0 / 3

// Config configures a Balancer. The zero value is valid and means the
// defaults: least-request, 10s decay, ejection from 1s doubling to 30s.
type Config struct {
	// Policy is PolicyLeastRequest (default when empty) or PolicyRoundRobin.
	Policy string
	// Rand returns a uniform int in [0, n); nil means math/rand/v2 IntN.
	// It is called concurrently and must be safe for that.
	Rand func(n int) int
	// DecayTime is the wall-time constant of the peak-EWMA latency
	// estimate: an estimate that is not refreshed fades to 1/e of its
	// distance from the usual latency after DecayTime, and sooner while
	// other endpoints serve traffic (see Endpoint.estimate). It is also
	// the memory of the recent-requests count that breaks ties. Zero means
	// DefaultDecayTime.
	DecayTime time.Duration
	// EjectBase is how long an endpoint is skipped after its first
	// Unavailable result; each further consecutive Unavailable doubles it,
	// up to EjectMax. Zero means the defaults.
	EjectBase time.Duration
	EjectMax  time.Duration
	// MaxEjectedFraction is the largest fraction of endpoints that picks
	// may skip as ejected. When more are ejected, ejection is ignored
	// (Envoy's "panic mode"): losing most apiservers at once is more likely
	// a fault on our side than on theirs, and refusing every request would
	// only make it worse. Zero means 1, so ejection is ignored only when
	// every endpoint is ejected; a pick never fails while endpoints exist.
	// The share is rounded up (a third of 3 or of 2 endpoints is 1), and
	// counts passive ejections only: an endpoint failing its readiness
	// probe, draining or shutting down is left out whatever the share, as
	// the apiserver itself said so; those give way only when no endpoint
	// at all is left (panic mode).
	MaxEjectedFraction float64
	// ConsecutiveFailures is how many DoneInfo.Failed results in a row
	// eject the endpoint (a DoneInfo.Unavailable ejects at once). Zero
	// means DefaultConsecutiveFailures.
	ConsecutiveFailures int
	// DrainHold is how long an endpoint whose apiserver answered "shutting
	// down" (DoneInfo.ShuttingDown) gets no new requests. Zero means
	// DefaultDrainHold.
	DrainHold time.Duration
	// OverloadPenalty is how long an endpoint that rejected a request for
	// overload (DoneInfo.Overloaded) costs more and is passed over by
	// Pick with PickInfo.Unloaded. Zero means DefaultOverloadPenalty.
	OverloadPenalty time.Duration
	// SlowStart is the window over which an endpoint that just became
	// usable (added, back from an ejection, a failed probe, draining or a
	// shutdown) ramps its weight linearly from SlowStartMinWeight to 1:
	// its cost is divided by the weight, so it takes a growing share
	// rather than every request at once. Zero turns slow start off.
	SlowStart time.Duration
	// SlowStartMinWeight is the starting weight, in (0, 1]. Zero means
	// DefaultSlowStartMinWeight.
	SlowStartMinWeight float64

	// Zone placement (see zone.go and docs/resilience.md). Zone is
	// fanout's own topology zone (--zone), "" when unknown; ZonePolicy is
	// ZonePolicyOff (default when empty), ZonePolicySameZoneFirst or
	// ZonePolicySpillOver (--zone-policy); ZoneMinEndpoints is how many
	// usable endpoints the own zone needs before it is preferred
	// (--zone-min-endpoints, at least 1 when a policy is set).
	Zone             string
	ZonePolicy       string
	ZoneMinEndpoints int
}

// Validate reports the first invalid field, in terms of the flags that set
// it.
func (c Config) Validate() error {
	if _, err := c.policy(); err != nil {
		return err
	}
	if c.DecayTime < 0 {
		return fmt.Errorf("balancer decay time must not be negative, got %v", c.DecayTime)
	}
	if c.EjectBase < 0 || c.EjectMax < 0 {
		return fmt.Errorf("balancer ejection times must not be negative, got base %v and max %v", c.EjectBase, c.EjectMax)
	}
	d := c.withDefaults()
	if d.EjectMax < d.EjectBase {
		return fmt.Errorf("balancer maximum ejection %v must not be shorter than the base ejection %v", d.EjectMax, d.EjectBase)
	}
	if c.MaxEjectedFraction < 0 || c.MaxEjectedFraction > 1 {
		return fmt.Errorf("--max-ejected-fraction must be within [0, 1], got %v", c.MaxEjectedFraction)
	}
	if c.ConsecutiveFailures < 0 {
		return fmt.Errorf("--outlier-consecutive-failures must not be negative, got %d", c.ConsecutiveFailures)
	}
	if c.DrainHold < 0 || c.OverloadPenalty < 0 || c.SlowStart < 0 {
		return fmt.Errorf("balancer drain hold, overload penalty and --slow-start must not be negative, got %v, %v and %v", c.DrainHold, c.OverloadPenalty, c.SlowStart)
	}
	if c.SlowStartMinWeight < 0 || c.SlowStartMinWeight > 1 {
		return fmt.Errorf("slow start minimum weight must be within (0, 1], got %v", c.SlowStartMinWeight)
	}
	return c.validateZone()
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = PolicyLeastRequest
	}
	if c.Rand == nil {
		c.Rand = rand.IntN
	}
	if c.DecayTime == 0 {
		c.DecayTime = DefaultDecayTime
	}
	if c.EjectBase == 0 {
		c.EjectBase = DefaultEjectBase
	}
	if c.EjectMax == 0 {
		c.EjectMax = max(DefaultEjectMax, c.EjectBase)
	}
	if c.MaxEjectedFraction == 0 {
		c.MaxEjectedFraction = DefaultMaxEjectedFraction
	}
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if c.DrainHold == 0 {
		c.DrainHold = DefaultDrainHold
	}
	if c.OverloadPenalty == 0 {
		c.OverloadPenalty = DefaultOverloadPenalty
	}
	if c.SlowStartMinWeight == 0 {
		c.SlowStartMinWeight = DefaultSlowStartMinWeight
	}
	return c
}

// policy is the selection policy Config.Policy names.
func (c Config) policy() (policy, error) {
	switch c.Policy {
	case PolicyRoundRobin:
		return &roundRobin{}, nil
	case "", PolicyLeastRequest:
		return leastRequest{rand: c.Rand}, nil
	}
	return nil, fmt.Errorf("--balancer must be %s or %s, got %q", PolicyLeastRequest, PolicyRoundRobin, c.Policy)
}
