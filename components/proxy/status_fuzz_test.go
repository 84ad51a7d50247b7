package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzWriteStatus checks the error body every fanout failure ends in:
// whatever the message (it quotes upstream errors, URLs and addresses),
// the answer is a metav1.Status client-go can decode, with the code and
// reason given, the message intact (as valid UTF-8), an exact
// Content-Length, and nothing the client could mistake for HTML.
func FuzzWriteStatus(f *testing.F) {
	codes := []int{http.StatusBadRequest, http.StatusNotImplemented, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests}
	f.Add(uint8(0), "ServiceUnavailable", "no kube-apiserver endpoint is available")
	f.Add(uint8(2), "InternalError", "request to kube-apiserver 10.0.0.1:6443 failed: EOF \"quoted\" <b>html</b>")
	f.Add(uint8(4), "", "\xff\xfe invalid utf-8 \x00")
	f.Fuzz(func(t *testing.T, ci uint8, reason, msg string) {
		code := codes[int(ci)%len(codes)]
		rec := httptest.NewRecorder()
		writeStatus(rec, code, metav1.StatusReason(reason), msg)
		if rec.Code != code {
			t.Fatalf("status %d, want %d", rec.Code, code)
		}
		body := rec.Body.Bytes()
		if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(len(body)) {
			t.Fatalf("Content-Length %s for a body of %d bytes", cl, len(body))
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("Content-Type %q, nosniff %q", ct, rec.Header().Get("X-Content-Type-Options"))
		}
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("body %q is not JSON: %v", body, err)
		}
		if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || int(st.Code) != code {
			t.Fatalf("decoded %+v", st)
		}
		if utf8.ValidString(msg) && st.Message != msg {
			t.Fatalf("message %q came back as %q", msg, st.Message)
		}
		if utf8.ValidString(reason) && string(st.Reason) != reason {
			t.Fatalf("reason %q came back as %q", reason, st.Reason)
		}
	})
}
