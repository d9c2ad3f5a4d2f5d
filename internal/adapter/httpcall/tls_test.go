package httpcall

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// ---------------------------------------------------------------------------
// Fixtures: a CA, certificates it issues and an mTLS server, all in memory.

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shop CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// issue returns the PEM certificate and key of a leaf for commonName,
// valid for 127.0.0.1 as a server or as a client.
func (ca *testCA) issue(t *testing.T, commonName string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func labelled(s *corev1.Secret) *corev1.Secret {
	s.Labels = map[string]string{v1alpha1.ToolCredentialLabel: "true"}
	return s
}

func caSecret(bundle []byte) *corev1.Secret {
	return labelled(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ca"},
		Data: map[string][]byte{"ca.crt": bundle}})
}

func clientSecret(certPEM, keyPEM []byte) *corev1.Secret {
	return labelled(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "client"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}})
}

func withCABundle(h *v1alpha1.HTTPAdapter) {
	if h.TLS == nil {
		h.TLS = &v1alpha1.HTTPTLS{}
	}
	h.TLS.CABundle = &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}
}

func withClientCertificate(h *v1alpha1.HTTPAdapter) {
	if h.TLS == nil {
		h.TLS = &v1alpha1.HTTPTLS{}
	}
	h.TLS.ClientCertificateSecretRef = &v1alpha1.SecretReference{Name: "client"}
}

// mtlsServer requires a client certificate issued by ca, and records the
// subjects it saw and the connections it accepted.
type mtlsServer struct {
	*httptest.Server
	mu       sync.Mutex
	subjects []string
	conns    int
}

func newMTLSServer(t *testing.T, ca *testCA, version uint16) *mtlsServer {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "downstream", x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.cert)
	s := &mtlsServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.subjects = append(s.subjects, r.TLS.PeerCertificates[0].Subject.String())
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	s.TLS = &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		MinVersion:   version,
		MaxVersion:   version,
	}
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	// The handshake errors the tests provoke are expected.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *mtlsServer) seen() (subjects []string, conns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.subjects...), s.conns
}

// tlsConnector reads objs and dials through the loopback egress policy.
func tlsConnector(t *testing.T, objs ...client.Object) *Connector {
	t.Helper()
	c := newConnector(t, egressTransport(t, loopbackPolicy()), objs...)
	c.Egress = loopbackPolicy()
	return c
}

func executeOnce(t *testing.T, c *Connector, tool *v1alpha1.Tool) error {
	t.Helper()
	conn, err := c.Connect(t.Context(), tool)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	_, err = conn.Execute(t.Context(), request(`{"amount": 1}`))
	return err
}

// ---------------------------------------------------------------------------
// Tests

func TestMutualTLS(t *testing.T) {
	ca := newCA(t)
	certPEM, keyPEM := ca.issue(t, "shop-agent", x509.ExtKeyUsageClientAuth)
	objs := []client.Object{caSecret(ca.pem), clientSecret(certPEM, keyPEM)}

	t.Run("the CA bundle and the client certificate", func(t *testing.T) {
		server := newMTLSServer(t, ca, tls.VersionTLS13)
		c := tlsConnector(t, objs...)
		tool := newTool(server.URL, withCABundle, withClientCertificate)
		if err := c.Validate(t.Context(), tool); err != nil {
			t.Fatalf("Validate = %v, want nil", err)
		}
		if err := executeOnce(t, c, tool); err != nil {
			t.Fatalf("Execute = %v, want success", err)
		}
		if subjects, _ := server.seen(); len(subjects) != 1 || subjects[0] != "CN=shop-agent" {
			t.Errorf("the server saw client certificates %q, want [CN=shop-agent]", subjects)
		}
	})

	// TLS 1.2 refuses a missing client certificate within the handshake,
	// before the request is written: it cannot have applied.
	t.Run("no client certificate, TLS 1.2", func(t *testing.T) {
		server := newMTLSServer(t, ca, tls.VersionTLS12)
		err := executeOnce(t, tlsConnector(t, objs...), newTool(server.URL, withCABundle))
		var retryable *adapter.RetryableError
		if !errors.As(err, &retryable) || retryable.Reason != "RequestNotSent" {
			t.Fatalf("Execute = %v (%T), want a RequestNotSent *adapter.RetryableError", err, err)
		}
		if !strings.Contains(err.Error(), "remote error: tls: handshake failure") {
			t.Errorf("Execute = %q, want the server's handshake failure", err)
		}
		if subjects, _ := server.seen(); len(subjects) != 0 {
			t.Errorf("the server served %q, want nothing", subjects)
		}
	})

	// TLS 1.3 refuses it after the client's handshake is done, often once
	// the request is written; the refusal still proves it was never read.
	t.Run("no client certificate, TLS 1.3", func(t *testing.T) {
		server := newMTLSServer(t, ca, tls.VersionTLS13)
		err := executeOnce(t, tlsConnector(t, objs...), newTool(server.URL, withCABundle))
		var retryable *adapter.RetryableError
		if !errors.As(err, &retryable) || retryable.Reason != "RequestNotSent" {
			t.Fatalf("Execute = %v (%T), want a RequestNotSent *adapter.RetryableError", err, err)
		}
		if !strings.Contains(err.Error(), "remote error: tls: certificate required") {
			t.Errorf("Execute = %q, want the server's certificate required alert", err)
		}
		if subjects, _ := server.seen(); len(subjects) != 0 {
			t.Errorf("the server served %q, want nothing", subjects)
		}
	})

	t.Run("the system roots only", func(t *testing.T) {
		server := newMTLSServer(t, ca, tls.VersionTLS13)
		err := executeOnce(t, tlsConnector(t, objs...), newTool(server.URL, withClientCertificate))
		var retryable *adapter.RetryableError
		if !errors.As(err, &retryable) || retryable.Reason != "RequestNotSent" {
			t.Fatalf("Execute = %v (%T), want a RequestNotSent *adapter.RetryableError", err, err)
		}
		if unknown := (x509.UnknownAuthorityError{}); !errors.As(err, &unknown) {
			t.Errorf("Execute = %v, want an x509.UnknownAuthorityError", err)
		}
		if subjects, _ := server.seen(); len(subjects) != 0 {
			t.Errorf("the server served %q, want nothing", subjects)
		}
	})

	t.Run("serverName is what the certificate is verified against", func(t *testing.T) {
		server := newMTLSServer(t, ca, tls.VersionTLS13)
		tool := newTool(server.URL, withCABundle, withClientCertificate, func(h *v1alpha1.HTTPAdapter) { h.TLS.ServerName = "payments.internal" })
		err := executeOnce(t, tlsConnector(t, objs...), tool)
		if hostname := (x509.HostnameError{}); !errors.As(err, &hostname) || hostname.Host != "payments.internal" {
			t.Errorf("Execute = %v, want an x509.HostnameError for payments.internal", err)
		}
	})

	// The clone keeps the shared transport's dialer, and so its egress policy.
	t.Run("the egress policy still applies", func(t *testing.T) {
		server := newMTLSServer(t, ca, tls.VersionTLS13)
		port := server.URL[strings.LastIndex(server.URL, ":")+1:]
		err := executeOnce(t, tlsConnector(t, objs...), newTool("https://127.0.0.2:"+port+"/charges", withCABundle, withClientCertificate))
		var permanent *adapter.PermanentError
		if !errors.As(err, &permanent) || permanent.Kind != adapter.Denied || permanent.Reason != ReasonEgressRefused {
			t.Errorf("Execute = %v (%T), want a Denied EgressRefused *adapter.PermanentError", err, err)
		}
	})
}

func TestTLSTransportsArePooled(t *testing.T) {
	ca := newCA(t)
	certPEM, keyPEM := ca.issue(t, "shop-agent", x509.ExtKeyUsageClientAuth)
	server := newMTLSServer(t, ca, tls.VersionTLS13)
	c := tlsConnector(t, caSecret(ca.pem), clientSecret(certPEM, keyPEM))
	tool := newTool(server.URL, withCABundle, withClientCertificate)
	transportOf := func() *http.Transport {
		t.Helper()
		conn, err := c.Connect(t.Context(), tool)
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		if _, err := conn.Execute(t.Context(), request(`{"amount": 1}`)); err != nil {
			t.Fatalf("Execute: %v", err)
		}
		return conn.Executor.(*executor).client.Transport.(*http.Transport)
	}

	first, second := transportOf(), transportOf()
	if first != second {
		t.Errorf("two Connects of a Tool made two transports, want one")
	}
	if first == c.Transport {
		t.Errorf("a Tool with tls uses the shared transport, want a clone")
	}
	if config := first.TLSClientConfig; config.MinVersion != tls.VersionTLS12 || len(config.Certificates) != 1 || config.RootCAs == nil {
		t.Errorf("TLSClientConfig: MinVersion %x, %d certificates, RootCAs %v; want TLS 1.2, 1, the bundle", config.MinVersion, len(config.Certificates), config.RootCAs)
	}
	if _, conns := server.seen(); conns != 1 {
		t.Errorf("the server accepted %d connections for two requests, want 1", conns)
	}

	// A rotated certificate is a new transport, kept in turn.
	certPEM, keyPEM = ca.issue(t, "shop-agent-rotated", x509.ExtKeyUsageClientAuth)
	if err := c.Secrets.(client.Client).Update(t.Context(), clientSecret(certPEM, keyPEM)); err != nil {
		t.Fatal(err)
	}
	rotated := transportOf()
	if rotated == first {
		t.Errorf("a rotated client certificate kept the old transport")
	}
	if again := transportOf(); again != rotated {
		t.Errorf("two Connects after the rotation made two transports, want one")
	}
	if subjects, _ := server.seen(); strings.Join(subjects, " ") != "CN=shop-agent CN=shop-agent CN=shop-agent-rotated CN=shop-agent-rotated" {
		t.Errorf("the server saw %q, want the first certificate twice, then the rotated one twice", subjects)
	}

	// A Tool without tls keeps the shared transport.
	conn, err := c.Connect(t.Context(), newTool(server.URL))
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.Executor.(*executor).client.Transport; got != c.Transport {
		t.Errorf("a Tool without tls got its own transport, want the shared one")
	}
}

func TestTransportCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	var cache transportCache
	builds := 0
	get := func(i int) *http.Transport {
		t.Helper()
		transport, err := cache.get([32]byte{byte(i), byte(i >> 8)}, func() (*http.Transport, error) {
			builds++
			return &http.Transport{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return transport
	}
	first := get(0)
	for i := 1; i < maxTLSTransports; i++ {
		get(i)
	}
	if get(0) != first || builds != maxTLSTransports {
		t.Fatalf("%d builds for %d digests, want each built once", builds, maxTLSTransports)
	}
	get(maxTLSTransports) // evicts 1, the least recently used
	if len(cache.entries) != maxTLSTransports || cache.order.Len() != maxTLSTransports {
		t.Errorf("the cache holds %d (%d in order), want %d", len(cache.entries), cache.order.Len(), maxTLSTransports)
	}
	if get(0) != first {
		t.Errorf("the most recently used transport was evicted")
	}
	builds = 0
	get(1)
	if builds != 1 {
		t.Errorf("the least recently used transport was kept, want it evicted and built again")
	}
}

func TestValidateTLS(t *testing.T) {
	ca := newCA(t)
	certPEM, keyPEM := ca.issue(t, "shop-agent", x509.ExtKeyUsageClientAuth)
	_, otherKey := ca.issue(t, "someone-else", x509.ExtKeyUsageClientAuth)
	unlabelled := func(s *corev1.Secret) *corev1.Secret { s.Labels = nil; return s }
	opaque := clientSecret(certPEM, keyPEM)
	opaque.Type = corev1.SecretTypeOpaque
	cut := ca.pem[:len(ca.pem)-30]

	tests := []struct {
		name        string
		secrets     []client.Object
		tls         []func(*v1alpha1.HTTPAdapter)
		wantReason  string
		wantMessage string
	}{
		{name: "unlabelled CA bundle", secrets: []client.Object{unlabelled(caSecret(ca.pem))}, tls: []func(*v1alpha1.HTTPAdapter){withCABundle},
			wantReason: ReasonSecretNotUsable, wantMessage: "Secret shop/ca is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is"},
		{name: "unlabelled client certificate", secrets: []client.Object{unlabelled(clientSecret(certPEM, keyPEM))}, tls: []func(*v1alpha1.HTTPAdapter){withClientCertificate},
			wantReason: ReasonSecretNotUsable, wantMessage: "Secret shop/client is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is"},
		{name: "absent client certificate", tls: []func(*v1alpha1.HTTPAdapter){withClientCertificate},
			wantReason: ReasonSecretNotUsable, wantMessage: "Secret shop/client is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is"},
		{name: "CA bundle without its key", secrets: []client.Object{labelled(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ca"}})},
			tls: []func(*v1alpha1.HTTPAdapter){withCABundle}, wantReason: ReasonSecretKeyAbsent, wantMessage: `Secret shop/ca has no key "ca.crt"`},
		{name: "CA bundle that is no PEM", secrets: []client.Object{caSecret([]byte("not a certificate"))}, tls: []func(*v1alpha1.HTTPAdapter){withCABundle},
			wantReason: ReasonInvalidTLS, wantMessage: `Secret shop/ca, key "ca.crt": it holds no PEM certificate`},
		{name: "CA bundle with a cut certificate", secrets: []client.Object{caSecret(append(append([]byte("# shop CA\n"), ca.pem...), cut...))}, tls: []func(*v1alpha1.HTTPAdapter){withCABundle},
			wantReason: ReasonInvalidTLS, wantMessage: `Secret shop/ca, key "ca.crt": 1 of its 2 PEM blocks cannot be read`},
		{name: "CA bundle with a private key", secrets: []client.Object{caSecret(append(append([]byte(nil), ca.pem...), keyPEM...))}, tls: []func(*v1alpha1.HTTPAdapter){withCABundle},
			wantReason: ReasonInvalidTLS, wantMessage: `Secret shop/ca, key "ca.crt": PEM block 2 is a PRIVATE KEY, not a CERTIFICATE`},
		{name: "client certificate in an Opaque Secret", secrets: []client.Object{opaque}, tls: []func(*v1alpha1.HTTPAdapter){withClientCertificate},
			wantReason: ReasonInvalidTLS, wantMessage: `Secret shop/client is of type "Opaque": spec.http.tls.clientCertificateSecretRef needs one of type kubernetes.io/tls`},
		{name: "key of another certificate", secrets: []client.Object{clientSecret(certPEM, otherKey)}, tls: []func(*v1alpha1.HTTPAdapter){withClientCertificate},
			wantReason: ReasonInvalidTLS, wantMessage: "Secret shop/client: tls.crt and tls.key are not a certificate and its private key: tls: private key does not match public key"},
		{name: "certificate and key swapped", secrets: []client.Object{clientSecret(keyPEM, certPEM)}, tls: []func(*v1alpha1.HTTPAdapter){withClientCertificate},
			wantReason: ReasonInvalidTLS, wantMessage: "Secret shop/client: tls.crt and tls.key are not a certificate and its private key: tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tool := newTool("https://127.0.0.1:8443/charges", tc.tls...)
			for what, call := range map[string]func() error{
				"Validate": func() error { return tlsConnector(t, tc.secrets...).Validate(t.Context(), tool) },
				"Connect":  func() error { _, err := tlsConnector(t, tc.secrets...).Connect(t.Context(), tool); return err },
			} {
				err := call()
				var config *adapter.ConfigError
				if !errors.As(err, &config) || config.Reason != tc.wantReason || config.Message != tc.wantMessage {
					t.Errorf("%s = %v, want %s: %q", what, err, tc.wantReason, tc.wantMessage)
				}
			}
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTLSNeedsAnHTTPTransport(t *testing.T) {
	ca := newCA(t)
	c := newConnector(t, roundTripperFunc(func(*http.Request) (*http.Response, error) {
		t.Error("a request was sent without the Tool's TLS settings")
		return nil, errors.New("unreachable")
	}), caSecret(ca.pem))
	tool := newTool("https://127.0.0.1:8443/charges", withCABundle)
	const want = "spec.http.tls cannot be used: this manager's transport for Tools is a httpcall.roundTripperFunc, not an *http.Transport"
	_, connectErr := c.Connect(t.Context(), tool)
	for what, err := range map[string]error{"Validate": c.Validate(t.Context(), tool), "Connect": connectErr} {
		var config *adapter.ConfigError
		if !errors.As(err, &config) || config.Reason != ReasonTLSUnsupported || config.Message != want {
			t.Errorf("%s = %v, want %s: %q", what, err, ReasonTLSUnsupported, want)
		}
	}
}
