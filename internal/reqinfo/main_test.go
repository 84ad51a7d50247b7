package reqinfo

import (
	"net/http/httptest"
	"os"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.DiscardKlog()
	os.Exit(m.Run())
}

func BenchmarkClassify(b *testing.B) {
	for _, target := range []string{
		"/api/v1/namespaces/ns/pods/p",
		"/apis/apps/v1/namespaces/ns/deployments?watch=true&resourceVersion=123&allowWatchBookmarks=true",
	} {
		r := httptest.NewRequest("GET", target, nil)
		b.Run(target, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				New(r)
			}
		})
	}
}
