package balancer

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestWatchLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1")
		p, err := b.Pick(PickInfo{Kind: Long})
		if err != nil {
			t.Fatal(err)
		}
		b.SetReady("b:1", false)
		time.Sleep(time.Minute)
		b.SetReady("b:1", true)
		back := time.Now()
		byAddr := map[string]WatchLoad{}
		for _, l := range b.WatchLoads() {
			byAddr[l.Address] = l
		}
		a, bb := byAddr["a:1"], byAddr["b:1"]
		if !a.Usable || !bb.Usable {
			t.Errorf("usable: a %v, b %v; want both", a.Usable, bb.Usable)
		}
		if !a.UsableSince.IsZero() {
			t.Errorf("a, of the first snapshot, usable since %v, want the zero time", a.UsableSince)
		}
		if !bb.UsableSince.Equal(back) {
			t.Errorf("b usable since %v, want %v, when its probe passed again", bb.UsableSince, back)
		}
		if got := byAddr[p.Endpoint.Address()].OpenLong; got != 1 {
			t.Errorf("the picked endpoint holds %d long requests, want 1", got)
		}
		b.SetReady("a:1", false)
		for _, l := range b.WatchLoads() {
			if l.Address == "a:1" && l.Usable {
				t.Error("a is usable while its probe fails")
			}
		}
		p.Done(DoneInfo{StatusCode: 200})
	})
}
