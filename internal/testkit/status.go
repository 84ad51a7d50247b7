package testkit

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WaitLimit bounds how long Wait waits for something that must happen.
const WaitLimit = 30 * time.Second

// Wait fails the test if ch is not closed within WaitLimit.
func Wait(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(WaitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// ReadStatus decodes a Kubernetes Status answer, checks its envelope (JSON,
// kind Status v1, Failure, the code the HTTP status) and closes the body.
func ReadStatus(t testing.TB, resp *http.Response) metav1.Status {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var st metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decoding Status: %v", err)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
		t.Errorf("Status envelope = %q %q %q, want Status v1 Failure", st.Kind, st.APIVersion, st.Status)
	}
	if int(st.Code) != resp.StatusCode {
		t.Errorf("Status code %d differs from HTTP status %d", st.Code, resp.StatusCode)
	}
	return st
}
