package components

import (
	"strings"
	"testing"
)

func TestInClusterFlagValidation(t *testing.T) {
	tests := []struct {
		name       string
		kubeconfig string
		inCluster  bool
		wantErr    string
	}{
		{name: "kubeconfig", kubeconfig: "/k"},
		{name: "in-cluster", inCluster: true},
		{name: "neither", wantErr: "--kubeconfig is required"},
		{name: "both", kubeconfig: "/k", inCluster: true, wantErr: "exclude each other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.Kubeconfig, o.InCluster = tt.kubeconfig, tt.inCluster
			err := o.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestInClusterOutsidePod: --in-cluster outside a pod fails before start
// with a hint, rather than at the first request.
func TestInClusterOutsidePod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o := NewOptions()
	o.InCluster = true
	if _, err := loadUpstream(*o); err == nil || !strings.Contains(err.Error(), "--in-cluster") {
		t.Fatalf("loadUpstream = %v, want an --in-cluster error", err)
	}
}
