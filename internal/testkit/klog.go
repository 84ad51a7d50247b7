package testkit

import (
	"flag"
	"io"

	"k8s.io/klog/v2"
)

// DiscardKlog silences klog for the test binary, for a TestMain: the
// apiserver's RequestInfoFactory logs every query it cannot parse, and
// fuzz corpora are full of them.
func DiscardKlog() {
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}
