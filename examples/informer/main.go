// Command informer is a client-go program that balances its requests over
// every kube-apiserver with fanout linked in (package client), no sidecar:
// it watches the ConfigMaps of a namespace through a shared informer and
// serves fanout's metrics.
//
//	go run ./examples/informer --kubeconfig ~/.kube/config \
//	  --endpoints https://10.0.0.11:6443,https://10.0.0.12:6443,https://10.0.0.13:6443
//
// See docs/library.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	fanoutclient "github.com/fanout-dev/fanout/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the program's user (client certificate or token)")
	endpoints := flag.String("endpoints", "", "fanout endpoint spec: https://h:p,https://h:p, dns:///name:port or endpointslice:///default/kubernetes (default: the kubeconfig's server alone)")
	namespace := flag.String("namespace", "default", "namespace whose ConfigMaps to watch")
	metricsAddr := flag.String("metrics-address", "127.0.0.1:8080", "where to serve /metrics; empty for nowhere")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	// The one call: cfg balances per request from here on.
	b, err := fanoutclient.New(cfg, fanoutclient.WithEndpoints(*endpoints), fanoutclient.WithRegisterer(reg), fanoutclient.WithLogger(log))
	if err != nil {
		return err
	}
	// Closed last, once the informer stopped using it.
	defer b.Close()
	cs, err := kubernetes.NewForConfig(b.Config())
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *metricsAddr != "" {
		srv := &http.Server{Addr: *metricsAddr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "error", err)
			}
		}()
		defer srv.Close()
	}

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute, informers.WithNamespace(*namespace))
	inf := factory.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { log.Info("added", "configmap", o.(*corev1.ConfigMap).Name) },
		UpdateFunc: func(_, o any) { log.Info("updated", "configmap", o.(*corev1.ConfigMap).Name) },
		DeleteFunc: func(o any) {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				log.Info("deleted", "configmap", cm.Name)
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown() // runs before b.Close: defers run last-in first-out
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("informer did not sync")
	}
	log.Info("synced; watching", "namespace", *namespace)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, e := range b.Endpoints() {
				log.Info("endpoint", "address", e.Address, "state", e.State, "requests", e.RequestsTotal, "open_watches", e.InflightLong)
			}
		}
	}
}
