// Package integration runs several toolledger managers, started and stopped
// by each spec, against one real API server and one real downstream: the
// guarantees that need more than one executor. The guard admission policy
// is installed, as config/ installs it, and the managers run as the
// manager's ServiceAccount user, which it exempts.
package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/adapter/httpcall"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

var (
	env        *specenv.Env
	k8s        client.Client
	downstream *demo.Server
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Multi-executor suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	// A data directory of our own survives an etcd restart.
	env = specenv.Start(testenv.SuiteOptions{
		ControlPlane: testenv.ControlPlaneOptions{EtcdDataDir: GinkgoT().TempDir()},
	})
	k8s, downstream = env.Client, env.Downstream

	ctx := context.Background()
	Expect(testenv.ApplyFile(ctx, env.Config, filepath.Join("..", "..", "config", "admission", "tombstone_guard_policy.yaml"), "integration")).To(Succeed())
	Expect(testenv.WaitForGuard(ctx, k8s, "default")).To(Succeed())
	// The decisions about a namespace's earlier lives are bound to its life
	// by the API server (archive_lives_test.go).
	for _, policy := range []string{"earlier_life_policy.yaml", "earlier_life_stamp_policy.yaml"} {
		Expect(testenv.ApplyFile(ctx, env.Config, filepath.Join("..", "..", "config", "admission", policy), "integration")).To(Succeed())
	}
})

// startManager runs a manager with its own executor identity until the
// returned function stops it. wrap, when set, intercepts its dispatches.
func startManager(executor string, wrap func(adapter.Adapter) adapter.Adapter) (stop func()) {
	return startManagerWith(app.Options{ExecutorID: executor, LeaseGrace: time.Second, MemberLeaseDuration: 3 * time.Second}, wrap)
}

// startManagerWith is startManager with the manager's options.
func startManagerWith(opts app.Options, wrap func(adapter.Adapter) adapter.Adapter) (stop func()) {
	if wrap != nil {
		registry, err := adapter.NewRegistry(wrap(&httpcall.Connector{Secrets: k8s}))
		Expect(err).NotTo(HaveOccurred())
		opts.Adapters = registry
	}
	stopManager, err := testenv.StartManager(testenv.AsManager(env.Config), opts)
	Expect(err).NotTo(HaveOccurred())
	// A manager stopped with a dispatch still blocked (a simulated crash)
	// reports that its runnables outlived the grace period: not a failure.
	stop = func() { _ = stopManager() }
	DeferCleanup(stop)
	return stop
}
