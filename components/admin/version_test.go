package admin

import (
	"strings"
	"testing"
)

// TestStatusTableVersion: each endpoint's kube-apiserver version is a
// column of `fanout status`, "-" while unknown.
func TestStatusTableVersion(t *testing.T) {
	s := snap(1, 2, 3)
	s.Endpoints[0].Version = "v1.36.4"
	s.Endpoints[1].Version = "v1.37.2"
	var b strings.Builder
	if err := StatusTable(&b, s, nil, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "VERSION") {
		t.Errorf("no VERSION column:\n%s", b.String())
	}
	for addr, want := range map[string]string{"10.0.0.1:6443": "v1.36.4", "10.0.0.2:6443": "v1.37.2", "10.0.0.3:6443": "-"} {
		if cols := row(t, b.String(), addr); len(cols) < 9 || cols[8] != want {
			t.Errorf("row %v, want version %q in the 9th column\n%s", cols, want, b.String())
		}
	}
}
