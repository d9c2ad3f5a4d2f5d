// The plugin's suite builds the kubectl-toolledger binary from
// ./cmd/kubectl-toolledger and runs it, as an operator would, against a real
// kube-apiserver and etcd (envtest) with the toolledger operator and the
// demo downstream running. The unit tests beside it (package kubectlplugin)
// call the commands in process and start no control plane.
package kubectlplugin_test

import (
	"bytes"
	"context"
	"errors"
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

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var (
	env        *specenv.Env
	k8s        client.Client
	downstream *demo.Server

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
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	pluginBinary = buildPlugin()

	grace := 5 * time.Second
	env = specenv.Start(testenv.SuiteOptions{Manager: &app.Options{
		ExecutorID:              "plugin-suite",
		LeaseGrace:              time.Second,
		GracefulShutdownTimeout: &grace,
	}})
	k8s, downstream = env.Client, env.Downstream
	writeKubeconfigs()
})

// buildPlugin builds the plugin's command, ./cmd/kubectl-toolledger, as `go
// install` would.
func buildPlugin() string {
	goTool, err := exec.LookPath("go")
	Expect(err).NotTo(HaveOccurred(), "the go command must be on PATH to build the plugin")
	binary := filepath.Join(GinkgoT().TempDir(), "kubectl-toolledger")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-o", binary, "github.com/toolledger/toolledger/cmd/kubectl-toolledger")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build: %s", out)
	return binary
}

// writeKubeconfigs writes the kubeconfigs the plugin is run with, for a user
// of the suite's API server in system:masters.
func writeKubeconfigs() {
	dir := GinkgoT().TempDir()
	home = filepath.Join(dir, "home")
	Expect(os.Mkdir(home, 0o700)).To(Succeed())
	kubeconfig = filepath.Join(dir, "kubeconfig")
	_, err := env.AddAdmin("plugin-operator", kubeconfig)
	Expect(err).NotTo(HaveOccurred())

	config, err := clientcmd.LoadFromFile(kubeconfig)
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
