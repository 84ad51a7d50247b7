package resolver

import (
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestParseDynamic(t *testing.T) {
	def, _ := url.Parse("https://kube.example:6443")
	fallback := []Endpoint{{Address: "kube.example:6443"}}
	api := APIServer{URL: "https://kube.example:6443", Transport: http.DefaultTransport}
	discovery := func() (APIServer, error) { return api, nil }
	tests := []struct {
		name      string
		spec      string
		discovery func() (APIServer, error)
		want      Resolver // compared without APIServer
		wantErr   string
	}{
		{"dns", "dns:///kube.example:6443", nil,
			&DNS{Host: "kube.example", Port: "6443", Fallback: fallback}, ""},
		{"dns default port", "dns:///kube.example", nil,
			&DNS{Host: "kube.example", Port: "443", Fallback: fallback}, ""},
		{"dns ipv6 literal", "dns:///[fd00::1]:6443", nil,
			&DNS{Host: "fd00::1", Port: "6443", Fallback: fallback}, ""},
		{"dns with server refused", "dns://8.8.8.8/kube.example:443", nil, nil, "three slashes"},
		{"dns without name", "dns:///:443", nil, nil, "has no name"},
		{"dns bad port", "dns:///kube.example:https", nil, nil, "not a number"},
		{"dns port out of range", "dns:///kube.example:70000", nil, nil, "not a number"},
		{"endpointslice", "endpointslice:///default/kubernetes", discovery,
			&EndpointSlices{Namespace: "default", Service: "kubernetes", Fallback: fallback}, ""},
		{"endpointslice port name", "endpointslice:///kube-system/apiserver:https", discovery,
			&EndpointSlices{Namespace: "kube-system", Service: "apiserver", PortName: "https", Fallback: fallback}, ""},
		{"endpointslice without namespace", "endpointslice:///kubernetes", discovery, nil, "expected endpointslice:///namespace/service"},
		{"endpointslice two slashes", "endpointslice://default/kubernetes", discovery, nil, "expected endpointslice:///namespace/service"},
		{"endpointslice extra path", "endpointslice:///default/kubernetes/x", discovery, nil, "expected endpointslice:///namespace/service"},
		{"endpointslice bad namespace", "endpointslice:///Default/kubernetes", discovery, nil, "namespace \"Default\""},
		{"endpointslice bad service", "endpointslice:///default/", discovery, nil, "service \"\""},
		{"endpointslice bad port name", "endpointslice:///default/kubernetes:", discovery, nil, "port name"},
		{"endpointslice no credentials", "endpointslice:///default/kubernetes", nil, nil, "no credentials"},
		{"endpointslice credentials fail", "endpointslice:///default/kubernetes",
			func() (APIServer, error) { return APIServer{}, errors.New("no such file") }, nil, "discovery credentials: no such file"},
		{"endpointslice bad discovery URL", "endpointslice:///default/kubernetes",
			func() (APIServer, error) {
				return APIServer{URL: "kube.example:6443", Transport: http.DefaultTransport}, nil
			}, nil, "is not an http(s) URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.spec, Config{Fallback: def, Discovery: tt.discovery}, tt.wantErr)
			if tt.wantErr != "" {
				return
			}
			if es, ok := r.(*EndpointSlices); ok {
				if es.APIServer.URL != api.URL || es.APIServer.Transport != api.Transport {
					t.Fatalf("endpointslice resolver has APIServer %+v, want %+v", es.APIServer, api)
				}
				es.APIServer = APIServer{}
			}
			if !reflect.DeepEqual(r, tt.want) {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.spec, r, tt.want)
			}
		})
	}
}

// mustParse parses spec with cfg. With a wantErr it fails t unless Parse
// fails with an error containing wantErr, and returns nil; without, it
// fails t if Parse fails.
func mustParse(t *testing.T, spec string, cfg Config, wantErr string) Resolver {
	t.Helper()
	r, err := Parse(spec, cfg)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Parse(%q) error = %v, want one containing %q", spec, err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("Parse(%q) = %v", spec, err)
	}
	return r
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		in   []Endpoint
		want []Endpoint
	}{
		{"sorted", []Endpoint{{Address: "b:1"}, {Address: "a:1"}}, []Endpoint{{Address: "a:1"}, {Address: "b:1"}}},
		{"duplicate draining only if all copies are",
			[]Endpoint{{Address: "a:1", Draining: true}, {Address: "a:1", Zone: "z1"}, {Address: "b:1", Draining: true}, {Address: "b:1", Draining: true}},
			[]Endpoint{{Address: "a:1", Zone: "z1"}, {Address: "b:1", Draining: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := normalize(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("normalize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseServerService checks endpointslice:///namespace/*: the Service
// the kubeconfig's server names, as a pod in that namespace resolves it,
// and the kubeconfig's server alone when it names none.
func TestParseServerService(t *testing.T) {
	api := APIServer{URL: "https://10.96.0.1:443", Transport: http.DefaultTransport}
	discovery := func() (APIServer, error) { return api, nil }
	tests := []struct {
		server, spec string
		want         Resolver
		wantErr      string
	}{
		{"https://kube-apiserver", "endpointslice:///shoot--p--c/*",
			&EndpointSlices{Namespace: "shoot--p--c", Service: "kube-apiserver", Fallback: []Endpoint{{Address: "kube-apiserver:443"}}}, ""},
		{"https://virtual-garden-kube-apiserver.garden.svc:443", "endpointslice:///other/*",
			&EndpointSlices{Namespace: "garden", Service: "virtual-garden-kube-apiserver", Fallback: []Endpoint{{Address: "virtual-garden-kube-apiserver.garden.svc:443"}}}, ""},
		{"https://kube-apiserver.shoot--p--c.svc.cluster.local", "endpointslice:///x/*:https",
			&EndpointSlices{Namespace: "shoot--p--c", Service: "kube-apiserver", PortName: "https", Fallback: []Endpoint{{Address: "kube-apiserver.shoot--p--c.svc.cluster.local:443"}}}, ""},
		{"https://kube-apiserver.shoot--p--c", "endpointslice:///x/*",
			&EndpointSlices{Namespace: "shoot--p--c", Service: "kube-apiserver", Fallback: []Endpoint{{Address: "kube-apiserver.shoot--p--c:443"}}}, ""},
		// Names no Service: the kubeconfig's server alone.
		{"https://10.0.0.1:6443", "endpointslice:///ns/*", Static{Endpoints: []Endpoint{{Address: "10.0.0.1:6443"}}}, ""},
		{"https://api.shoot.example.com", "endpointslice:///ns/*", Static{Endpoints: []Endpoint{{Address: "api.shoot.example.com:443"}}}, ""},
		{"https://9lives", "endpointslice:///ns/*", Static{Endpoints: []Endpoint{{Address: "9lives:443"}}}, ""},
		{"https://kube-apiserver", "endpointslice:///Bad/*", nil, "namespace \"Bad\""},
	}
	for _, tt := range tests {
		t.Run(tt.server+" "+tt.spec, func(t *testing.T) {
			u, err := url.Parse(tt.server)
			if err != nil {
				t.Fatal(err)
			}
			r := mustParse(t, tt.spec, Config{Fallback: u, Discovery: discovery}, tt.wantErr)
			if tt.wantErr != "" {
				return
			}
			if es, ok := r.(*EndpointSlices); ok {
				es.APIServer = APIServer{}
			}
			if !reflect.DeepEqual(r, tt.want) {
				t.Fatalf("Parse(%q) with server %s = %+v, want %+v", tt.spec, tt.server, r, tt.want)
			}
		})
	}
}
