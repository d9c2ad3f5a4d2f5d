package sdk_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The suite runs the SDK against a real kube-apiserver and etcd (envtest),
// one toolledger manager and the demo downstream, which counts requests and
// effects per idempotency key.
var (
	env        *specenv.Env
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server
)

func TestSDK(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "SDK suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	// The control plane's client has no rate limit worth measuring: 64
	// callers each apply and watch at once.
	env = specenv.Start(testenv.SuiteOptions{Manager: &app.Options{ExecutorID: "sdk-suite", LeaseGrace: 5 * time.Second}})
	cfg, k8s, downstream = env.Config, env.Client, env.Downstream
})

// countingClient is an SDK client whose HTTP requests to the API server are
// counted and bounded in flight, as the call-count contract is stated.
func countingClient() (*sdk.Client, *requestCounter) {
	counter := &requestCounter{}
	c := rest.CopyConfig(cfg)
	c.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: next, counter: counter}
	}
	invoker, err := sdk.NewClient(c)
	Expect(err).NotTo(HaveOccurred())
	return invoker, counter
}

// requestCounter records the requests sent ("PATCH /apis/…") and the most
// that were open at once, of all and of applies: from the start of the
// request until its response body is closed, which for a watch is when the
// watch stops.
type requestCounter struct {
	mu                 sync.Mutex
	requests           []string
	inFlight           int
	maxInFlight        int
	appliesInFlight    int
	maxAppliesInFlight int
}

func (c *requestCounter) start(r *http.Request) (finish func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	line := r.Method + " " + r.URL.Path
	if r.URL.Query().Get("watch") == "true" {
		line += "?watch"
	}
	c.requests = append(c.requests, line)
	c.inFlight++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
	apply := r.Method == http.MethodPatch
	if apply {
		c.appliesInFlight++
		c.maxAppliesInFlight = max(c.maxAppliesInFlight, c.appliesInFlight)
	}
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.inFlight--
		if apply {
			c.appliesInFlight--
		}
	})
}

// Requests returns the requests sent so far and forgets them.
func (c *requestCounter) Requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent := c.requests
	c.requests = nil
	return sent
}

func (c *requestCounter) MaxInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxInFlight
}

func (c *requestCounter) MaxAppliesInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxAppliesInFlight
}

type countingTransport struct {
	next    http.RoundTripper
	counter *requestCounter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	finish := t.counter.start(r)
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		finish()
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, finish: finish}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	finish func()
}

func (b *countedBody) Close() error {
	defer b.finish()
	return b.ReadCloser.Close()
}
