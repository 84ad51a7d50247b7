package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
)

// options are fanout-injector's flags.
type options struct {
	listenAddress  string
	metricsAddress string
	certFile       string
	keyFile        string
	clientCAFile   string
	pki            string
	pkiSecret      string
	pkiNamespace   string
	pkiService     string
	webhookConfig  string
	maxConnections int
	limits         webhook.Limits
	pullPolicy     string
	cpuRequest     string
	cpuLimit       string
	memoryRequest  string
	memoryLimit    string
	logFormat      string
	verbosity      int
	hostedLabels   map[string]string
	sidecar        webhook.Config
	// ownPod names the injector's container, whose image the sidecar
	// gets when --sidecar-image is empty (sidecarConfig).
	ownPod ownPod
	getenv func(string) string
}

func newOptions() *options {
	return &options{
		listenAddress:  ":8443",
		metricsAddress: ":8080",
		pullPolicy:     string(corev1.PullIfNotPresent),
		cpuRequest:     "20m",
		memoryRequest:  "32Mi",
		memoryLimit:    "256Mi",
		logFormat:      "text",
		pki:            pkiFiles,
		pkiSecret:      "fanout-injector-pki",
		pkiService:     "fanout-injector",
		webhookConfig:  "fanout-injector",
		hostedLabels:   webhook.DefaultHostedPodLabels,
		maxConnections: webhook.DefaultMaxConnections,
		limits:         webhook.DefaultLimits(),
		sidecar:        webhook.DefaultConfig(),
		getenv:         os.Getenv,
	}
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.listenAddress, "listen-address", o.listenAddress, "HTTPS listener for kube-apiserver's admission requests (path /mutate) and /healthz.")
	fs.StringVar(&o.metricsAddress, "metrics-address", o.metricsAddress, "Plaintext listener for /metrics and /healthz; empty disables it.")
	fs.StringVar(&o.pki, "pki", o.pki,
		"Where the serving certificate comes from. files: --tls-cert-file and --tls-private-key-file, reloaded when they change (cert-manager); the webhook's caBundle is yours to set. "+
			"self: the injector makes a CA (1 year, succeeded at 80% with both CAs in caBundle) and a serving certificate (30 days, renewed at 2/3) for --pki-service, keeps them in Secret --pki-secret so that all replicas serve the same one, "+
			"and writes caBundle into every entry of --webhook-configuration, checking it every minute; it needs a ServiceAccount token and manifests/injector/pki-rbac.yaml.")
	fs.StringVar(&o.certFile, "tls-cert-file", o.certFile, "With --pki=files: serving certificate (PEM, may hold intermediates) for --listen-address; it must carry the webhook Service's DNS name (required).")
	fs.StringVar(&o.keyFile, "tls-private-key-file", o.keyFile, "With --pki=files: private key (PEM) of --tls-cert-file (required).")
	fs.StringVar(&o.pkiSecret, "pki-secret", o.pkiSecret, "With --pki=self: the Secret, in --pki-namespace, that holds the CAs and the serving certificate; created if absent.")
	fs.StringVar(&o.pkiNamespace, "pki-namespace", o.pkiNamespace, "With --pki=self: namespace of --pki-secret and of the webhook Service. Empty: the injector's own, from its ServiceAccount token.")
	fs.StringVar(&o.pkiService, "pki-service", o.pkiService, "With --pki=self: the webhook's Service; the serving certificate is for <service>.<namespace>.svc, the name kube-apiserver calls.")
	fs.StringVar(&o.webhookConfig, "webhook-configuration", o.webhookConfig, "With --pki=self: the MutatingWebhookConfiguration whose every entry gets the caBundle.")
	fs.StringVar(&o.clientCAFile, "client-ca-file", o.clientCAFile,
		"CA bundle (PEM) that verifies callers' client certificates: when set, a TLS handshake without a client certificate signed by one of them fails, before any request is read. "+
			"Give kube-apiserver that certificate for this webhook in its --admission-control-config-file kubeconfig (docs/injector.md, Restricting who can call the webhook). The file is re-read when it changes. Empty: any caller that reaches the port.")
	fs.IntVar(&o.limits.MaxConcurrentReviews, "max-concurrent-reviews", o.limits.MaxConcurrentReviews,
		"Admission reviews read and decided at once; each holds at most a few MiB. A review beyond it waits up to 1s (a third of the webhook's timeout, if less), then gets 429 with Retry-After: 1, which kube-apiserver retries within the webhook's timeoutSeconds.")
	fs.IntVar(&o.maxConnections, "max-connections", o.maxConnections,
		"Connections the webhook listener holds open; at the cap a new one replaces the one idle longest.")
	fs.StringVar(&o.sidecar.Image, "sidecar-image", o.sidecar.Image,
		"Image of the injected fanout sidecar, e.g. ghcr.io/fanout-dev/fanout:v0.1.0. Empty: the injector's own image, read at start from its own pod, "+
			"named by "+envPodNamespace+" and "+envPodName+" (downward API) and "+envContainerName+" (optional with one container); this needs get on pods in its namespace (manifests/injector/own-pod-rbac.yaml). "+
			"The image is then named once, where kustomize's images: and Helm's values set it.")
	fs.StringVar(&o.pullPolicy, "sidecar-image-pull-policy", o.pullPolicy, "imagePullPolicy of the sidecar: Always, IfNotPresent or Never.")
	fs.StringVar(&o.sidecar.Endpoints, "default-endpoints", o.sidecar.Endpoints,
		"Default fanout --endpoints for injected sidecars (see fanout --help), e.g. endpointslice:///default/kubernetes; a pod's fanout.dev/endpoints annotation overrides it. Empty: the client kubeconfig's server alone.")
	fs.Int32Var(&o.sidecar.ListenPort, "sidecar-listen-port", o.sidecar.ListenPort, "Loopback port the sidecar serves the client on (127.0.0.1:PORT). Pods declaring this port are skipped.")
	fs.Int32Var(&o.sidecar.AdminPort, "sidecar-admin-port", o.sidecar.AdminPort, "The sidecar's admin port (/startupz, /healthz, /readyz, /metrics). Pods declaring this port are skipped.")
	fs.StringVar(&o.cpuRequest, "sidecar-cpu-request", o.cpuRequest, "The sidecar's CPU request; empty for none. About 2m per 10 requests a second the client sends, beyond about 4m idle (docs/injector.md, Sizing the sidecar).")
	fs.StringVar(&o.cpuLimit, "sidecar-cpu-limit", o.cpuLimit, "The sidecar's CPU limit; empty for none. A throttled sidecar delays every request of its client: leave it empty or well above the request.")
	fs.StringVar(&o.memoryRequest, "sidecar-memory-request", o.memoryRequest, "The sidecar's memory request; empty for none. About 17 MiB idle; for a busy client about 35 MiB plus 25 KiB per open watch (docs/injector.md, Sizing the sidecar).")
	fs.StringVar(&o.memoryLimit, "sidecar-memory-limit", o.memoryLimit, "The sidecar's memory limit; empty for none. The sidecar sets Go's memory limit to 90% of it (fanout --memory-limit).")
	fs.DurationVar(&o.sidecar.MaxShutdownGrace, "max-shutdown-grace", o.sidecar.MaxShutdownGrace,
		"Upper bound of the sidecar's --shutdown-grace. Below it the sidecar gets half of the pod's terminationGracePeriodSeconds minus 5s (its stop timeout); the client keeps the other half.")
	fs.Int64Var(&o.sidecar.RunAsUser, "sidecar-run-as-user", o.sidecar.RunAsUser,
		"uid of the sidecar when the client container runs as root or sets no runAsUser (container or pod); otherwise the sidecar takes the client's uid, so that it reads the client's files as the client does.")
	fs.Int64Var(&o.sidecar.RunAsGroup, "sidecar-run-as-group", o.sidecar.RunAsGroup,
		"gid of the sidecar when the client sets neither runAsUser nor runAsGroup. Otherwise the sidecar takes the client's runAsGroup, or gid 0 when the client sets a user only, as the container runtime gives it.")
	fs.StringSliceVar(&o.sidecar.ExtraArgs, "sidecar-extra-args", o.sidecar.ExtraArgs, "Arguments appended to every sidecar's command line, e.g. --balancer=round-robin,--probe-interval=5s.")
	fs.StringToStringVar(&o.hostedLabels, "hosted-pod-labels", o.hostedLabels,
		"Labels added to pods injected in a namespace labelled fanout.dev/inject=hosted, where the pod lacks them: NetworkPolicy selectors that let the sidecar reach the hosting cluster's kube-apiserver for discovery. "+
			"The default is Gardener's; pass --hosted-pod-labels= (empty) for none.")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "Log format: text or json.")
	fs.IntVarP(&o.verbosity, "v", "v", o.verbosity, "Log verbosity: 0 info, 1 debug.")
}

// complete parses the string flags into o.sidecar and validates everything.
func (o *options) complete() error {
	var errs []error
	switch o.pki {
	case pkiFiles:
		if o.certFile == "" || o.keyFile == "" {
			errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file are required: kube-apiserver calls webhooks over HTTPS only; or pass --pki=self to let the injector make its own"))
		}
	case pkiSelf:
		if o.certFile != "" || o.keyFile != "" {
			errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file are for --pki=files; --pki=self makes its own certificate"))
		}
		if o.pkiSecret == "" || o.pkiService == "" || o.webhookConfig == "" {
			errs = append(errs, errors.New("--pki=self needs --pki-secret, --pki-service and --webhook-configuration"))
		}
	default:
		errs = append(errs, fmt.Errorf("--pki must be files or self, got %q", o.pki))
	}
	if o.limits.MaxConcurrentReviews < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reviews must be at least 1, got %d", o.limits.MaxConcurrentReviews))
	}
	if o.maxConnections < 1 {
		errs = append(errs, fmt.Errorf("--max-connections must be at least 1, got %d", o.maxConnections))
	}
	if _, _, err := net.SplitHostPort(o.listenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--listen-address %q: %v; expected host:port such as :8443", o.listenAddress, err))
	}
	if o.metricsAddress != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddress); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-address %q: %v; expected host:port such as :8080", o.metricsAddress, err))
		}
	}
	o.sidecar.ImagePullPolicy = corev1.PullPolicy(o.pullPolicy)
	o.sidecar.Resources = corev1.ResourceRequirements{}
	for _, q := range []struct {
		flag, v string
		name    corev1.ResourceName
		limit   bool
	}{
		{"--sidecar-cpu-request", o.cpuRequest, corev1.ResourceCPU, false},
		{"--sidecar-cpu-limit", o.cpuLimit, corev1.ResourceCPU, true},
		{"--sidecar-memory-request", o.memoryRequest, corev1.ResourceMemory, false},
		{"--sidecar-memory-limit", o.memoryLimit, corev1.ResourceMemory, true},
	} {
		if strings.TrimSpace(q.v) == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %v; expected a quantity such as 20m or 64Mi", q.flag, q.v, err))
			continue
		}
		list := &o.sidecar.Resources.Requests
		if q.limit {
			list = &o.sidecar.Resources.Limits
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[q.name] = v
	}
	o.sidecar.HostedPodLabels = o.hostedLabels
	for k, v := range o.hostedLabels {
		for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
			errs = append(errs, fmt.Errorf("--hosted-pod-labels %s=%s: %s", k, v, msg))
		}
	}
	check := o.sidecar
	if check.Image == "" {
		var err error
		if o.ownPod, err = ownPodFromEnv(o.getenv); err != nil {
			errs = append(errs, err)
		}
		check.Image = "read at start from the injector's own pod"
	}
	if err := check.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch o.logFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", o.logFormat))
	}
	return errors.Join(errs...)
}
