// Command demo runs fanout's main job on a local control plane: etcd, three
// kube-apiservers on their own test hosts, one fanout sidecar and a
// controller-like client behind it, plus the same client behind a plain L4
// proxy for comparison. It shows a live table of each apiserver's share of
// both clients' requests and of the open watches until Ctrl-C, then cleans
// everything up.
//
// Run it with `make demo` (as root: the test hosts are network namespaces).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fanout-dev/fanout/e2e/harness"
)

func main() {
	interval := flag.Duration("interval", 2*time.Second, "how often the table is redrawn")
	duration := flag.Duration("duration", 0, "stop after this long (0: until Ctrl-C)")
	rate := flag.Int("rate", 40, "requests per second each client sends besides its watches")
	watches := flag.Int("watches", 10, "watches (informers) each client keeps open")
	flag.Parse()

	err := run(*interval, *duration, *rate, *watches)
	harness.Teardown()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(interval, duration time.Duration, rate, watches int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	if err := harness.SweepStale(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: sweeping leftovers of earlier runs: %v\n", err)
	}
	logf := func(format string, args ...any) { fmt.Printf("demo: "+format+"\n", args...) }

	logf("starting etcd and 3 kube-apiservers (the first run builds the Kubernetes binaries, ~14 min on 2 cores)")
	cp, err := harness.Start(ctx, nil, harness.Options{Logf: logf})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	logf("apiservers: %s", strings.Join(cp.Endpoints(), ", "))

	// Two clients with the same code and the same kind of credentials; only
	// the path to the apiservers differs.
	const viaFanout, viaL4 = "demo-via-fanout", "demo-via-l4"
	kcFanout, err := cp.UserKubeconfig(viaFanout, "system:masters")
	if err != nil {
		return err
	}
	sidecar, err := cp.StartFanout(ctx, nil, "demo", kcFanout)
	if err != nil {
		return fmt.Errorf("starting fanout: %w", err)
	}
	logf("fanout listens on http://%s (admin http://%s)", sidecar.ListenAddress, sidecar.AdminAddress)

	var backends []string
	for _, ep := range cp.Endpoints() {
		backends = append(backends, strings.TrimPrefix(ep, "https://"))
	}
	l4, err := harness.StartL4Proxy(backends)
	if err != nil {
		return err
	}
	defer l4.Close()
	kcL4, err := cp.UserKubeconfig(viaL4, "system:masters")
	if err != nil {
		return err
	}
	l4Config, err := harness.RESTConfig(kcL4)
	if err != nil {
		return err
	}
	l4Config.Host = "https://" + l4.Addr()
	// The serving certificate covers 127.0.0.1, as a real VIP's would.

	var wg sync.WaitGroup
	var errs errorsOnce
	for _, c := range []struct {
		name string
		cfg  *rest.Config
	}{{viaFanout, sidecar.Config}, {viaL4, l4Config}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := controller(ctx, c.cfg, c.name, rate, watches); err != nil {
				errs.set(fmt.Errorf("%s: %w", c.name, err))
			}
		}()
	}

	t := time.NewTicker(interval)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			logf("stopping; cleaning up the control plane")
			return errs.get()
		case <-t.C:
			if err := errs.get(); err != nil {
				return err
			}
			draw(os.Stdout, cp, sidecar.AdminAddress, viaFanout, viaL4, time.Since(start))
		}
	}
}

// controller behaves like a small client-go controller: informers keep
// watches open, and a worker creates, reads, lists, updates and deletes
// ConfigMaps at a steady rate. All of it goes through one rest.Config, so
// client-go multiplexes it over one HTTP/2 connection.
func controller(ctx context.Context, cfg *rest.Config, ns string, rate, watches int) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(rate*2), rate*2
	cfg.UserAgent = ns
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace: %w", err)
	}
	for i := range watches {
		// One informer per label value: each holds its own watch open.
		lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, func(o *metav1.ListOptions) {
			o.LabelSelector = fmt.Sprintf("shard=%d", i)
		})
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		go inf.RunWithContext(ctx)
	}
	tick := time.NewTicker(time.Second / time.Duration(max(rate/5, 1)))
	defer tick.Stop()
	cms := cs.CoreV1().ConfigMaps(ns)
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// Five requests per tick: create, get, list, update, delete.
		name := fmt.Sprintf("cm-%d", n)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"shard": fmt.Sprint(rand.IntN(max(watches, 1)))}}, Data: map[string]string{"n": fmt.Sprint(n)}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("create: %w", err)
		}
		got, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			_, err = cms.List(ctx, metav1.ListOptions{Limit: 50})
		}
		if err == nil {
			got.Data["updated"] = "yes"
			_, err = cms.Update(ctx, got, metav1.UpdateOptions{})
		}
		if err == nil {
			err = cms.Delete(ctx, name, metav1.DeleteOptions{})
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// draw prints the table: per apiserver, each client's share of requests
// (from the apiservers' own audit logs) and fanout's open watches.
func draw(w io.Writer, cp *harness.ControlPlane, admin, viaFanout, viaL4 string, elapsed time.Duration) {
	fan, err1 := cp.ServedPerAPIServerNow(userIs(viaFanout))
	l4, err2 := cp.ServedPerAPIServerNow(userIs(viaL4))
	longs := openWatches(admin)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(w, "reading audit logs: %v\n", err)
		return
	}
	var b strings.Builder
	if isTerminal() {
		b.WriteString("\033[H\033[2J")
	}
	fmt.Fprintf(&b, "fanout demo — %s elapsed — Ctrl-C to stop and clean up\n\n", elapsed.Truncate(time.Second))
	fmt.Fprintf(&b, "%-20s  %22s  %14s  %22s\n", "apiserver", "via fanout: requests", "fanout watches", "via L4 proxy: requests")
	fs, ls := harness.Shares(fan), harness.Shares(l4)
	for i, ep := range cp.Endpoints() {
		addr := strings.TrimPrefix(ep, "https://")
		fmt.Fprintf(&b, "%-20s  %8d  %5.1f%% %s  %14s  %8d  %5.1f%% %s\n",
			addr, fan[i], 100*fs[i], bar(100*fs[i]), longs[addr],
			l4[i], 100*ls[i], bar(100*ls[i]))
	}
	fmt.Fprintf(&b, "\nShares come from each kube-apiserver's audit log, counted per user.\n")
	fmt.Fprintf(&b, "Both clients run the same code; only the path differs. fanout spreads each request,\n")
	fmt.Fprintf(&b, "the L4 proxy pins the client's single HTTP/2 connection to one apiserver.\n")
	_, _ = io.WriteString(w, b.String())
}

func bar(pct float64) string {
	n := int(pct/10 + 0.5)
	return strings.Repeat("#", n) + strings.Repeat(".", 10-n)
}

// openWatches reads fanout's /debug/endpoints and returns the open
// long-running requests per endpoint address.
func openWatches(admin string) map[string]string {
	out := map[string]string{}
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + admin + "/debug/endpoints")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	var body struct {
		Endpoints []struct {
			Address      string `json:"address"`
			InflightLong int64  `json:"inflight_long"`
			State        string `json:"state"`
		} `json:"endpoints"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return out
	}
	for _, e := range body.Endpoints {
		out[e.Address] = fmt.Sprintf("%d (%s)", e.InflightLong, e.State)
	}
	return out
}

func isTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type errorsOnce struct {
	v atomic.Pointer[error]
}

func (e *errorsOnce) set(err error) { e.v.CompareAndSwap(nil, &err) }
func (e *errorsOnce) get() error {
	if p := e.v.Load(); p != nil {
		return *p
	}
	return nil
}

func userIs(name string) func(*harness.AuditEvent) bool {
	match := harness.UserIs(name)
	return func(e *harness.AuditEvent) bool { return e.Served() && match(e.User.Username) }
}
