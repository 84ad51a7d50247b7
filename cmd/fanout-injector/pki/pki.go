package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Defaults of Config.
const (
	DefaultCAValidity      = 365 * 24 * time.Hour
	DefaultServingValidity = 30 * 24 * time.Hour
	DefaultResync          = time.Minute
	// retryAfterError is how soon a failed synchronisation is retried.
	retryAfterError = 5 * time.Second
	// syncTimeout bounds one background synchronisation.
	syncTimeout = 30 * time.Second
	// writeAttempts bounds the re-reads after a conflicting write within
	// one synchronisation; the next one starts over.
	writeAttempts = 5
)

// Expiry receives the NotAfter of the certificates in use, by kind (ca,
// serving); *certs.Metrics is one.
type Expiry interface {
	SetExpiration(kind string, t time.Time)
}

// Config configures a Manager.
type Config struct {
	// Namespace and SecretName name the Secret that holds the CAs and the
	// serving certificate (created if absent).
	Namespace, SecretName string
	// WebhookConfiguration is the MutatingWebhookConfiguration whose every
	// entry gets the caBundle.
	WebhookConfiguration string
	// DNSNames go into the serving certificate; the first is its common
	// name. kube-apiserver calls a webhook Service as <service>.<namespace>.svc.
	DNSNames []string
	// CAValidity and ServingValidity are the lifetimes of new
	// certificates; 0 takes the defaults.
	CAValidity, ServingValidity time.Duration
	// Resync is how often the Secret and the caBundle are re-read and
	// repaired; 0 takes DefaultResync.
	Resync time.Duration
	// Log is nil to discard.
	Log *slog.Logger
	// Metrics and Expiry may be nil.
	Metrics *Metrics
	Expiry  Expiry
}

// Manager keeps the injector's PKI (see the package comment). Sync runs
// one synchronisation; Start runs the first, then one every Resync until
// Stop. GetCertificate may be called from any goroutine at any time.
//
// Rotation: at 80% of the signing CA's lifetime a next CA is made and
// added to the caBundle; a tenth of its lifetime later it signs the
// serving certificate, and the old CA stays in the caBundle until it
// expires. The serving certificate is renewed at 2/3 of its lifetime and
// never outlives its CA. Every decision is made from the Secret and the
// clock, and every write carries the resourceVersion it read, so
// replicas that race converge on what the first writer stored.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	secrets  corev1client.SecretInterface
	webhooks admissionv1client.MutatingWebhookConfigurationInterface

	cert atomic.Pointer[tls.Certificate]

	mu         sync.Mutex // serialises Sync; guards servingPEM
	servingPEM []byte     // of cert

	started  atomic.Bool
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// New returns a Manager; it does no I/O.
func New(cfg Config, secrets corev1client.SecretsGetter, webhooks admissionv1client.MutatingWebhookConfigurationsGetter) (*Manager, error) {
	if cfg.Namespace == "" || cfg.SecretName == "" || cfg.WebhookConfiguration == "" || len(cfg.DNSNames) == 0 {
		return nil, errors.New("pki: a namespace, a Secret name, a webhook configuration name and at least one DNS name are required")
	}
	if cfg.CAValidity <= 0 {
		cfg.CAValidity = DefaultCAValidity
	}
	if cfg.ServingValidity <= 0 {
		cfg.ServingValidity = DefaultServingValidity
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		cfg:      cfg,
		log:      log.With("secret", cfg.Namespace+"/"+cfg.SecretName, "webhook_configuration", cfg.WebhookConfiguration),
		secrets:  secrets.Secrets(cfg.Namespace),
		webhooks: webhooks.MutatingWebhookConfigurations(),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}, nil
}

// GetCertificate returns the serving certificate of the last successful
// synchronisation; it is a tls.Config.GetCertificate.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.cert.Load()
	if c == nil {
		return nil, errors.New("fanout-injector --pki=self: no serving certificate yet")
	}
	return c, nil
}

// Start synchronises until the Secret has been read or created (the
// caBundle may still be failing: that is retried), or ctx ends, then
// keeps synchronising in the background until Stop.
func (m *Manager) Start(ctx context.Context) error {
	for {
		err := m.Sync(ctx)
		if m.cert.Load() != nil {
			break
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("--pki=self: no serving certificate from Secret %s/%s: %w; check that the injector's ServiceAccount may get, create and update it (manifests/injector/pki-rbac.yaml)",
				m.cfg.Namespace, m.cfg.SecretName, err)
		case <-t.C:
		}
	}
	m.started.Store(true)
	go m.run()
	return nil
}

// Stop ends the background synchronisation and waits for it; the
// certificate in use keeps being served. It is idempotent and may be
// called without Start.
func (m *Manager) Stop(context.Context) error {
	m.stopOnce.Do(func() { close(m.stop) })
	if m.started.Load() {
		<-m.done
	}
	return nil
}

func (m *Manager) run() {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	wait := m.cfg.Resync
	for {
		t := time.NewTimer(wait)
		select {
		case <-m.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = m.cfg.Resync
		// A hung API call must not stop the resyncs: the client has no
		// timeout of its own.
		sctx, scancel := context.WithTimeout(ctx, syncTimeout)
		if err := m.Sync(sctx); err != nil && ctx.Err() == nil {
			wait = min(retryAfterError, m.cfg.Resync)
		}
		scancel()
	}
}

// Sync brings the Secret up to date (creating it, rotating what is due),
// serves its certificate, and writes the caBundle into every entry of
// the webhook configuration where it differs. Errors are logged and
// counted as well as returned.
func (m *Manager) Sync(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mat, err := m.syncSecret(ctx)
	if err == nil {
		m.serve(mat)
		err = m.syncCABundle(ctx, mat.bundle())
	}
	// A timed-out synchronisation counts; one cancelled by Stop does not.
	if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.SyncErrors.Inc()
		}
		m.log.Error("synchronising the injector's PKI failed; keeping the certificate in use and retrying", "error", err)
	}
	return err
}

// syncSecret reads the Secret, creates it if absent and writes what plan
// changed, re-reading after a conflict: whoever wrote first wins, and
// the others adopt what it wrote.
func (m *Manager) syncSecret(ctx context.Context) (material, error) {
	name := m.cfg.Namespace + "/" + m.cfg.SecretName
	var lastErr error
	for range writeAttempts {
		s, err := m.secrets.Get(ctx, m.cfg.SecretName, metav1.GetOptions{})
		found := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return material{}, fmt.Errorf("reading Secret %s: %w", name, err)
		}
		var current material
		if found {
			var errs []error
			current, errs = parse(s.Data)
			for _, e := range errs {
				m.log.Warn("a part of the PKI Secret is unusable and will be replaced", "error", e)
			}
		}
		next, changes, err := plan(current, time.Now(), timing{m.cfg.CAValidity, m.cfg.ServingValidity}, m.cfg.DNSNames)
		if err != nil {
			return material{}, err
		}
		if len(changes) == 0 {
			return current, nil
		}
		if !found {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				Name:      m.cfg.SecretName,
				Namespace: m.cfg.Namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "fanout-injector", "app.kubernetes.io/managed-by": "fanout-injector"},
			}, Type: corev1.SecretTypeOpaque, Data: next.data()}
			_, err = m.secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			s = s.DeepCopy()
			s.Data = next.data()
			_, err = m.secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			lastErr = err
			m.log.Debug("another replica wrote the PKI Secret first; adopting it", "error", err)
			continue
		case err != nil:
			return material{}, fmt.Errorf("writing Secret %s: %w", name, err)
		}
		m.wrote(next, changes)
		return next, nil
	}
	return material{}, fmt.Errorf("writing Secret %s: still conflicting after %d attempts: %w", name, writeAttempts, lastErr)
}

func (m *Manager) wrote(mat material, changes []change) {
	for _, c := range changes {
		kind := KindCA
		switch c {
		case changeServing:
			kind = KindServing
		case changePreviousGone, changeCAPromoted:
			kind = ""
		}
		if kind != "" && m.cfg.Metrics != nil {
			m.cfg.Metrics.Issued.WithLabelValues(kind).Inc()
		}
		m.log.Info("injector PKI: "+string(c), "ca_not_after", mat.ca.cert.NotAfter, "serving_not_after", mat.serving.cert.NotAfter)
	}
}

// serve takes the Secret's serving certificate into use if it changed.
func (m *Manager) serve(mat material) {
	if m.cfg.Expiry != nil {
		m.cfg.Expiry.SetExpiration(KindCA, mat.ca.cert.NotAfter)
		m.cfg.Expiry.SetExpiration(KindServing, mat.serving.cert.NotAfter)
	}
	if bytes.Equal(m.servingPEM, mat.serving.certPEM) {
		return
	}
	m.cert.Store(&tls.Certificate{
		Certificate: [][]byte{mat.serving.cert.Raw},
		PrivateKey:  mat.serving.key,
		Leaf:        mat.serving.cert,
	})
	first := m.servingPEM == nil
	m.servingPEM = mat.serving.certPEM
	if !first {
		m.log.Info("serving a new certificate from the PKI Secret", "not_after", mat.serving.cert.NotAfter, "issuer", mat.serving.cert.Issuer.String())
	}
}

// syncCABundle writes bundle into every webhook entry whose caBundle
// differs.
func (m *Manager) syncCABundle(ctx context.Context, bundle []byte) error {
	var lastErr error
	for range writeAttempts {
		w, err := m.webhooks.Get(ctx, m.cfg.WebhookConfiguration, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("MutatingWebhookConfiguration %s not found: kube-apiserver calls the injector only once it exists (kubectl apply -k manifests/injector), or --webhook-configuration names another", m.cfg.WebhookConfiguration)
		}
		if err != nil {
			return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", m.cfg.WebhookConfiguration, err)
		}
		var stale []string
		w = w.DeepCopy()
		for i := range w.Webhooks {
			if !bytes.Equal(w.Webhooks[i].ClientConfig.CABundle, bundle) {
				stale = append(stale, w.Webhooks[i].Name)
				w.Webhooks[i].ClientConfig.CABundle = bundle
			}
		}
		if len(stale) == 0 {
			return nil
		}
		_, err = m.webhooks.Update(ctx, w, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			lastErr = err
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the caBundle of MutatingWebhookConfiguration %s: %w", m.cfg.WebhookConfiguration, err)
		}
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.CABundleWrites.Inc()
		}
		m.log.Info("wrote the caBundle of the webhook configuration", "webhooks", stale)
		return nil
	}
	return fmt.Errorf("writing the caBundle of MutatingWebhookConfiguration %s: still conflicting after %d attempts: %w", m.cfg.WebhookConfiguration, writeAttempts, lastErr)
}
