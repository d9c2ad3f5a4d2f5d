package sdk_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/operator"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The suite runs the SDK against a real kube-apiserver and etcd (envtest),
// one toolledger manager and the demo downstream, which counts requests and
// effects per idempotency key.
var (
	testEnv    *envtest.Environment
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server
	httpServer *httptest.Server
)

func TestSDK(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "SDK suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// KUBEBUILDER_ASSETS wins when set; `make test` sets it to bin/.
		BinaryAssetsDirectory: filepath.Join("..", "..", "bin"),
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "cannot start the control plane; run `make controlplane` to build bin/kube-apiserver and bin/etcd")
	DeferCleanup(func() { Expect(testEnv.Stop()).To(Succeed()) })
	// 64 callers each apply and watch at once; client-go's default of 5
	// requests per second would make the test measure the rate limiter.
	cfg.QPS, cfg.Burst = 500, 1000
	k8s, err = client.New(cfg, client.Options{Scheme: operator.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	downstream = demo.NewServer()
	httpServer = httptest.NewServer(downstream) // listens on 127.0.0.1
	DeferCleanup(httpServer.Close)

	grace := time.Second
	mgr, err := operator.NewManager(rest.CopyConfig(cfg), operator.Options{
		MetricsAddr:             "0",
		ProbeAddr:               "0",
		ExecutorID:              "sdk-suite",
		LeaseGrace:              5 * time.Second,
		GracefulShutdownTimeout: &grace,
		SkipNameValidation:      true,
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done).Should(BeClosed())
	})
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
// that were open at once: from the start of the request until its response
// body is closed, which for a watch is when the watch stops.
type requestCounter struct {
	mu          sync.Mutex
	requests    []string
	inFlight    int
	maxInFlight int
}

func (c *requestCounter) start(r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	line := r.Method + " " + r.URL.Path
	if r.URL.Query().Get("watch") == "true" {
		line += "?watch"
	}
	c.requests = append(c.requests, line)
	c.inFlight++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
}

func (c *requestCounter) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
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

type countingTransport struct {
	next    http.RoundTripper
	counter *requestCounter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.counter.start(r)
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		t.counter.finish()
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, finish: sync.OnceFunc(t.counter.finish)}
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
