// Command podclient is the client container of the e2e harness's real-node
// tests. It is one static binary with several commands, because its image
// has nothing else in it:
//
//	podclient run [flags]   the client: requests through its kubeconfig,
//	                        a TCP echo port, stdin echoed to stdout
//	podclient echo ARGS...  prints ARGS (for kubectl exec)
//	podclient cat           copies stdin to stdout (for kubectl exec -i)
//	podclient exit N        exits with status N
//
// run makes one discovery request (GET /api) every -interval and logs each
// result on a line of its own: "request N ok" or "request N failed: ...".
// On SIGTERM it logs "sigterm", keeps making requests for -shutdown-for (a
// client finishing its work during shutdown), logs
// "shutdown: N ok, M failed" and exits, with status 1 if any failed.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podclient run|echo|cat|exit ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(os.Args[2:], " "))
	case "cat":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "exit":
		code := 1
		if len(os.Args) > 2 {
			fmt.Sscan(os.Args[2], &code)
		}
		os.Exit(code)
	case "run":
		os.Exit(run(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "podclient: unknown command %q (want run, echo, cat or exit)\n", os.Args[1])
		os.Exit(2)
	}
}

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig to make requests with (empty: in-cluster if in a pod, else no requests)")
	interval := fs.Duration("interval", 500*time.Millisecond, "time between requests")
	shutdownFor := fs.Duration("shutdown-for", 5*time.Second, "how long to keep making requests after SIGTERM")
	echo := fs.String("echo-address", ":8080", "TCP echo server address (port-forward target)")
	health := fs.String("health-address", ":8081", "HTTP /healthz address (probes)")
	_ = fs.Parse(args)

	logf := func(format string, a ...any) {
		fmt.Printf(time.Now().UTC().Format(time.RFC3339Nano)+" "+format+"\n", a...)
	}
	go serveEcho(*echo, logf)
	go func() {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
		srv := &http.Server{Addr: *health, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		logf("health server: %v", srv.ListenAndServe())
	}()
	// Attach: whatever comes in on stdin goes back out, marked.
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			logf("attach: %s", sc.Text())
		}
	}()

	var client rest.Interface
	if *kubeconfig != "" || inCluster() {
		// No kubeconfig: in-cluster, through the kubernetes Service.
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			logf("loading kubeconfig: %v", err)
			return 1
		}
		logf("talking to %s", cfg.Host)
		cfg.Timeout = 5 * time.Second
		cfg.UserAgent = "podclient"
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			logf("client: %v", err)
			return 1
		}
		client = cs.Discovery().RESTClient()
	}
	var n, failed atomic.Int64
	request := func() bool {
		if client == nil {
			return true
		}
		i := n.Add(1)
		_, err := client.Get().AbsPath("/api").DoRaw(context.Background())
		if err != nil {
			failed.Add(1)
			logf("request %d failed: %v", i, err)
			return false
		}
		logf("request %d ok", i)
		return true
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	logf("started")
	tick := time.NewTicker(*interval)
	defer tick.Stop()
loop:
	for {
		select {
		case <-sigs:
			break loop
		case <-tick.C:
			request()
		}
	}
	logf("sigterm")
	before := n.Load()
	beforeFailed := failed.Load()
	end := time.After(*shutdownFor)
	for {
		select {
		case <-end:
			ok := n.Load() - before - (failed.Load() - beforeFailed)
			bad := failed.Load() - beforeFailed
			logf("shutdown: %d ok, %d failed", ok, bad)
			if bad > 0 {
				return 1
			}
			return 0
		case <-tick.C:
			request()
		}
	}
}

// inCluster reports whether the pod has a service account token to make
// requests with.
func inCluster() bool {
	_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	return err == nil && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

func serveEcho(addr string, logf func(string, ...any)) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logf("echo server: %v", err)
		return
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			logf("echo server: %v", err)
			return
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(c, c)
			logf("echo: %d bytes", n)
		}()
	}
}
