//go:build node && linux

// Package node proves the chart on a real single-node Kubernetes (make
// test-node): the kubelet runs the project's images under the chart's
// limits, the controller-manager collects garbage and deletes namespaces,
// Services have endpoints, and rollouts roll.
package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testnode"
)

// The images the suite builds from the project's binaries, under names no
// registry serves: the node pulls nothing.
const (
	imageRepository = "toolledger.local/toolledger"
	imageTag        = "dev"
	downstreamImage = "toolledger.local/demo-downstream:dev"
)

var (
	root    = repoRoot()
	cluster *testnode.Cluster
	kube    kubernetes.Interface
	k8s     client.Client
	// bin holds the suite's static builds and image archives.
	bin string
)

func TestNode(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(time.Second)
	RunSpecs(t, "Node suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	cfg := testnode.Config{
		Bin: filepath.Join(root, "bin"), NodeBin: filepath.Join(root, "bin", "node"),
		StateDir: "/var/lib/toolledger-node", Log: GinkgoWriter,
	}
	Expect(testnode.Preflight(cfg)).To(Succeed())
	bin = GinkgoT().TempDir()
	started := time.Now()
	cfg.Images = buildImages(ctx, bin)
	report("build", started)

	started = time.Now()
	var err error
	cluster, err = testnode.Up(ctx, cfg)
	Expect(err).NotTo(HaveOccurred())
	report("bring-up", started)
	kube = kubernetes.NewForConfigOrDie(cluster.Admin)
	k8s, err = client.New(cluster.Admin, client.Options{Scheme: scheme()})
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(20*time.Minute))

var _ = AfterSuite(func(ctx SpecContext) {
	if cluster == nil {
		return
	}
	Expect(stopArchive()).To(Succeed())
	started := time.Now()
	Expect(cluster.Down(ctx)).To(Succeed())
	report("teardown", started)
	after, err := testnode.TakeSnapshot(ctx, "/var/lib/toolledger-node")
	Expect(err).NotTo(HaveOccurred())
	Expect(cluster.Before.Diff(after)).To(BeEmpty(), "the machine after the node differs from the machine before it")
	if !anyFailed && len(rows) > 0 {
		Expect(writeResults()).To(Succeed())
	}
}, NodeTimeout(5*time.Minute))

// buildImages builds the project's binaries static, as the Dockerfile does,
// and writes the images the node runs: the manager's (with the MCP gateway
// and the console, as the Dockerfile ships them), the demo downstream's and
// the pause image.
func buildImages(ctx context.Context, dir string) []string {
	for _, cmd := range []string{"manager", "toolledger-mcp", "toolledger-console", "demo-downstream"} {
		goBuild(ctx, filepath.Join(dir, cmd), "./cmd/"+cmd)
	}
	goBuild(ctx, filepath.Join(dir, "pause"), "./test/node/pause")
	goBuild(ctx, filepath.Join(dir, "kubectl-toolledger"), "./cmd/kubectl-toolledger")
	images := []struct {
		archive string
		image   testnode.Image
	}{
		{"toolledger.tar", testnode.Image{
			Name: imageRepository + ":" + imageTag, Entrypoint: []string{"/manager"}, User: "65532:65532",
			Binaries: map[string]string{
				"/manager": filepath.Join(dir, "manager"), "/toolledger-mcp": filepath.Join(dir, "toolledger-mcp"),
				"/toolledger-console": filepath.Join(dir, "toolledger-console"),
			},
		}},
		{"demo-downstream.tar", testnode.Image{
			Name: downstreamImage, Entrypoint: []string{"/demo-downstream"}, User: "65532:65532",
			Binaries: map[string]string{"/demo-downstream": filepath.Join(dir, "demo-downstream")},
		}},
		{"pause.tar", testnode.Image{
			Name: testnode.SandboxImage, Entrypoint: []string{"/pause"}, User: "65535:65535",
			Binaries: map[string]string{"/pause": filepath.Join(dir, "pause")},
		}},
	}
	var archives []string
	for _, img := range images {
		archive := filepath.Join(dir, img.archive)
		Expect(testnode.WriteImage(archive, img.image)).To(Succeed())
		archives = append(archives, archive)
	}
	return archives
}

func goBuild(ctx context.Context, out, pkg string) {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	output, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build %s: %s", pkg, output)
}

// report prints how long a phase of the suite took, for the results.
func report(phase string, started time.Time) {
	took := time.Since(started).Round(time.Second)
	_, _ = fmt.Fprintf(GinkgoWriter, "node suite: %s took %s\n", phase, took)
	AddReportEntry(phase, took.String())
	phaseTimes = append(phaseTimes, phase+" "+took.String())
}

func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(dir, "..", "..")
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}
