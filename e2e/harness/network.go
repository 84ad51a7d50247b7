package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Host is where one apiserver runs: a network namespace on the run's bridge,
// or, in fallback mode, a loopback address of the root namespace.
type Host struct {
	Index int
	IP    net.IP
	// NS is the network namespace, empty in fallback mode.
	NS string
	// Veth is the root-namespace end of the host's veth pair, the one
	// Disconnect takes down.
	Veth string
}

// Network is the test network of one run.
type Network struct {
	// NetNS is false in fallback mode: hosts are loopback addresses, there
	// is no bridge and Disconnect is not supported.
	NetNS bool
	RunID string
	// Bridge and BridgeIP are the root-namespace side every host reaches
	// (etcd listens there). In fallback mode BridgeIP is 127.0.0.1.
	Bridge   string
	BridgeIP net.IP
	Subnet   *net.IPNet
	Hosts    []*Host
}

// Names of everything a run creates start with fo<pid><letter>, so a later
// run can tell whether the run that made them is still alive; the letter
// tells apart the networks of control planes in one process. Interface names
// must fit in 15 bytes, hence the terseness.
var (
	staleName = regexp.MustCompile(`^fo([0-9]+)[a-z](br|h[0-9]+|-api[0-9]+|nd[0-9]+|-node[0-9]+)$`)
	staleDir  = regexp.MustCompile(`^fanout-e2e-([0-9]+)-[0-9]+$`)
)

func runID() string { return strconv.Itoa(os.Getpid()) }

// networks counts the networks this process made, for unique names.
var networks atomic.Int32

// netnsWanted reports whether the run should use network namespaces, and
// whether their absence is an error.
func netnsWanted() (want, required bool) {
	required = os.Getenv("CI") == "true"
	return os.Getenv("FANOUT_E2E_NETNS") != "0", required
}

// newNetwork builds the test network for n hosts. It uses network namespaces
// when it can (root and a working `ip netns`); otherwise it falls back to
// loopback addresses and says so loudly, unless CI=true, where the fallback
// would hide exactly the behaviour the tests exist for.
func newNetwork(ctx context.Context, n int, logf func(string, ...any)) (*Network, error) {
	want, required := netnsWanted()
	if want {
		nw, err := newNetnsNetwork(ctx, n)
		if err == nil {
			return nw, nil
		}
		if required {
			return nil, fmt.Errorf("CI=true requires network namespaces for the test hosts, and setting them up failed (run as root with iproute2 installed): %w", err)
		}
		logf("harness: network namespaces unavailable: %v", err)
	} else if required {
		return nil, errors.New("CI=true requires network namespaces, but FANOUT_E2E_NETNS=0 turned them off")
	}
	return newLoopbackNetwork(n, logf)
}

func newLoopbackNetwork(n int, logf func(string, ...any)) (*Network, error) {
	logf("\n" +
		"##########################################################################\n" +
		"## harness: FALLBACK MODE: apiservers on 127.0.x.y loopback addresses.  ##\n" +
		"## No network namespaces: --endpoint-reconciler-type=none, static       ##\n" +
		"## endpoints, and Disconnect/Reconnect are unavailable. Run as root     ##\n" +
		"## with iproute2 for the real test hosts.                               ##\n" +
		"##########################################################################")
	// The third octet spreads concurrent runs over distinct addresses so
	// they can all use port 6443.
	x := 1 + (os.Getpid()+int(networks.Add(1)))%250
	nw := &Network{RunID: runID(), BridgeIP: net.ParseIP("127.0.0.1")}
	for i := 1; i <= n; i++ {
		nw.Hosts = append(nw.Hosts, &Host{Index: i - 1, IP: net.IPv4(127, 0, byte(x), byte(10+i))})
	}
	return nw, nil
}

func newNetnsNetwork(ctx context.Context, n int) (nw *Network, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not running as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("iproute2's ip command not found: %w", err)
	}
	// Picking a free subnet and claiming it must not interleave with another
	// run doing the same.
	unlock, err := lockFile(ctx, filepath.Join(os.TempDir(), "fanout-e2e-net.lock"), nil, "")
	if err != nil {
		return nil, err
	}
	defer unlock()

	seq := networks.Add(1) - 1
	if seq >= 26 {
		return nil, errors.New("more than 26 test networks in one process")
	}
	id := fmt.Sprintf("%s%c", runID(), 'a'+seq)
	nw = &Network{NetNS: true, RunID: id, Bridge: "fo" + id + "br"}
	defer func() {
		if err != nil {
			nw.Close()
		}
	}()

	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	nw.Subnet = subnet
	nw.BridgeIP = hostIP(subnet, 1)
	prefix := fmt.Sprintf("/%d", maskBits(subnet))

	if err := ip("link", "add", nw.Bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := ip("addr", "add", nw.BridgeIP.String()+prefix, "dev", nw.Bridge); err != nil {
		return nil, err
	}
	if err := ip("link", "set", nw.Bridge, "up"); err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		h := &Host{
			Index: i - 1,
			IP:    hostIP(subnet, 10+i),
			NS:    fmt.Sprintf("fo%s-api%d", id, i),
			Veth:  fmt.Sprintf("fo%sh%d", id, i),
		}
		nw.Hosts = append(nw.Hosts, h)
		inner := fmt.Sprintf("fo%sn%d", id, i)
		steps := [][]string{
			{"netns", "add", h.NS},
			{"link", "add", h.Veth, "type", "veth", "peer", "name", inner, "netns", h.NS},
			{"link", "set", h.Veth, "master", nw.Bridge, "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", h.NS, "addr", "add", h.IP.String() + prefix, "dev", inner},
			{"-n", h.NS, "link", "set", inner, "up"},
			// Only the bridge address is ever used; the default route just
			// gives the apiserver a sane routing table. The root namespace
			// does not forward, so nothing leaves the test network.
			{"-n", h.NS, "route", "add", "default", "via", nw.BridgeIP.String()},
		}
		for _, s := range steps {
			if err := ip(s...); err != nil {
				return nil, err
			}
		}
	}
	return nw, nil
}

// Close removes the run's namespaces and links. Processes inside the
// namespaces must have been stopped first; any left are killed.
func (nw *Network) Close() error {
	if !nw.NetNS {
		return nil
	}
	var errs []error
	for _, h := range nw.Hosts {
		if h.NS != "" {
			killNetnsPids(h.NS)
			if err := ip("netns", "del", h.NS); err != nil && !strings.Contains(err.Error(), "No such file") {
				errs = append(errs, err)
			}
		}
		// Deleting the namespace destroys the inner end and with it the
		// pair; this only matters when the namespace was never made.
		_ = ipQuiet("link", "del", h.Veth)
	}
	if nw.Bridge != "" {
		_ = ipQuiet("link", "del", nw.Bridge)
	}
	return errors.Join(errs...)
}

// Disconnect cuts h off the network by taking its veth down in the root
// namespace: packets to and from it are dropped, as with a pulled cable, and
// open connections hang rather than reset.
func (h *Host) Disconnect() error {
	if h.NS == "" {
		return errors.New("Disconnect needs network namespaces (fallback mode has none)")
	}
	return ip("link", "set", h.Veth, "down")
}

// Reconnect undoes Disconnect.
func (h *Host) Reconnect() error {
	if h.NS == "" {
		return errors.New("Reconnect needs network namespaces (fallback mode has none)")
	}
	return ip("link", "set", h.Veth, "up")
}

// command prefixes argv so that it runs on h.
func (h *Host) command(argv []string) []string {
	if h.NS == "" {
		return argv
	}
	return append([]string{"ip", "netns", "exec", h.NS}, argv...)
}

// SweepStale removes namespaces, links and run directories of earlier runs
// whose process is gone (a SIGKILLed run cannot clean up after itself). Only
// names of the form fo<pid>… and fanout-e2e-<pid>-… are considered, and never
// those of a live process.
func SweepStale() error {
	var errs []error
	if os.Geteuid() == 0 {
		// A dead run's node leaves processes, mounts and cgroups in its
		// directories; they must go before the directories can.
		if err := sweepNodes(); err != nil {
			errs = append(errs, err)
		}
	}
	if entries, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range entries {
			m := staleDir.FindStringSubmatch(e.Name())
			if m != nil && e.IsDir() && !alive(m[1]) {
				if err := os.RemoveAll(filepath.Join(os.TempDir(), e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if os.Geteuid() != 0 {
		return errors.Join(errs...)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.Join(errs...)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !stale(f[0]) {
				continue
			}
			killNetnsPids(f[0])
			if err := ip("netns", "del", f[0]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	out, err = exec.Command("ip", "-o", "link", "show").Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			// "12: fo123h1@if11: <...>"
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if stale(name) {
				if err := ipQuiet("link", "del", name); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func stale(name string) bool {
	m := staleName.FindStringSubmatch(name)
	return m != nil && !alive(m[1])
}

// alive reports whether the run with this pid may still be running; when in
// doubt it says yes, so nothing of a live run is ever removed.
func alive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n == os.Getpid() {
		return true
	}
	return syscall.Kill(n, 0) != syscall.ESRCH
}

// killNetnsPids SIGKILLs whatever still runs inside ns: only processes of
// ours can be there, since only we use the namespace.
func killNetnsPids(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// freeSubnet picks a /24 in 172.30.0.0/16, starting from one derived from
// our pid, that no address or route of the root namespace overlaps.
func freeSubnet() (*net.IPNet, error) {
	used, err := usedNets()
	if err != nil {
		return nil, err
	}
	start := os.Getpid() % 256
	for i := 0; i < 256; i++ {
		x := (start + i) % 256
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("172.30.%d.0/24", x))
		clash := false
		for _, u := range used {
			if u.Contains(cand.IP) || cand.Contains(u.IP) {
				clash = true
				break
			}
		}
		if !clash {
			return cand, nil
		}
	}
	return nil, errors.New("no free /24 in 172.30.0.0/16 for the test network")
}

func usedNets() ([]*net.IPNet, error) {
	var out []*net.IPNet
	addrs, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip addr show: %w", err)
	}
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route show: %w", err)
	}
	for _, line := range strings.Split(string(addrs)+"\n"+string(routes), "\n") {
		for _, f := range strings.Fields(line) {
			if !strings.Contains(f, "/") {
				continue
			}
			if _, n, err := net.ParseCIDR(f); err == nil && n.IP.To4() != nil {
				if ones, _ := n.Mask.Size(); ones == 0 {
					continue // the default route overlaps everything
				}
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func hostIP(n *net.IPNet, last int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, n.IP.To4())
	ip[3] = byte(last)
	return ip
}

func maskBits(n *net.IPNet) int {
	ones, _ := n.Mask.Size()
	return ones
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ipQuiet is ip for removals whose target may already be gone.
func ipQuiet(args ...string) error {
	err := ip(args...)
	if err != nil && (strings.Contains(err.Error(), "Cannot find device") || strings.Contains(err.Error(), "does not exist")) {
		return nil
	}
	return err
}
