package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testNS      = "fanout-system"
	testSecret  = "fanout-injector-pki"
	testWebhook = "fanout-injector"
	testDNSName = "fanout-injector.fanout-system.svc"
)

// newCluster is a fake API with the injector's webhook configuration (three
// entries, no caBundle) that, unlike the plain fake, enforces
// resourceVersions: an update carrying a stale one is a Conflict, as a real
// kube-apiserver answers.
func newCluster(t *testing.T) *fake.Clientset {
	t.Helper()
	mwc := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: testWebhook, ResourceVersion: "1"}}
	for _, n := range []string{"inject.fanout.dev", "namespace.inject.fanout.dev", "hosted.inject.fanout.dev"} {
		mwc.Webhooks = append(mwc.Webhooks, admissionv1.MutatingWebhook{Name: n})
	}
	cs := fake.NewClientset(mwc)
	rv := 1 // guarded by the Fake's lock, held while reactors run
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv++
		a.(k8stesting.CreateAction).GetObject().(metav1.Object).SetResourceVersion(strconv.Itoa(rv))
		return false, nil, nil
	})
	cs.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ua := a.(k8stesting.UpdateAction)
		obj := ua.GetObject().(metav1.Object)
		stored, err := cs.Tracker().Get(ua.GetResource(), ua.GetNamespace(), obj.GetName())
		if err != nil {
			return false, nil, nil
		}
		if got := stored.(metav1.Object).GetResourceVersion(); got != obj.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(ua.GetResource().GroupResource(), obj.GetName(),
				errors.New("resourceVersion "+obj.GetResourceVersion()+" is stale, stored "+got))
		}
		rv++
		obj.SetResourceVersion(strconv.Itoa(rv))
		return false, nil, nil
	})
	return cs
}

type replica struct {
	*Manager
	metrics *Metrics
}

func newReplica(t *testing.T, cs *fake.Clientset) replica {
	t.Helper()
	met, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		Namespace: testNS, SecretName: testSecret, WebhookConfiguration: testWebhook,
		DNSNames: []string{testDNSName}, Metrics: met,
	}, cs.CoreV1(), cs.AdmissionregistrationV1())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return replica{m, met}
}

func mustSync(t *testing.T, r replica) {
	t.Helper()
	if err := r.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// theSecret is the injector's PKI Secret; it fails if there is none.
func theSecret(t *testing.T, cs *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := cs.CoreV1().Secrets(testNS).Get(context.Background(), testSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Secret was not created: %v", err)
	}
	return s
}

func caBundles(t *testing.T, cs *fake.Clientset) [][]byte {
	t.Helper()
	w, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), testWebhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b [][]byte
	for _, e := range w.Webhooks {
		b = append(b, e.ClientConfig.CABundle)
	}
	return b
}

// theCABundle is the one caBundle of every entry; it fails if they differ.
func theCABundle(t *testing.T, cs *fake.Clientset) []byte {
	t.Helper()
	b := caBundles(t, cs)
	for i := range b {
		if !bytes.Equal(b[i], b[0]) || len(b[i]) == 0 {
			t.Fatalf("webhook entry %d has caBundle %q, entry 0 %q: want one non-empty caBundle in every entry", i, b[i], b[0])
		}
	}
	return b[0]
}

func certsIn(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := bundle; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// advanceTo moves the bubble's clock forward to at.
func advanceTo(t *testing.T, at time.Time) {
	t.Helper()
	d := time.Until(at)
	if d < 0 {
		t.Fatalf("advanceTo %s: the clock is past it already, at %s", at, time.Now())
	}
	time.Sleep(d)
}

// handshake serves m's certificate over real TLS and verifies it as
// kube-apiserver does: against caBundle, for the Service's DNS name, at
// the bubble's time. It returns the certificate served. The test
// goroutine waits on loopback sockets here, which stops the bubble's
// clock for the handshake only.
func handshake(t *testing.T, m *Manager, caBundle []byte) (*x509.Certificate, error) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatalf("caBundle %q holds no certificate", caBundle)
	}
	// TCP, not net.Pipe: a client that rejects the certificate writes an
	// alert while the server is still writing, which an unbuffered pipe
	// deadlocks on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		defer sc.Close()
		_ = sc.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tls.Server(sc, &tls.Config{GetCertificate: m.GetCertificate}).Handshake()
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	cli := tls.Client(cc, &tls.Config{RootCAs: pool, ServerName: testDNSName})
	if err := cli.Handshake(); err != nil {
		return nil, err
	}
	return cli.ConnectionState().PeerCertificates[0], nil
}

func mustServe(t *testing.T, m *Manager, caBundle []byte) *x509.Certificate {
	t.Helper()
	c, err := handshake(t, m, caBundle)
	if err != nil {
		t.Fatalf("TLS handshake verified against the caBundle at %s: %v", time.Now(), err)
	}
	return c
}

func TestFirstStartCreatesSecretAndCABundle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		cs := newCluster(t)
		r := newReplica(t, cs)
		if _, err := r.GetCertificate(nil); err == nil {
			t.Fatal("GetCertificate before the first Sync: want an error, got a certificate")
		}
		mustSync(t, r)
		s := theSecret(t, cs)
		for _, k := range []string{keyCACert, keyCAKey, keyServingCert, keyServingKey} {
			if len(s.Data[k]) == 0 {
				t.Errorf("Secret key %s is empty", k)
			}
		}
		bundle := theCABundle(t, cs)
		if !bytes.Equal(bundle, s.Data[keyCACert]) {
			t.Fatalf("caBundle is not the Secret's ca.crt")
		}
		served := mustServe(t, r.Manager, bundle)
		if got, want := served.NotAfter, t0.Add(DefaultServingValidity); !got.Equal(want) {
			t.Errorf("serving certificate NotAfter %s, want %s", got, want)
		}
		if ca := certsIn(t, bundle)[0]; !ca.NotAfter.Equal(t0.Add(DefaultCAValidity)) || !ca.IsCA {
			t.Errorf("CA: IsCA %v, NotAfter %s; want a CA valid until %s", ca.IsCA, ca.NotAfter, t0.Add(DefaultCAValidity))
		}
		for kind, want := range map[string]float64{KindCA: 1, KindServing: 1} {
			if got := testutil.ToFloat64(r.metrics.Issued.WithLabelValues(kind)); got != want {
				t.Errorf("issued{kind=%s} = %v, want %v", kind, got, want)
			}
		}
		if got := testutil.ToFloat64(r.metrics.CABundleWrites); got != 1 {
			t.Errorf("caBundle writes = %v, want 1", got)
		}
		// A second Sync with nothing due writes nothing.
		mustSync(t, r)
		if got := testutil.ToFloat64(r.metrics.CABundleWrites) + testutil.ToFloat64(r.metrics.Issued.WithLabelValues(KindServing)); got != 2 {
			t.Errorf("a Sync with nothing due wrote: caBundle writes + serving issued = %v, want 2", got)
		}
	})
}

func TestSecondReplicaAdoptsTheSecret(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newCluster(t)
		a, b := newReplica(t, cs), newReplica(t, cs)
		mustSync(t, a)
		before := theSecret(t, cs)
		mustSync(t, b)
		if after := theSecret(t, cs); before.ResourceVersion != after.ResourceVersion {
			t.Fatalf("the second replica rewrote the Secret (resourceVersion %s -> %s); want it adopted", before.ResourceVersion, after.ResourceVersion)
		}
		bundle := theCABundle(t, cs)
		ca, cb := mustServe(t, a.Manager, bundle), mustServe(t, b.Manager, bundle)
		if !ca.Equal(cb) {
			t.Fatal("the replicas serve different certificates")
		}
		if got := testutil.ToFloat64(b.metrics.Issued.WithLabelValues(KindCA)) + testutil.ToFloat64(b.metrics.Issued.WithLabelValues(KindServing)) + testutil.ToFloat64(b.metrics.CABundleWrites); got != 0 {
			t.Fatalf("the second replica issued or wrote %v times, want 0", got)
		}
	})
}

// TestCABundleResetIsRepaired: a caBundle reset by someone else is
// written again at the next resync, a resync interval after the last.
func TestCABundleResetIsRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newCluster(t)
		r := newReplica(t, cs)
		ctx := t.Context()
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		want := theCABundle(t, cs)
		// Someone applies the manifest, which has no caBundle, and edits
		// another entry.
		ws := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
		w, _ := ws.Get(ctx, testWebhook, metav1.GetOptions{})
		w.Webhooks[0].ClientConfig.CABundle = nil
		w.Webhooks[2].ClientConfig.CABundle = []byte("something else")
		if _, err := ws.Update(ctx, w, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		repaired := func() bool {
			b := caBundles(t, cs)
			return bytes.Equal(b[0], want) && bytes.Equal(b[1], want) && bytes.Equal(b[2], want)
		}
		time.Sleep(DefaultResync - time.Nanosecond)
		synctest.Wait()
		if repaired() {
			t.Fatal("caBundle repaired before the resync interval")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !repaired() {
			t.Fatalf("caBundle not repaired at the resync: %q", caBundles(t, cs))
		}
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(r.metrics.CABundleWrites); got != 2 {
			t.Errorf("caBundle writes = %v, want 2 (the first and the repair)", got)
		}
	})
}

func TestRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newCluster(t)
		a, b := newReplica(t, cs), newReplica(t, cs)
		mustSync(t, a)
		mustSync(t, b)
		bundle := theCABundle(t, cs)
		oldCA := certsIn(t, bundle)[0]
		first := mustServe(t, b.Manager, bundle)

		// The serving certificate is renewed at 2/3 of its 30 days, by the
		// same CA.
		advanceTo(t, servingRenewAt(first).Add(-time.Minute))
		mustSync(t, a)
		if got := mustServe(t, a.Manager, theCABundle(t, cs)); !got.Equal(first) {
			t.Fatal("the serving certificate was renewed before 2/3 of its lifetime")
		}
		advanceTo(t, servingRenewAt(first))
		mustSync(t, a)
		renewed := mustServe(t, a.Manager, theCABundle(t, cs))
		if renewed.Equal(first) || renewed.CheckSignatureFrom(oldCA) != nil {
			t.Fatal("the serving certificate was not renewed by the same CA at 2/3 of its lifetime")
		}
		// b, not yet synchronised, still serves the first one, valid.
		mustServe(t, b.Manager, theCABundle(t, cs))

		// At 80% of the CA's lifetime the next CA joins the caBundle, and
		// does not sign yet.
		advanceTo(t, caRotateAt(oldCA))
		mustSync(t, a)
		bundle = theCABundle(t, cs)
		cas := certsIn(t, bundle)
		if len(cas) != 2 || !cas[0].Equal(oldCA) {
			t.Fatalf("caBundle at 80%% of the CA's lifetime holds %d certificates (first is the old CA: %v), want the old CA and the next", len(cas), len(cas) > 0 && cas[0].Equal(oldCA))
		}
		newCA := cas[1]
		if s := mustServe(t, a.Manager, bundle); s.CheckSignatureFrom(oldCA) != nil {
			t.Fatal("the next CA signs the serving certificate before it has been trusted for a while")
		}

		// Once promoted, it signs; the old CA stays in the caBundle, so a
		// replica still serving the old CA's certificate stays valid. Until
		// then a's certificate is renewed by the old CA, as its resync does.
		advanceTo(t, promoteAt(newCA).Add(-time.Minute))
		mustSync(t, a)
		if s := mustServe(t, a.Manager, theCABundle(t, cs)); s.CheckSignatureFrom(oldCA) != nil {
			t.Fatal("the serving certificate is not signed by the old CA before promotion")
		}
		advanceTo(t, promoteAt(newCA))
		mustSync(t, b)
		bundle = theCABundle(t, cs)
		cas = certsIn(t, bundle)
		if len(cas) != 2 || !cas[0].Equal(newCA) || !cas[1].Equal(oldCA) {
			t.Fatalf("caBundle after promotion holds %d certificates, want the new CA then the old one", len(cas))
		}
		if s := mustServe(t, b.Manager, bundle); s.CheckSignatureFrom(newCA) != nil {
			t.Fatal("after promotion the serving certificate is not signed by the new CA")
		}
		if s := mustServe(t, a.Manager, bundle); s.CheckSignatureFrom(oldCA) != nil {
			t.Fatal("a replica not yet synchronised should still serve the old CA's certificate")
		}
		mustSync(t, a)
		if s := mustServe(t, a.Manager, bundle); s.CheckSignatureFrom(newCA) != nil {
			t.Fatal("after its next Sync the other replica does not serve the new CA's certificate")
		}

		// The old CA leaves the caBundle when it expires.
		advanceTo(t, oldCA.NotAfter)
		mustSync(t, a)
		if cas := certsIn(t, theCABundle(t, cs)); len(cas) != 1 || !cas[0].Equal(newCA) {
			t.Fatalf("caBundle after the old CA expired holds %d certificates, want the new CA only", len(cas))
		}
	})
}

func TestRacingReplicasConverge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newCluster(t)
		const n = 4
		var rs []replica
		for range n {
			rs = append(rs, newReplica(t, cs))
		}
		syncAll := func() {
			var wg sync.WaitGroup
			for _, r := range rs {
				wg.Go(func() {
					if err := r.Sync(context.Background()); err != nil {
						t.Errorf("Sync: %v", err)
					}
				})
			}
			wg.Wait()
		}
		issued := func(kind string) (sum float64) {
			for _, r := range rs {
				sum += testutil.ToFloat64(r.metrics.Issued.WithLabelValues(kind))
			}
			return sum
		}
		check := func(phase string, wantCA, wantServing float64) {
			t.Helper()
			bundle := theCABundle(t, cs)
			first := mustServe(t, rs[0].Manager, bundle)
			for i, r := range rs[1:] {
				if c := mustServe(t, r.Manager, bundle); !c.Equal(first) {
					t.Fatalf("%s: replica %d serves another certificate than replica 0", phase, i+1)
				}
			}
			if got := issued(KindCA); got != wantCA {
				t.Errorf("%s: %v CAs issued in all, want %v", phase, got, wantCA)
			}
			if got := issued(KindServing); got != wantServing {
				t.Errorf("%s: %v serving certificates issued in all, want %v", phase, got, wantServing)
			}
		}
		syncAll()
		check("creation", 1, 1)
		cas := certsIn(t, theCABundle(t, cs))
		advanceTo(t, caRotateAt(cas[0]))
		syncAll()
		// The serving certificate, long due by then, is renewed in the same
		// write: still one of each per round, whoever wins.
		check("next CA", 2, 2)
		cas = certsIn(t, theCABundle(t, cs))
		advanceTo(t, promoteAt(cas[1]))
		syncAll()
		check("promotion", 2, 3)
	})
}

func TestStartFailsWithoutAccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newCluster(t)
		cs.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, testSecret, errors.New("RBAC: no"))
		})
		r := newReplica(t, cs)
		// Start retries every second until ctx ends: at 0, 1 and 2s.
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		err := r.Start(ctx)
		if err == nil || !apierrors.IsForbidden(errors.Unwrap(err)) && !bytes.Contains([]byte(err.Error()), []byte("forbidden")) {
			t.Fatalf("Start without access to the Secret: %v, want an error that says forbidden", err)
		}
		if got := testutil.ToFloat64(r.metrics.SyncErrors); got != 3 {
			t.Errorf("sync errors = %v in 2.5s of retries every second, want 3", got)
		}
	})
}
