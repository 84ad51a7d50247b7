package watch

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// blockingBody signals when it is first read, then blocks until release
// is closed and reports io.EOF: a watch whose first event has not come.
type blockingBody struct {
	reading chan<- struct{}
	release <-chan struct{}
	once    bool
}

func (b *blockingBody) Read([]byte) (int, error) {
	if !b.once {
		b.once = true
		b.reading <- struct{}{}
	}
	<-b.release
	return 0, io.EOF
}

func (b *blockingBody) Close() error { return nil }

// TestGoneCheckHoldsNoBufferBeforeFirstEvent: a watch whose first event
// has not come yet costs the 410 check nothing; its buffer comes with the
// event. When the check allocated its 64 KiB buffer up front, 1,000
// watches waiting for their first event grew the heap by 62.5 MiB. The
// bound leaves room for what other tests' goroutines free or allocate
// meanwhile (about 1 MiB either way).
func TestGoneCheckHoldsNoBufferBeforeFirstEvent(t *testing.T) {
	const (
		watches = 1000
		bound   = 4 << 20 // 4 KiB a watch, far below one 64 KiB buffer
	)
	for _, f := range []framing{framingJSON, framingProtobuf} {
		t.Run(fmt.Sprint(f), func(t *testing.T) {
			reading := make(chan struct{}, watches)
			release := make(chan struct{})
			bodies := make([]*goneRetryBody, watches)
			bufs := make([][]byte, watches) // the reverse proxy's copy buffers
			for i := range bodies {
				bodies[i] = newGoneRetryBody(&blockingBody{reading: reading, release: release}, f,
					func() (io.ReadCloser, error) { return nil, errNoRetry })
				bufs[i] = make([]byte, 8<<10)
			}
			done := make(chan struct{}, watches)
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range bodies {
				go func() {
					bodies[i].Read(bufs[i])
					done <- struct{}{}
				}()
			}
			for range watches {
				select {
				case <-reading:
				case <-time.After(testkit.WaitLimit):
					close(release)
					t.Fatal("a watch body was never read")
				}
			}
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			close(release)
			for range watches {
				<-done
			}
			growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d watches waiting for their first event: heap grew by %.1f KiB", watches, float64(growth)/1024)
			if growth >= bound {
				t.Errorf("heap grew by %.1f MiB for %d watches waiting for their first event; want less than %d KiB: the 410 check allocates before an event arrives",
					float64(growth)/(1<<20), watches, bound>>10)
			}
		})
	}
}
