package sidecar

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestRebalanceOptions(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"off", []string{"--watch-rebalance=false"}, ""},
		{"negative rate", []string{"--watch-rebalance-rate=-1"}, "--watch-rebalance-rate"},
		{"zero rate", []string{"--watch-rebalance-rate=0"}, "--watch-rebalance=false"},
		{"negative rate ignored when off", []string{"--watch-rebalance=false", "--watch-rebalance-rate=-1"}, ""},
		{"negative tolerance", []string{"--watch-rebalance-tolerance=-0.5"}, "--watch-rebalance-tolerance"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := NewConfig()
			o.Kubeconfig = "/etc/kubernetes/controller-manager.conf"
			fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
	if !NewConfig().Engine.WatchRebalance {
		t.Error("--watch-rebalance is off by default, want on")
	}
}
