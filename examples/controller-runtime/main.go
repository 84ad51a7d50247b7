// Command controller-runtime is a controller-runtime manager whose
// requests fanout balances over every kube-apiserver, linked in (package
// github.com/fanout-dev/fanout/client), no sidecar. Its reconciler reads
// each ConfigMap of a namespace live from the apiservers; fanout's metrics join the manager's on
// its /metrics endpoint.
//
//	cd examples/controller-runtime
//	go run . --kubeconfig ~/.kube/config --namespace default \
//	  --endpoints https://10.0.0.11:6443,https://10.0.0.12:6443,https://10.0.0.13:6443
//
// It is a module of its own so that the fanout module does not depend on
// controller-runtime. See docs/library.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fanoutclient "github.com/fanout-dev/fanout/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "controller-runtime example:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoints := flag.String("endpoints", "", "fanout endpoint spec: https://h:p,https://h:p, dns:///name:port or endpointslice:///default/kubernetes (default: the kubeconfig's server alone)")
	namespace := flag.String("namespace", "default", "namespace whose ConfigMaps to reconcile")
	metricsAddr := flag.String("metrics-address", "127.0.0.1:8080", "where the manager serves /metrics; 0 for nowhere")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("example")

	// --kubeconfig, $KUBECONFIG, in-cluster or ~/.kube/config, as any
	// controller-runtime program.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// The one call. metrics.Registry is the registry the manager serves.
	cfg, closer, err := fanoutclient.Wrap(cfg,
		fanoutclient.WithEndpoints(*endpoints),
		fanoutclient.WithRegisterer(metrics.Registry))
	if err != nil {
		return err
	}
	// Closed after the manager returned: it no longer sends requests.
	defer closer.Close()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: *metricsAddr},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
	})
	if err != nil {
		return err
	}
	// The cached client reads from the informers; the API reader asks the
	// apiservers, so each reconcile is one request fanout balances.
	live := mgr.GetAPIReader()
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := live.Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			log.Info("reconciled", "configmap", req.NamespacedName, "keys", len(cm.Data))
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
