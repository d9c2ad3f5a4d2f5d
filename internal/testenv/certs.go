package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority for a local control plane: the API
// server's front proxy, an aggregated API's serving certificate.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, as a CA bundle holds it.
	PEM []byte
}

// certValidity is long enough for any local run, whose data (and so its
// certificates) may be kept for days.
const certValidity = 10 * 365 * 24 * time.Hour

// NewCA returns a new CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadOrNewCA reads the CA kept in dir (ca.crt, ca.key), or makes one
// named name and keeps it there, so that a restarted control plane trusts
// what it trusted before.
func LoadOrNewCA(dir, name string) (*CA, error) {
	certPEM, certErr := os.ReadFile(filepath.Join(dir, "ca.crt"))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dir, "ca.key"))
	if certErr == nil && keyErr == nil {
		return parseCA(certPEM, keyPEM)
	}
	ca, err := NewCA(name)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.PEM, 0o600); err != nil {
		return nil, err
	}
	return ca, os.WriteFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, errors.New("the kept CA is not PEM")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: certPEM}, nil
}

// Issue writes a certificate for commonName, signed by the CA, and its key
// to dir as tls.crt and tls.key: a server's for dnsNames when given (and
// 127.0.0.1), a client's otherwise.
func (ca *CA) Issue(dir, commonName string, dnsNames ...string) error {
	if len(dnsNames) > 0 {
		return ca.IssueCert(dir, Cert{CommonName: commonName, DNSNames: dnsNames, IPs: loopback, Server: true})
	}
	return ca.IssueCert(dir, Cert{CommonName: commonName, Client: true})
}

// Cert is what a certificate the CA issues says: a user of the API server
// is its CommonName and Organizations (groups); a server is reached by its
// DNSNames and IPs.
type Cert struct {
	CommonName     string
	Organizations  []string
	DNSNames       []string
	IPs            []net.IP
	Server, Client bool
}

// IssueCert writes the certificate c, signed by the CA, and its key to dir
// as tls.crt and tls.key.
func (ca *CA) IssueCert(dir string, c Cert) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	template := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: c.CommonName, Organization: c.Organizations},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: c.DNSNames, IPAddresses: c.IPs,
	}
	if c.Server {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if c.Client {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("cannot issue a certificate for %s: %w", c.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}
