package controllers

import (
	"errors"
	"fmt"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// decisionStep is what the rules make of a person's decision about an
// action (a ToolApproval, a ToolResolution), from facts read beforehand.
type decisionStep struct {
	kind decisionKind
	// reason and message say why a decision is refused.
	reason, message string
	// aboutAction: the refusal concerns an action that awaits the
	// decision, and is told on the action too.
	aboutAction bool
	// recheck: the refusal may change without any watched object
	// changing (the action's tool cannot be resolved now).
	recheck bool
	// err is a fact that could not be read, retried with backoff.
	err error
}

type decisionKind int

const (
	// decisionWait: nothing to do until the action changes.
	decisionWait decisionKind = iota
	// decisionRefuse: the decision is not applied; its Applied condition
	// says why.
	decisionRefuse
	// decisionApplied: applied before (a crash, a failed mark): what
	// follows is scheduled again and the decision marked.
	decisionApplied
	// decisionApply: the Ledger records it on the action.
	decisionApply
	// decisionRetry: a fact could not be read.
	decisionRetry
)

// refused is the step of a decision that is not applied, and why.
func refused(reason, message string) decisionStep {
	return decisionStep{kind: decisionRefuse, reason: reason, message: message}
}

// approvalFacts is what an approval is decided from: the action it names
// (nil when there is none), that action's tool (or why it cannot be
// found), and the time.
type approvalFacts struct {
	approval *v1alpha1.ToolApproval
	action   *v1alpha1.ToolAction
	tool     *v1alpha1.Tool
	toolErr  error
	now      time.Time
}

// decideApproval applies an approval to an action only while it awaits
// one, about its request digest, unexpired, by a verified approver other
// than the requester (unless the tool allows self-approval).
func decideApproval(f approvalFacts) decisionStep {
	approval, action := f.approval, f.action
	if action == nil {
		// An approval may come first (applied with its action, say): the
		// action's creation brings it back.
		return refused(ReasonActionNotFound, fmt.Sprintf("ToolAction %q not found in namespace %q; the approval is applied if it is created and awaits approval",
			approval.Spec.ActionName, approval.Namespace))
	}
	if uid := approval.Spec.ActionUID; uid != "" && uid != action.UID {
		return refused(ReasonActionReplaced, fmt.Sprintf(
			"the approval is for ToolAction %q with UID %s, which was deleted; the ToolAction of that name now is another object (UID %s), created again, and needs a decision of its own",
			action.Name, uid, action.UID))
	}
	if decided := action.Status.Approval; decided != nil {
		if decided.Name == approval.Name && decided.Decision == approval.Spec.Decision && decided.RequestDigest == approval.Spec.RequestDigest {
			return decisionStep{kind: decisionApplied}
		}
		return refused(ReasonAlreadyDecided, fmt.Sprintf("ToolAction %q was already %s by %s (ToolApproval %s)",
			action.Name, decisionVerb(decided.Decision), decided.DecidedBy, decided.Name))
	}
	switch phase := action.Status.Phase; {
	case phase == "" || phase == v1alpha1.PhasePending:
		// Not accepted yet: it awaits approval, if at all, once its digest
		// is known, and that change brings the approval back.
		return decisionStep{kind: decisionWait}
	case phase.IsTerminal():
		return refused(ReasonNotAwaitingApproval, fmt.Sprintf("ToolAction %q is %s: it finished without awaiting this approval", action.Name, phase))
	case phase != v1alpha1.PhaseAwaitingApproval:
		return refused(ReasonNotAwaitingApproval, fmt.Sprintf("ToolAction %q is %s and does not await an approval; the approval is applied if it starts to", action.Name, phase))
	}
	step := approvalRefusal(f)
	step.aboutAction = step.kind == decisionRefuse
	return step
}

// approvalRefusal says why an approval cannot be applied to an action that
// awaits one; decisionApply when it can.
func approvalRefusal(f approvalFacts) decisionStep {
	approval, action := f.approval, f.action
	if exp := approval.Spec.ExpiresAt; exp != nil && !f.now.Before(exp.Time) {
		return refused(ReasonApprovalExpired, fmt.Sprintf("the approval expired at %s before it was applied", exp.UTC().Format(time.RFC3339)))
	}
	approver := approval.Annotations[v1alpha1.DecidedByAnnotation]
	if approver == "" {
		return refused(ReasonApproverUnverified, "the approval has no "+v1alpha1.DecidedByAnnotation+
			" annotation: the API server stamps the approver only where the identity admission policies are installed (config/admission/identity_policy.yaml)")
	}
	if want := action.Status.RequestDigest; approval.Spec.RequestDigest != want {
		return refused(ReasonDigestMismatch, fmt.Sprintf(
			"the approval is for request %s, but ToolAction %q records request %s: a decision about other parameters is never applied; approve %s to dispatch it",
			approval.Spec.RequestDigest, action.Name, want, want))
	}
	var invalid *invalidError
	switch {
	case errors.As(f.toolErr, &invalid):
		step := refused(invalid.reason, invalid.message)
		step.recheck = true
		return step
	case f.toolErr != nil:
		return decisionStep{kind: decisionRetry, err: f.toolErr}
	}
	tool := f.tool
	if tool.Spec.SelfApprovalAllowed {
		return decisionStep{kind: decisionApply}
	}
	switch requester := action.Annotations[v1alpha1.RequestedByAnnotation]; requester {
	case "":
		return refused(ReasonRequesterUnverified, fmt.Sprintf(
			"ToolAction %q has no %s annotation, so separation of duties cannot be checked (tool %q does not set selfApprovalAllowed)",
			action.Name, v1alpha1.RequestedByAnnotation, tool.Name))
	case approver:
		return refused(ReasonSelfApproval, fmt.Sprintf(
			"%s requested ToolAction %q and cannot approve it too: tool %q requires someone else's approval (selfApprovalAllowed is not set)",
			approver, action.Name, tool.Name))
	}
	return decisionStep{kind: decisionApply}
}

// decideResolution applies a resolution to the action it names only while
// that action is Unknown or Escalated, and only about the object and the
// attempt its resolver judged.
func decideResolution(resolution *v1alpha1.ToolResolution, action *v1alpha1.ToolAction) decisionStep {
	if action == nil {
		return refused(ReasonActionNotFound, fmt.Sprintf("ToolAction %q not found in namespace %q", resolution.Spec.ActionName, resolution.Namespace))
	}
	if appliedTo(action, resolutionActor(resolution)) {
		return decisionStep{kind: decisionApplied}
	}
	if uid := resolution.Spec.ActionUID; uid != "" && uid != action.UID {
		return refused(ReasonActionReplaced, fmt.Sprintf(
			"the resolution is about ToolAction %q with UID %s, which was deleted; the ToolAction of that name now is another object (UID %s) and needs a resolution of its own",
			action.Name, uid, action.UID))
	}
	if judged, now := resolution.Spec.Attempt, action.Status.Attempts; judged != now {
		return refused(ReasonStaleAttempt, fmt.Sprintf(
			"the resolution judged attempt %d of ToolAction %q, which is at attempt %d (%s) now: a finding about an earlier attempt is never applied to a later one, which may have applied; judge attempt %d and create another resolution",
			judged, action.Name, now, phaseOrPending(action.Status.Phase), now))
	}
	if phase := action.Status.Phase; phase != v1alpha1.PhaseUnknown && phase != v1alpha1.PhaseEscalated {
		return refused(ReasonNotResolvable, fmt.Sprintf("ToolAction %q is %s; only Unknown or Escalated actions take a resolution", action.Name, phaseOrPending(phase)))
	}
	return decisionStep{kind: decisionApply}
}
