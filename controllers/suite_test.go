package controllers_test

import (
	"context"
	"net/http/httptest"
	"os"
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

	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/operator"
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
	stopMgr    context.CancelFunc
	mgrDone    chan struct{}
)

const executorID = "suite-executor"

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ToolAction controller suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// KUBEBUILDER_ASSETS wins when set; `make test` sets it to bin/.
		BinaryAssetsDirectory: filepath.Join("..", "bin"),
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "cannot start the control plane; run `make controlplane` to build bin/kube-apiserver and bin/etcd")

	k8s, err = client.New(cfg, client.Options{Scheme: operator.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	admin, err := testEnv.AddUser(envtest.User{Name: "suite-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfigBytes, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(kubeconfig, kubeconfigBytes, 0o600)).To(Succeed())

	downstream = demo.NewServer()
	httpServer = httptest.NewServer(downstream)

	mgr, err := operator.NewManager(cfg, operator.Options{
		MetricsAddr: "0",
		ProbeAddr:   "0",
		ExecutorID:  executorID,
		LeaseGrace:  5 * time.Second,
	})
	Expect(err).NotTo(HaveOccurred())
	var ctx context.Context
	ctx, stopMgr = context.WithCancel(context.Background())
	mgrDone = make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(mgrDone)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if stopMgr != nil {
		stopMgr()
		Eventually(mgrDone).Should(BeClosed())
	}
	if httpServer != nil {
		httpServer.Close()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
