package certs

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Timings of the watchers.
const (
	// DefaultPollInterval is how often watched files are re-read even
	// without a file system event: inotify misses changes on some file
	// systems (NFS, some FUSE and overlay set-ups) and a directory that
	// did not exist at start cannot be watched until it does.
	DefaultPollInterval = 10 * time.Second
	// retryInterval replaces the poll interval while a source is broken
	// (a half-written file, a key that does not match its certificate
	// yet), so that the repaired file is picked up quickly.
	retryInterval = time.Second
	// settleDelay lets a burst of events (kubelet writes a new directory,
	// then swaps ..data; an editor writes, then renames) end before the
	// files are read, so that a cert and key written one after the other
	// are seen together.
	settleDelay = 100 * time.Millisecond
	// renewAt is the share of a certificate's lifetime after which a
	// certificate that was not replaced is logged as due for renewal.
	renewAt = 0.8
)

// Options configure how file-backed material is watched. The zero value
// is usable: the default logger, no metrics, DefaultPollInterval.
type Options struct {
	// Log receives one line per reload and per failed reload; nil discards.
	Log *slog.Logger
	// Metrics counts reloads and exports expiration times; nil for none.
	Metrics *Metrics
	// PollInterval is how often files are re-read without an event.
	PollInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	return o
}

// checkResult is what one re-read of the sources tells the watcher.
type checkResult struct {
	// files are the paths read; their directories are watched.
	files []string
	// failing says a source is broken and should be re-read soon.
	failing bool
}

// watcher calls check whenever the watched files may have changed: on
// any event in their directories (after settleDelay) and every poll
// interval. Watching directories rather than files is what survives
// Kubernetes volume updates (the ..data symlink is swapped, the files
// themselves never change) and atomic renames (the watched inode is
// replaced). check runs on the watcher's goroutine only.
type watcher struct {
	opts  Options
	check func() checkResult
	// noNotify leaves polling alone, as on a file system without
	// inotify; set by tests before Start, also by those in a synctest
	// bubble, whose clock stands still while a goroutine waits on
	// inotify.
	noNotify bool
	// watched and warned are the directories watched and those that
	// could not be; owned by Start, then by run.
	watched, warned map[string]bool

	mu      sync.Mutex // guards started and stopped
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

func newWatcher(opts Options, check func() checkResult) *watcher {
	return &watcher{opts: opts, check: check, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start begins watching in a goroutine of its own. It does not block on
// the file system beyond reading the files once. A failure to use
// inotify is logged and leaves polling alone: never an error.
func (w *watcher) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("certs: watcher already started")
	}
	if w.stopped {
		return errors.New("certs: watcher already stopped")
	}
	w.started = true
	var fsw *fsnotify.Watcher
	if !w.noNotify {
		var err error
		if fsw, err = fsnotify.NewWatcher(); err != nil {
			w.opts.Log.Warn("cannot watch credential files for changes; polling them instead", "interval", w.opts.PollInterval, "error", err)
			fsw = nil
		}
	}
	first := w.check()
	// The first directories are watched before Start returns, so that
	// no change after it is missed.
	w.watched, w.warned = map[string]bool{}, map[string]bool{}
	w.watch(fsw, first.files)
	go w.run(fsw, first)
	return nil
}

// watch adds the directories of files to fsw; only Start and then run
// call it.
func (w *watcher) watch(fsw *fsnotify.Watcher, files []string) {
	if fsw == nil {
		return
	}
	for _, d := range watchDirs(files) {
		if w.watched[d] {
			continue
		}
		if err := fsw.Add(d); err != nil {
			if !w.warned[d] {
				w.warned[d] = true
				w.opts.Log.Warn("cannot watch a credential directory; polling it", "directory", d, "interval", w.opts.PollInterval, "error", err)
			}
			continue
		}
		w.watched[d] = true
	}
}

// Stop ends the watcher and waits for its goroutine. It is idempotent
// and may be called without Start.
func (w *watcher) Stop() {
	w.mu.Lock()
	started, stopped := w.started, w.stopped
	w.stopped = true
	w.mu.Unlock()
	if stopped {
		return
	}
	close(w.stop)
	if started {
		<-w.done
	}
}

func (w *watcher) run(fsw *fsnotify.Watcher, first checkResult) {
	defer close(w.done)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if fsw != nil {
		defer fsw.Close()
		events, errs = fsw.Events, fsw.Errors
	}
	// apply watches the directories of r's files and returns when to
	// poll next.
	apply := func(r checkResult) <-chan time.Time {
		w.watch(fsw, r.files)
		return time.After(w.wait(r))
	}
	poll := time.After(w.wait(first))
	var settle <-chan time.Time
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if w.watched[ev.Name] && ev.Op.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went away: inotify dropped the
				// watch. Add it again when it is back.
				delete(w.watched, ev.Name)
			}
			if settle == nil {
				settle = time.After(settleDelay)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Typically an inotify queue overflow: events were lost, so
			// look at the files now rather than at the next poll.
			w.opts.Log.Debug("credential file watcher error; re-reading the files", "error", err)
			if settle == nil {
				settle = time.After(settleDelay)
			}
		case <-settle:
			settle = nil
			poll = apply(w.check())
		case <-poll:
			poll = apply(w.check())
		}
	}
}

// watchDirs returns the directories to watch for files: each file's
// directory and, when the file is a symlink to a file elsewhere, the
// target's directory too. A target inside the file's own directory (the
// ..data/ layout of Kubernetes volumes) is not watched: its directory is
// replaced on every update, and the swap of ..data shows in the file's
// directory.
func watchDirs(files []string) []string {
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		dir := filepath.Dir(f)
		add(dir)
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			continue
		}
		rd := filepath.Dir(real)
		resolvedDir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			resolvedDir = dir
		}
		if !within(rd, dir) && !within(rd, resolvedDir) {
			add(rd)
		}
	}
	return dirs
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// wait is how long to wait for the next poll after r.
func (w *watcher) wait(r checkResult) time.Duration {
	if r.failing && retryInterval < w.opts.PollInterval {
		return retryInterval
	}
	return w.opts.PollInterval
}
