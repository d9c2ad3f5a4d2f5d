// Package integration runs several toolledger managers, started and stopped
// by each spec, against one real API server and one real downstream: the
// guarantees that need more than one executor.
package integration

import (
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/toolledger/toolledger/cmd/manager/app"
	httpadapter "github.com/toolledger/toolledger/internal/adapter/http"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

var (
	testEnv    *envtest.Environment
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server
	httpServer *httptest.Server
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Multi-executor suite")
}

var _ = BeforeSuite(func() {
	testenv.SetLogger(GinkgoWriter)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	// A data directory of our own survives an etcd restart.
	plane, err := testenv.StartControlPlane(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(plane.Stop()).To(Succeed()) })
	testEnv, cfg, k8s = plane.Env, plane.Config, plane.Client

	downstream, httpServer = testenv.StartDownstream()
	DeferCleanup(httpServer.Close)
})

// startManager runs a manager with its own executor identity until the
// returned function stops it. wrap, when set, intercepts its dispatches.
func startManager(executor string, wrap func(adapter.Adapter) adapter.Adapter) (stop func()) {
	opts := app.Options{ExecutorID: executor, LeaseGrace: time.Second}
	if wrap != nil {
		registry, err := adapter.NewRegistry(wrap(&httpadapter.Connector{Secrets: k8s}))
		Expect(err).NotTo(HaveOccurred())
		opts.Adapters = registry
	}
	stopManager, err := testenv.StartManager(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	// A manager stopped with a dispatch still blocked (a simulated crash)
	// reports that its runnables outlived the grace period: not a failure.
	stop = func() { _ = stopManager() }
	DeferCleanup(stop)
	return stop
}
