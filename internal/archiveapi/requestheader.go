package archiveapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AuthenticationConfigMap is where the API server publishes how it
// forwards a user to an aggregated API: the CA of its front-proxy client
// certificate, the names that certificate may carry, and the headers that
// name the user. Reading it takes the extension-apiserver-authentication-reader
// Role in kube-system.
var AuthenticationConfigMap = types.NamespacedName{Namespace: "kube-system", Name: "extension-apiserver-authentication"}

// errNotFromTheAPIServer is the answer to a request that does not come
// through the API server's aggregation layer.
var errNotFromTheAPIServer = errors.New("the archive API answers only requests forwarded by the API server (its front-proxy client certificate); use kubectl or a Kubernetes client")

// requestHeader is the API server's front-proxy configuration, as the
// AuthenticationConfigMap gives it.
type requestHeader struct {
	clientCAs      *x509.CertPool
	allowedNames   []string
	usernameHeader []string
	uidHeaders     []string
	groupHeaders   []string
	extraPrefixes  []string
}

// Authenticator trusts the user a request names in its headers only when
// the request carries a client certificate the API server's front-proxy CA
// signed, for one of the allowed names, or any name when none is listed,
// as k8s.io/apiserver does: the API server has authenticated the user and
// forwards them. It re-reads the configuration every refresh, and checks
// each request against the configuration read last.
type Authenticator struct {
	reader  client.Reader
	current atomic.Pointer[requestHeader]
}

// NewAuthenticator returns an Authenticator that reads the front-proxy
// configuration with reader when it runs.
func NewAuthenticator(reader client.Reader) *Authenticator {
	return &Authenticator{reader: reader}
}

// Run reads the configuration until it has it, retrying every few
// seconds, then again every interval until ctx ends; a failed read keeps
// the last one. Until the first read, every request is answered 503.
func (a *Authenticator) Run(ctx context.Context, interval time.Duration, onError func(error)) {
	wait := firstReadRetry
	for {
		if err := a.refresh(ctx); err != nil && ctx.Err() == nil {
			onError(err)
		}
		if a.current.Load() != nil {
			wait = interval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// firstReadRetry is how soon a failed first read of the configuration is
// tried again.
const firstReadRetry = 5 * time.Second

// errNotConfigured answers requests before the front-proxy configuration
// was read.
var errNotConfigured = errors.New("the archive API has not yet read the API server's front-proxy configuration (ConfigMap kube-system/extension-apiserver-authentication)")

func (a *Authenticator) refresh(ctx context.Context) error {
	var cm corev1.ConfigMap
	if err := a.reader.Get(ctx, AuthenticationConfigMap, &cm); err != nil {
		return fmt.Errorf("cannot read the API server's front-proxy configuration (ConfigMap %s): %w", AuthenticationConfigMap, err)
	}
	h, err := parseRequestHeader(cm.Data)
	if err != nil {
		return fmt.Errorf("ConfigMap %s: %w", AuthenticationConfigMap, err)
	}
	a.current.Store(h)
	return nil
}

func parseRequestHeader(data map[string]string) (*requestHeader, error) {
	ca := data["requestheader-client-ca-file"]
	if ca == "" {
		return nil, errors.New("it has no requestheader-client-ca-file: the API server runs without --requestheader-client-ca-file, so it cannot forward users to an aggregated API")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		return nil, errors.New("its requestheader-client-ca-file holds no PEM certificate")
	}
	h := &requestHeader{clientCAs: pool}
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names":        &h.allowedNames,
		"requestheader-username-headers":     &h.usernameHeader,
		"requestheader-uid-headers":          &h.uidHeaders,
		"requestheader-group-headers":        &h.groupHeaders,
		"requestheader-extra-headers-prefix": &h.extraPrefixes,
	} {
		if data[key] == "" {
			continue
		}
		if err := json.Unmarshal([]byte(data[key]), into); err != nil {
			return nil, fmt.Errorf("its %s is not a JSON list of strings: %w", key, err)
		}
	}
	if len(h.usernameHeader) == 0 {
		return nil, errors.New("it names no requestheader-username-headers")
	}
	return h, nil
}

// TLSConfig asks each client for a certificate and verifies one given
// against the current front-proxy CA; serving is the server's own
// certificate.
func (a *Authenticator) TLSConfig(serving func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			config := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serving}
			if h := a.current.Load(); h != nil {
				config.ClientAuth, config.ClientCAs = tls.VerifyClientCertIfGiven, h.clientCAs
			}
			return config, nil
		},
	}
}

// User returns the user the API server forwarded with r.
func (a *Authenticator) User(r *http.Request) (authenticationv1.UserInfo, error) {
	h := a.current.Load()
	if h == nil {
		return authenticationv1.UserInfo{}, errNotConfigured
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return authenticationv1.UserInfo{}, errNotFromTheAPIServer
	}
	if err := h.verify(r.TLS.PeerCertificates); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("%w; %w", errNotFromTheAPIServer, err)
	}
	if name := r.TLS.PeerCertificates[0].Subject.CommonName; len(h.allowedNames) > 0 && !slices.Contains(h.allowedNames, name) {
		return authenticationv1.UserInfo{}, fmt.Errorf("%w; the client certificate's name %q is not one the API server allows", errNotFromTheAPIServer, name)
	}
	user := authenticationv1.UserInfo{Username: firstValue(r.Header, h.usernameHeader), UID: firstValue(r.Header, h.uidHeaders)}
	if user.Username == "" {
		return authenticationv1.UserInfo{}, fmt.Errorf("%w; the request names no user", errNotFromTheAPIServer)
	}
	for _, name := range h.groupHeaders {
		user.Groups = append(user.Groups, r.Header.Values(name)...)
	}
	user.Extra = extra(r.Header, h.extraPrefixes)
	return user, nil
}

// verify checks the client's certificate chain, leaf first, against the
// front-proxy CA read last, on every request, as k8s.io/apiserver's
// request-header authenticator does: the handshake verified it against
// the CA of its time, and a kept-alive connection outlives a rotation.
// The intermediates are those the client sent.
func (h *requestHeader) verify(chain []*x509.Certificate) error {
	opts := x509.VerifyOptions{Roots: h.clientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(chain) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, intermediate := range chain[1:] {
			opts.Intermediates.AddCert(intermediate)
		}
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return fmt.Errorf("the client certificate does not verify against the current front-proxy CA: %w", err)
	}
	return nil
}

func firstValue(header http.Header, names []string) string {
	for _, name := range names {
		if v := header.Get(name); v != "" {
			return v
		}
	}
	return ""
}

// extra reads the user's extra values: each header under a prefix names a
// key, lower-cased and percent-decoded, as the API server sends it.
func extra(header http.Header, prefixes []string) map[string]authenticationv1.ExtraValue {
	var out map[string]authenticationv1.ExtraValue
	for name, values := range header {
		for _, prefix := range prefixes {
			if !strings.HasPrefix(strings.ToLower(name), strings.ToLower(prefix)) {
				continue
			}
			key, err := url.PathUnescape(strings.ToLower(name[len(prefix):]))
			if err != nil {
				continue
			}
			if out == nil {
				out = map[string]authenticationv1.ExtraValue{}
			}
			out[key] = append(out[key], values...)
		}
	}
	return out
}
