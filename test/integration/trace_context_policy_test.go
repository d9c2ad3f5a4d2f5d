package integration

import (
	"context"
	"path/filepath"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// traceContextRefused is what the API server answers, after the action's
// name, when config/admission's trace context policy refuses it.
const traceContextRefused = ` is forbidden: ValidatingAdmissionPolicy 'toolledger-trace-context' with binding 'toolledger-trace-context' denied request: ` +
	`the annotation toolledger.dev/traceparent must be a W3C traceparent (version-traceid-parentid-flags in lowercase hex, ` +
	`such as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01), of at most 256 characters: the manager reads the trace it names`

// The trace context a tenant writes on a ToolAction is checked where it
// enters: the annotation by config/admission's policy when it is set or
// changed, spec.provenance.traceID by the CRD; neither keeps an existing
// record from being written.
var _ = Describe("The trace context admission policy (config/admission) and the CRD's traceID", Ordered, func() {
	ctx := context.Background()
	policy := filepath.Join("..", "..", "config", "admission", "trace_context_policy.yaml")
	const (
		valid    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		poisoned = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a\nb"
	)
	var (
		ns    string
		older *v1alpha1.ToolAction
	)
	annotated := func(name, traceparent string) *v1alpha1.ToolAction {
		a := action(ns, name, 100)
		a.Annotations = map[string]string{v1alpha1.TraceparentAnnotation: traceparent}
		return a
	}
	refused := func(err error, name string) {
		GinkgoHelper()
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(`toolactions.toolledger.dev "` + name + `"` + traceContextRefused))
	}

	BeforeAll(func() {
		ns = env.NewTenant()
		// A record an API server without the policy stored: no manager runs
		// here, so it stays as written.
		older = annotated("older", poisoned)
		Expect(k8s.Create(ctx, older)).To(Succeed())
		Expect(testenv.ApplyFile(ctx, env.Config, policy, "integration")).To(Succeed())
		DeferCleanup(func() { Expect(testenv.DeleteFile(ctx, env.Config, policy)).To(Succeed()) })
		// The API server loads a new policy within moments.
		Eventually(func() error { return k8s.Create(ctx, annotated("probe", poisoned), client.DryRunAll) }).Should(HaveOccurred())
	})

	It("refuses an annotation that is no W3C traceparent, at creation and when it changes", func() {
		for name, value := range map[string]string{
			"line-break":      poisoned,
			"upper-case":      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
			"version-ff":      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"zero-trace":      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
			"zero-parent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
			"version-00-tail": valid + "-extra",
			"bare-trace-id":   "4bf92f3577b34da6a3ce929d0e0e4736",
		} {
			refused(k8s.Create(ctx, annotated(name, value), client.DryRunAll), name)
		}
		for name, value := range map[string]string{
			"version-00":    valid,
			"later-version": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",
			"empty":         "",
		} {
			Expect(k8s.Create(ctx, annotated(name, value), client.DryRunAll)).To(Succeed(), name)
		}

		current := annotated("changed", valid)
		Expect(k8s.Create(ctx, current)).To(Succeed())
		current.Annotations[v1alpha1.TraceparentAnnotation] = poisoned
		refused(k8s.Update(ctx, current), "changed")
	})

	It("leaves a record stored before it writable: its labels and finalizers change, its annotation may go", func() {
		current := env.Get(ns, older.Name)
		current.Labels = map[string]string{"run": "7"}
		current.Finalizers = nil
		Expect(k8s.Update(ctx, current)).To(Succeed(), "the annotation is unchanged")
		delete(current.Annotations, v1alpha1.TraceparentAnnotation)
		Expect(k8s.Update(ctx, current)).To(Succeed())
	})

	It("refuses a spec.provenance.traceID holding a control character, which no header may carry", func() {
		const injected = "4bf92f3577b34da6a3ce929d0e0e4736\r\nX-Injected: 1"
		a := action(ns, "trace-id-line-break", 100)
		a.Spec.Provenance = &v1alpha1.Provenance{TraceID: injected}
		err := k8s.Create(ctx, a, client.DryRunAll)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(`ToolAction.toolledger.dev "trace-id-line-break" is invalid: spec.provenance.traceID: Invalid value: ` +
			strconv.Quote(injected) + `: traceID must not hold a control character: it is passed downstream in an HTTP header`))
		for _, traceID := range []string{"4bf92f3577b34da6a3ce929d0e0e4736", poisoned[:55], "1-5759e988-bd862e3fe1be46a994272793", "trace ü"} {
			a.Spec.Provenance.TraceID = traceID
			Expect(k8s.Create(ctx, a, client.DryRunAll)).To(Succeed(), "traceID %q", traceID)
		}
	})
})
