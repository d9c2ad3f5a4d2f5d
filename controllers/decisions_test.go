package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// decisionResult is a decisionStep flattened for comparison.
type decisionResult struct {
	Kind        string
	Reason      string
	AboutAction bool
	Recheck     bool
}

var decisionKinds = map[decisionKind]string{decisionWait: "wait", decisionRefuse: "refuse", decisionApplied: "applied",
	decisionApply: "apply", decisionRetry: "retry"}

func flatten(s decisionStep) decisionResult {
	return decisionResult{Kind: decisionKinds[s.kind], Reason: s.reason, AboutAction: s.aboutAction, Recheck: s.recheck}
}

// An approval is applied only to the action it names, while that action
// awaits one, about its request, unexpired, by a verified approver who is
// not its requester unless the tool allows it; each refusal names why, in
// that order, with no control plane.
func TestDecideApproval(t *testing.T) {
	const digest = "sha256:request"
	expired := metav1.NewTime(t0.Add(-time.Second))
	approval := func(opts ...func(*v1alpha1.ToolApproval)) *v1alpha1.ToolApproval {
		a := &v1alpha1.ToolApproval{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "approve-1001",
			Annotations: map[string]string{v1alpha1.DecidedByAnnotation: "alice"}},
			Spec: v1alpha1.ToolApprovalSpec{ActionName: "order-1001-charge", Decision: v1alpha1.Approved, RequestDigest: digest}}
		for _, o := range opts {
			o(a)
		}
		return a
	}
	awaiting := func(opts ...actionOption) *v1alpha1.ToolAction {
		a := newAction(v1alpha1.PhaseAwaitingApproval)
		a.UID = "uid-1"
		a.Status.RequestDigest = digest
		a.Annotations = map[string]string{v1alpha1.RequestedByAnnotation: "bob"}
		for _, o := range opts {
			o(a)
		}
		return a
	}
	requestedBy := func(who string) actionOption {
		return func(a *v1alpha1.ToolAction) { a.Annotations = map[string]string{v1alpha1.RequestedByAnnotation: who} }
	}
	decided := func(name string, d v1alpha1.ApprovalDecision) actionOption {
		return func(a *v1alpha1.ToolAction) {
			a.Status.Approval = &v1alpha1.ApprovalRecord{Name: name, Decision: d, RequestDigest: digest, DecidedBy: "carol"}
		}
	}
	tool := withTool(v1alpha1.KeyProtected).tool
	selfAllowed := tool.DeepCopy()
	selfAllowed.Spec.SelfApprovalAllowed = true
	notFound := &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound, message: `tool "charge" not found`}

	tests := []struct {
		name     string
		approval *v1alpha1.ToolApproval
		action   *v1alpha1.ToolAction
		tool     *v1alpha1.Tool
		toolErr  error
		want     decisionResult
	}{
		{"no such action: refused, told on the approval alone", approval(), nil, nil, nil,
			decisionResult{Kind: "refuse", Reason: ReasonActionNotFound}},
		{"another object under the name", approval(func(a *v1alpha1.ToolApproval) { a.Spec.ActionUID = "uid-0" }), awaiting(), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonActionReplaced}},
		{"recorded on the action before a crash: marked again", approval(), awaiting(decided("approve-1001", v1alpha1.Approved)), tool, nil,
			decisionResult{Kind: "applied"}},
		{"someone decided first", approval(), awaiting(decided("deny-1001", v1alpha1.Denied)), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonAlreadyDecided}},
		{"not accepted yet: waits", approval(), newAction(v1alpha1.PhasePending), nil, nil, decisionResult{Kind: "wait"}},
		{"finished without awaiting it", approval(), newAction(v1alpha1.PhaseSucceeded), nil, nil,
			decisionResult{Kind: "refuse", Reason: ReasonNotAwaitingApproval}},
		{"executing: applied if it starts to await one", approval(), newAction(v1alpha1.PhaseExecuting), nil, nil,
			decisionResult{Kind: "refuse", Reason: ReasonNotAwaitingApproval}},
		{"expired", approval(func(a *v1alpha1.ToolApproval) { a.Spec.ExpiresAt = &expired }), awaiting(), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonApprovalExpired, AboutAction: true}},
		{"no approver stamped", approval(func(a *v1alpha1.ToolApproval) { a.Annotations = nil }), awaiting(), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonApproverUnverified, AboutAction: true}},
		{"about another request", approval(func(a *v1alpha1.ToolApproval) { a.Spec.RequestDigest = "sha256:other" }), awaiting(), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonDigestMismatch, AboutAction: true}},
		{"the tool is gone: refused, looked at again", approval(), awaiting(), nil, notFound,
			decisionResult{Kind: "refuse", Reason: ReasonToolNotFound, AboutAction: true, Recheck: true}},
		{"the tool cannot be read: retried", approval(), awaiting(), nil, errors.New("connection refused"),
			decisionResult{Kind: "retry"}},
		{"expired wins over an unreadable tool", approval(func(a *v1alpha1.ToolApproval) { a.Spec.ExpiresAt = &expired }), awaiting(), nil, errors.New("connection refused"),
			decisionResult{Kind: "refuse", Reason: ReasonApprovalExpired, AboutAction: true}},
		{"no requester stamped", approval(), awaiting(requestedBy("")), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonRequesterUnverified, AboutAction: true}},
		{"the requester approves: refused", approval(), awaiting(requestedBy("alice")), tool, nil,
			decisionResult{Kind: "refuse", Reason: ReasonSelfApproval, AboutAction: true}},
		{"the requester approves where the tool allows it", approval(), awaiting(requestedBy("alice")), selfAllowed, nil,
			decisionResult{Kind: "apply"}},
		{"someone else approves", approval(), awaiting(), tool, nil, decisionResult{Kind: "apply"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideApproval(approvalFacts{approval: tt.approval, action: tt.action, tool: tt.tool, toolErr: tt.toolErr, now: t0})
			if diff := cmp.Diff(tt.want, flatten(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	// A few messages whole: they tell the approver what to do.
	golden := map[string]decisionStep{
		`the approval is for request sha256:other, but ToolAction "order-1001-charge" records request sha256:request: a decision about other parameters is never applied; approve sha256:request to dispatch it`: decideApproval(approvalFacts{
			approval: approval(func(a *v1alpha1.ToolApproval) { a.Spec.RequestDigest = "sha256:other" }), action: awaiting(), tool: tool, now: t0}),
		`alice requested ToolAction "order-1001-charge" and cannot approve it too: tool "charge" requires someone else's approval (selfApprovalAllowed is not set)`: decideApproval(approvalFacts{
			approval: approval(), action: awaiting(requestedBy("alice")), tool: tool, now: t0}),
	}
	for want, got := range golden {
		if got.message != want {
			t.Errorf("message %q, want %q", got.message, want)
		}
	}
}

// A resolution is applied only to the object and the attempt its resolver
// judged, while the action is Unknown or Escalated.
func TestDecideResolution(t *testing.T) {
	resolution := func(attempt int32, opts ...func(*v1alpha1.ToolResolution)) *v1alpha1.ToolResolution {
		r := &v1alpha1.ToolResolution{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "resolve-1001"},
			Spec: v1alpha1.ToolResolutionSpec{ActionName: "order-1001-charge", Attempt: attempt}}
		for _, o := range opts {
			o(r)
		}
		return r
	}
	unknown := func(opts ...actionOption) *v1alpha1.ToolAction {
		a := newAction(v1alpha1.PhaseUnknown, append([]actionOption{attempts(2)}, opts...)...)
		a.UID = "uid-1"
		return a
	}
	resolvedBefore := func(a *v1alpha1.ToolAction) {
		a.Status.History = append(a.Status.History, v1alpha1.Transition{Reason: ReasonResolved, Executor: "toolresolution/resolve-1001"})
	}
	tests := []struct {
		name       string
		resolution *v1alpha1.ToolResolution
		action     *v1alpha1.ToolAction
		want       decisionResult
	}{
		{"no such action", resolution(2), nil, decisionResult{Kind: "refuse", Reason: ReasonActionNotFound}},
		{"recorded on the action before a crash: marked again", resolution(2), func() *v1alpha1.ToolAction {
			a := newAction(v1alpha1.PhaseSucceeded, attempts(2))
			resolvedBefore(a)
			return a
		}(), decisionResult{Kind: "applied"}},
		{"another object under the name", resolution(2, func(r *v1alpha1.ToolResolution) { r.Spec.ActionUID = "uid-0" }), unknown(),
			decisionResult{Kind: "refuse", Reason: ReasonActionReplaced}},
		{"an earlier attempt judged", resolution(1), unknown(), decisionResult{Kind: "refuse", Reason: ReasonStaleAttempt}},
		{"not Unknown or Escalated", resolution(2), newAction(v1alpha1.PhaseSucceeded, attempts(2)), decisionResult{Kind: "refuse", Reason: ReasonNotResolvable}},
		{"Unknown: applied", resolution(2), unknown(), decisionResult{Kind: "apply"}},
		{"Escalated: applied", resolution(2), newAction(v1alpha1.PhaseEscalated, attempts(2)), decisionResult{Kind: "apply"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, flatten(decideResolution(tt.resolution, tt.action))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	stale := decideResolution(resolution(1), unknown())
	if want := `the resolution judged attempt 1 of ToolAction "order-1001-charge", which is at attempt 2 (Unknown) now: a finding about an earlier attempt is never applied to a later one, which may have applied; judge attempt 2 and create another resolution`; stale.message != want {
		t.Errorf("message %q, want %q", stale.message, want)
	}
}
