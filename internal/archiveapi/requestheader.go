package archiveapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
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
// AuthenticationConfigMap gives it, and k8s.io/apiserver's request-header
// authenticator over it.
type requestHeader struct {
	clientCAs     *x509.CertPool
	authenticator authenticator.Request
}

// Authenticator trusts the user a request names in its headers only when
// the request carries a client certificate the API server's front-proxy CA
// signed, for one of the allowed names, or any name when none is listed:
// the API server has authenticated the user and forwards them. The check
// is k8s.io/apiserver's own (headerrequest over x509); what this type adds
// is reading its configuration through the manager's client rather than
// the informers and typed clientset of k8s.io/apiserver's controllers. It
// re-reads the configuration every refresh, and checks each request,
// certificate included, against the configuration read last: a kept-alive
// connection outlives a rotation of the CA.
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
	var allowedNames, usernameHeaders, uidHeaders, groupHeaders, extraPrefixes []string
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names":        &allowedNames,
		"requestheader-username-headers":     &usernameHeaders,
		"requestheader-uid-headers":          &uidHeaders,
		"requestheader-group-headers":        &groupHeaders,
		"requestheader-extra-headers-prefix": &extraPrefixes,
	} {
		if data[key] == "" {
			continue
		}
		if err := json.Unmarshal([]byte(data[key]), into); err != nil {
			return nil, fmt.Errorf("its %s is not a JSON list of strings: %w", key, err)
		}
	}
	if len(usernameHeaders) == 0 {
		return nil, errors.New("it names no requestheader-username-headers")
	}
	// The client's intermediates are added by the verifier, per request.
	verifyOptions := func() (x509.VerifyOptions, bool) {
		return x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
	}
	return &requestHeader{clientCAs: pool, authenticator: headerrequest.NewDynamicVerifyOptionsSecure(verifyOptions,
		headerrequest.StaticStringSlice(allowedNames), headerrequest.StaticStringSlice(usernameHeaders), headerrequest.StaticStringSlice(uidHeaders),
		headerrequest.StaticStringSlice(groupHeaders), headerrequest.StaticStringSlice(extraPrefixes))}, nil
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
	answer, ok, err := h.authenticator.AuthenticateRequest(r)
	switch {
	case err != nil:
		return authenticationv1.UserInfo{}, fmt.Errorf("%w; the client certificate is not the current front proxy's: %w", errNotFromTheAPIServer, err)
	case !ok:
		return authenticationv1.UserInfo{}, fmt.Errorf("%w; the request names no user", errNotFromTheAPIServer)
	}
	forwarded := answer.User
	user := authenticationv1.UserInfo{Username: forwarded.GetName(), UID: forwarded.GetUID(), Groups: forwarded.GetGroups()}
	for key, values := range forwarded.GetExtra() {
		if user.Extra == nil {
			user.Extra = map[string]authenticationv1.ExtraValue{}
		}
		user.Extra[key] = values
	}
	return user, nil
}
