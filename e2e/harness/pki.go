package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CertKey is a certificate, its private key, and where both are written.
type CertKey struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertPEM  []byte
	KeyPEM   []byte
	CertFile string
	KeyFile  string
}

// PKI is the cluster's certificate material, generated fresh for each
// control plane and written under Dir.
type PKI struct {
	Dir string

	CA                *CertKey // signs the serving cert and every client cert
	FrontProxyCA      *CertKey // requestheader client CA
	FrontProxyClient  *CertKey // CN front-proxy-client, the apiservers' proxy client cert
	Serving           *CertKey // the apiservers' serving cert
	Admin             *CertKey // O=system:masters
	ControllerManager *CertKey // CN system:kube-controller-manager
	Scheduler         *CertKey // CN system:kube-scheduler
	// KubeletClient is what the apiservers present to kubelets (exec, logs,
	// port-forward); a real kubelet authorizes it with a
	// SubjectAccessReview, which O=system:masters passes.
	KubeletClient *CertKey

	// ServiceAccountKey signs service-account tokens; ServiceAccountPub is
	// what the apiservers verify them with.
	ServiceAccountKey string
	ServiceAccountPub string
}

// ServingNames are the DNS names every apiserver's serving certificate
// carries, as in a kubeadm cluster, so in-cluster clients and clients of the
// kubernetes Service verify it.
var ServingNames = []string{
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
	"localhost",
}

// NewPKI generates the cluster PKI into dir. servingIPs are the addresses the
// apiservers are reached at (127.0.0.1 is always added) and serviceIP is the
// kubernetes Service's cluster IP.
func NewPKI(dir string, servingIPs []net.IP, serviceIP net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	var err error
	if p.CA, err = newCA(dir, "ca", "fanout-e2e-ca"); err != nil {
		return nil, err
	}
	if p.FrontProxyCA, err = newCA(dir, "front-proxy-ca", "fanout-e2e-front-proxy-ca"); err != nil {
		return nil, err
	}
	if p.FrontProxyClient, err = issue(dir, "front-proxy-client", p.FrontProxyCA, clientTemplate("front-proxy-client", nil)); err != nil {
		return nil, err
	}

	ips := append([]net.IP{net.ParseIP("127.0.0.1"), serviceIP}, servingIPs...)
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    ServingNames,
		IPAddresses: uniqueIPs(ips),
	}
	if p.Serving, err = issue(dir, "apiserver", p.CA, serving); err != nil {
		return nil, err
	}
	if p.Admin, err = p.MintUser("kubernetes-admin", "system:masters"); err != nil {
		return nil, err
	}
	if p.ControllerManager, err = p.MintUser("system:kube-controller-manager"); err != nil {
		return nil, err
	}
	if p.Scheduler, err = p.MintUser("system:kube-scheduler"); err != nil {
		return nil, err
	}
	if p.KubeletClient, err = p.MintUser("kube-apiserver-kubelet-client", "system:masters"); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	p.ServiceAccountKey = filepath.Join(dir, "sa.key")
	p.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.ServiceAccountKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// MintUser issues a client certificate for user name in groups orgs, signed
// by the cluster CA. Files are named after the user.
func (p *PKI) MintUser(name string, orgs ...string) (*CertKey, error) {
	return issue(p.Dir, "user-"+fileSafe(name), p.CA, clientTemplate(name, orgs))
}

// WriteKubeconfig writes a kubeconfig for ck that talks to server and trusts
// the cluster CA. Certificates are embedded so the file stands alone.
func (p *PKI) WriteKubeconfig(path, server string, ck *CertKey) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.CA.CertPEM}
	cfg.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificateData: ck.CertPEM, ClientKeyData: ck.KeyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	cfg.CurrentContext = "e2e"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func fileSafe(s string) string {
	return strings.NewReplacer(":", "_", "/", "_", " ", "_").Replace(s)
}

func uniqueIPs(ips []net.IP) []net.IP {
	var out []net.IP
	seen := map[string]bool{}
	for _, ip := range ips {
		if ip == nil || seen[ip.String()] {
			continue
		}
		seen[ip.String()] = true
		out = append(out, ip)
	}
	return out
}

func clientTemplate(cn string, orgs []string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func newCA(dir, file, cn string) (*CertKey, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return issue(dir, file, nil, tmpl)
}

// issue completes tmpl (serial, validity), signs it with parent (self-signed
// when parent is nil) and writes <file>.crt and <file>.key into dir.
func issue(dir, file string, parent *CertKey, tmpl *x509.Certificate) (*CertKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	// Backdated an hour so a test host's clock skew never makes it "not yet
	// valid"; a day is far longer than any run.
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)

	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("signing the %s certificate: %w", file, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	ck := &CertKey{
		Cert:     cert,
		Key:      key,
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CertFile: filepath.Join(dir, file+".crt"),
		KeyFile:  filepath.Join(dir, file+".key"),
	}
	if err := os.WriteFile(ck.CertFile, ck.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ck.KeyFile, ck.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return ck, nil
}

// IssueServingFor issues a serving certificate for dnsNames and ips, signed by
// the cluster CA, such as a webhook's in a pod (whose caBundle is then
// p.CA.CertPEM). Files are named after file.
func (p *PKI) IssueServingFor(file string, dnsNames []string, ips ...net.IP) (*CertKey, error) {
	return issue(p.Dir, "serving-"+fileSafe(file), p.CA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	})
}
