package resolver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// DefaultDebounce is how long the endpointslice resolver waits after a
// change for more before it publishes: a rolling restart rewrites several
// slices in a burst, and the balancer should see the end state once.
const DefaultDebounce = 200 * time.Millisecond

// labelServiceName is the label that ties an EndpointSlice to its Service
// (discovery.k8s.io/v1 LabelServiceName).
const labelServiceName = "kubernetes.io/service-name"

// EndpointSlices follows the discovery.k8s.io/v1 EndpointSlices of one
// Service (list, then watch; see listWatch) and publishes one endpoint per
// address that is ready or still serving, merged over all of the
// Service's slices. An endpoint that is serving but terminating or not
// ready is published Draining; one that is not serving is left out.
// Errors and empty results keep the last good set (see publisher).
type EndpointSlices struct {
	// APIServer is where the slices are read and with what credentials.
	APIServer APIServer
	Namespace string
	Service   string
	// PortName selects the slice port; empty takes the only port, or the
	// first one if there are several.
	PortName string
	// Debounce is DefaultDebounce if zero.
	Debounce time.Duration
	// Fallback is published if the first resolutions fail or find nothing.
	Fallback []Endpoint
	Log      *slog.Logger // discards if nil
	Metrics  *Metrics

	onEvent func() // tests: called on every applied watch event
}

var _ Resolver = (*EndpointSlices)(nil)

// Run lists and watches the slices and publishes until ctx is done. It
// returns only once its list/watch goroutine has ended.
func (r *EndpointSlices) Run(ctx context.Context, update func([]Endpoint)) error {
	debounce := r.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	client, err := newSliceClient(r.APIServer, r.Namespace, r.Service)
	if err != nil {
		return err
	}
	if r.APIServer.Start != nil {
		if err := r.APIServer.Start(); err != nil {
			return fmt.Errorf("endpointslice discovery credentials: %w", err)
		}
	}
	if r.APIServer.Stop != nil {
		defer r.APIServer.Stop()
	}
	p := &publisher{name: "endpointslice", update: update, fallback: r.Fallback, log: logger(r.Log), metrics: r.Metrics}

	// Both channels hold one item: a pending signal or the latest error is
	// all the loop needs.
	changed := make(chan struct{}, 1)
	errs := make(chan error, 1)
	lw := &listWatch{
		client: client, onEvent: r.onEvent,
		changed: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
		failed: func(err error) {
			select {
			case <-errs:
			default:
			}
			errs <- err
		},
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { lw.run(lctx) })

	var timer *time.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			p.fail(fmt.Errorf("list/watch EndpointSlices of %s/%s: %w", r.Namespace, r.Service, err))
		case <-changed:
			if fire == nil {
				timer = time.NewTimer(debounce)
				fire = timer.C
			}
		case <-fire:
			fire = nil
			all, synced := lw.snapshot()
			if !synced {
				// The first list is still on its way; it signals.
				continue
			}
			eps, err := r.endpoints(all)
			p.result(eps, err)
		}
	}
}

// listWatch keeps a copy of the Service's EndpointSlices current, as
// client-go's reflector does for an informer, with the same recovery:
//
//   - list, then watch from the list's resourceVersion, with bookmarks so
//     that a quiet watch still moves its resourceVersion forward;
//   - a watch the server ends (its timeout) is opened again from the last
//     resourceVersion seen, without a new list;
//   - 410 Gone (the resourceVersion is compacted away) or a broken stream
//     means events may be lost: wait the backoff and list again. These
//     are routine and not reported; any other failure is reported
//     (failed) and then handled the same way.
type listWatch struct {
	client  *sliceClient
	changed func()      // the set may have changed
	failed  func(error) // a failure to report
	onEvent func()      // tests; may be nil

	mu     sync.Mutex // guards slices and synced
	slices map[string]*endpointSlice
	synced bool

	failures    int // consecutive, for the backoff
	lastFailure time.Time
}

const (
	backoffBase = time.Second
	backoffMax  = 30 * time.Second
	// backoffReset forgets earlier failures once none happened for this
	// long, so that one failure after hours of calm waits backoffBase.
	backoffReset = 2 * time.Minute
	// minWatchTimeout is the least a watch asks the server to run; each
	// asks for between one and two times it, so that many sidecars
	// started together do not re-watch together (client-go does the same).
	minWatchTimeout = 5 * time.Minute
	// minWatchRun is how long a watch that the server ended cleanly must
	// have run to be opened again at once; a shorter one waits the
	// backoff, so that a server that ends every watch at once is not
	// hammered.
	minWatchRun = time.Second
)

func (lw *listWatch) run(ctx context.Context) {
	for ctx.Err() == nil {
		rv, err := lw.list(ctx)
		for err == nil && ctx.Err() == nil {
			// rv moves forward with every event and bookmark.
			err = lw.watch(ctx, &rv)
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, errRelist) {
			lw.failed(err)
		}
		if !lw.wait(ctx) {
			return
		}
	}
}

// errRelist ends a watch for a routine reason that needs a new list
// (410 Gone, a broken stream); it is not reported.
var errRelist = errors.New("relist")

// wait sleeps the backoff after a failure; false if ctx ended first.
func (lw *listWatch) wait(ctx context.Context) bool {
	now := time.Now()
	if now.Sub(lw.lastFailure) > backoffReset {
		lw.failures = 0
	}
	lw.lastFailure = now
	d := backoffBase << min(lw.failures, 5)
	lw.failures++
	// Up to 50% more, so that sidecars that failed together retry apart.
	d = min(d+time.Duration(rand.Int64N(int64(d)/2+1)), backoffMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// list replaces the copy with a fresh list and returns its
// resourceVersion.
func (lw *listWatch) list(ctx context.Context) (string, error) {
	l, err := lw.client.list(ctx)
	if err != nil {
		return "", err
	}
	m := make(map[string]*endpointSlice, len(l.Items))
	for i := range l.Items {
		m[l.Items[i].Metadata.Name] = &l.Items[i]
	}
	lw.mu.Lock()
	lw.slices, lw.synced = m, true
	lw.mu.Unlock()
	// Also when nothing changed or the list is empty: the first list
	// must lead to a first resolution either way.
	lw.changed()
	return l.Metadata.ResourceVersion, nil
}

// watch follows one watch stream from *rv until it ends, applying its
// events. nil means the server ended it cleanly and it may be opened
// again from *rv.
func (lw *listWatch) watch(ctx context.Context, rv *string) error {
	timeout := minWatchTimeout + time.Duration(rand.Int64N(int64(minWatchTimeout)))
	started := time.Now()
	w, err := lw.client.watch(ctx, *rv, timeout)
	if err != nil {
		return err
	}
	defer w.close()
	for {
		ev, err := w.next()
		switch {
		case errors.Is(err, errWatchEnded):
			if time.Since(started) < minWatchRun {
				return errRelist
			}
			return nil
		case err != nil:
			return err
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
			lw.mu.Lock()
			lw.slices[ev.slice.Metadata.Name] = ev.slice
			lw.mu.Unlock()
		case "DELETED":
			lw.mu.Lock()
			delete(lw.slices, ev.slice.Metadata.Name)
			lw.mu.Unlock()
		case "BOOKMARK":
			*rv = ev.slice.Metadata.ResourceVersion
			continue
		default:
			return fmt.Errorf("watch sent an event of unknown type %q", ev.Type)
		}
		*rv = ev.slice.Metadata.ResourceVersion
		if lw.onEvent != nil {
			lw.onEvent()
		}
		lw.changed()
	}
}

// snapshot returns the slices by name, and whether a list has arrived.
func (lw *listWatch) snapshot() ([]*endpointSlice, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	all := make([]*endpointSlice, 0, len(lw.slices))
	for _, s := range lw.slices {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b *endpointSlice) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	return all, lw.synced
}

// endpoints merges the slices into one set. The error explains an empty
// result.
func (r *EndpointSlices) endpoints(all []*endpointSlice) ([]Endpoint, error) {
	var eps []Endpoint
	noPort, notServing := 0, 0
	for _, s := range all {
		port, ok := r.port(s)
		if !ok {
			if len(s.Endpoints) > 0 {
				noPort++
			}
			continue
		}
		for _, e := range s.Endpoints {
			c := e.Conditions
			// The API says unknown readiness counts as ready, and unknown
			// serving as the readiness.
			ready := c.Ready == nil || *c.Ready
			serving := ready
			if c.Serving != nil {
				serving = *c.Serving
			}
			terminating := c.Terminating != nil && *c.Terminating
			if !serving {
				notServing += len(e.Addresses)
				continue
			}
			zone := ""
			if e.Zone != nil {
				zone = *e.Zone
			}
			for _, a := range e.Addresses {
				eps = append(eps, Endpoint{
					Address:  net.JoinHostPort(a, strconv.Itoa(int(port))),
					Draining: terminating || !ready,
					Zone:     zone,
				})
			}
		}
	}
	if len(eps) > 0 {
		return eps, nil
	}
	switch {
	case len(all) == 0:
		return nil, fmt.Errorf("no EndpointSlice labelled %s=%s in namespace %s", labelServiceName, r.Service, r.Namespace)
	case noPort > 0 && r.PortName != "":
		return nil, fmt.Errorf("the EndpointSlices of %s/%s have no port named %q; check the port name in --endpoints", r.Namespace, r.Service, r.PortName)
	case notServing > 0:
		return nil, fmt.Errorf("none of the %d endpoints of %s/%s is serving", notServing, r.Namespace, r.Service)
	}
	return nil, errors.New("the EndpointSlices of " + r.Namespace + "/" + r.Service + " list no endpoint")
}

// port picks the slice's port: by name if one is given, else the only or
// first port. A slice without ports (possible with no selector) is unusable.
func (r *EndpointSlices) port(s *endpointSlice) (int32, bool) {
	for i, sp := range s.Ports {
		if sp.Port == nil {
			continue
		}
		name := ""
		if sp.Name != nil {
			name = *sp.Name
		}
		if r.PortName == "" && i == 0 || r.PortName != "" && name == r.PortName {
			return *sp.Port, true
		}
	}
	return 0, false
}
