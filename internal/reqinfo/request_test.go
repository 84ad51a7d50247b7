package reqinfo

import (
	"context"
	"sync"
	"testing"
	"time"
)

type recordEnder struct {
	name string
	mu   *sync.Mutex
	log  *[]string
}

func (e recordEnder) RequestEnded(*Request) {
	e.mu.Lock()
	*e.log = append(*e.log, e.name)
	e.mu.Unlock()
}

// TestRequestEndsOnce: the Request in the context is the one WithRequest
// made; its End runs every Ender once, the last registered first, however
// many callers end it at once.
func TestRequestEndsOnce(t *testing.T) {
	start := time.Unix(1e9, 0)
	ctx, req := WithRequest(context.Background(), Info{Verb: "watch", LongRunning: true}, start)
	if got := RequestFrom(ctx); got != req || got.Verb != "watch" || !got.Start.Equal(start) {
		t.Fatalf("RequestFrom = %+v, want the Request WithRequest made", got)
	}
	if RequestFrom(context.Background()) != nil {
		t.Error("RequestFrom of a context without a Request is not nil")
	}
	req.SetHandlerState(&start)
	if req.HandlerState() != &start {
		t.Error("HandlerState is not what SetHandlerState hung on the request")
	}
	var mu sync.Mutex
	var log []string
	req.OnEnd(recordEnder{"edge", &mu, &log})
	req.OnEnd(recordEnder{"handler", &mu, &log})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(req.End)
	}
	wg.Wait()
	if len(log) != 2 || log[0] != "handler" || log[1] != "edge" {
		t.Errorf("Enders ran %v, want [handler edge]: once each, the last registered first", log)
	}
	if !req.Ended() {
		t.Error("Ended is false after End")
	}
}
