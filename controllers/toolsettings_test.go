package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

func TestBackoff(t *testing.T) {
	tool := &v1alpha1.Tool{Spec: v1alpha1.ToolSpec{Retry: v1alpha1.RetryPolicy{
		InitialBackoff: &metav1.Duration{Duration: time.Second},
		MaxBackoff:     &metav1.Duration{Duration: 10 * time.Second},
	}}}
	noJitter := func() float64 { return 0 }
	fullJitter := func() float64 { return 1 }
	tests := []struct {
		name       string
		attempts   int32
		retryAfter time.Duration
		random     func() float64
		want       time.Duration
	}{
		{name: "first retry", attempts: 1, random: noJitter, want: time.Second},
		{name: "doubles", attempts: 2, random: noJitter, want: 2 * time.Second},
		{name: "doubles again", attempts: 4, random: noJitter, want: 8 * time.Second},
		{name: "capped", attempts: 5, random: noJitter, want: 10 * time.Second},
		{name: "capped without overflow", attempts: 90, random: noJitter, want: 10 * time.Second},
		{name: "jitter takes off at most half", attempts: 2, random: fullJitter, want: time.Second},
		{name: "Retry-After is a lower bound", attempts: 1, retryAfter: 7 * time.Second, random: noJitter, want: 7 * time.Second},
		{name: "Retry-After below the backoff", attempts: 4, retryAfter: time.Second, random: noJitter, want: 8 * time.Second},
		{name: "Retry-After capped by maxBackoff", attempts: 1, retryAfter: time.Hour, random: noJitter, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backoff(tool, tt.attempts, tt.retryAfter, tt.random); got != tt.want {
				t.Errorf("backoff(attempts=%d, retryAfter=%s) = %s, want %s", tt.attempts, tt.retryAfter, got, tt.want)
			}
		})
	}
}

func TestBackoffDefaults(t *testing.T) {
	if got := backoff(&v1alpha1.Tool{}, 1, 0, func() float64 { return 0 }); got != defaultInitialBackoff {
		t.Errorf("backoff without a policy = %s, want %s", got, defaultInitialBackoff)
	}
	if got := maxAttempts(&v1alpha1.Tool{}); got != defaultMaxAttempts {
		t.Errorf("maxAttempts without a policy = %d, want %d", got, defaultMaxAttempts)
	}
}

func TestPolicyForUnknown(t *testing.T) {
	tests := []struct {
		class     v1alpha1.IdempotencyClass
		hasLookup bool
		want      unknownPolicy
	}{
		{v1alpha1.ReadOnly, true, lookUp},
		{v1alpha1.ReadOnly, false, redispatch},
		{v1alpha1.NaturallyIdempotent, true, lookUp},
		{v1alpha1.NaturallyIdempotent, false, redispatch},
		{v1alpha1.KeyProtected, true, lookUp},
		{v1alpha1.KeyProtected, false, redispatch},
		{v1alpha1.Compensatable, true, lookUp},
		{v1alpha1.Compensatable, false, escalate},
		{v1alpha1.NonRepeatable, true, escalate},
		{v1alpha1.NonRepeatable, false, escalate},
	}
	for _, tt := range tests {
		if got := policyForUnknown(tt.class, adapter.Capabilities{Lookup: tt.hasLookup}); got != tt.want {
			t.Errorf("policyForUnknown(%s, lookup=%t) = %d, want %d", tt.class, tt.hasLookup, got, tt.want)
		}
	}
}

func TestHistoryIsBounded(t *testing.T) {
	a := &v1alpha1.ToolAction{}
	now := time.Now()
	for i := range v1alpha1.MaxHistory + 5 {
		a.Status.Attempts = int32(i)
		setRetryScheduled(a, now, now, "test", "HTTP503", "busy")
		setExecuting(a, now, "test", ReasonExecuting, "again")
	}
	if got := len(a.Status.History); got != v1alpha1.MaxHistory {
		t.Fatalf("history has %d entries, want %d", got, v1alpha1.MaxHistory)
	}
	total := 2 * (v1alpha1.MaxHistory + 5)
	if got, want := a.Status.DroppedTransitions, int32(total-v1alpha1.MaxHistory); got != want {
		t.Errorf("droppedTransitions = %d, want %d", got, want)
	}
	last := a.Status.History[len(a.Status.History)-1]
	if last.To != v1alpha1.PhaseExecuting || last.Attempt != int32(v1alpha1.MaxHistory+4) {
		t.Errorf("last transition = %+v, want the newest", last)
	}
}
