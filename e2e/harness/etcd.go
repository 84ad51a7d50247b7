package harness

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is an in-process etcd member serving the apiservers.
type Etcd struct {
	// URL is the client URL the apiservers use (--etcd-servers).
	URL string
	e   *embed.Etcd
}

// startEtcd runs etcd with its data in dir, serving clients on ip (the
// bridge address, because loopback inside a test host's namespace is the
// namespace's own) and peers on loopback.
func startEtcd(dir string, ip net.IP) (*Etcd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	clientPort, err := freePort(ip)
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort(net.ParseIP("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort(ip.String(), strconv.Itoa(clientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}

	cfg := embed.NewConfig()
	cfg.Name = "e2e"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	// Durability is pointless for a throwaway cluster, and fsync on a
	// shared two-core machine makes every apiserver write slow.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd on %s: %w", clientURL.Host, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 60s; see %s", cfg.LogOutputs[0])
	}
	return &Etcd{URL: clientURL.String(), e: e}, nil
}

// Close stops etcd.
func (e *Etcd) Close() {
	e.e.Close()
}

// freePort returns a TCP port on ip that nothing listens on right now. The
// port is only reserved until this returns, which is good enough for
// components that take a port flag rather than a listener.
func freePort(ip net.IP) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
