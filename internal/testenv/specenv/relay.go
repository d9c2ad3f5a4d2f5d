package specenv

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// Relayed is one request as it reached the wire, and the answer's status
// and headers.
type Relayed struct {
	Method, Path string
	Header       http.Header
	Body         string
	Status       int
	Answer       http.Header
}

// Relay forwards every request to a target on 127.0.0.1 and records it. It
// can lose an answer in transit (the target handled the request, the
// connection closes without a reply), and hold a request before
// forwarding it.
type Relay struct {
	*httptest.Server
	mu   sync.Mutex
	sent []Relayed
	// lose names the paths whose first request's answer is lost; loseNext
	// and holdNext apply to the next request, whatever its path.
	lose     map[string]bool
	loseNext bool
	holdNext time.Duration
}

// NewRelay relays to target until the spec ends, losing the answer to the
// first request to each path in lose.
func NewRelay(target string, lose ...string) *Relay {
	r := &Relay{lose: map[string]bool{}}
	for _, path := range lose {
		r.lose[path] = true
	}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer ginkgo.GinkgoRecover()
		body, err := io.ReadAll(req.Body)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		r.mu.Lock()
		hold := r.holdNext
		r.holdNext = 0
		r.mu.Unlock()
		time.Sleep(hold)
		// The target's answer is not the caller's to cancel: a lost answer
		// is one the target gave.
		forward, err := http.NewRequestWithContext(context.WithoutCancel(req.Context()), req.Method, target+req.URL.RequestURI(), bytes.NewReader(body))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		forward.Header = req.Header.Clone()
		resp, err := http.DefaultClient.Do(forward)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		answer, err := io.ReadAll(resp.Body)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		r.mu.Lock()
		r.sent = append(r.sent, Relayed{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: string(body), Status: resp.StatusCode, Answer: resp.Header.Clone()})
		drop := r.lose[req.URL.Path] || r.loseNext
		delete(r.lose, req.URL.Path)
		r.loseNext = false
		r.mu.Unlock()
		if drop {
			conn, _, err := http.NewResponseController(w).Hijack()
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			_ = conn.Close()
			return
		}
		for name, values := range resp.Header {
			w.Header()[name] = values
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	ginkgo.DeferCleanup(r.Close)
	return r
}

// LoseNextAnswer loses the answer to the next request.
func (r *Relay) LoseNextAnswer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loseNext = true
}

// HoldNext holds the next request for d before forwarding it.
func (r *Relay) HoldNext(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdNext = d
}

// Sent is every request relayed to path, or every request when path is
// empty, in order.
func (r *Relay) Sent(path string) []Relayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Relayed
	for _, s := range r.sent {
		if path == "" || s.Path == path {
			out = append(out, s)
		}
	}
	return out
}
