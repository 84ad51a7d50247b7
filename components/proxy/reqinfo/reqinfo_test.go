package reqinfo

import (
	"net/http"
	"net/url"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/server/filters"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, target string
		want           balancer.Kind
	}{
		{"GET", "/api/v1/pods", balancer.Short},
		{"GET", "/api/v1/namespaces/ns/pods/p", balancer.Short},
		{"POST", "/api/v1/namespaces/ns/pods", balancer.Short},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments", balancer.Short},
		{"GET", "/healthz", balancer.Short},
		{"GET", "/version", balancer.Short},
		{"GET", "/openapi/v3", balancer.Short},

		{"GET", "/api/v1/pods?watch=true", balancer.Long},
		{"GET", "/api/v1/pods?watch=1", balancer.Long},
		{"GET", "/api/v1/pods?watch=yes", balancer.Long},
		{"GET", "/api/v1/pods?watch=0", balancer.Short},
		{"GET", "/api/v1/pods?watch=false", balancer.Short},
		{"GET", "/api/v1/pods?watch=False", balancer.Short},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?watch=true&resourceVersion=5&allowWatchBookmarks=true", balancer.Long},
		{"GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dx&watch=true", balancer.Long},
		// A named GET is a get for the apiserver, watch or not.
		{"GET", "/api/v1/namespaces/ns/pods/p?watch=true", balancer.Short},
		{"GET", "/api/v1/watch/pods", balancer.Long},
		{"GET", "/api/v1/watch/namespaces/ns/pods/p", balancer.Long},
		{"GET", "/apis/apps/v1/watch/deployments", balancer.Long},
		// Too short to name a resource: the apiserver fails to parse it.
		{"GET", "/api/v1/watch", balancer.Short},

		{"GET", "/api/v1/namespaces/ns/pods/p/log", balancer.Long},
		{"GET", "/api/v1/namespaces/ns/pods/p/log?follow=true&container=c", balancer.Long},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec?command=ls", balancer.Long},
		{"GET", "/api/v1/namespaces/ns/pods/p/attach", balancer.Long},
		{"POST", "/api/v1/namespaces/ns/pods/p/portforward", balancer.Long},
		{"GET", "/api/v1/namespaces/ns/services/s/proxy/metrics", balancer.Long},
		{"GET", "/api/v1/proxy/namespaces/ns/pods/p", balancer.Long},
		{"GET", "/api/v1/namespaces/ns/pods/p/status", balancer.Short},
		{"GET", "/debug/pprof/profile", balancer.Long},
		{"GET", "/debug/pprof", balancer.Short},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := New(r).Kind; got != tc.want {
				t.Errorf("New(r).Kind = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClassifyRequest(t *testing.T) {
	tests := []struct {
		method, target string
		kind           balancer.Kind
		class          balancer.Class
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p", balancer.Short, balancer.ClassGet},
		{"HEAD", "/api/v1/namespaces/ns/pods/p", balancer.Short, balancer.ClassGet},
		{"GET", "/api/v1/namespaces/ns/pods/p/status", balancer.Short, balancer.ClassGet},
		{"GET", "/api/v1/pods", balancer.Short, balancer.ClassList},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?limit=500", balancer.Short, balancer.ClassList},
		{"GET", "/api/v1/pods?watch=false", balancer.Short, balancer.ClassList},
		{"POST", "/api/v1/namespaces/ns/pods", balancer.Short, balancer.ClassCreate},
		{"PUT", "/api/v1/namespaces/ns/pods/p", balancer.Short, balancer.ClassUpdate},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale", balancer.Short, balancer.ClassPatch},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", balancer.Short, balancer.ClassDelete},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments", balancer.Short, balancer.ClassDeleteCollection},
		// Non-resource requests: their verb is the HTTP method, not
		// comparable with a resource GET.
		{"GET", "/healthz", balancer.Short, balancer.ClassOther},
		{"GET", "/version", balancer.Short, balancer.ClassOther},
		{"GET", "/apis", balancer.Short, balancer.ClassOther},
		{"GET", "/openapi/v3", balancer.Short, balancer.ClassOther},
		{"POST", "/some/non/resource", balancer.Short, balancer.ClassOther},
		// Unparseable: Short, and no class.
		{"GET", "/api/v1/watch", balancer.Short, balancer.ClassOther},
		// Long requests carry their verb's class too; the balancer
		// ignores it for them.
		{"GET", "/api/v1/pods?watch=true", balancer.Long, balancer.ClassOther},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", balancer.Long, balancer.ClassGet},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			info := New(r)
			kind, class := info.Kind, info.Class
			if kind != tc.kind || class != tc.class {
				t.Errorf("New(r) kind, class = %v, %v; want %v, %v", kind, class, tc.kind, tc.class)
			}
		})
	}
}

func TestAuthModeFor(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   transport.AuthMode
	}{
		{"no credentials", http.Header{}, transport.AuthSidecar},
		{"bearer token", http.Header{"Authorization": {"Bearer abc"}}, transport.AuthPassthrough},
		{"basic auth", http.Header{"Authorization": {"Basic dTpw"}}, transport.AuthPassthrough},
		{"blank Authorization", http.Header{"Authorization": {"  "}}, transport.AuthSidecar},
		{"websocket token first", http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.dG9rZW4,v4.channel.k8s.io"}}, transport.AuthPassthrough},
		{"websocket token later with spaces", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io,  base64url.bearer.authorization.k8s.io.dG9rZW4"}}, transport.AuthPassthrough},
		{"websocket token in a second header line", http.Header{"Sec-Websocket-Protocol": {"v4.channel.k8s.io", "base64url.bearer.authorization.k8s.io.dG9rZW4"}}, transport.AuthPassthrough},
		{"websocket without token", http.Header{"Sec-Websocket-Protocol": {"v4.channel.k8s.io, channel.k8s.io"}}, transport.AuthSidecar},
		{"lookalike protocol", http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io"}}, transport.AuthSidecar},
		{"impersonation alone", http.Header{"Impersonate-User": {"bob"}}, transport.AuthSidecar},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Header: tc.header}
			if got := authModeFor(r); got != tc.want {
				t.Errorf("authModeFor = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsUpgrade(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   bool
	}{
		{"plain", http.Header{}, false},
		{"spdy", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, true},
		{"websocket, token list", http.Header{"Connection": {"keep-alive, upgrade"}, "Upgrade": {"websocket"}}, true},
		{"Upgrade header without Connection token", http.Header{"Upgrade": {"websocket"}}, false},
		{"keep-alive only", http.Header{"Connection": {"keep-alive"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isUpgrade(&http.Request{Header: tc.header}); got != tc.want {
				t.Errorf("isUpgrade = %v, want %v", got, tc.want)
			}
		})
	}
}

// apiserverLongRunning is kube-apiserver's own check, built as
// pkg/controlplane/apiserver/config.go builds it.
var apiserverLongRunning = filters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"),
)

// FuzzLongRunningMatchesApiserver keeps the reimplemented check equal to the
// apiserver's for any method, path and query.
func FuzzLongRunningMatchesApiserver(f *testing.F) {
	seeds := []struct{ method, path, query string }{
		{"GET", "/api/v1/pods", ""},
		{"GET", "/api/v1/pods", "watch=true"},
		{"GET", "/api/v1/pods", "watch=0"},
		{"GET", "/api/v1/pods", "watch=false&limit=x"},
		{"GET", "/api/v1/pods", "watch"},
		{"GET", "/api/v1/pods", "watch=%zz"},
		{"GET", "/api/v1/pods", "timeoutSeconds=abc&watch=1"},
		{"GET", "/apis/apps/v1/watch/deployments", ""},
		{"GET", "/api/v1/watch", ""},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", "follow=true"},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec", "command=sh"},
		{"GET", "/api/v1/namespaces/ns/pods/p/attach", ""},
		{"POST", "/api/v1/namespaces/ns/pods/p/portforward", ""},
		{"GET", "/api/v1/namespaces/ns/services/s/proxy/x/y", ""},
		{"GET", "/api/v1/proxy/nodes/n/stats", ""},
		{"GET", "/api/v1/namespaces/log", ""},
		{"GET", "/api/v1/namespaces/ns/status", ""},
		{"GET", "/apis/g/v1/namespaces/ns/r/n/exec", ""},
		{"PATCH", "/apis/g/v1/proxy", ""},
		{"GET", "/debug/pprof/heap", ""},
		{"GET", "/debug/pprof/", ""},
		{"GET", "//api//v1//pods", "watch=true"},
		{"WATCH", "/api/v1/pods", ""},
		{"PROXY", "/healthz", ""},
		{"GET", "/api/v1/pods", "fieldSelector=metadata.name%3Dfoo&watch=true"},
		{"GET", "/api/v1/pods", "fieldSelector=metadata.name%3D%2F&watch=true"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query)
	}
	f.Fuzz(func(t *testing.T, method, path, query string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
		info, err := apiserverFactory.NewRequestInfo(r)
		want := err == nil && apiserverLongRunning(r, info)
		if err == nil {
			if ours := fromAPIServer(info); isLongRunning(&ours) != want {
				t.Errorf("isLongRunning(%+v) = %v, apiserver says %v", ours, !want, want)
			}
		}
		if got := New(r).Kind == balancer.Long; got != want {
			t.Errorf("%s %s?%s: New(r).Kind long = %v, apiserver says %v", method, path, query, got, want)
		}
	})
}
