// Package watchtest builds watch events as kube-apiserver sends them, for
// the tests of package proxy (the 410 retry through the handler) and of
// package watch (the framing and the retry itself).
package watchtest

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// ProtoFrame encodes one protobuf watch event as kube-apiserver sends it:
// a length prefix, then a metav1.WatchEvent whose object is "k8s\x00" and
// a runtime.Unknown.
func ProtoFrame(t testing.TB, typ string, obj runtime.Object) []byte {
	t.Helper()
	var raw, ev bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &raw); err != nil {
		t.Fatal(err)
	}
	if err := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme).Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw.Bytes()}}, &ev); err != nil {
		t.Fatal(err)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(ev.Len()))
	return append(out, ev.Bytes()...)
}

// GoneStatus is the Status of a watch's 410: its resource version is
// older than the apiserver's cache.
func GoneStatus() *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: "too old resource version: 5 (90)", Reason: metav1.StatusReasonExpired, Code: http.StatusGone}
}

// AddedConfigMap is the object of an ordinary ADDED event.
func AddedConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "91"}}
}
