package controllers

import (
	"testing"

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

func TestDropManagedFields(t *testing.T) {
	action := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{
		Name: "order-1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "toolledger-sdk"}},
	}}
	got, err := DropManagedFields(action)
	if err != nil {
		t.Fatal(err)
	}
	if kept := got.(*v1alpha1.ToolAction); kept.ManagedFields != nil || kept.Name != "order-1" {
		t.Errorf("managed fields kept or the action changed otherwise: %+v", kept.ObjectMeta)
	}
}
