// The plugin's suite builds the kubectl-toolledger binary and runs it, as an
// operator would, against a real kube-apiserver and etcd (envtest) with the
// toolledger operator and the demo downstream running.
package main_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

var (
	testEnv    *envtest.Environment
	k8s        client.Client
	downstream *demo.Server
	httpServer *httptest.Server

	// pluginBinary is the kubectl-toolledger the suite built.
	pluginBinary string
	// kubeconfig has one context, for the suite's API server, without a
	// namespace.
	kubeconfig string
	// twoContexts has the suite's context (named workingContext, with a
	// namespace of its own) and a current context whose server nobody
	// serves.
	twoContexts    string
	workingContext string
	// home is the plugin's home directory, so that no kubeconfig or cache of
	// the machine's user takes part.
	home string
)

const (
	unreachableContext = "unreachable"
	// unreachableServer is a port on the loopback interface that nobody
	// listens on: requests fail at once with "connection refused".
	unreachableServer = "https://127.0.0.1:1"
)

func TestKubectlToolledger(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "kubectl-toolledger suite")
}

var _ = BeforeSuite(func() {
	testenv.SetLogger(GinkgoWriter)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	pluginBinary = buildPlugin()

	plane, err := testenv.StartControlPlane("")
	Expect(err).NotTo(HaveOccurred())
	// Cleanups run last-registered first: the manager and the downstream
	// stop before the control plane does.
	DeferCleanup(func() { Expect(plane.Stop()).To(Succeed()) })
	testEnv, k8s = plane.Env, plane.Client

	writeKubeconfigs()

	downstream, httpServer = testenv.StartDownstream()
	DeferCleanup(httpServer.Close)

	grace := 5 * time.Second
	stopManager, err := testenv.StartManager(plane.Config, app.Options{
		ExecutorID:              "plugin-suite",
		LeaseGrace:              time.Second,
		GracefulShutdownTimeout: &grace,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(stopManager()).To(Succeed()) })
})

// buildPlugin builds the plugin from this package, as `go install` would.
func buildPlugin() string {
	goTool, err := exec.LookPath("go")
	Expect(err).NotTo(HaveOccurred(), "the go command must be on PATH to build the plugin")
	binary := filepath.Join(GinkgoT().TempDir(), "kubectl-toolledger")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-o", binary, ".")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build: %s", out)
	return binary
}

// writeKubeconfigs writes the kubeconfigs the plugin is run with, for a user
// of the suite's API server in system:masters.
func writeKubeconfigs() {
	user, err := testEnv.AddUser(envtest.User{Name: "plugin-operator", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	home = filepath.Join(dir, "home")
	Expect(os.Mkdir(home, 0o700)).To(Succeed())
	kubeconfig = filepath.Join(dir, "kubeconfig")
	Expect(os.WriteFile(kubeconfig, data, 0o600)).To(Succeed())

	config, err := clientcmd.Load(data)
	Expect(err).NotTo(HaveOccurred())
	workingContext = config.CurrentContext
	working := config.Contexts[workingContext]
	Expect(working).NotTo(BeNil(), "the envtest kubeconfig has a current context")
	config.Clusters[unreachableContext] = &clientcmdapi.Cluster{Server: unreachableServer, InsecureSkipTLSVerify: true}
	config.Contexts[unreachableContext] = &clientcmdapi.Context{Cluster: unreachableContext, AuthInfo: working.AuthInfo}
	config.CurrentContext = unreachableContext
	twoContexts = filepath.Join(dir, "two-contexts")
	Expect(clientcmd.WriteToFile(*config, twoContexts)).To(Succeed())
}

// setContextNamespace makes namespace the working context's namespace in the
// two-context kubeconfig.
func setContextNamespace(namespace string) {
	config, err := clientcmd.LoadFromFile(twoContexts)
	Expect(err).NotTo(HaveOccurred())
	config.Contexts[workingContext].Namespace = namespace
	Expect(clientcmd.WriteToFile(*config, twoContexts)).To(Succeed())
}

// result is one run of the plugin.
type result struct {
	stdout, stderr string
	code           int
}

// plugin runs the built plugin with args, bounded in time, in an
// environment with no kubeconfig of its own.
func plugin(args ...string) result {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBinary, args...)
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + filepath.Join(home, "absent"), "PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && ctx.Err() == nil:
		r.code = exitErr.ExitCode()
	default:
		Fail("cannot run the plugin: " + err.Error())
	}
	GinkgoWriter.Printf("$ kubectl-toolledger %v\n(exit %d)\n%s%s", args, r.code, r.stdout, r.stderr)
	return r
}

// in runs the plugin against the suite's API server in namespace.
func in(namespace string, args ...string) result {
	GinkgoHelper()
	return plugin(append(args, "--kubeconfig", kubeconfig, "-n", namespace)...)
}
