package controllers

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/keyhistory"
)

// beforeConnectResult is what rules.beforeConnect decided: "connect" (the
// action may be claimed), "retry" (an error, retried with backoff) or
// "record", with what the record then shows in its last history entry.
type beforeConnectResult struct {
	Kind        string
	Phase       v1alpha1.Phase
	Class       v1alpha1.ErrorClass
	Reason      string
	Message     string
	ExternalRef string
	// Retried is a recorded hold that comes back with backoff.
	Retried bool
}

func summarizeBeforeConnect(a *v1alpha1.ToolAction, t *transition, err error) beforeConnectResult {
	switch {
	case t == nil && err != nil:
		return beforeConnectResult{Kind: "retry", Message: err.Error()}
	case t == nil:
		return beforeConnectResult{Kind: "connect"}
	}
	next := a.DeepCopy()
	t.apply(next)
	last := next.Status.History[len(next.Status.History)-1]
	r := beforeConnectResult{Kind: "record", Phase: next.Status.Phase, Reason: last.Reason, Message: last.Message,
		ExternalRef: next.Status.ExternalRef, Retried: t.retry != nil}
	if e := next.Status.Error; e != nil {
		r.Class = e.Class
	}
	return r
}

// The rules of an attempt before it connects: what the key settled before,
// a compensation's original, and approvals, decided from facts read
// beforehand, in that order, with no control plane.
func TestBeforeConnect(t *testing.T) {
	const request, other = "sha256:request", "sha256:other"
	completed, deleted := metav1.NewTime(t0.Add(-2*time.Hour)), metav1.NewTime(t0.Add(-time.Hour))
	earlier := func(digest string, phase v1alpha1.Phase, class v1alpha1.ErrorClass) *earlierRecord {
		return earlierFrom(&keyhistory.Earlier{
			Record: v1alpha1.TombstoneRecord{RequestDigest: digest, Phase: phase, ErrorClass: class, ExternalRef: "ch_1",
				CompletionTime: completed, DeletionTime: deleted, Cause: v1alpha1.TombstoneCauseDeleted},
			Where: "Tombstone order-1001-charge",
		})
	}
	// archived is the key's earlier record as the archive keeps it.
	archived := func(digest string) *earlierRecord {
		rec := archive.Record{UID: "u-1001", Key: "order-1001-charge", RequestDigest: digest, Phase: v1alpha1.PhaseSucceeded,
			ExternalRef: "ch_1", CompletionTime: completed.Time, DeletionTime: deleted.Time, Cause: v1alpha1.TombstoneCauseRecordRetention}
		return earlierFrom(&keyhistory.Earlier{Record: rec.Tombstone(), Where: "the archived record of order-1001-charge (UID u-1001)", Archived: true})
	}
	original := func(phase v1alpha1.Phase, compensatedBy ...string) *compensated {
		a := newAction(phase)
		a.Name, a.Status.CompensatedBy = "order-1000-charge", compensatedBy
		return &compensated{name: a.Name, record: a}
	}
	buried := func(phase v1alpha1.Phase, class v1alpha1.ErrorClass) *compensated {
		return &compensated{name: "order-1000-charge", kept: earlierFrom(&keyhistory.Earlier{
			Record: v1alpha1.TombstoneRecord{Phase: phase, ErrorClass: class}, Where: "Tombstone order-1000-charge"})}
	}
	full := make([]string, v1alpha1.MaxCompensations)
	for i := range full {
		full[i] = fmt.Sprintf("refund-%02d", i)
	}
	approvalRequired := v1alpha1.TargetRecord{ApprovalRequired: true, Digest: "sha256:target"}
	invalidParameters := &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters, message: "amount: must be at least 1"}
	rejected := func(reason, message string) beforeConnectResult {
		return beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseFailed, Class: v1alpha1.ErrorClassInvalidInput, Reason: reason, Message: message}
	}
	settledAt := "this key settled the same request before: %s at 2026-12-01T10:00:00Z, external reference ch_1 " +
		"(Tombstone order-1001-charge: the record was deleted at 2026-12-01T11:00:00Z); it is not dispatched again"
	pending := beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseAccepted, Reason: ReasonCompensationPending, Retried: true,
		Message: `waiting for ToolAction "order-1000-charge" to succeed before compensating it (it is Executing)`}

	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		facts  attemptFacts
		want   beforeConnectResult
	}{
		{"nothing holds the action: it connects", newAction(""), attemptFacts{requestDigest: request}, beforeConnectResult{Kind: "connect"}},
		{"invalid parameters: rejected before anything else", newAction(""),
			attemptFacts{refused: invalidParameters, earlier: earlier(request, v1alpha1.PhaseSucceeded, ""), original: original(v1alpha1.PhaseExecuting), target: approvalRequired},
			rejected(ReasonInvalidParameters, "amount: must be at least 1")},
		{"parameters unreadable: retried", newAction(""), attemptFacts{refused: errors.New("etcdserver: request timed out")},
			beforeConnectResult{Kind: "retry", Message: "etcdserver: request timed out"}},

		// The key's earlier life.
		{"the key settled this request before (Succeeded): answered from it, never dispatched", newAction(""),
			attemptFacts{requestDigest: request, earlier: earlier(request, v1alpha1.PhaseSucceeded, "")},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseSucceeded, Reason: ReasonSettledByTombstone, ExternalRef: "ch_1",
				Message: fmt.Sprintf(settledAt, v1alpha1.PhaseSucceeded)}},
		{"the key settled this request before (Failed, Denied): the same failure", newAction(""),
			attemptFacts{requestDigest: request, earlier: earlier(request, v1alpha1.PhaseFailed, v1alpha1.ErrorClassDenied)},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseFailed, Class: v1alpha1.ErrorClassDenied, Reason: ReasonSettledByTombstone, ExternalRef: "ch_1",
				Message: fmt.Sprintf(settledAt, v1alpha1.PhaseFailed)}},
		{"the key settled another request: DuplicateConflict, never dispatched", newAction(""),
			attemptFacts{requestDigest: request, earlier: earlier(other, v1alpha1.PhaseSucceeded, "")},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseFailed, Class: v1alpha1.ErrorClassDuplicateConflict, Reason: ReasonTombstoneConflict,
				Message: "this key settled a different request before (digest sha256:other, Succeeded at 2026-12-01T10:00:00Z; Tombstone order-1001-charge); " +
					"this request, digest sha256:request, is not dispatched: use a new name for a new intent"}},
		{"the archive keeps the key's record of this request: answered from it, never dispatched", newAction(""),
			attemptFacts{requestDigest: request, earlier: archived(request)},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseSucceeded, Reason: ReasonSettledByArchive, ExternalRef: "ch_1",
				Message: "this key settled the same request before: Succeeded at 2026-12-01T10:00:00Z, external reference ch_1 " +
					"(the archived record of order-1001-charge (UID u-1001): the record was retired by the tool's recordRetention at 2026-12-01T11:00:00Z); it is not dispatched again"}},
		{"the archive keeps the key's record of another request: DuplicateConflict, never dispatched", newAction(""),
			attemptFacts{requestDigest: request, earlier: archived(other)},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseFailed, Class: v1alpha1.ErrorClassDuplicateConflict, Reason: ReasonArchiveConflict,
				Message: "this key settled a different request before (digest sha256:other, Succeeded at 2026-12-01T10:00:00Z; the archived record of order-1001-charge (UID u-1001)); " +
					"this request, digest sha256:request, is not dispatched: use a new name for a new intent"}},
		{"the archive cannot check the key: it waits, with backoff, before a compensation's wait and an approval", newAction(""),
			attemptFacts{requestDigest: request, unchecked: errors.New("the archive cannot be used: connection refused"),
				original: original(v1alpha1.PhaseExecuting), target: approvalRequired},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseAccepted, Reason: ReasonArchiveUnavailable, Retried: true,
				Message: "waiting for the archive to check key order-1001-charge before the first dispatch: the archive cannot be used: connection refused"}},
		{"the ledger is bound to an archive this manager lacks: it waits, before the key's earlier record, a compensation and an approval", newAction(""),
			attemptFacts{requestDigest: request, unbound: errors.New("this ledger keeps its keys in archive a-1 (since 2026-12-01T09:00:00Z), but this manager runs without an archive"),
				earlier: earlier(request, v1alpha1.PhaseSucceeded, ""), original: original(v1alpha1.PhaseExecuting), target: approvalRequired},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseAccepted, Reason: ReasonArchiveRequired, Retried: true,
				Message: "waiting to check key order-1001-charge: this ledger keeps its keys in archive a-1 (since 2026-12-01T09:00:00Z), but this manager runs without an archive"}},
		{"invalid parameters are rejected though the ledger is bound to an archive this manager lacks", newAction(""),
			attemptFacts{refused: invalidParameters, unbound: errors.New("bound elsewhere")},
			rejected(ReasonInvalidParameters, "amount: must be at least 1")},
		{"invalid parameters are rejected though the archive cannot check the key", newAction(""),
			attemptFacts{refused: invalidParameters, unchecked: errors.New("connection refused")},
			rejected(ReasonInvalidParameters, "amount: must be at least 1")},
		{"the key's earlier record comes before a compensation's wait and an approval", newAction(""),
			attemptFacts{requestDigest: request, earlier: earlier(request, v1alpha1.PhaseSucceeded, ""), original: original(v1alpha1.PhaseExecuting), target: approvalRequired},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseSucceeded, Reason: ReasonSettledByTombstone, ExternalRef: "ch_1",
				Message: fmt.Sprintf(settledAt, v1alpha1.PhaseSucceeded)}},

		// A compensation's original.
		{"compensation: the original succeeded: it connects", newAction(""), attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseSucceeded)},
			beforeConnectResult{Kind: "connect"}},
		{"compensation: the original is in flight: it waits, with backoff", newAction(""), attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseExecuting)}, pending},
		{"compensation: the original is not accepted yet: it waits", newAction(""), attemptFacts{requestDigest: request, original: original("")},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseAccepted, Reason: ReasonCompensationPending, Retried: true,
				Message: `waiting for ToolAction "order-1000-charge" to succeed before compensating it (it is Pending)`}},
		{"compensation: a wait for the original comes before an approval", newAction(""),
			attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseExecuting), target: approvalRequired}, pending},
		{"compensation: the original failed: rejected", newAction(""), attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseFailed)},
			rejected(ReasonCompensationInvalid, `spec.compensates: ToolAction "order-1000-charge" failed, so there is no effect to compensate`)},
		{"compensation: the original lists as many compensations as it holds: a new one is rejected", newAction(""),
			attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseSucceeded, full...)},
			rejected(ReasonCompensationInvalid, `spec.compensates: ToolAction "order-1000-charge" has 16 compensations already, the most it records`)},
		{"compensation: the original's list is full but names this one: it connects", newAction(""),
			attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseSucceeded, append(full[1:], "order-1001-charge")...)},
			beforeConnectResult{Kind: "connect"}},
		{"compensation: the original's list is full and this one was sent before: it goes on", newAction(v1alpha1.PhaseRetryScheduled),
			attemptFacts{requestDigest: request, original: original(v1alpha1.PhaseSucceeded, full...)}, beforeConnectResult{Kind: "connect"}},
		{"compensation: the original's record is gone and its tombstone says it succeeded: it connects", newAction(""),
			attemptFacts{requestDigest: request, original: buried(v1alpha1.PhaseSucceeded, "")}, beforeConnectResult{Kind: "connect"}},
		{"compensation: the original's tombstone says it failed: rejected", newAction(""),
			attemptFacts{requestDigest: request, original: buried(v1alpha1.PhaseFailed, v1alpha1.ErrorClassDenied)},
			rejected(ReasonCompensationInvalid, `spec.compensates: ToolAction "order-1000-charge" failed (Tombstone order-1000-charge says Denied), so there is no effect to compensate`)},
		{"compensation: the archive says the original failed: rejected", newAction(""),
			attemptFacts{requestDigest: request, original: &compensated{name: "order-1000-charge", kept: earlierFrom(&keyhistory.Earlier{
				Record: v1alpha1.TombstoneRecord{Phase: v1alpha1.PhaseFailed, ErrorClass: v1alpha1.ErrorClassDenied},
				Where:  "the archived record of order-1000-charge (UID u-1000)", Archived: true})}},
			rejected(ReasonCompensationInvalid, `spec.compensates: ToolAction "order-1000-charge" failed (the archived record of order-1000-charge (UID u-1000) says Denied), so there is no effect to compensate`)},
		{"compensation: neither the original nor its tombstone exists: rejected", newAction(""),
			attemptFacts{requestDigest: request, original: &compensated{name: "order-1000-charge"}},
			rejected(ReasonCompensationInvalid, `spec.compensates: ToolAction "order-1000-charge" not found in namespace "shop", and no tombstone of it either`)},

		// Approvals (rules.approvalGate has the table of its own).
		{"approval required and none applied: held", newAction(""), attemptFacts{requestDigest: request, target: approvalRequired},
			beforeConnectResult{Kind: "record", Phase: v1alpha1.PhaseAwaitingApproval, Reason: ReasonAwaitingApproval,
				Message: `tool "charge" requires an approval of request sha256:request before it is dispatched (a ToolApproval of this key and digest)`}},
		{"the target cannot be digested: retried", newAction(""), attemptFacts{requestDigest: request, targetErr: errors.New("unsupported value")},
			beforeConnectResult{Kind: "retry", Message: `cannot digest the target of tool "charge": unsupported value`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decided, err := atT0().beforeConnect(tt.action, tt.facts)
			if diff := cmp.Diff(tt.want, summarizeBeforeConnect(tt.action, decided, err)); diff != "" {
				t.Errorf("beforeConnect (-want +got):\n%s", diff)
			}
		})
	}
}
