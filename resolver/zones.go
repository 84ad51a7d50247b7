package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Zones gives endpoints whose resolver knows no zone (a static list, DNS
// records) their topology zone, from --endpoint-zones. EndpointSlices
// carry their own zones, which win.
type Zones struct {
	rules []zoneRule
}

// zoneRule matches an endpoint by IP prefix, by host and port, or by host
// alone.
type zoneRule struct {
	prefix netip.Prefix // valid for an IP or CIDR key
	host   string       // for a name key, lowercased
	port   string       // "" matches any port
	zone   string
}

// ParseZones parses an --endpoint-zones value: comma-separated KEY=ZONE
// rules, where KEY is a CIDR (10.0.1.0/24), an IP, host:port, a host, or
// https://host:port as in --endpoints. An endpoint takes the zone of the
// first rule it matches.
func ParseZones(spec string) (Zones, error) {
	var z Zones
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, zone, ok := strings.Cut(part, "=")
		key, zone = strings.TrimSpace(key), strings.TrimSpace(zone)
		if !ok || key == "" || zone == "" {
			return Zones{}, fmt.Errorf("--endpoint-zones: %q is not KEY=ZONE; expected e.g. 10.0.1.0/24=eu-west-1a,https://10.0.2.5:6443=eu-west-1b", part)
		}
		if err := ValidateZone(zone); err != nil {
			return Zones{}, fmt.Errorf("--endpoint-zones: %w", err)
		}
		r, err := parseZoneKey(key)
		if err != nil {
			return Zones{}, fmt.Errorf("--endpoint-zones: %q: %v; expected a CIDR, an IP, host:port, a host or https://host:port", key, err)
		}
		r.zone = zone
		z.rules = append(z.rules, r)
	}
	return z, nil
}

func parseZoneKey(key string) (zoneRule, error) {
	key = strings.TrimPrefix(key, "https://")
	key = strings.TrimSuffix(key, "/")
	if p, err := netip.ParsePrefix(key); err == nil {
		return zoneRule{prefix: p.Masked()}, nil
	}
	host, port := key, ""
	if h, p, err := net.SplitHostPort(key); err == nil {
		host, port = h, p
	} else if strings.ContainsAny(key, "[]") || strings.Count(key, ":") == 1 {
		return zoneRule{}, err
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		return zoneRule{prefix: netip.PrefixFrom(ip, ip.BitLen()), port: port}, nil
	}
	if host == "" || strings.ContainsAny(host, "/ ") {
		return zoneRule{}, fmt.Errorf("not a host name")
	}
	return zoneRule{host: strings.ToLower(host), port: port}, nil
}

// Empty reports whether there are no rules.
func (z Zones) Empty() bool { return len(z.rules) == 0 }

// zoneOf returns the zone of the first rule address matches, "" if none.
func (z Zones) zoneOf(address string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return ""
	}
	ip, ipErr := netip.ParseAddr(host)
	for _, r := range z.rules {
		if r.port != "" && r.port != port {
			continue
		}
		if r.prefix.IsValid() {
			if ipErr == nil && r.prefix.Contains(ip.Unmap()) {
				return r.zone
			}
			continue
		}
		if strings.EqualFold(r.host, host) {
			return r.zone
		}
	}
	return ""
}

// Apply returns eps with the zones of z filled in where the resolver gave
// none: a copy, so that the resolver's snapshot is left alone; eps itself
// when z has no rules.
func (z Zones) Apply(eps []Endpoint) []Endpoint {
	if z.Empty() {
		return eps
	}
	out := make([]Endpoint, len(eps))
	for i, ep := range eps {
		if ep.Zone == "" {
			ep.Zone = z.zoneOf(ep.Address)
		}
		out[i] = ep
	}
	return out
}

// ValidateZone accepts "" and Kubernetes label values (at most 63
// characters: letters, digits, '-', '_' and '.', starting and ending with
// a letter or digit), the form of topology.kubernetes.io/zone.
func ValidateZone(z string) error {
	if z == "" {
		return nil
	}
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }
	ok := len(z) <= 63 && alnum(z[0]) && alnum(z[len(z)-1])
	for i := 0; ok && i < len(z); i++ {
		ok = alnum(z[i]) || z[i] == '-' || z[i] == '_' || z[i] == '.'
	}
	if !ok {
		return fmt.Errorf("zone %q is not a topology.kubernetes.io/zone label value (at most 63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)", z)
	}
	return nil
}
