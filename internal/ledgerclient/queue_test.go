package ledgerclient

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func queued(namespace, name string, phase v1alpha1.Phase, created time.Duration, unknownSince *metav1.Time) v1alpha1.ToolAction {
	return v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, CreationTimestamp: at(created)},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status:     v1alpha1.ToolActionStatus{Phase: phase, UnknownSince: unknownSince, Attempts: 1},
	}
}

func TestBuildQueueOrdersOldestFirst(t *testing.T) {
	// Created long ago, but unknown only for a minute: it waits since then.
	recentlyUnknown := queued("shop", "old-but-recently-unknown", v1alpha1.PhaseUnknown, -time.Hour, timePtr(-time.Minute))
	recentlyUnknown.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassOutcomeUnknown, Reason: "Timeout", Message: "no answer"}
	escalated := queued("shop", "escalated", v1alpha1.PhaseEscalated, -20*time.Minute, timePtr(-10*time.Minute))
	waiting := queued("billing", "waiting", v1alpha1.PhaseAccepted, -5*time.Minute, nil)
	waiting.Status.Conditions = []metav1.Condition{{
		Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: "CompensationTargetPending", Message: "waiting for order-1",
	}}
	// Listed again in a later phase: it shows once, as last listed.
	advanced := escalated
	advanced.Status.Lookups = 3

	queue := BuildQueue(lastSightings([]v1alpha1.ToolAction{waiting, recentlyUnknown, escalated, advanced}), now)

	var names []string
	for _, item := range queue.Items {
		names = append(names, item.Name)
	}
	if got, want := strings.Join(names, " "), "escalated waiting old-but-recently-unknown"; got != want {
		t.Fatalf("queue order = %q, want %q", got, want)
	}
	first := queue.Items[0]
	if first.AgeSeconds != 600 || first.Lookups != 3 || !first.Since.Equal(timePtr(-10*time.Minute)) {
		t.Errorf("escalated item = %+v, want 600s since unknownSince and the last sighting's 3 lookups", first)
	}
	if w := queue.Items[1]; w.AgeSeconds != 300 || w.Reason != "CompensationTargetPending" || w.Message != "waiting for order-1" {
		t.Errorf("accepted item = %+v, want its age from creation and the Reconciling reason", w)
	}
	if u := queue.Items[2]; u.Reason != "Timeout" || u.Message != "no answer" {
		t.Errorf("unknown item = %+v, want the error's reason and message", u)
	}

}
