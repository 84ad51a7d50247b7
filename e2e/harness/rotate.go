package harness

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// This file holds what the credential rotation tests need: minting and
// swapping certificates, a Kubernetes-style secret volume, and reading
// fanout's own state (PID, metrics).

// PID is the sidecar's process ID: a rotation test checks it did not
// change, i.e. fanout was not restarted.
func (f *Fanout) PID() int { return f.proc.cmd.Process.Pid }

// Metric returns the value of the series name{labels} on fanout's
// /metrics, or 0 if there is no such series. Label values must be plain
// (no quotes or escapes).
func (f *Fanout) Metric(name string, labels map[string]string) (float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + f.AdminAddress + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	total, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(series, k+`="`+v+`"`) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		x, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		// Several series may match partial labels: sum them.
		total += x
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, nil
	}
	return total, nil
}

// NewCA creates a self-signed CA with common name cn, written to
// dir/<file>.crt and .key.
func NewCA(dir, file, cn string) (*CertKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return newCA(dir, file, cn)
}

// IssueClient issues a client certificate for user cn in groups orgs,
// signed by ca, written to dir/<file>.crt and .key.
func IssueClient(ca *CertKey, dir, file, cn string, orgs ...string) (*CertKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return issue(dir, file, ca, clientTemplate(cn, orgs))
}

// IssueServing issues an apiserver serving certificate with the names
// and addresses of the cluster's current one, signed by ca, written to
// dir/<file>.crt and .key. The files are not the apiservers' own: see
// ServeCertificate.
func (p *PKI) IssueServing(ca *CertKey, dir, file string) (*CertKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    p.Serving.Cert.DNSNames,
		IPAddresses: p.Serving.Cert.IPAddresses,
	}
	return issue(dir, file, ca, tmpl)
}

// ServeCertificate makes every apiserver serve certPEM/keyPEM: it
// replaces the files of --tls-cert-file and --tls-private-key-file
// (each by an atomic rename, the key first), which kube-apiserver
// watches and reloads. Use WaitServing to know when it did.
func (cp *ControlPlane) ServeCertificate(certPEM, keyPEM []byte) error {
	if err := ReplaceFile(cp.PKI.Serving.KeyFile, keyPEM); err != nil {
		return err
	}
	return ReplaceFile(cp.PKI.Serving.CertFile, certPEM)
}

// WaitServing waits until a TLS handshake with every apiserver shows a
// leaf certificate equal to want.
func (cp *ControlPlane) WaitServing(ctx context.Context, want *x509.Certificate) error {
	for _, a := range cp.APIServers {
		addr := net.JoinHostPort(a.Host.IP.String(), strconv.Itoa(APIServerPort))
		var last string
		for {
			leaf, err := servedLeaf(ctx, addr)
			switch {
			case err != nil:
				last = err.Error()
			case leaf.Equal(want):
				last = ""
			default:
				last = fmt.Sprintf("serves serial %s issued by %q", leaf.SerialNumber, leaf.Issuer.CommonName)
			}
			if last == "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("apiserver %d does not serve the certificate with serial %s: %s", a.Index+1, want.SerialNumber, last)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func servedLeaf(ctx context.Context, addr string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{
		// Only to look at the certificate: nothing is sent.
		InsecureSkipVerify: true, //nolint:gosec
		NextProtos:         []string{"h2"},
	}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s presented no certificate", addr)
	}
	return certs[0], nil
}

// ReplaceFile replaces path by data with an atomic rename, as editors
// and certificate tools do.
func ReplaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SecretVolume lays files out as the kubelet does for a secret or
// projected volume: dir/<name> -> ..data/<name>, ..data -> a timestamped
// directory, and an update swaps ..data to a new directory in one rename.
type SecretVolume struct {
	Dir string
	n   int
	cur string
}

// NewSecretVolume creates the volume in dir with files.
func NewSecretVolume(dir string, files map[string][]byte) (*SecretVolume, error) {
	v := &SecretVolume{Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := v.Update(files); err != nil {
		return nil, err
	}
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Path is where a volume file is read.
func (v *SecretVolume) Path(name string) string { return filepath.Join(v.Dir, name) }

// Update replaces every file at once, as a kubelet sync does.
func (v *SecretVolume) Update(files map[string][]byte) error {
	v.n++
	ts := fmt.Sprintf("..%s.%d", time.Now().Format("2006_01_02_15_04_05"), v.n)
	for name, data := range files {
		p := filepath.Join(v.Dir, ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		return err
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, v.cur)); err != nil {
			return err
		}
	}
	v.cur = ts
	return nil
}
