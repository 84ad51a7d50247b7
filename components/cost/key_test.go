package cost

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/reqinfo"
)

func TestComponent(t *testing.T) {
	const base = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc"
	tests := []struct{ ua, want string }{
		{base, "kube-controller-manager"},
		// rest.AddUserAgent(cfg, "replicaset-controller")
		{base + "/replicaset-controller", "kube-controller-manager/replicaset-controller"},
		// --use-service-account-credentials (clientbuilder)
		{base + "/system:serviceaccount:kube-system:replicaset-controller", "kube-controller-manager/replicaset-controller"},
		{base + "/system:serviceaccount:kube-system:", Unknown},
		{base + "/bad name", Unknown},
		{base + "/" + strings.Repeat("x", maxComponent+1), Unknown},
		{"kube-scheduler/v1.37.2 (linux/amd64) kubernetes/0123abc/leader-election", "kube-scheduler/leader-election"},
		{"kubectl/v1.37.2 (linux/amd64) kubernetes/0123abc", "kubectl"},
		{"curl/8.5.0", "curl"},
		{"Go-http-client/2.0", "Go-http-client"},
		{"my operator", "my"},
		{"", Unknown},
		{"/v1", Unknown},
		{"kube-ctrl\x00/v1", Unknown},
		{"ünïcode/v1", Unknown},
		{strings.Repeat("p", maxComponent+1) + "/v1", Unknown},
		// The evicted fold's name is the table's own.
		{"other/v1", Unknown},
	}
	for _, tc := range tests {
		if got := component(tc.ua); got != tc.want {
			t.Errorf("component(%q) = %q, want %q", tc.ua, got, tc.want)
		}
	}
}

func TestKeyOf(t *testing.T) {
	tests := []struct {
		method, target string
		want           Key
	}{
		{"GET", "/apis/apps/v1/namespaces/ns/replicasets?limit=500", Key{"c", "list", "apps", "replicasets", "", ScopeNamespaced}},
		{"PUT", "/apis/apps/v1/namespaces/ns/replicasets/r/status", Key{"c", "update", "apps", "replicasets", "status", ScopeNamespaced}},
		{"GET", "/api/v1/nodes?watch=true", Key{"c", "watch", "", "nodes", "", ScopeCluster}},
		{"DELETE", "/api/v1/namespaces/ns", Key{"c", "delete", "", "namespaces", "", ScopeCluster}},
		{"GET", "/version", Key{"c", "get", "", "", "", ""}},
		{"GET", "/apis/apps/v1/namespaces/ns/RepliCaSets", Key{"c", "list", "apps", Unknown, "", ScopeNamespaced}},
		{"GET", "/apis/" + strings.Repeat("g", maxGroup+1) + "/v1/things", Key{"c", "list", Unknown, "things", "", ScopeCluster}},
		{"GET", "/api/v1/namespaces/ns/pods/p/" + strings.Repeat("s", maxLabel+1), Key{"c", "get", "", "pods", Unknown, ScopeNamespaced}},
		{"BREW", "/coffee", Key{"c", "brew", "", "", "", ""}},
		{"M-SEARCH", "/", Key{"c", Unknown, "", "", "", ""}},
	}
	for _, tc := range tests {
		r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		info := reqinfo.New(r)
		if got := keyOf(&info, "c"); got != tc.want {
			t.Errorf("%s %s: key %+v, want %+v", tc.method, tc.target, got, tc.want)
		}
	}
}
