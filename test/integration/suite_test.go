// Package integration runs several toolledger managers, started and stopped
// by each spec, against one real API server and one real downstream: the
// guarantees that need more than one executor.
package integration

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/internal/adapter"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/operator"
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
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: filepath.Join("..", "..", "bin"),
		// A data directory of our own survives an etcd restart.
		ControlPlane: envtest.ControlPlane{Etcd: &envtest.Etcd{DataDir: GinkgoT().TempDir()}},
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "cannot start the control plane; run `make controlplane` to build bin/kube-apiserver and bin/etcd")
	cfg.QPS, cfg.Burst = 500, 1000
	k8s, err = client.New(cfg, client.Options{Scheme: operator.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	downstream = demo.NewServer()
	httpServer = httptest.NewServer(downstream)
	DeferCleanup(httpServer.Close)
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// startManager runs a manager with its own executor identity until the
// returned function stops it. wrap, when set, intercepts its dispatches.
func startManager(executor string, wrap func(adapter.Connector) adapter.Connector) (stop func()) {
	grace := time.Second
	mgr, err := operator.NewManager(rest.CopyConfig(cfg), operator.Options{
		MetricsAddr:             "0",
		ProbeAddr:               "0",
		ExecutorID:              executor,
		LeaseGrace:              time.Second,
		GracefulShutdownTimeout: &grace,
		SkipNameValidation:      true,
		WrapConnector:           wrap,
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		// A manager stopped with a dispatch still blocked (a simulated
		// crash) reports that its runnables outlived the grace period.
		_ = mgr.Start(ctx)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		Eventually(done).Should(BeClosed())
	}
	DeferCleanup(stop)
	return stop
}
