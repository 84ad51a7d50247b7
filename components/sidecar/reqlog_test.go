package sidecar

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/internal/logging"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestWhichAPIServerAnswered runs the sidecar as its flags configure it
// at -v 4 with --debug-endpoint-header: a request's answer names the
// apiserver that answered, and its log line, written once the request
// has ended, names the same one. docs/troubleshooting.md shows the line
// this test logs.
func TestWhichAPIServerAnswered(t *testing.T) {
	var log testkit.Buffer
	f := startSidecarLogged(t, logging.New("text", logging.RequestVerbosity, &log), "", "least-request", func(c *Config) {
		fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
		c.AddFlags(fs)
		if err := fs.Parse([]string{"--debug-endpoint-header", "-v", "4"}); err != nil {
			t.Fatal(err)
		}
	})
	req, _ := http.NewRequest("GET", "http://"+f.proxy.Addr().String()+"/api/v1/namespaces/default/configmaps?labelSelector=app%3Dweb&limit=500", nil)
	req.Header.Set("User-Agent", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abcdef/replicaset-controller")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	endpoint := resp.Header.Get("X-Fanout-Endpoint")
	if endpoint == "" || resp.Header.Get("X-Fanout-Attempts") != "1" {
		t.Fatalf("answer headers %v: want X-Fanout-Endpoint and X-Fanout-Attempts: 1", resp.Header)
	}
	served := false
	for _, s := range f.servers {
		served = served || strings.HasSuffix(s.URL, "//"+endpoint) && len(s.clientRequests()) == 1
	}
	if !served {
		t.Errorf("X-Fanout-Endpoint %s is not the test apiserver that got the request", endpoint)
	}
	var line string
	testkit.WaitFor(t, "the request's log line", func() bool {
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "msg=request") {
				line = l
				return true
			}
		}
		return false
	})
	t.Logf("%s", line)
	for _, want := range []string{"level=DEBUG-4", "method=GET", "path=/api/v1/namespaces/default/configmaps",
		"query=\"labelSelector=app%3Dweb&limit=500\"", "verb=list", "endpoint=" + endpoint, "status=200", "attempts=1", "duration="} {
		if !strings.Contains(line, want) {
			t.Errorf("the request line lacks %s: %s", want, line)
		}
	}
}
