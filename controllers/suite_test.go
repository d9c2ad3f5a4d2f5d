package controllers_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The suite runs the operator against a real kube-apiserver and etcd
// (envtest) and a real HTTP downstream that counts requests and effects per
// idempotency key.
var (
	testEnv    *envtest.Environment
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server
	httpServer *httptest.Server
	kubeconfig string
)

const executorID = "suite-executor"

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ToolAction controller suite")
}

var _ = BeforeSuite(func() {
	testenv.SetLogger(GinkgoWriter)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	plane, err := testenv.StartControlPlane("")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(plane.Stop()).To(Succeed()) })
	testEnv, cfg, k8s = plane.Env, plane.Config, plane.Client

	admin, err := testEnv.AddUser(envtest.User{Name: "suite-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfigBytes, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(kubeconfig, kubeconfigBytes, 0o600)).To(Succeed())

	downstream, httpServer = testenv.StartDownstream()
	DeferCleanup(httpServer.Close)

	stopManager, err := testenv.StartManager(cfg, app.Options{ExecutorID: executorID, LeaseGrace: 5 * time.Second, RetentionSweep: 500 * time.Millisecond})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(stopManager()).To(Succeed()) })
})
