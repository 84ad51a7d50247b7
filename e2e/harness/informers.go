package harness

import (
	"context"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Lists counts what makes informers list: LIST calls, and watches that ask
// for initial events (client-go's WatchList streams the list through a
// watch). An informer's first list is its start; every further one is a
// re-list, the burst of load and the stale moment an apiserver restart
// costs a client whose watches cannot resume elsewhere.
type Lists struct {
	lists, watchLists atomic.Int64
	// watchErrors counts errors the reflectors reported (a failed list or
	// a watch that ended with an error).
	watchErrors atomic.Int64
}

// List and WatchList are the counts by kind; Total is their sum.
func (l *Lists) List() int64      { return l.lists.Load() }
func (l *Lists) WatchList() int64 { return l.watchLists.Load() }
func (l *Lists) Total() int64     { return l.lists.Load() + l.watchLists.Load() }

// WatchErrors counts the errors the reflectors reported.
func (l *Lists) WatchErrors() int64 { return l.watchErrors.Load() }

// CountedInformer is an informer of obj over list and watch, with real
// reflectors, whose lists and watch errors are counted in l. Several
// informers may share one Lists.
func CountedInformer(l *Lists, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) (cache.SharedIndexInformer, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l.lists.Add(1)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				l.watchLists.Add(1)
			}
			return watchFn(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		l.watchErrors.Add(1)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, err
	}
	return inf, nil
}
