package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestActiveActions(t *testing.T) {
	for phase, cached := range map[v1alpha1.Phase]bool{
		"":                           true,
		v1alpha1.PhasePending:        true,
		v1alpha1.PhaseAccepted:       true,
		v1alpha1.PhaseExecuting:      true,
		v1alpha1.PhaseRetryScheduled: true,
		v1alpha1.PhaseUnknown:        true,
		v1alpha1.PhaseEscalated:      true,
		v1alpha1.PhaseSucceeded:      false,
		v1alpha1.PhaseFailed:         false,
	} {
		if got := ActiveActions().Matches(fields.Set{"status.phase": string(phase)}); got != cached {
			t.Errorf("phase %q: cached %t, want %t", phase, got, cached)
		}
	}
}

func TestTrimForCache(t *testing.T) {
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{
			Name: "order-1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "toolledger-sdk"}},
			Annotations: map[string]string{
				corev1.LastAppliedConfigAnnotation: `{"spec":{"parameters":{"amount":1}}}`,
				v1alpha1.RequestedByAnnotation:     "alice",
			},
		},
		Spec: v1alpha1.ToolActionSpec{
			ToolRef:    v1alpha1.ToolReference{Name: "charge"},
			Parameters: map[string]apiextensionsv1.JSON{"document": {Raw: []byte(`"` + strings.Repeat("d", cachedParametersBytes) + `"`)}},
		},
	}
	small := action.DeepCopy()
	small.Spec.Parameters = map[string]apiextensionsv1.JSON{"amount": {Raw: []byte("1")}}
	if got, _ := TrimForCache(small); got.(*v1alpha1.ToolAction).Spec.Parameters == nil {
		t.Errorf("small parameters dropped: reading them back would cost a request per attempt")
	}
	got, err := TrimForCache(action)
	if err != nil {
		t.Fatal(err)
	}
	kept := got.(*v1alpha1.ToolAction)
	if kept.ManagedFields != nil || kept.Spec.Parameters != nil || len(kept.Annotations) != 1 {
		t.Errorf("managed fields, parameters or the last-applied configuration kept: %+v", kept)
	}
	if kept.Name != "order-1" || kept.Spec.ToolRef.Name != "charge" || kept.Annotations[v1alpha1.RequestedByAnnotation] != "alice" {
		t.Errorf("the action changed otherwise: %+v", kept)
	}
}
