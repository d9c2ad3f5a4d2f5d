package webconsole_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/internal/serve"
	"github.com/toolledger/toolledger/internal/webconsole"
)

// tokenReviews counts the TokenReviews a client sends, as they leave it:
// what the API server receives.
type tokenReviews struct {
	mu sync.Mutex
	n  int
}

func (c *tokenReviews) wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews" {
				c.mu.Lock()
				c.n++
				c.mu.Unlock()
			}
			return next.RoundTrip(r)
		})
	})
	return out
}

func (c *tokenReviews) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var _ = Describe("The console's authentication", func() {
	// consoleCounting runs a cluster-mode console as the suite's console
	// ServiceAccount, counting its TokenReviews, on 127.0.0.1.
	consoleCounting := func(limit *serve.RateLimit) (string, *tokenReviews) {
		GinkgoHelper()
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		reviews := &tokenReviews{}
		identity := rest.AnonymousClientConfig(cfg)
		identity.BearerToken = token(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: consoleNS, Name: consoleUser}}, nil)
		console, err := webconsole.New(ctx, webconsole.Options{Config: reviews.wrap(identity), Audience: audience, RateLimit: limit, Logger: log.Log.WithName("console")})
		Expect(err).NotTo(HaveOccurred())
		server := httptest.NewServer(console)
		DeferCleanup(server.Close)
		return server.URL, reviews
	}
	// get fetches the queue from ip (a loopback address) with token.
	get := func(url, ip, token string) *http.Response {
		GinkgoHelper()
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url+"/queue", nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp
	}

	It("reviews a refused token once, and one that cannot be a bearer token never", func() {
		url, reviews := consoleCounting(nil)
		for range 10 {
			Expect(get(url, "127.0.0.1", "not-a-token-the-api-server-knows").StatusCode).To(Equal(http.StatusUnauthorized))
		}
		Expect(reviews.count()).To(Equal(1))
		Expect(get(url, "127.0.0.1", "<script>").StatusCode).To(Equal(http.StatusUnauthorized))
		Expect(get(url, "127.0.0.1", strings.Repeat("a", 17<<10)).StatusCode).To(Equal(http.StatusUnauthorized))
		Expect(reviews.count()).To(Equal(1))
	})

	It("answers a client over its rate 429 before reviewing its token, while another client is served", func() {
		url, reviews := consoleCounting(serve.NewRateLimit(0.2, 4, 100))
		statuses := map[int]int{}
		for range 8 {
			statuses[get(url, "127.0.0.1", "not-a-token-the-api-server-knows").StatusCode]++
		}
		Expect(statuses).To(Equal(map[int]int{http.StatusUnauthorized: 4, http.StatusTooManyRequests: 4}), "a burst of 4, then 429")
		over := get(url, "127.0.0.1", "not-a-token-the-api-server-knows")
		Expect(over.StatusCode).To(Equal(http.StatusTooManyRequests))
		Expect(over.Header.Get("Retry-After")).To(BeElementOf("1", "2", "3", "4", "5"), "the next token is due within 5 s")
		Expect(get(url, "127.0.0.2", "another-unknown-token").StatusCode).To(Equal(http.StatusUnauthorized))
		Expect(reviews.count()).To(Equal(2))
	})
})
