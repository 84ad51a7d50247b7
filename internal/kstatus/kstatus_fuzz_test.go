package kstatus

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzWrite checks the error body every fanout failure ends in:
// whatever the message (it quotes upstream errors, URLs and addresses),
// the answer is a metav1.Status client-go can decode, with the code and
// reason given, the message intact (as valid UTF-8), an exact
// Content-Length, and nothing the client could mistake for HTML. The body
// is byte for byte what apimachinery writes for the same metav1.Status.
func FuzzWrite(f *testing.F) {
	codes := []int{http.StatusBadRequest, http.StatusNotImplemented, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests}
	f.Add(uint8(0), "ServiceUnavailable", "no kube-apiserver endpoint is available")
	f.Add(uint8(2), "InternalError", "request to kube-apiserver 10.0.0.1:6443 failed: EOF \"quoted\" <b>html</b>")
	f.Add(uint8(4), "", "\xff\xfe invalid utf-8 \x00")
	f.Fuzz(func(t *testing.T, ci uint8, reason, msg string) {
		code := codes[int(ci)%len(codes)]
		rec := httptest.NewRecorder()
		Write(rec, code, Reason(reason), msg)
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
		want, err := json.Marshal(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Message: msg, Reason: metav1.StatusReason(reason), Code: int32(code),
		})
		if err != nil {
			t.Fatal(err)
		}
		if want = append(want, '\n'); !bytes.Equal(body, want) {
			t.Fatalf("body\n%s\nmetav1.Status marshals to\n%s", body, want)
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

// TestStatusMatchesMetav1 checks every reason fanout answers with: the body
// is the one json.Marshal makes of the metav1.Status, and client-go turns
// it into the StatusError its IsXxx helpers recognise.
func TestStatusMatchesMetav1(t *testing.T) {
	tests := []struct {
		code   int
		reason Reason
		want   metav1.StatusReason
		is     func(error) bool
	}{
		{http.StatusBadRequest, ReasonBadRequest, metav1.StatusReasonBadRequest, apierrors.IsBadRequest},
		{http.StatusForbidden, ReasonForbidden, metav1.StatusReasonForbidden, apierrors.IsForbidden},
		{http.StatusMethodNotAllowed, ReasonMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, apierrors.IsMethodNotSupported},
		{http.StatusTooManyRequests, ReasonTooManyRequests, metav1.StatusReasonTooManyRequests, apierrors.IsTooManyRequests},
		{http.StatusServiceUnavailable, ReasonServiceUnavailable, metav1.StatusReasonServiceUnavailable, apierrors.IsServiceUnavailable},
		{http.StatusGatewayTimeout, ReasonTimeout, metav1.StatusReasonTimeout, apierrors.IsTimeout},
		{http.StatusBadGateway, ReasonInternalError, metav1.StatusReasonInternalError, apierrors.IsInternalError},
		{http.StatusNotImplemented, ReasonUnknown, metav1.StatusReasonUnknown, func(err error) bool {
			return apierrors.ReasonForError(err) == metav1.StatusReasonUnknown
		}},
		{ClientClosedRequest, ReasonUnknown, metav1.StatusReasonUnknown, func(err error) bool {
			return apierrors.ReasonForError(err) == metav1.StatusReasonUnknown
		}},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		Write(rec, tc.code, tc.reason, "fanout: it failed")
		want, err := json.Marshal(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Message: "fanout: it failed", Reason: tc.want, Code: int32(tc.code),
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.Bytes(); !bytes.Equal(got, append(want, '\n')) {
			t.Errorf("%d %q: body\n%s\nmetav1.Status marshals to\n%s", tc.code, tc.reason, got, want)
		}
		var st metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		err = apierrors.FromObject(&st)
		if !tc.is(err) || apierrors.ReasonForError(err) != tc.want || err.Error() != "fanout: it failed" {
			t.Errorf("%d %q: client-go makes %#v of it (reason %q)", tc.code, tc.reason, err, apierrors.ReasonForError(err))
		}
	}
}
