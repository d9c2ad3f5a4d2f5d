package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestOwnClaim(t *testing.T) {
	r := &ToolActionReconciler{Executor: "me"}
	action := func(phase v1alpha1.Phase, executor string, attempt int32) *v1alpha1.ToolAction {
		a := &v1alpha1.ToolAction{Status: v1alpha1.ToolActionStatus{Phase: phase}}
		if executor != "" {
			a.Status.Claim = &v1alpha1.ExecutorClaim{Executor: executor, Attempt: attempt}
		}
		return a
	}
	deleting := action(v1alpha1.PhaseExecuting, "me", 1)
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name           string
		before, after  *v1alpha1.ToolAction
		skipsReconcile bool
	}{
		{"this executor's first claim", action("", "", 0), action(v1alpha1.PhaseExecuting, "me", 1), true},
		{"this executor's claim of a retry", action(v1alpha1.PhaseRetryScheduled, "me", 1), action(v1alpha1.PhaseExecuting, "me", 2), true},
		{"this executor's re-send after an unknown outcome", action(v1alpha1.PhaseUnknown, "me", 1), action(v1alpha1.PhaseExecuting, "me", 2), true},
		{"another executor's claim", action("", "", 0), action(v1alpha1.PhaseExecuting, "other", 1), false},
		{"a deletion of an action this executor claimed", action(v1alpha1.PhaseExecuting, "me", 1), deleting, false},
		{"a resync of a claimed action", action(v1alpha1.PhaseExecuting, "me", 1), action(v1alpha1.PhaseExecuting, "me", 1), false},
		{"an outcome", action(v1alpha1.PhaseExecuting, "me", 1), action(v1alpha1.PhaseUnknown, "me", 1), false},
	} {
		if got := r.ownClaim(tc.before, tc.after); got != tc.skipsReconcile {
			t.Errorf("%s: ownClaim = %t, want %t", tc.name, got, tc.skipsReconcile)
		}
	}
}
