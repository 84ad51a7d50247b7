package resolver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// DefaultDebounce is how long the endpointslice resolver waits after a
// change for more before it publishes: a rolling restart rewrites several
// slices in a burst, and the balancer should see the end state once.
const DefaultDebounce = 200 * time.Millisecond

// EndpointSlices follows the discovery.k8s.io/v1 EndpointSlices of one
// Service through an informer and publishes one endpoint per address that
// is ready or still serving, merged over all of the Service's slices. An
// endpoint that is serving but terminating or not ready is published
// Draining; one that is not serving is left out. Errors and empty results
// keep the last good set (see publisher).
type EndpointSlices struct {
	Client    kubernetes.Interface
	Namespace string
	Service   string
	// PortName selects the slice port; empty takes the only port, or the
	// first one if there are several.
	PortName string
	// Debounce is DefaultDebounce if zero.
	Debounce time.Duration
	// Fallback is published if the first resolutions fail or find nothing.
	Fallback []Endpoint
	Clock    clock.WithTicker // the real clock if nil
	Log      *slog.Logger     // discards if nil
	Metrics  *Metrics

	onEvent func() // tests: called on every informer event
}

var _ Resolver = (*EndpointSlices)(nil)

// Run starts the informer and publishes until ctx is done. It returns only
// once the informer's goroutines have ended.
func (r *EndpointSlices) Run(ctx context.Context, update func([]Endpoint)) error {
	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	debounce := r.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	p := &publisher{name: "endpointslice", update: update, fallback: r.Fallback, log: logger(r.Log), metrics: r.Metrics, now: clk.Now}

	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: r.Service})
	factory := informers.NewSharedInformerFactoryWithOptions(r.Client, 0,
		informers.WithNamespace(r.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	slices := factory.Discovery().V1().EndpointSlices()
	informer, lister := slices.Informer(), slices.Lister()

	// Both channels hold one item: a pending signal or the latest error is
	// all the loop needs.
	changed := make(chan struct{}, 1)
	errs := make(chan error, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	notify := func() {
		if r.onEvent != nil {
			r.onEvent()
		}
		signal()
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return fmt.Errorf("endpointslice informer: %w", err)
	}
	// Replaces client-go's default handler, which logs every failed list
	// or watch; the publisher logs once per transition instead.
	if err := informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		// A watch that ends or expires is routine: the reflector
		// re-watches or relists on its own.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		select {
		case <-errs:
		default:
		}
		errs <- err
	}); err != nil {
		return fmt.Errorf("endpointslice informer: %w", err)
	}

	ictx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		factory.Shutdown()
		wg.Wait()
	}()
	factory.Start(ictx.Done())
	// An initial list with no slices fires no event; the sync does.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if cache.WaitForCacheSync(ictx.Done(), informer.HasSynced) {
			signal()
		}
	}()

	var timer clock.Timer
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
				timer = clk.NewTimer(debounce)
				fire = timer.C()
			}
		case <-fire:
			fire = nil
			if !informer.HasSynced() {
				// The initial list is still arriving; the sync signals.
				continue
			}
			all, err := lister.EndpointSlices(r.Namespace).List(selector)
			if err != nil {
				p.fail(err)
				continue
			}
			eps, err := r.endpoints(all)
			p.result(eps, err)
		}
	}
}

// endpoints merges the slices into one set. The error explains an empty
// result.
func (r *EndpointSlices) endpoints(all []*discoveryv1.EndpointSlice) ([]Endpoint, error) {
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
		return nil, fmt.Errorf("no EndpointSlice labelled %s=%s in namespace %s", discoveryv1.LabelServiceName, r.Service, r.Namespace)
	case noPort > 0 && r.PortName != "":
		return nil, fmt.Errorf("the EndpointSlices of %s/%s have no port named %q; check the port name in --endpoints", r.Namespace, r.Service, r.PortName)
	case notServing > 0:
		return nil, fmt.Errorf("none of the %d endpoints of %s/%s is serving", notServing, r.Namespace, r.Service)
	}
	return nil, errors.New("the EndpointSlices of " + r.Namespace + "/" + r.Service + " list no endpoint")
}

// port picks the slice's port: by name if one is given, else the only or
// first port. A slice without ports (possible with no selector) is unusable.
func (r *EndpointSlices) port(s *discoveryv1.EndpointSlice) (int32, bool) {
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
