package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
)

var metaGet = metav1.GetOptions{}

func clientcmdContext(namespace string) clientcmdapi.Context {
	return clientcmdapi.Context{Namespace: namespace}
}

// sidecarOf returns the pod's fanout container: the injected native
// sidecar (an init container), or a container of that name added by hand.
func sidecarOf(pod *corev1.Pod) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == webhook.SidecarName {
				return &list[i]
			}
		}
	}
	return nil
}

// adminPort is the sidecar's admin port: the port it names fanout-admin,
// as the injector declares it and the PodMonitor scrapes it, else the
// port of its --admin-address flag.
func adminPort(pod *corev1.Pod) (int, error) {
	ct := sidecarOf(pod)
	if ct == nil {
		return 0, fmt.Errorf("pod %s/%s has no container named %q: it runs without fanout (kubectl fanout check says why)", pod.Namespace, pod.Name, webhook.SidecarName)
	}
	for _, p := range ct.Ports {
		if p.Name == webhook.AdminPortName {
			return int(p.ContainerPort), nil
		}
	}
	for _, a := range append(append([]string{}, ct.Command...), ct.Args...) {
		if v, ok := strings.CutPrefix(a, "--admin-address="); ok {
			if _, port, err := net.SplitHostPort(v); err == nil {
				if n, err := strconv.Atoi(port); err == nil {
					return n, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("the fanout container of %s/%s declares no port %q and no --admin-address=HOST:PORT", pod.Namespace, pod.Name, webhook.AdminPortName)
}

// forward opens a port-forward to port of pod on a free loopback port, as
// kubectl port-forward does (WebSocket, falling back to SPDY), and returns
// that local address and a function that closes the forward. Inside the
// pod the connection comes from loopback, which the sidecar's /debug
// pages require.
func forward(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, pod *corev1.Pod, port int) (string, func(), error) {
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(ws, dialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	fctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	var errs strings.Builder
	var mu sync.Mutex
	fw, err := portforward.NewOnAddressesForStreamingWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, lockedWriter{&mu, &errs})
	if err != nil {
		cancel()
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	stop := func() {
		cancel()
		<-done
	}
	select {
	case <-ready:
	case err := <-done:
		cancel()
		mu.Lock()
		defer mu.Unlock()
		return "", nil, fmt.Errorf("%w %s", err, strings.TrimSpace(errs.String()))
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		stop()
		return "", nil, fmt.Errorf("the forwarded port: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), stop, nil
}

// lockedWriter serialises the port-forward's error lines, written from
// its connection goroutines.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
