package controllers_test

import (
	"math"
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
)

// The suite runs the operator against a real kube-apiserver and etcd
// (envtest) and a real HTTP downstream that counts requests and effects per
// idempotency key.
var (
	env        *specenv.Env
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server
	// metricsURL is the suite manager's metrics endpoint (HTTPS, with
	// authentication and authorization), and managerLogs its log lines.
	metricsURL  string
	managerLogs = &testenv.LogLines{}
)

const executorID = "suite-executor"

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ToolAction controller suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	env = specenv.Start(testenv.SuiteOptions{})
	cfg, k8s, downstream = env.Config, env.Client, env.Downstream
	// Every action's story is told, so that the specs read their events
	// whatever else the suite runs at once (the budget: routine_events_test.go).
	stopManager, metricsAddr, err := testenv.StartManagerWithMetrics(cfg, app.Options{ExecutorID: executorID, LeaseGrace: 5 * time.Second, RetentionSweep: 500 * time.Millisecond,
		MetricsSecure: true, Logger: managerLogs.Logger(GinkgoWriter), RoutineEventRate: math.Inf(1)})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(stopManager)
	metricsURL = "https://" + metricsAddr + "/metrics"

	env.AddKubeconfig()
})
