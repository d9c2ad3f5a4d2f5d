// Package specenv is testenv for Ginkgo suites: it starts a testenv.Suite
// in a BeforeSuite and has the helpers their specs share, which fail the
// spec rather than return an error. It is apart from testenv so that the
// harnesses without Ginkgo (the benchmarks, the end-to-end suite) do not
// link Ginkgo, which registers its flags on the command line.
package specenv

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// Env is a running testenv.Suite.
type Env struct {
	*testenv.Suite
	// Kubeconfig is the admin's kubeconfig that Kubectl uses, once
	// AddKubeconfig wrote it.
	Kubeconfig string
}

// Start starts a suite from a BeforeSuite, with controller-runtime's logs
// in GinkgoWriter, and stops it when the Ginkgo suite ends; the suite then
// fails if its managers were ever asked to dial outside loopback.
func Start(opts testenv.SuiteOptions) *Env {
	ginkgo.GinkgoHelper()
	testenv.SetLogger(ginkgo.GinkgoWriter)
	suite, err := testenv.StartSuite(opts)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() {
		gomega.Expect(testenv.EgressViolations()).To(gomega.BeEmpty(), "a manager was asked to dial outside 127.0.0.0/8")
	})
	ginkgo.DeferCleanup(suite.Stop)
	return &Env{Suite: suite}
}

// NewTenant creates a namespace of its own for one spec, so that keys and
// downstream counters of different specs never meet, and clears the
// downstream's faults before and after the spec.
func (e *Env) NewTenant() string {
	ginkgo.GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	gomega.Expect(e.Client.Create(context.Background(), ns)).To(gomega.Succeed())
	e.Downstream.ClearFaults()
	ginkgo.DeferCleanup(e.Downstream.ClearFaults)
	return ns.Name
}

// NewOperatorNamespace creates an operator namespace of its own for the
// managers of one spec that use an archive: the ledger's archive binding
// lives there (internal/archivebinding), so that one spec's archive does
// not hold the managers of the others, which share the API server.
func (e *Env) NewOperatorNamespace() string {
	ginkgo.GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "toolledger-ledger-"}}
	gomega.Expect(e.Client.Create(context.Background(), ns)).To(gomega.Succeed())
	return ns.Name
}

// CreateTool creates testenv.NewTool(namespace, name, url, opts...) with url
// the suite downstream's charges.
func (e *Env) CreateTool(namespace, name string, opts ...testenv.ToolOption) {
	ginkgo.GinkgoHelper()
	tool := testenv.NewTool(namespace, name, e.DownstreamURL+"/charges", opts...)
	gomega.Expect(e.Client.Create(context.Background(), tool)).To(gomega.Succeed())
}

// Get reads a ToolAction.
func (e *Env) Get(namespace, name string) *v1alpha1.ToolAction {
	ginkgo.GinkgoHelper()
	var action v1alpha1.ToolAction
	gomega.Expect(e.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &action)).To(gomega.Succeed())
	return &action
}

// WaitForPhase waits until the action is in phase and returns it.
func (e *Env) WaitForPhase(namespace, name string, phase v1alpha1.Phase) *v1alpha1.ToolAction {
	ginkgo.GinkgoHelper()
	var action *v1alpha1.ToolAction
	gomega.Eventually(func(g gomega.Gomega) {
		var current v1alpha1.ToolAction
		g.Expect(e.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &current)).To(gomega.Succeed())
		g.Expect(current.Status.Phase).To(gomega.Equal(phase), "status: %+v", current.Status)
		action = &current
	}).Should(gomega.Succeed())
	return action
}

// Reasons lists the reasons of the action's history, oldest first.
func Reasons(action *v1alpha1.ToolAction) []string {
	out := make([]string, 0, len(action.Status.History))
	for _, t := range action.Status.History {
		out = append(out, t.Reason)
	}
	return out
}
