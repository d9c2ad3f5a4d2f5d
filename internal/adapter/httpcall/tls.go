package httpcall

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// Reasons of a Tool's Ready condition for spec.http.tls.
const (
	// ReasonInvalidTLS: a TLS Secret holds no usable CA certificates or no
	// matching key pair. The message names the Secret and the key, never
	// what they hold.
	ReasonInvalidTLS = "InvalidTLS"
	// ReasonTLSUnsupported: the connector's transport is not an
	// *http.Transport, so it cannot be cloned with a Tool's TLS settings.
	ReasonTLSUnsupported = "TLSUnsupported"
)

// maxTLSTransports bounds the transports kept for Tools with spec.http.tls:
// each holds a connection pool of its own.
const maxTLSTransports = 256

// tlsMaterial is what a Tool's spec.http.tls reads from its Secrets.
type tlsMaterial struct {
	namespace string
	spec      *v1alpha1.HTTPTLS
	// caBundle is nil without spec.caBundle, cert and key without
	// spec.clientCertificateSecretRef.
	caBundle, cert, key []byte
}

// readTLS reads the Secrets of spec, which must be labelled for Tools.
func (c *Connector) readTLS(ctx context.Context, namespace string, spec *v1alpha1.HTTPTLS) (*tlsMaterial, error) {
	m := &tlsMaterial{namespace: namespace, spec: spec}
	if ref := spec.CABundle; ref != nil {
		bundle, err := c.secretValue(ctx, namespace, *ref)
		if err != nil {
			return nil, err
		}
		m.caBundle = bundle
	}
	if ref := spec.ClientCertificateSecretRef; ref != nil {
		secret, err := c.labelledSecret(ctx, namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		if secret.Type != corev1.SecretTypeTLS {
			return nil, &adapter.ConfigError{Reason: ReasonInvalidTLS, Message: fmt.Sprintf(
				"Secret %s/%s is of type %q: spec.http.tls.clientCertificateSecretRef needs one of type %s", namespace, ref.Name, secret.Type, corev1.SecretTypeTLS)}
		}
		if m.cert, err = secretKey(secret, corev1.TLSCertKey); err != nil {
			return nil, err
		}
		if m.key, err = secretKey(secret, corev1.TLSPrivateKeyKey); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// config is base (which may be nil) with the material's roots, client
// certificate and server name, and TLS 1.2 at least.
func (m *tlsMaterial) config(base *tls.Config) (*tls.Config, error) {
	config := &tls.Config{}
	if base != nil {
		config = base.Clone()
	}
	config.MinVersion = max(config.MinVersion, tls.VersionTLS12)
	if m.spec.ServerName != "" {
		config.ServerName = m.spec.ServerName
	}
	if ref := m.spec.CABundle; ref != nil {
		roots, err := parseCABundle(m.caBundle)
		if err != nil {
			return nil, &adapter.ConfigError{Reason: ReasonInvalidTLS, Message: fmt.Sprintf(
				"Secret %s/%s, key %q: %v", m.namespace, ref.Name, ref.Key, err)}
		}
		config.RootCAs = roots
	}
	if ref := m.spec.ClientCertificateSecretRef; ref != nil {
		pair, err := tls.X509KeyPair(m.cert, m.key)
		if err != nil {
			return nil, &adapter.ConfigError{Reason: ReasonInvalidTLS, Message: fmt.Sprintf(
				"Secret %s/%s: %s and %s are not a certificate and its private key: %v", m.namespace, ref.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)}
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

// parseCABundle reads PEM CERTIFICATE blocks, and text between them such as
// comments. It refuses a block it cannot read, which pem.Decode would skip:
// a bundle that is partly unreadable would trust less than it says.
func parseCABundle(bundle []byte) (*x509.CertPool, error) {
	roots := x509.NewCertPool()
	n := 0
	for block, rest := pem.Decode(bundle); block != nil; block, rest = pem.Decode(rest) {
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %s, not a CERTIFICATE", n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d is not a certificate: %w", n, err)
		}
		roots.AddCert(cert)
	}
	if begun := bytes.Count(bundle, []byte("-----BEGIN")); begun != n {
		return nil, fmt.Errorf("%d of its %d PEM blocks cannot be read", begun-n, begun)
	}
	if n == 0 {
		return nil, errors.New("it holds no PEM certificate")
	}
	return roots, nil
}

// digest identifies the material: Tools with equal material share a
// transport, and a rotated Secret gets a new one.
func (m *tlsMaterial) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, field := range [][]byte{m.caBundle, m.cert, m.key, []byte(m.spec.ServerName)} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(field))) // a hash.Hash never fails to write
		h.Write(field)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// baseTransport is the transport a Tool's TLS settings are cloned from.
func (c *Connector) baseTransport() (*http.Transport, error) {
	if c.Transport == nil {
		return http.DefaultTransport.(*http.Transport), nil
	}
	base, ok := c.Transport.(*http.Transport)
	if !ok {
		return nil, &adapter.ConfigError{Reason: ReasonTLSUnsupported, Message: fmt.Sprintf(
			"spec.http.tls cannot be used: this manager's transport for Tools is a %T, not an *http.Transport", c.Transport)}
	}
	return base, nil
}

// validateTLS checks that the Secrets of spec are usable and what they hold
// parses, for the Tool's Ready condition.
func (c *Connector) validateTLS(ctx context.Context, namespace string, spec *v1alpha1.HTTPTLS) error {
	base, err := c.baseTransport()
	if err != nil {
		return err
	}
	m, err := c.readTLS(ctx, namespace, spec)
	if err != nil {
		return err
	}
	_, err = m.config(base.TLSClientConfig)
	return err
}

// transport is the round tripper of a Tool: the shared one, or for a Tool
// with spec.http.tls a clone of it with only its TLS client configuration
// changed, so that it dials through the same egress policy. Connect runs
// for every attempt, so the clone is kept by its material's digest and its
// connections are reused.
func (c *Connector) transport(ctx context.Context, namespace string, spec *v1alpha1.HTTPTLS) (http.RoundTripper, error) {
	if spec == nil {
		return c.Transport, nil
	}
	base, err := c.baseTransport()
	if err != nil {
		return nil, err
	}
	m, err := c.readTLS(ctx, namespace, spec)
	if err != nil {
		return nil, err
	}
	return c.tlsTransports.get(m.digest(), func() (*http.Transport, error) {
		config, err := m.config(base.TLSClientConfig)
		if err != nil {
			return nil, err
		}
		transport := base.Clone()
		transport.TLSClientConfig = config
		return transport, nil
	})
}

// transportCache holds up to maxTLSTransports transports by digest, the
// least recently used evicted first. Its zero value is empty and usable.
type transportCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]*list.Element
	order   list.List // of *cachedTransport, the most recently used at the front
}

type cachedTransport struct {
	digest    [sha256.Size]byte
	transport *http.Transport
}

// get is the transport of digest, built by build when there is none. The
// lock is held while building, so that concurrent Connects of a Tool make
// one transport.
func (c *transportCache) get(digest [sha256.Size]byte, build func() (*http.Transport, error)) (*http.Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[digest]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*cachedTransport).transport, nil
	}
	transport, err := build()
	if err != nil {
		return nil, err
	}
	if c.entries == nil {
		c.entries = map[[sha256.Size]byte]*list.Element{}
	}
	c.entries[digest] = c.order.PushFront(&cachedTransport{digest: digest, transport: transport})
	if c.order.Len() > maxTLSTransports {
		oldest := c.order.Remove(c.order.Back()).(*cachedTransport)
		delete(c.entries, oldest.digest)
		// Requests in flight on it finish; their connections then idle
		// out after its IdleConnTimeout.
		oldest.transport.CloseIdleConnections()
	}
	return transport, nil
}
