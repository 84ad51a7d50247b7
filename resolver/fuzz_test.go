package resolver

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary --endpoints specs to Parse. Whatever the
// input, it must not panic, it must either fail with a message or return a
// resolver, and a static list it accepts must hold only dialable
// host:port addresses, sorted and without duplicates, that parse back to
// the same list.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"https://10.0.0.1:6443,https://10.0.0.2:6443",
		"https://[fd00::1]:6443", "https://kubernetes.default.svc",
		"dns:///kubernetes.default.svc:443", "dns:///a", "endpointslice:///default/kubernetes:https",
		"endpointslice:///ns/svc", "http://10.0.0.1:80", "https://user:pw@host:1/path?q#f",
		" , ,https://a:1, https://a:1 ", "https://:0", "https://a:99999", "dns://x/y", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		r, err := Parse(spec, Config{})
		if err != nil {
			if r != nil {
				t.Fatalf("Parse(%q) returned both a resolver and an error %v", spec, err)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("Parse(%q) failed with an empty message", spec)
			}
			return
		}
		st, ok := r.(Static)
		if !ok {
			return // dns and endpointslice resolve later
		}
		if len(st.Endpoints) == 0 {
			t.Fatalf("Parse(%q) accepted an empty static list", spec)
		}
		var urls []string
		for i, ep := range st.Endpoints {
			host, port, err := net.SplitHostPort(ep.Address)
			if err != nil || host == "" {
				t.Fatalf("Parse(%q): endpoint %q is not host:port: %v", spec, ep.Address, err)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("Parse(%q): endpoint %q has port %q", spec, ep.Address, port)
			}
			if i > 0 && st.Endpoints[i-1].Address >= ep.Address {
				t.Fatalf("Parse(%q): endpoints not sorted and unique: %v", spec, st.Endpoints)
			}
			urls = append(urls, "https://"+ep.Address)
		}
		again, err := Parse(strings.Join(urls, ","), Config{})
		if err != nil {
			t.Fatalf("Parse(%q) gave %v, which does not parse back: %v", spec, urls, err)
		}
		if got := again.(Static).Endpoints; len(got) != len(st.Endpoints) {
			t.Fatalf("round trip of %v gave %v", st.Endpoints, got)
		}
	})
}
