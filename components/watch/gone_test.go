package watch

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fanout-dev/fanout/internal/watchtest"
)

const (
	goneEvent  = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (90)","reason":"Expired","code":410}}`
	addedEvent = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"91"}}}`
)

func TestIsGoneEvent(t *testing.T) {
	for line, want := range map[string]bool{
		goneEvent:  true,
		addedEvent: false,
		`{"type":"ERROR","object":{"kind":"Status","code":500}}`: false,
		`not json`: false,
	} {
		if got := isGoneEvent([]byte(line)); got != want {
			t.Errorf("isGoneEvent(%s) = %v, want %v", line, got, want)
		}
	}
}

func TestIsGoneProtobufEvent(t *testing.T) {
	frame := func(typ string, obj runtime.Object) []byte { return watchtest.ProtoFrame(t, typ, obj)[4:] }
	for _, tc := range []struct {
		name string
		ev   []byte
		want bool
	}{
		{"410 Status", frame("ERROR", watchtest.GoneStatus()), true},
		{"500 Status", frame("ERROR", &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Code: 500}), false},
		{"ADDED object", frame("ADDED", watchtest.AddedConfigMap()), false},
		{"garbage", []byte("not protobuf"), false},
		{"empty", nil, false},
	} {
		if got := isGoneProtobufEvent(tc.ev); got != tc.want {
			t.Errorf("%s: isGoneProtobufEvent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGoneRetryBodyPassesEverythingOn: when the first event is not a 410,
// every byte reaches the client in order, the first event too, whatever
// its size, and an error after it comes after the bytes.
func TestGoneRetryBodyPassesEverythingOn(t *testing.T) {
	added := watchtest.ProtoFrame(t, "ADDED", watchtest.AddedConfigMap())
	big := `{"type":"ADDED","object":{"kind":"ConfigMap","data":{"k":"` + strings.Repeat("x", 100<<10) + `"}}}` + "\n"
	boom := errors.New("stream broke")
	for _, tc := range []struct {
		name    string
		framing framing
		body    string
		err     error
	}{
		{"JSON, several events", framingJSON, addedEvent + "\n" + strings.Repeat(addedEvent+"\n", 1000), nil},
		{"JSON, first event above the 64 KiB buffer", framingJSON, big + addedEvent + "\n", nil},
		{"JSON, broken after half an event", framingJSON, addedEvent[:20], boom},
		{"protobuf, several events", framingProtobuf, string(added) + strings.Repeat(string(added), 1000), nil},
		{"protobuf, broken inside the length", framingProtobuf, string(added[:2]), boom},
		{"protobuf, broken inside the first frame", framingProtobuf, string(added[:10]), boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src io.Reader = strings.NewReader(tc.body)
			if tc.err != nil {
				src = io.MultiReader(src, errReader{tc.err})
			}
			retried := false
			b := newGoneRetryBody(io.NopCloser(src), tc.framing, func() (io.ReadCloser, error) {
				retried = true
				return nil, errNoRetry
			})
			got, err := io.ReadAll(b)
			if string(got) != tc.body {
				t.Errorf("passed on %d bytes, want the %d sent, in order", len(got), len(tc.body))
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("error %v, want %v", err, tc.err)
			}
			if retried {
				t.Error("retried a watch whose first event is not a 410")
			}
		})
	}
}

// errNoRetry is what a Resend without another endpoint returns.
var errNoRetry = errors.New("no other endpoint to retry the watch on")

// isGoneProtobufEventGogo is isGoneProtobufEvent as it was written with
// apimachinery's generated decoders, which the sidecar no longer links.
func isGoneProtobufEventGogo(ev []byte) bool {
	var we metav1.WatchEvent
	if we.Unmarshal(ev) != nil || we.Type != "ERROR" {
		return false
	}
	raw, ok := bytes.CutPrefix(we.Object.Raw, []byte("k8s\x00"))
	if !ok {
		return false
	}
	var u runtime.Unknown
	if u.Unmarshal(raw) != nil || u.Kind != "Status" {
		return false
	}
	var st metav1.Status
	return st.Unmarshal(u.Raw) == nil && st.Code == http.StatusGone
}

// FuzzIsGoneProtobufEventMatchesGogo compares the protowire reading of a
// watch event with apimachinery's generated decoders.
func FuzzIsGoneProtobufEventMatchesGogo(f *testing.F) {
	f.Add(watchtest.ProtoFrame(f, "ERROR", watchtest.GoneStatus())[4:])
	f.Add(watchtest.ProtoFrame(f, "ERROR", &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Code: 500})[4:])
	f.Add(watchtest.ProtoFrame(f, "ADDED", watchtest.AddedConfigMap())[4:])
	f.Add(watchtest.ProtoFrame(f, "ERROR", watchtest.AddedConfigMap())[4:])
	f.Add([]byte("not protobuf"))
	f.Fuzz(func(t *testing.T, ev []byte) {
		if got, want := isGoneProtobufEvent(ev), isGoneProtobufEventGogo(ev); got != want {
			t.Errorf("isGoneProtobufEvent(%q) = %v, the generated decoders say %v", ev, got, want)
		}
	})
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
