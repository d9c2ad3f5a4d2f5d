package api

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

var _ = Describe("The ToolAction schema", func() {
	ctx := context.Background()

	It("refuses parameters that are not an object", func() {
		ns := env.NewTenant()
		action := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "toolledger.dev/v1alpha1",
			"kind":       "ToolAction",
			"metadata":   map[string]any{"name": "order-array", "namespace": ns},
			"spec": map[string]any{
				"toolRef":    map[string]any{"name": "charge"},
				"parameters": []any{"amount", int64(1)},
			},
		}}
		err := k8s.Create(ctx, action)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "create: %v", err)
		Expect(err.Error()).To(ContainSubstring(`spec.parameters: Invalid value: "array": spec.parameters in body must be of type object`))
	})

	It("refuses a compensation of its own key", func() {
		ns := env.NewTenant()
		self := &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "self-refund"},
			Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "refund"}, Compensates: "self-refund"},
		}
		err := k8s.Create(ctx, self)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "create: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.compensates must name another ToolAction: a compensation is a new intent with its own key"))
	})
})
