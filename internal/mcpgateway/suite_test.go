package mcpgateway_test

import (
	"context"
	"os/exec"
	"path/filepath"
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

// The suite runs the gateway against a real kube-apiserver and etcd
// (envtest), one toolledger manager and the demo downstream, which counts
// requests and effects per idempotency key; MCP clients are the Go MCP
// SDK's own.
var (
	env        *specenv.Env
	cfg        *rest.Config
	k8s        client.Client
	downstream *demo.Server

	// gatewayBinary is cmd/toolledger-mcp, built for the specs that run it
	// as an agent host does; adminKubeconfig is the kubeconfig it runs
	// with, of the user adminName.
	gatewayBinary   string
	adminKubeconfig string
)

const adminName = "mcp-desktop-user"

func TestGateway(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "MCP gateway suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	env = specenv.Start(testenv.SuiteOptions{Manager: &app.Options{ExecutorID: "mcp-suite", LeaseGrace: 5 * time.Second}})
	cfg, k8s, downstream = env.Config, env.Client, env.Downstream

	dir := GinkgoT().TempDir()
	adminKubeconfig = filepath.Join(dir, "kubeconfig")
	_, err := env.AddAdmin(adminName, adminKubeconfig)
	Expect(err).NotTo(HaveOccurred())
	gatewayBinary = filepath.Join(dir, "toolledger-mcp")
	build := exec.Command("go", "build", "-o", gatewayBinary, "../../cmd/toolledger-mcp")
	build.Stdout, build.Stderr = GinkgoWriter, GinkgoWriter
	Expect(build.Run()).To(Succeed())

	remove, err := testenv.InstallRBAC(context.Background(), cfg, k8s, "mcp-suite", "role_agent.yaml", "role_viewer.yaml", "role_mcp_gateway.yaml", "role_mcp_gateway_constrained.yaml")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(remove)
})
