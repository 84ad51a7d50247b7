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
)

// Config configures a Balancer. The zero value is valid and means the
// defaults: least-request, 10s decay, ejection from 1s doubling to 30s.
type Config struct {
	// Policy is PolicyLeastRequest (default when empty) or PolicyRoundRobin.
	Policy string
	// Now is the clock; nil means time.Now. Tests inject a fake clock.
	Now func() time.Time
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
	MaxEjectedFraction float64
}

// Validate reports the first invalid field, in terms of the flags that set
// it.
func (c Config) Validate() error {
	switch c.Policy {
	case "", PolicyLeastRequest, PolicyRoundRobin:
	default:
		return fmt.Errorf("--balancer must be %s or %s, got %q", PolicyLeastRequest, PolicyRoundRobin, c.Policy)
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
		return fmt.Errorf("balancer max ejected fraction must be within [0, 1], got %v", c.MaxEjectedFraction)
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = PolicyLeastRequest
	}
	if c.Now == nil {
		c.Now = time.Now
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
	return c
}
