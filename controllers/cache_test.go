package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestSlimTerminalActions(t *testing.T) {
	done := metav1.Now()
	full := func(phase v1alpha1.Phase) *v1alpha1.ToolAction {
		return &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{
				Name: "order-1", Namespace: "shop", Finalizers: []string{v1alpha1.Finalizer},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "toolledger-sdk"}},
			},
			Spec: v1alpha1.ToolActionSpec{
				ToolRef:     v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "refund"},
				Parameters:  map[string]apiextensionsv1.JSON{"amount": {Raw: []byte("1")}},
				Compensates: "order-0",
				Provenance:  &v1alpha1.Provenance{RunID: "run-1"},
			},
			Status: v1alpha1.ToolActionStatus{
				Phase: phase, CompletionTime: &done, CompensatedBy: []string{"order-2"}, ExternalRef: "re_1",
				History: []v1alpha1.Transition{{To: phase, Reason: "Succeeded"}},
			},
		}
	}

	got, err := SlimTerminalActions(full(v1alpha1.PhaseSucceeded))
	if err != nil {
		t.Fatal(err)
	}
	want := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Name: "order-1", Namespace: "shop", Finalizers: []string{v1alpha1.Finalizer}},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "refund"}, Compensates: "order-0"},
		Status:     v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, CompletionTime: &done, CompensatedBy: []string{"order-2"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a finished action keeps only what the controller reads (-want +got):\n%s", diff)
	}

	inFlight := full(v1alpha1.PhaseExecuting)
	got, err = SlimTerminalActions(inFlight.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	inFlight.ManagedFields = nil
	if diff := cmp.Diff(inFlight, got); diff != "" {
		t.Errorf("an action in flight is kept whole but for managed fields (-want +got):\n%s", diff)
	}
}
