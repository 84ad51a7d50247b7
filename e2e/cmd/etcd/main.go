// Command etcd is a single-member etcd for the hosted control plane of the
// e2e suite's real node (e2e/harness/hosted.go): the same embedded server
// the harness runs in process, built static into an image, so that the
// hosted kube-apiservers have an etcd pod beside them as a hosted control
// plane does. Nothing is pulled: the image is built offline.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "/var/etcd/data", "data directory")
	listen := flag.String("listen-client-url", "http://0.0.0.0:2379", "client URL to listen on")
	advertise := flag.String("advertise-client-url", "http://127.0.0.1:2379", "client URL to advertise")
	flag.Parse()

	cfg := embed.NewConfig()
	cfg.Name = "hosted"
	cfg.Dir = *dataDir
	lc, err := url.Parse(*listen)
	if err != nil {
		log.Fatalf("--listen-client-url: %v", err)
	}
	ac, err := url.Parse(*advertise)
	if err != nil {
		log.Fatalf("--advertise-client-url: %v", err)
	}
	peer, _ := url.Parse("http://127.0.0.1:2380")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*lc}, []url.URL{*ac}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	// A throwaway cluster on a shared two-core machine: fsync only slows
	// every write down.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("starting etcd: %v", err)
	}
	<-e.Server.ReadyNotify()
	log.Printf("etcd ready, serving clients on %s", lc)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		log.Printf("%s: stopping", s)
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
	e.Close()
}
