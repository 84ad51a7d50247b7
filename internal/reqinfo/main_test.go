package reqinfo

import (
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	// RequestInfoFactory logs unparsable queries through klog; the fuzz
	// corpus is full of them.
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
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
