// Command demo runs fanout's main job on a local control plane: etcd, three
// kube-apiservers on their own test hosts, one fanout sidecar and a
// controller-like client behind it, plus the same client behind a plain L4
// proxy for comparison. It shows a live table of where each client's
// requests and watches land until Ctrl-C, then cleans everything up. A
// rolling restart of the apiservers (the r key, or -roll-after) shows what
// fanout is for: the L4 client's watches all move to one apiserver while
// fanout's stay spread, and no request fails and no informer re-lists.
// With -node a real node joins, with fanout installed from manifests/ as a
// user installs it (nodedemo.go).
//
// Run it with `make demo` (as root: the test hosts are network namespaces).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/e2e/harness"
)

type options struct {
	interval, duration, rollAfter time.Duration
	rate, watches                 int
	node                          bool
}

func main() {
	var o options
	flag.DurationVar(&o.interval, "interval", 0, "how often the table is redrawn (0: every 2s on a terminal, every 10s otherwise)")
	flag.DurationVar(&o.duration, "duration", 0, "stop this long after the clients start, setup not counted (0: until q or Ctrl-C)")
	flag.IntVar(&o.rate, "rate", 40, "requests per second each client sends besides its watches")
	flag.IntVar(&o.watches, "watches", 10, "watches (informers) each client keeps open")
	flag.DurationVar(&o.rollAfter, "roll-after", 0, "start a rolling restart of the apiservers this long after the clients have synced (0: only on the r key)")
	flag.BoolVar(&o.node, "node", false, "also run a real node (containerd, kubelet, kube-proxy) with fanout-injector and the example kube-controller-manager and kube-scheduler Deployments installed from manifests/; their pods get fanout as a sidecar, and the table adds their shares (about 2 more minutes to start; needs containerd, runc and the CNI plugins: make e2e-packages)")
	flag.Usage = func() {
		out := flag.CommandLine.Output()
		fmt.Fprint(out, `usage: make demo [ARGS="flags"]    (or: cd e2e && go run ./cmd/demo [flags]; as root)

Starts etcd, three kube-apiservers, a fanout sidecar and two identical
controller-like clients, one through fanout and one through a plain L4 TCP
proxy, and shows where each client's requests and watches land, from the
apiservers' audit logs. The first run builds the Kubernetes binaries
(12-14 minutes on two cores, with progress lines).

On a terminal the table redraws in place and these keys work:
  r   rolling restart: each apiserver in turn gets SIGTERM, is down for 2 s,
      starts, and rejoins fanout; the table shows where the watches go and
      counts both clients' failed requests and re-lists
  q   stop, print the last table and clean up (as Ctrl-C does)
Without a terminal (CI logs, a pipe) the table is printed every -interval.

With -node (make demo ARGS=-node) a real node joins: fanout-injector and
the example kube-controller-manager and kube-scheduler Deployments are
installed from manifests/ as a user would, their pods run with fanout as a
sidecar, and the table adds their requests and watches and a line per pod.

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	err := run(o)
	harness.Teardown()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	logf := func(format string, args ...any) { fmt.Printf("demo: "+format+"\n", args...) }
	tty := isTerminal(os.Stdout)
	if o.interval <= 0 {
		o.interval = 10 * time.Second
		if tty {
			o.interval = 2 * time.Second
		}
	}

	if err := harness.SweepStale(); err != nil {
		logf("sweeping leftovers of earlier runs: %v", err)
	}
	// The same step as `make e2e-binaries`, with its progress lines: a cold
	// build takes minutes and must not look like a hang.
	logf("finding or building the Kubernetes binaries")
	if _, err := harness.Binaries(ctx, os.Stdout); err != nil {
		return err
	}

	opts := harness.Options{Logf: logf, APIServerArgs: shutdownArgs, Nodes: 1}
	var node nodeDemo
	if o.node {
		node = newNodeDemo()
		node.Options(&opts)
	}
	logf("starting etcd and %d kube-apiservers", 3)
	cp, err := harness.Start(ctx, nil, opts)
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	// client-go logs every broken watch and failed request to stderr, which
	// would scribble over the table: its log goes to a file instead.
	clientLog := filepath.Join(cp.Dir, "demo-clients.log")
	if err := redirectKlog(clientLog); err != nil {
		return err
	}

	d := &demo{cp: cp, ev: &events{}}
	if !tty {
		d.ev.plain = os.Stdout
	}
	for _, a := range cp.APIServers {
		d.logs = append(d.logs, newServerLog(a.AuditLog))
	}

	// Two clients with the same code and the same kind of credentials; only
	// the path to the apiservers differs.
	viaFanout := newClient("demo-via-fanout", "via fanout", o.watches)
	viaL4 := newClient("demo-via-l4", "via L4 proxy", o.watches)
	kcFanout, err := cp.UserKubeconfig(viaFanout.name, "system:masters")
	if err != nil {
		return err
	}
	sidecar, err := cp.StartFanout(ctx, nil, "demo", kcFanout)
	if err != nil {
		return fmt.Errorf("starting fanout: %w", err)
	}
	d.admin = sidecar.AdminAddress
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
	kcL4, err := cp.UserKubeconfig(viaL4.name, "system:masters")
	if err != nil {
		return err
	}
	l4Config, err := harness.RESTConfig(kcL4)
	if err != nil {
		return err
	}
	// The serving certificate covers 127.0.0.1, as a real VIP's would.
	l4Config.Host = "https://" + l4.Addr()
	logf("L4 proxy listens on %s, round robin over the apiservers per TCP connection", l4.Addr())

	if node != nil {
		if d.node, err = node.Start(ctx, cp, logf); err != nil {
			return fmt.Errorf("starting the node: %w", err)
		}
	}

	failures := &failureLog{ev: d.ev, last: map[string]time.Time{}}
	d.clients = []*client{viaFanout, viaL4}
	d.roller = newRoller(cp, sidecar.AdminAddress, d.clients, d.ev)
	// The clients outlive ctx (q, Ctrl-C, -duration) until the last frame
	// is taken: their watches must still be open in it.
	clientCtx, stopClients := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClients()
	var clientsDone, rolls sync.WaitGroup
	clientErr := make(chan error, len(d.clients))
	synced := make(chan *client, len(d.clients))
	cfgs := map[*client]*clientConfig{viaFanout: {sidecar.Config, "(client → fanout sidecar → every apiserver)"}, viaL4: {l4Config, "(client → L4 TCP proxy → one apiserver per connection)"}}
	for _, c := range d.clients {
		c.onFailure = failures.record
		c.note = cfgs[c].note
		clientsDone.Go(func() {
			if err := c.run(clientCtx, cfgs[c].cfg, o.rate, func() { synced <- c }); err != nil {
				clientErr <- fmt.Errorf("%s: %w", c.name, err)
			}
		})
	}

	var keys <-chan byte
	if isTerminal(os.Stdin) {
		k, restore, err := readKeys(ctx, os.Stdin)
		if err != nil {
			logf("no keys: %v", err)
		} else {
			keys, d.keys = k, true
			defer restore()
		}
	}
	scr := &screen{w: os.Stdout, tty: tty, size: terminalSize(os.Stdout)}
	scr.open()
	defer scr.close()
	d.start = time.Now()
	d.ev.add("clients starting: %d informers and %d requests/s each", o.watches, o.rate)

	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	var rollTimer <-chan time.Time
	// -duration counts from here: the setup before it takes from seconds
	// (binaries cached) to many minutes (a first build, -node).
	var stopTimer <-chan time.Time
	if o.duration > 0 {
		stopTimer = time.After(o.duration)
	}
	var runErr error
	nSynced := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-clientErr:
			runErr = err
			break loop
		case c := <-synced:
			d.ev.add("%s: informers synced, requests flowing", c.label)
			if nSynced++; nSynced == len(d.clients) && o.rollAfter > 0 {
				rollTimer = time.After(o.rollAfter)
				d.ev.add("rolling restart in %s (-roll-after)", o.rollAfter)
			}
			continue
		case <-rollTimer:
			d.roller.start(ctx, &rolls, "-roll-after")
		case <-stopTimer:
			d.ev.add("-duration %s reached: stopping", o.duration)
			quit()
			continue
		case k := <-keys:
			switch k {
			case 'r', 'R':
				d.roller.start(ctx, &rolls, "r pressed")
			case 'q', 'Q':
				d.ev.add("q pressed: stopping")
				quit()
				continue
			default:
				continue
			}
		case <-tick.C:
		}
		scr.draw(scr.fit(d.frame(ctx)))
	}

	// The last frame is taken while the clients still run: once they stop,
	// their watches end and the table would show none.
	final := render(d.frame(context.Background()))
	stopClients()
	clientsDone.Wait()
	rolls.Wait()
	scr.close()
	fmt.Println()
	for _, l := range final {
		fmt.Println(l)
	}
	fmt.Println()
	for _, c := range d.clients {
		n := c.counts()
		logf("%s: %d requests sent, %d failed, %d re-lists, %d watch errors", c.label, n.sent, n.failed, n.relists, n.watchErrors)
	}
	logf("client-go's own log: %s (kept with FANOUT_E2E_KEEP=1)", clientLog)
	logf("stopping; cleaning up the control plane")
	return runErr
}

type clientConfig struct {
	cfg  *rest.Config
	note string
}

// demo holds what a frame is made of.
type demo struct {
	cp      *harness.ControlPlane
	admin   string
	logs    []*serverLog
	clients []*client
	roller  *roller
	node    nodePanel
	ev      *events
	keys    bool
	start   time.Time
	// logErr is the last audit log error, reported once.
	logErr string
}

// frame gathers one frame: the audit logs read since the last one,
// fanout's view of the apiservers, and the clients' counters.
func (d *demo) frame(ctx context.Context) view {
	now := time.Now()
	var errs []error
	for _, l := range d.logs {
		errs = append(errs, l.update(now))
	}
	if err := errors.Join(errs...); err != nil && err.Error() != d.logErr {
		d.logErr = err.Error()
		d.ev.add("reading the audit logs: %v", err)
	}
	phases, status := d.roller.snapshot()
	fanoutStates := map[string]string{}
	snapCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if snap, err := admin.FetchSnapshot(snapCtx, http.DefaultClient, d.admin); err == nil {
		for _, e := range snap.Endpoints {
			fanoutStates[e.Address] = e.State
		}
	}
	v := view{elapsed: now.Sub(d.start).Truncate(time.Second), keys: d.keys, status: status}
	for i, a := range d.cp.APIServers {
		addr := strings.TrimPrefix(a.URL, "https://")
		st := fanoutStates[addr]
		if st == "" {
			st = "?"
		}
		// The port is 6443 on every test host.
		v.servers = append(v.servers, serverView{addr: a.Host.IP.String(), phase: phases[i], fanout: st})
	}
	row := func(label, note string, match func(string) bool, n *counts) clientView {
		cv := clientView{label: label, note: note, counts: n}
		for i, a := range d.cp.APIServers {
			s := d.logs[i].stats(match, a.StartedAt())
			if !a.Running() {
				s.watches = 0
			}
			cv.per = append(cv.per, s)
		}
		return cv
	}
	for _, c := range d.clients {
		n := c.counts()
		v.clients = append(v.clients, row(c.label, c.note, harness.UserIs(c.name), &n))
	}
	if d.node != nil {
		for _, c := range d.node.Clients() {
			v.clients = append(v.clients, row(c.label, c.note, c.match, nil))
		}
		v.extra = d.node.Lines(ctx)
	}
	v.events = d.ev.last()
	return v
}

// redirectKlog sends klog's output (client-go's) to path only.
func redirectKlog(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			return err
		}
	}
	klog.SetOutput(f)
	return nil
}
