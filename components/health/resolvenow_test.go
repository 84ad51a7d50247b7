package health

import (
	"reflect"
	"testing"

	"github.com/fanout-dev/fanout/resolver"
)

type readyReport struct {
	address string
	ready   bool
}

// recordingSink records SetReady calls; the test calls it from one
// goroutine.
type recordingSink struct{ reports []readyReport }

func (s *recordingSink) SetReady(address string, ready bool) {
	s.reports = append(s.reports, readyReport{address, ready})
}

// plainResolver cannot look up early.
type plainResolver struct{}

// nowResolver is a resolver that counts ResolveNow calls.
type nowResolver struct {
	calls int
}

func (r *nowResolver) ResolveNow() { r.calls++ }

func TestWithResolveOnFailure(t *testing.T) {
	t.Run("resolver without ResolveNow gets the sink itself", func(t *testing.T) {
		sink := &recordingSink{}
		if got := WithResolveOnFailure(sink, plainResolver{}); got != Sink(sink) {
			t.Fatalf("probeSink = %#v, want the sink itself", got)
		}
	})
	t.Run("a failed probe asks the resolver to look up", func(t *testing.T) {
		sink := &recordingSink{}
		r := &nowResolver{}
		s := WithResolveOnFailure(sink, r)
		steps := []struct {
			report    readyReport
			wantCalls int
		}{
			{readyReport{"10.0.0.1:6443", true}, 0},
			{readyReport{"10.0.0.2:6443", false}, 1},
			{readyReport{"10.0.0.2:6443", false}, 2},
			{readyReport{"10.0.0.1:6443", true}, 2},
		}
		var want []readyReport
		for i, st := range steps {
			s.SetReady(st.report.address, st.report.ready)
			want = append(want, st.report)
			if r.calls != st.wantCalls {
				t.Errorf("after report %d %v: ResolveNow called %d times, want %d", i, st.report, r.calls, st.wantCalls)
			}
		}
		if !reflect.DeepEqual(sink.reports, want) {
			t.Errorf("sink got %v, want %v", sink.reports, want)
		}
	})
	t.Run("dns resolver", func(t *testing.T) {
		r, err := resolver.Parse("dns:///kube.example:6443", resolver.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := WithResolveOnFailure(&recordingSink{}, r).(resolveOnFailure); !ok {
			t.Fatal("WithResolveOnFailure did not decorate the sink for a dns resolver")
		}
		// Without Run, requests only coalesce: this must not block.
		r.(*resolver.DNS).ResolveNow()
		r.(*resolver.DNS).ResolveNow()
	})
}
