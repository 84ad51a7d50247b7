package harness

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Kubelet is a stand-in for a kubelet: a Node whose kubelet endpoint is a
// TLS server on the test network that kube-apiserver proxies exec, attach,
// port-forward and container logs to, exactly as it would to a real
// kubelet. Streams are served by k8s.io/cri-streaming, the package the real
// kubelet serves them with; behind it runs a fake container runtime:
//
//   - exec "cat" copies stdin to stdout, "echo a b" prints "a b", "exit N"
//     ends with exit code N; anything else ends with 127;
//   - attach behaves like exec "cat";
//   - port-forward to any port reaches the Kubelet's TCP echo server, which
//     checksums what it receives and sends (see EchoSums);
//   - container logs print the lines given to Log, and with follow=true
//     keep the stream open for more until the client leaves.
type Kubelet struct {
	NodeName string
	// Address is host:port of the kubelet endpoint: the test network's
	// bridge address, which every apiserver's host reaches.
	Address string

	srv  *http.Server
	echo net.Listener

	mu       sync.Mutex
	logLines []string
	logMore  chan struct{} // closed and replaced when a line is added
	sums     []EchoSum
}

// EchoSum is what one port-forwarded connection carried.
type EchoSum struct {
	Bytes int64
	// SHA256 of the bytes received from (and echoed back to) the client.
	SHA256 string
}

// kubelet stream timeouts, as kubelet's defaults.
const (
	kubeletStreamIdleTimeout     = 4 * time.Hour
	kubeletStreamCreationTimeout = 30 * time.Second
)

// StartKubelet serves a stand-in kubelet on the bridge address and
// registers the Ready Node nodeName pointing at it (status.addresses
// InternalIP and daemonEndpoints.kubeletEndpoint.Port). kube-apiserver
// reaches kubelets with neither client certificate nor CA here (the harness
// passes no --kubelet-client-certificate or --kubelet-certificate-authority),
// so the Kubelet serves a self-signed certificate and asks for no client
// certificate. It stops when tb ends.
func (cp *ControlPlane) StartKubelet(ctx context.Context, tb testing.TB, nodeName string) (*Kubelet, error) {
	dir, err := os.MkdirTemp(cp.Dir, "kubelet-"+fileSafe(nodeName)+"-")
	if err != nil {
		return nil, err
	}
	ip := cp.Net.BridgeIP
	serving, err := issue(dir, "kubelet", cp.PKI.CA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeName},
		IPAddresses: []net.IP{ip},
		DNSNames:    []string{nodeName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("kubelet stand-in: listening on %s: %w", ip, err)
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, err
	}
	k := &Kubelet{NodeName: nodeName, Address: ln.Addr().String(), echo: echo, logMore: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/", k.serveExec)
	mux.HandleFunc("/attach/", k.serveAttach)
	mux.HandleFunc("/portForward/", k.servePortForward)
	mux.HandleFunc("/containerLogs/", k.serveLogs)
	k.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 30 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() { _ = k.srv.ServeTLS(ln, "", "") }()
	go k.serveEcho()
	onCleanup(tb, k.close)

	port := ln.Addr().(*net.TCPAddr).Port
	if err := cp.registerKubeletNode(ctx, nodeName, ip, port); err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) close() {
	_ = k.echo.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.srv.Shutdown(ctx); err != nil {
		_ = k.srv.Close()
	}
}

// registerKubeletNode creates (or updates) a Ready Node whose kubelet is
// at ip:port.
func (cp *ControlPlane) registerKubeletNode(ctx context.Context, name string, ip net.IP, port int) error {
	nodes := cp.AdminClient.CoreV1().Nodes()
	node, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		node, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("registering node %s: %w", name, err)
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("10"),
	}
	now := metav1.Now()
	node.Status.Capacity = capacity
	node.Status.Allocatable = capacity
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet stand-in of the fanout e2e harness", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the kubelet endpoint of node %s: %w", name, err)
	}
	return nil
}

// Log adds a line to every container's log; open follow streams get it.
func (k *Kubelet) Log(line string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.logLines = append(k.logLines, line)
	close(k.logMore)
	k.logMore = make(chan struct{})
}

// EchoSums returns what each finished port-forwarded connection carried.
func (k *Kubelet) EchoSums() []EchoSum {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]EchoSum(nil), k.sums...)
}

// kubeletPath splits /<kind>/<ns>/<pod>[/<uid>]/<container> (container
// absent for portForward).
func kubeletPath(p string, withContainer bool) (pod, uid, container string, ok bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")[1:]
	if !withContainer {
		switch len(parts) {
		case 2:
			return parts[1], "", "", true
		case 3:
			return parts[1], parts[2], "", true
		}
		return "", "", "", false
	}
	switch len(parts) {
	case 3:
		return parts[1], "", parts[2], true
	case 4:
		return parts[1], parts[2], parts[3], true
	}
	return "", "", "", false
}

func (k *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	pod, uid, container, ok := kubeletPath(r.URL.Path, true)
	if !ok {
		http.NotFound(w, r)
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	remotecommand.ServeExec(w, r, fakeRuntime{}, pod, uid, container, cmd, opts,
		kubeletStreamIdleTimeout, kubeletStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *Kubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	pod, uid, container, ok := kubeletPath(r.URL.Path, true)
	if !ok {
		http.NotFound(w, r)
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeAttach(w, r, fakeRuntime{}, pod, uid, container, opts,
		kubeletStreamIdleTimeout, kubeletStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	pod, uid, _, ok := kubeletPath(r.URL.Path, false)
	if !ok {
		http.NotFound(w, r)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, k, pod, uid, opts,
		kubeletStreamIdleTimeout, kubeletStreamCreationTimeout, portforward.SupportedProtocols)
}

// PortForward implements portforward.PortForwarder: every port of every
// pod is the echo server.
func (k *Kubelet) PortForward(ctx context.Context, _, _ string, _ int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", k.echo.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(stream, c)
		close(done)
	}()
	_, _ = io.Copy(c, stream)
	// The client finished sending: let the echo server see EOF, and wait
	// until it has echoed everything back.
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

func (k *Kubelet) serveEcho() {
	for {
		c, err := k.echo.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			h := sha256.New()
			n, _ := io.Copy(io.MultiWriter(c, h), c)
			k.recordSum(n, h)
		}()
	}
}

func (k *Kubelet) recordSum(n int64, h hash.Hash) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sums = append(k.sums, EchoSum{Bytes: n, SHA256: fmt.Sprintf("%x", h.Sum(nil))})
}

func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	if _, _, _, ok := kubeletPath(r.URL.Path, true); !ok {
		http.NotFound(w, r)
		return
	}
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	sent := 0
	for {
		k.mu.Lock()
		lines := k.logLines[sent:]
		more := k.logMore
		k.mu.Unlock()
		for _, l := range lines {
			if _, err := io.WriteString(w, l+"\n"); err != nil {
				return
			}
			sent++
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow {
			return
		}
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
	}
}

// fakeRuntime runs the stand-in's commands in-process.
type fakeRuntime struct{}

func (fakeRuntime) ExecInContainer(_ context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	closeAll := func() {
		if out != nil {
			out.Close()
		}
		if errw != nil {
			errw.Close()
		}
	}
	defer closeAll()
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	switch cmd[0] {
	case "cat":
		if in != nil && out != nil {
			_, err := io.Copy(out, in)
			return err
		}
		return nil
	case "echo":
		if out != nil {
			_, err := io.WriteString(out, strings.Join(cmd[1:], " ")+"\n")
			return err
		}
		return nil
	case "exit":
		code := 1
		if len(cmd) > 1 {
			code, _ = strconv.Atoi(cmd[1])
		}
		if code == 0 {
			return nil
		}
		return utilexec.CodeExitError{Err: fmt.Errorf("exit %d", code), Code: code}
	default:
		if errw != nil {
			fmt.Fprintf(errw, "%s: command not found\n", cmd[0])
		}
		return utilexec.CodeExitError{Err: fmt.Errorf("%s: command not found", cmd[0]), Code: 127}
	}
}

func (r fakeRuntime) AttachContainer(ctx context.Context, name, uid, container string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return r.ExecInContainer(ctx, name, uid, container, []string{"cat"}, in, out, errw, tty, resize, 0)
}
