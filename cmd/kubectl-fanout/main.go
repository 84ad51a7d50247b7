// Command kubectl-fanout is the kubectl plugin for fanout: on PATH, it
// runs as `kubectl fanout`. status and top draw the tables of `fanout
// status` and `fanout top` for a pod's sidecar, reached through the API
// server's port-forward (the pods/portforward subresource), so neither
// kubectl exec nor a shell in the sidecar's image is needed. check lists
// what drifted: pods that should have fanout and do not, injected clients
// that go around it, and sidecars that know a single kube-apiserver.
//
// Unlike the sidecar binary it links client-go; it runs on an operator's
// machine, never in the pod.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fanout-dev/fanout/cmd/internal/admincli"
	"github.com/fanout-dev/fanout/internal/version"
)

const usageText = `Usage: kubectl fanout status POD [-n NAMESPACE] [--watch] [--interval D]
       kubectl fanout top POD [-n NAMESPACE] [--interval D] [--once] [-o table|json] [--sort KEY]
       kubectl fanout check [-n NAMESPACE | -A] [-o table|json]
       kubectl fanout version

status and top show a pod's fanout sidecar as fanout status and fanout top do in the pod,
through the API server's port-forward to the sidecar's admin port. check lists pods that
should have fanout and do not, injected clients that bypass it, and sidecars that know one
kube-apiserver endpoint; it exits 1 when it finds any.

Every command takes --kubeconfig (default: KUBECONFIG, else ~/.kube/config), --context
and -n/--namespace (default: the context's); see kubectl fanout COMMAND --help.

Exit codes: 0 done (check: nothing found); 1 check found something, or status or top could
not read the sidecar; 2 bad flags or arguments; 3 check could not list pods or namespaces.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return 2
	}
	switch args[0] {
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "top":
		return topCmd(ctx, args[1:], stdout, stderr)
	case "check":
		return checkCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprint(stdout, version.Get().Text("kubectl-fanout"))
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return 0
	}
	fmt.Fprintf(stderr, "kubectl fanout: unknown command %q\n\n%s", args[0], usageText)
	return 2
}

// kubeFlags are the flags every command takes to reach the cluster, as
// kubectl's own.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func addKubeFlags(fs *pflag.FlagSet) *kubeFlags {
	k := &kubeFlags{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "the kubeconfig file (default: KUBECONFIG, else ~/.kube/config, as kubectl)")
	fs.StringVar(&k.context, "context", "", "the kubeconfig context (default: its current-context)")
	fs.StringVarP(&k.namespace, "namespace", "n", "", "the namespace (default: the context's, else default)")
	return k
}

// client loads the kubeconfig as kubectl does and returns the REST
// config, a clientset and the namespace to use.
func (k *kubeFlags) client() (*rest.Config, kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context, Context: clientcmdContext(k.namespace)})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, nil, "", fmt.Errorf("the kubeconfig's namespace: %w", err)
	}
	cfg.UserAgent = "kubectl-fanout/" + version.Get().Version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	return cfg, cs, ns, nil
}

// parse parses a command's flags with one positional argument, POD, when
// wantPod. When done, the command ends with code.
func parse(fs *pflag.FlagSet, args []string, wantPod bool, stderr io.Writer) (pod string, code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return "", 0, true
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return "", 2, true
	case wantPod && fs.NArg() != 1:
		fmt.Fprintf(stderr, "%s: expected one argument, the pod's name; got %q\n", fs.Name(), fs.Args())
		return "", 2, true
	case !wantPod && fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return "", 2, true
	}
	return fs.Arg(0), 0, false
}

// forwardAdmin opens a port-forward to the admin port of the fanout
// sidecar in the named pod and returns the Target for admincli, and a
// function that closes the forward.
func forwardAdmin(ctx context.Context, k *kubeFlags, name string) (admincli.Target, func(), error) {
	cfg, cs, ns, err := k.client()
	if err != nil {
		return admincli.Target{}, nil, err
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metaGet)
	if err != nil {
		return admincli.Target{}, nil, err
	}
	port, err := adminPort(pod)
	if err != nil {
		return admincli.Target{}, nil, err
	}
	addr, closeFn, err := forward(ctx, cfg, cs, pod, port)
	if err != nil {
		return admincli.Target{}, nil, fmt.Errorf("port-forward to %s/%s port %d: %w", ns, name, port, err)
	}
	return admincli.Target{Client: httpClient(), Addr: addr}, closeFn, nil
}

// httpClient reads the admin server through a forward.
func httpClient() *http.Client { return &http.Client{Timeout: 5 * time.Second} }

// podCommand runs status or top: it parses the kube flags, the
// command's own (addFlags) and POD, opens the port-forward to the pod's
// sidecar and runs body on it.
func podCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer, usage string, addFlags func(*pflag.FlagSet), body func(admincli.Target) int) int {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stdout)
	k := addKubeFlags(fs)
	addFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"The sidecar is reached through the API server's port-forward (RBAC: create pods/portforward).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pod, code, done := parse(fs, args, true, stderr)
	if done {
		return code
	}
	t, closeFn, err := forwardAdmin(ctx, k, pod)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer closeFn()
	return body(t)
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o *admincli.StatusOptions
	const name = "kubectl fanout status"
	return podCommand(ctx, name, args, stdout, stderr,
		"Usage: kubectl fanout status POD [-n NAMESPACE] [--watch] [--interval D]\n\n"+admincli.StatusHelp,
		func(fs *pflag.FlagSet) { o = admincli.AddStatusFlags(fs) },
		func(t admincli.Target) int {
			return admincli.Status(ctx, name, t, *o, stdout, stderr, admincli.StdoutIsTerminal())
		})
}

func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o *admincli.TopOptions
	const name = "kubectl fanout top"
	return podCommand(ctx, name, args, stdout, stderr,
		"Usage: kubectl fanout top POD [-n NAMESPACE] [--interval D] [--once] [-o table|json] [--sort KEY]\n\n"+admincli.TopHelp(""),
		func(fs *pflag.FlagSet) { o = admincli.AddTopFlags(fs) },
		func(t admincli.Target) int {
			var open func() (*admincli.Screen, error)
			if admincli.StdoutIsTerminal() {
				open = admincli.OpenScreen
			}
			return admincli.Top(ctx, name, t, o, stdout, stderr, open)
		})
}
