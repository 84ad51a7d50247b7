package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Proc is a proxy running as a process of its own, so its CPU and memory
// can be read from /proc.
type Proc struct {
	Name string
	// URL is where the client sends plain HTTP/1.1, or with ClientTLS
	// HTTP/2 over TLS.
	URL string
	// ClientTLS is set when the proxy serves TLS: the client's
	// configuration (CA and client certificate).
	ClientTLS *tls.Config
	// AdminURL is fanout's admin server (http://host:port), "" for HAProxy.
	AdminURL string
	LogPath  string
	cmd      *exec.Cmd
	done     chan struct{}
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Usage reads the process's CPU and memory.
func (p *Proc) Usage() (ProcUsage, error) { return ReadProc(p.PID()) }

// Stop SIGTERMs the process and waits (SIGKILL after 10 s).
func (p *Proc) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func startProc(name, logPath string, argv []string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Nothing outlives the benchmark, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *Proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitOK polls url until it answers 200 n times in a row.
func (p *Proc) waitOK(ctx context.Context, c *http.Client, url string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	get := getter(c, url, 2*time.Second)
	var last error
	for ok := 0; ok < n; {
		if p.exited() {
			return fmt.Errorf("%s exited; last lines of %s:\n%s", p.Name, p.LogPath, tailFile(p.LogPath, 20))
		}
		if last = get(ctx); last == nil {
			ok++
			continue
		}
		ok = 0
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after a minute: %v; last lines of %s:\n%s", p.Name, last, p.LogPath, tailFile(p.LogPath, 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// StartFanout runs the fanout binary for kubeconfig, spreading over
// endpoints (https URLs), and waits until its /readyz passes and a request
// through it succeeds.
func StartFanout(ctx context.Context, bin, dir, name, kubeconfig string, endpoints []string) (*Proc, error) {
	return startFanout(ctx, bin, dir, name, kubeconfig, endpoints, "http")
}

// startFanout is StartFanout with extra flags; scheme is the listener's.
func startFanout(ctx context.Context, bin, dir, name, kubeconfig string, endpoints []string, scheme string, extraArgs ...string) (*Proc, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startProc("fanout", filepath.Join(dir, name+".log"), append([]string{bin,
		"--kubeconfig", kubeconfig,
		"--endpoints", strings.Join(endpoints, ","),
		"--listen-address", listen,
		"--admin-address", admin,
		// The bench runs on the host, not in a pod's network namespace.
		"--allow-shared-loopback",
	}, extraArgs...))
	if err != nil {
		return nil, err
	}
	p.URL = scheme + "://" + listen
	p.AdminURL = "http://" + admin
	c := newH1Client(2)
	if err := p.waitOK(ctx, c, "http://"+admin+"/readyz", 1); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// HAProxyConfig is what the L7 HAProxy configuration is made from.
type HAProxyConfig struct {
	Listen string // frontend address, plain HTTP/1.1
	// Servers are host:port of the TLS HTTP/2 backends.
	Servers []string
	// CAFile verifies the servers; ClientPEM is the client certificate and
	// its key in one file, presented to every server.
	CAFile, ClientPEM string
	// Balance is the backend's balance algorithm: roundrobin (when
	// empty) or leastconn, which for HTTP/2 servers counts requests in
	// flight.
	Balance string
}

var haproxyTemplate = template.Must(template.New("haproxy").Parse(`# Written by fanout's benchmark (e2e/cmd/bench): HAProxy as a node-local L7
# proxy in front of the apiservers, the setup users compare fanout with.
# No global maxconn: HAProxy derives it from the file descriptor limit.
global

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout http-keep-alive 90s

frontend client
    bind {{.Listen}}
    default_backend apiservers

backend apiservers
    balance {{.Balance}}
    # Every request carries the same identity (the client certificate), so
    # any request may ride any server connection; with the default "safe",
    # each new client connection's first request opens a TLS connection.
    http-reuse always
    # Checks speak HTTP/1.1 (check-alpn below): HAProxy 2.6 sends them with
    # the HTTP/1 checker, which misreads an h2 answer as invalid.
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 2s ssl verify required ca-file {{.CAFile}} crt {{.ClientPEM}} alpn h2 check-alpn http/1.1
{{- range $i, $s := .Servers}}
    server apiserver{{$i}} {{$s}}
{{- end}}
`))

// Render writes the configuration.
func (c HAProxyConfig) Render() (string, error) {
	switch c.Balance {
	case "":
		c.Balance = "roundrobin"
	case "roundrobin", "leastconn":
	default:
		return "", fmt.Errorf("HAProxy balance %q: want roundrobin or leastconn", c.Balance)
	}
	var b strings.Builder
	if err := haproxyTemplate.Execute(&b, c); err != nil {
		return "", err
	}
	return b.String(), nil
}

// StartHAProxy writes the configuration into dir and runs haproxy in the
// foreground, then waits until requests through it succeed. balance is
// HAProxyConfig.Balance.
func StartHAProxy(ctx context.Context, dir, name string, servers []string, caFile string, clientCertPEM, clientKeyPEM []byte, balance string) (*Proc, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pem := filepath.Join(dir, name+"-client.pem")
	if err := os.WriteFile(pem, append(append([]byte{}, clientCertPEM...), clientKeyPEM...), 0o600); err != nil {
		return nil, err
	}
	cfg, err := HAProxyConfig{Listen: listen, Servers: servers, CAFile: caFile, ClientPEM: pem, Balance: balance}.Render()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, name+".cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy is not installed (make bench installs it with apt-get install -y haproxy): %w", err)
	}
	p, err := startProc("haproxy", filepath.Join(dir, name+".log"), []string{bin, "-db", "-f", cfgPath})
	if err != nil {
		return nil, err
	}
	p.URL = "http://" + listen
	// Enough successes in a row that every server has answered once.
	if err := p.waitOK(ctx, newH1Client(2), p.URL+"/readyz", 2*len(servers)); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// haproxyVersion is the first line of haproxy -v, or why there is none.
func haproxyVersion() string {
	out, err := exec.Command("haproxy", "-v").Output()
	if err != nil {
		return "not installed (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
