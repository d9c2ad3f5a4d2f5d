package archiveapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/internal/archive"
)

// TestAKeptAliveConnectionIsVerifiedAgainstTheCurrentCA: the handshake
// verified the front proxy's certificate against the CA of its time; once
// the API server publishes another front-proxy CA, the next request on the
// same connection is refused, and the new CA's certificate is served.
func TestAKeptAliveConnectionIsVerifiedAgainstTheCurrentCA(t *testing.T) {
	ctx := context.Background()
	before, after := newProxy(t), newProxy(t)
	kube := fakeKube(before, allowAll)
	h := handlerOf(t, kube, &records{rows: []archive.Record{row("order-1", 1, time.Now())}})
	server := httptest.NewUnstartedServer(h)
	server.TLS = h.authn.TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &server.TLS.Certificates[0], nil })
	server.StartTLS()
	t.Cleanup(server.Close)

	// clientOf is the front proxy presenting p's certificate, on
	// connections of its own that it keeps alive.
	clientOf := func(p proxy) *http.Client {
		transport := server.Client().Transport.(*http.Transport).Clone()
		transport.TLSClientConfig.Certificates = []tls.Certificate{{Certificate: [][]byte{p.leaf.Raw}, PrivateKey: p.key}}
		t.Cleanup(transport.CloseIdleConnections)
		return &http.Client{Transport: transport}
	}
	ask := func(c *http.Client) (code int, message string, reused bool) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, server.URL+shop+"/order-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Remote-User", "alice")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var status metav1.Status
		_ = json.Unmarshal(body, &status)
		return resp.StatusCode, status.Message, reused
	}

	proxied := clientOf(before)
	if code, message, _ := ask(proxied); code != http.StatusOK {
		t.Fatalf("before the rotation: %d %q, want 200", code, message)
	}

	var cm corev1.ConfigMap
	if err := kube.Get(ctx, AuthenticationConfigMap, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = frontProxyConfig(after.ca).Data
	if err := kube.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	if err := h.authn.refresh(ctx); err != nil {
		t.Fatal(err)
	}

	code, message, reused := ask(proxied)
	want := errNotFromTheAPIServer.Error() + "; the client certificate is not the current front proxy's: x509: certificate signed by unknown authority"
	if !reused || code != http.StatusUnauthorized || !strings.HasPrefix(message, want) {
		t.Errorf("after the rotation, on the same connection (reused %v): %d %q, want 401 %q", reused, code, message, want)
	}
	if code, message, _ := ask(clientOf(after)); code != http.StatusOK {
		t.Errorf("the rotated CA's certificate: %d %q, want 200", code, message)
	}
}
