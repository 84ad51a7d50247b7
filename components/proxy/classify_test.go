package proxy

import (
	"net/http"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// TestClassifyMapsInfo: reqinfo's classification in the balancer's and the
// transport's terms, as every part of the proxy reads it.
func TestClassifyMapsInfo(t *testing.T) {
	bearer := http.Header{"Authorization": {"Bearer abc"}}
	wsBearer := http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.dG9rZW4,v4.channel.k8s.io"}}
	tests := []struct {
		method, target string
		header         http.Header
		kind           balancer.Kind
		class          balancer.Class
		mode           transport.AuthMode
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p", nil, balancer.Short, balancer.ClassGet, transport.AuthSidecar},
		{"HEAD", "/api/v1/namespaces/ns/pods/p", nil, balancer.Short, balancer.ClassGet, transport.AuthSidecar},
		{"GET", "/api/v1/namespaces/ns/pods/p/status", nil, balancer.Short, balancer.ClassGet, transport.AuthSidecar},
		{"GET", "/api/v1/pods", nil, balancer.Short, balancer.ClassList, transport.AuthSidecar},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?limit=500", nil, balancer.Short, balancer.ClassList, transport.AuthSidecar},
		{"GET", "/api/v1/pods?watch=false", nil, balancer.Short, balancer.ClassList, transport.AuthSidecar},
		{"POST", "/api/v1/namespaces/ns/pods", nil, balancer.Short, balancer.ClassCreate, transport.AuthSidecar},
		{"PUT", "/api/v1/namespaces/ns/pods/p", nil, balancer.Short, balancer.ClassUpdate, transport.AuthSidecar},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale", nil, balancer.Short, balancer.ClassPatch, transport.AuthSidecar},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", nil, balancer.Short, balancer.ClassDelete, transport.AuthSidecar},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments", nil, balancer.Short, balancer.ClassDeleteCollection, transport.AuthSidecar},
		// Non-resource requests: their verb is the HTTP method, not
		// comparable with a resource GET.
		{"GET", "/healthz", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		{"GET", "/version", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		{"GET", "/apis", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		{"GET", "/openapi/v3", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		{"POST", "/some/non/resource", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		{"DELETE", "/some/non/resource", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		// Unparseable: Short, and no class.
		{"GET", "/api/v1/watch", nil, balancer.Short, balancer.ClassOther, transport.AuthSidecar},
		// Long requests carry their verb's class too; the balancer
		// ignores it for them.
		{"GET", "/api/v1/pods?watch=true", nil, balancer.Long, balancer.ClassOther, transport.AuthSidecar},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", nil, balancer.Long, balancer.ClassGet, transport.AuthSidecar},
		// A request that brings its own token goes without the sidecar's
		// credentials.
		{"GET", "/api/v1/pods", bearer, balancer.Short, balancer.ClassList, transport.AuthPassthrough},
		{"GET", "/api/v1/namespaces/ns/pods/p/exec", wsBearer, balancer.Long, balancer.ClassGet, transport.AuthPassthrough},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != nil {
				r.Header = tc.header
			}
			c := classify(reqinfo.New(r))
			if c.Kind != tc.kind || c.Class != tc.class || c.Mode != tc.mode {
				t.Errorf("classify kind, class, mode = %v, %v, %v; want %v, %v, %v", c.Kind, c.Class, c.Mode, tc.kind, tc.class, tc.mode)
			}
		})
	}
}
