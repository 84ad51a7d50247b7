package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// The fast backends stand in for kube-apiservers with none of their cost:
// TLS with a required client certificate, HTTP/2, a small JSON answer to any
// GET, /readyz, watches that stream one small event per interval, and one
// huge LIST. They run in a process of their own (this binary re-executed
// with the "backends" subcommand) so their CPU never counts as the load
// generator's, and the proxies in between are processes of their own too.

// smallObject is the answer to every short GET: a ConfigMap-sized JSON.
const smallObject = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"bench","uid":"6a1f7c1e-4c1b-4f69-9a37-1c2d3e4f5a6b","resourceVersion":"12345","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"key":"value","other":"a somewhat longer value to make the object realistic"}}` + "\n"

// bigListPath is the cluster-wide ConfigMap LIST the backends answer with
// -list-bytes of JSON.
const bigListPath = "/api/v1/configmaps"

// backendsMain is the "backends" subcommand: it listens on n loopback ports,
// prints "listening a,b,c" on stdout, and serves until stdin closes or it
// gets SIGTERM.
func backendsMain(args []string) error {
	fs := flag.NewFlagSet("backends", flag.ContinueOnError)
	n := fs.Int("n", 3, "how many backends")
	certFile := fs.String("cert", "", "serving certificate")
	keyFile := fs.String("key", "", "serving key")
	caFile := fs.String("ca", "", "CA that client certificates must chain to")
	watchEvery := fs.Duration("watch-interval", time.Second, "each watch gets one event per interval")
	listBytes := fs.Int64("list-bytes", 100<<20, "size of the LIST response at "+bigListPath)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificate in %s", *caFile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h := &backendHandler{watchEvery: *watchEvery, listBytes: *listBytes}
	var addrs []string
	var servers []*http.Server
	for range *n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{
			Handler: h,
			TLSConfig: &tls.Config{
				Certificates: []tls.Certificate{cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    pool,
				MinVersion:   tls.VersionTLS12,
			},
			HTTP2:       &http.HTTP2Config{MaxConcurrentStreams: 1000},
			IdleTimeout: 5 * time.Minute,
		}
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
		servers = append(servers, srv)
		addrs = append(addrs, ln.Addr().String())
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	}
	fmt.Printf("listening %s\n", strings.Join(addrs, ","))
	// The parent holds our stdin; when it dies, so do we.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	for _, s := range servers {
		_ = s.Close()
	}
	return nil
}

type backendHandler struct {
	watchEvery time.Duration
	listBytes  int64
}

func (h *backendHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/readyz" || r.URL.Path == "/livez" || r.URL.Path == "/healthz":
		_, _ = io.WriteString(w, "ok")
	case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
		h.watch(w, r)
	case r.URL.Path == bigListPath:
		h.list(w)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(smallObject)))
		_, _ = io.WriteString(w, smallObject)
	}
}

// watch streams one small event per interval, from a random phase so that
// thousands of watches do not tick together.
func (h *backendHandler) watch(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	phase := time.Duration(time.Now().UnixNano() % int64(h.watchEvery))
	t := time.NewTimer(phase)
	defer t.Stop()
	for rv := 1; ; rv++ {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		t.Reset(h.watchEvery)
		if _, err := fmt.Fprintf(w, `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"bench","resourceVersion":"%d"}}}`+"\n", rv); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// list streams listBytes of a ConfigMapList, item by item, never holding
// more than a write buffer.
func (h *backendHandler) list(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 32<<10)
	head := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`
	n, _ := bw.WriteString(head)
	written := int64(n)
	item := []byte(strings.TrimSuffix(smallObject, "\n"))
	for i := 0; written < h.listBytes; i++ {
		if i > 0 {
			_ = bw.WriteByte(',')
			written++
		}
		m, err := bw.Write(item)
		if err != nil {
			return
		}
		written += int64(m)
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush()
}

// Backends is the running backends process.
type Backends struct {
	Addrs []string
	cmd   *exec.Cmd
	stdin io.Closer
}

// StartBackends re-executes this binary as "backends".
func StartBackends(certFile, keyFile, caFile string, watchEvery time.Duration, listBytes int64, logPath string) (*Backends, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "backends", "-cert", certFile, "-key", keyFile, "-ca", caFile,
		"-watch-interval", watchEvery.String(), "-list-bytes", fmt.Sprint(listBytes))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &Backends{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addrs, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		b.Close()
		return nil, errors.Join(fmt.Errorf("backends did not report their addresses (got %q); see %s", line, logPath), err)
	}
	b.Addrs = strings.Split(addrs, ",")
	return b, nil
}

// Close stops the backends.
func (b *Backends) Close() {
	_ = b.stdin.Close()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}
