package balancer

import "time"

// RecommendedSlowStart is the --slow-start default: an endpoint that just
// became usable ramps to its full share over 10 s.
const RecommendedSlowStart = 10 * time.Second

// Recommended returns the Config fanout runs with when nothing is
// configured, for policy: what the sidecar's flag defaults give
// (--max-ejected-fraction, --outlier-consecutive-failures, --slow-start)
// and what the library (package client) uses. New's own defaults for a
// zero Config are more permissive (no cap on ejections, no slow start),
// for tests and callers that set every field.
func Recommended(policy string) Config {
	return Config{
		Policy:              policy,
		MaxEjectedFraction:  RecommendedMaxEjectedFraction,
		ConsecutiveFailures: DefaultConsecutiveFailures,
		SlowStart:           RecommendedSlowStart,
		ZonePolicy:          ZonePolicyOff,
		ZoneMinEndpoints:    DefaultZoneMinEndpoints,
	}
}
