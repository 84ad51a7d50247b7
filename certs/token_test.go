package certs

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// rewrite replaces the token file's content and moves its modification
// time forward, as a kubelet rotation does.
func rewrite(t *testing.T, path, content string, mtime *time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	*mtime = mtime.Add(time.Minute)
	if err := os.Chtimes(path, *mtime, *mtime); err != nil {
		t.Fatal(err)
	}
}

func TestTokenFileRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := testkit.WriteFile(t, dir, "token", []byte("one\n"))
		mtime := time.Now().Add(-time.Hour)
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		creds, err := NewCredentials(&Upstream{Token: Source{Path: path}})
		if err != nil {
			t.Fatal(err)
		}

		steps := []struct {
			name    string
			do      func()
			advance time.Duration
			want    string
		}{
			{"initial", func() {}, 0, "one"},
			{"rotated, checked less than a second ago", func() { rewrite(t, path, "two", &mtime) }, tokenRecheck - time.Nanosecond, "one"},
			{"a second after the last check", func() {}, time.Nanosecond, "two"},
			{"file removed: last good token kept", func() { os.Remove(path) }, time.Second, "two"},
			{"file empty: last good token kept", func() { rewrite(t, path, "  \n", &mtime) }, time.Second, "two"},
			{"file valid again", func() { rewrite(t, path, "three\n", &mtime) }, time.Second, "three"},
			{"same content, new mtime", func() { rewrite(t, path, "three\n", &mtime) }, time.Second, "three"},
		}
		for _, s := range steps {
			s.do()
			time.Sleep(s.advance)
			if got, err := creds.Token(); err != nil || got != s.want {
				t.Fatalf("%s: Token() = %q, %v; want %q", s.name, got, err, s.want)
			}
		}
	})
}

// TestTokenFileSymlinkSwap follows the layout of a Kubernetes projected
// volume: token -> ..data/token, ..data -> a timestamped directory that
// the kubelet replaces by swapping the ..data symlink.
func TestTokenFileSymlinkSwap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		old := filepath.Join(dir, "..2024_01_01")
		testkit.WriteFile(t, old, "token", []byte("old"))
		if err := os.Symlink(filepath.Base(old), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "token")
		if err := os.Symlink(filepath.Join("..data", "token"), path); err != nil {
			t.Fatal(err)
		}
		creds, err := NewCredentials(&Upstream{Token: Source{Path: path}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := creds.Token(); got != "old" {
			t.Fatalf("Token() = %q, want old", got)
		}

		next := filepath.Join(dir, "..2024_01_02")
		testkit.WriteFile(t, next, "token", []byte("new-token"))
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(filepath.Join(next, "token"), later, later); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(next), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(old)

		time.Sleep(2 * time.Second)
		if got, _ := creds.Token(); got != "new-token" {
			t.Fatalf("Token() after the symlink swap = %q, want new-token", got)
		}
	})
}

// TestTokenConcurrent runs Token from many goroutines across rotations;
// under -race it checks the lock-free read path. The readers call Token
// every millisecond of the bubble's clock, all at the same instants, so
// that every recheck of the file is raced for by all of them.
func TestTokenConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := testkit.WriteFile(t, dir, "token", []byte("v0"))
		creds, err := NewCredentials(&Upstream{Token: Source{Path: path}})
		if err != nil {
			t.Fatal(err)
		}
		mtime := time.Now()
		valid := map[string]bool{"v0": true, "v1": true, "v2": true, "v3": true}

		var wg sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan string, 8)
		for range 8 {
			wg.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					if v, _ := creds.Token(); !valid[v] {
						errs <- v
						return
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			})
		}
		for _, v := range []string{"v1", "v2", "v3"} {
			rewrite(t, path, v, &mtime)
			time.Sleep(tokenRecheck)
			// The readers have had their turn at this instant: whoever
			// won the recheck read the file.
			synctest.Wait()
			if got, _ := creds.Token(); got != v {
				t.Fatalf("Token() = %q a recheck interval after the file became %s", got, v)
			}
		}
		close(stop)
		wg.Wait()
		close(errs)
		for v := range errs {
			t.Errorf("Token() returned %q, which was never in the file", v)
		}
	})
}
