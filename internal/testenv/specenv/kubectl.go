package specenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// AddKubeconfig adds an admin user and writes its kubeconfig, for the
// commands the specs run (Kubectl), and returns its path.
func (e *Env) AddKubeconfig() string {
	ginkgo.GinkgoHelper()
	e.Kubeconfig = filepath.Join(ginkgo.GinkgoT().TempDir(), "kubeconfig")
	_, err := e.AddAdmin("suite-admin", e.Kubeconfig)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return e.Kubeconfig
}

// Kubectl runs the real kubectl against the suite's API server, as the
// admin of AddKubeconfig.
func (e *Env) Kubectl(args ...string) (string, error) {
	path, err := exec.LookPath("kubectl")
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "kubectl must be on PATH for the CLI specs")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// WriteManifest writes content to a file of the spec's own and returns its path.
func WriteManifest(content string) string {
	path := filepath.Join(ginkgo.GinkgoT().TempDir(), "action.yaml")
	gomega.Expect(os.WriteFile(path, []byte(content), 0o600)).To(gomega.Succeed())
	return path
}

// DryRunFinalizers creates the manifest in a server-side dry run, through
// admission, and returns the finalizers the API server would store.
func (e *Env) DryRunFinalizers(manifest string) (string, error) {
	return e.Kubectl("create", "--dry-run=server", "-f", manifest, "-o", "jsonpath={.metadata.finalizers}")
}
