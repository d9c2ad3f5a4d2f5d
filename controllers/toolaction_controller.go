// Package controllers holds the ToolAction state machine. It reads the ledger
// (ToolAction status), claims an attempt with a compare-and-set status write,
// dispatches it through an adapter and records the outcome. It never speaks
// HTTP itself; adapters never write status.
package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/adapter"
	"github.com/toolledger/toolledger/internal/catalog"
	"github.com/toolledger/toolledger/pkg/digest"
)

// ToolActionReconciler drives ToolActions to exactly one downstream effect.
//
// Several reconcilers, in one process or many, may run against the same API
// server without leader election: an attempt is dispatched only by the
// reconciler whose claim (a status update carrying the resourceVersion it
// read) the API server accepted. Every other writer gets a conflict and
// dispatches nothing.
type ToolActionReconciler struct {
	// Client reads from the informer cache and writes to the API server.
	Client client.Client
	// APIReader reads the API server directly, to confirm what the cache lacks.
	APIReader client.Reader
	// Connector turns a Tool into an executor.
	Connector adapter.Connector
	// Recorder emits events on transitions.
	Recorder events.EventRecorder
	// SuccessEvents also records a Normal event for every dispatch that
	// succeeds. Off by default: it is one more API write per action, and the
	// action's status history already holds the transition.
	SuccessEvents bool
	// Deleting delivers finished actions being deleted (see DeletionWatch).
	Deleting <-chan event.GenericEvent
	// Clock is injected so that leases and backoff can be tested.
	Clock clock.PassiveClock
	// Executor identifies this reconciler in claims; unique per process.
	Executor string
	// LeaseGrace is added to the tool's timeout to give the claim's lease: the
	// time an executor has to dispatch an attempt and record its outcome.
	LeaseGrace time.Duration
	// MaxConcurrentReconciles is the number of actions handled in parallel.
	MaxConcurrentReconciles int
	// OperatorNamespace holds the Secrets of ClusterTools.
	OperatorNamespace string
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions/finalizers,verbs=update
// +kubebuilder:rbac:groups=toolledger.dev,resources=tools;clustertools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one action a step towards its outcome. The whole state
// machine reads top to bottom from here: terminal actions are never
// reprocessed, an unknown outcome is looked up (or, where the tool's class
// allows, re-sent under the same key) and escalated when nothing proves it.
func (r *ToolActionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var action v1alpha1.ToolAction
	// The cache holds active actions only (ActiveActions): a finished one,
	// requeued for its key's expiry or reported by the DeletionWatch, is read
	// from the API server.
	if err := r.getConfirmed(ctx, req.NamespacedName, &action); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !action.DeletionTimestamp.IsZero() && !mayHaveApplied(action.Status.Phase) {
		return ctrl.Result{}, r.release(ctx, &action)
	}
	switch action.Status.Phase {
	case v1alpha1.PhaseSucceeded:
		if err := r.linkCompensation(ctx, &action); err != nil {
			return ctrl.Result{}, err
		}
		return r.expire(ctx, &action)
	case v1alpha1.PhaseFailed:
		return r.expire(ctx, &action)
	case v1alpha1.PhaseEscalated:
		// Escalated actions wait for a ToolResolution.
		return ctrl.Result{}, nil
	case v1alpha1.PhaseUnknown:
		return r.reconcileUnknown(ctx, &action)
	case v1alpha1.PhaseExecuting:
		return r.reconcileExecuting(ctx, &action)
	case v1alpha1.PhaseRetryScheduled:
		if next := action.Status.NextAttemptTime; next != nil && next.After(r.Clock.Now()) {
			return ctrl.Result{RequeueAfter: next.Sub(r.Clock.Now())}, nil
		}
	}
	return r.attempt(ctx, &action, ReasonExecuting)
}

// mayHaveApplied reports whether an effect may be under way or may have
// happened without a record of its outcome: such actions keep their
// finalizer through a deletion until the outcome is known.
func mayHaveApplied(phase v1alpha1.Phase) bool {
	return phase == v1alpha1.PhaseExecuting || phase == v1alpha1.PhaseUnknown || phase == v1alpha1.PhaseEscalated
}

// reconcileExecuting handles an action claimed earlier. While the lease runs
// its executor may still be dispatching; once it lapses the request may or
// may not have been sent, so the outcome is Unknown, never a blind re-send.
func (r *ToolActionReconciler) reconcileExecuting(ctx context.Context, action *v1alpha1.ToolAction) (ctrl.Result, error) {
	claim := action.Status.Claim
	now := r.Clock.Now()
	if claim != nil {
		if wait := claim.LeaseExpiry.Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	next := action.DeepCopy()
	msg := "the executor's claim lapsed before it recorded an outcome; the request may have been sent"
	if claim != nil {
		msg = fmt.Sprintf("executor %s's claim on attempt %d lapsed at %s before it recorded an outcome; the request may have been sent",
			claim.Executor, claim.Attempt, claim.LeaseExpiry.UTC().Format(time.RFC3339))
	}
	// The lapsed attempt had its whole lease to be processed downstream, so
	// the first lookup may run at once.
	setUnknown(next, now, r.Executor, ReasonLeaseExpired, msg)
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ctrl.Result{}, ignoreConflict(err, "cannot record lapsed claim of %s", action.Name)
	}
	r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, ReasonLeaseExpired, "Reconcile", msg)
	outcomes.WithLabelValues(string(v1alpha1.PhaseUnknown), string(v1alpha1.ErrorClassOutcomeUnknown)).Inc()
	return ctrl.Result{}, nil
}

// reconcileUnknown settles an outcome that may or may not have applied,
// following the tool's class (see policyForUnknown): look the key up,
// re-send under the same key, or escalate to a human. Lookups that cannot
// tell are repeated with backoff until the tool's deadline.
func (r *ToolActionReconciler) reconcileUnknown(ctx context.Context, action *v1alpha1.ToolAction) (ctrl.Result, error) {
	now := r.Clock.Now()
	tool, err := r.resolveTool(ctx, action)
	if err != nil {
		var invalid *invalidError
		if errors.As(err, &invalid) {
			return ctrl.Result{}, r.escalate(ctx, action, invalid.reason, invalid.message+"; the outcome cannot be looked up")
		}
		return ctrl.Result{}, err
	}
	deleting := !action.DeletionTimestamp.IsZero()
	spent := action.Status.Attempts >= maxAttempts(tool)
	policy := policyForUnknown(tool)
	if next := action.Status.NextAttemptTime; policy != escalate && next != nil && next.After(now) {
		return ctrl.Result{RequeueAfter: next.Sub(now)}, nil
	}

	switch policy {
	case escalate:
		why := "a NonRepeatable tool is never repeated or settled automatically"
		if tool.Spec.IdempotencyClass != v1alpha1.NonRepeatable {
			why = fmt.Sprintf("a %s tool without a lookup call is never repeated automatically", tool.Spec.IdempotencyClass)
		}
		return ctrl.Result{}, r.escalate(ctx, action, ReasonOutcomeUnknown, fmt.Sprintf(
			"the outcome of attempt %d is unknown and %s; resolve it with a ToolResolution", action.Status.Attempts, why))
	case redispatch:
		if deleting || spent {
			return ctrl.Result{}, r.escalate(ctx, action, ReasonOutcomeUnknown, fmt.Sprintf(
				"the outcome of attempt %d is unknown and no further attempt is made (deleting: %t, attempts spent: %t)", action.Status.Attempts, deleting, spent))
		}
		return r.attempt(ctx, action, ReasonRedispatch)
	}

	outcome, lookupErr := r.lookup(ctx, tool, action)
	switch {
	case lookupErr == nil:
		next := action.DeepCopy()
		setSucceeded(next, now, r.Executor, ReasonFoundByLookup, outcome)
		if err := r.Client.Status().Update(ctx, next); err != nil {
			return ctrl.Result{}, ignoreConflict(err, "cannot record the found outcome of %s", action.Name)
		}
		outcomes.WithLabelValues(string(v1alpha1.PhaseSucceeded), "").Inc()
		r.Recorder.Eventf(next, nil, corev1.EventTypeNormal, ReasonFoundByLookup, "Lookup",
			"the downstream has the request of key %s: external reference %s", next.Status.IdempotencyKey, outcome.ExternalRef)
		return r.expireUnder(ctx, next, tool)
	case errors.Is(lookupErr, adapter.ErrNotFound):
		if deleting {
			// Nothing applied and nobody wants it any more.
			return ctrl.Result{}, r.release(ctx, action)
		}
		if spent {
			next := action.DeepCopy()
			setFailed(next, now, r.Executor, v1alpha1.ErrorClassRetriesExhausted, ReasonAbsentByLookup, fmt.Sprintf(
				"a lookup shows attempt %d did not apply, and all %d attempts are used", action.Status.Attempts, maxAttempts(tool)))
			return ctrl.Result{}, ignoreConflict(r.Client.Status().Update(ctx, next), "cannot record the failure of %s", action.Name)
		}
		return r.attempt(ctx, action, ReasonAbsentByLookup)
	}

	deadline := action.Status.UnknownSince.Add(unknownDeadline(tool))
	if action.Status.UnknownSince == nil {
		deadline = now.Add(unknownDeadline(tool))
	}
	if !now.Before(deadline) {
		return ctrl.Result{}, r.escalate(ctx, action, ReasonOutcomeUnknown, fmt.Sprintf(
			"no lookup proved the outcome of attempt %d within the tool's deadline of %s (%d lookups; last: %v); resolve it with a ToolResolution",
			action.Status.Attempts, unknownDeadline(tool), action.Status.Lookups+1, lookupErr))
	}
	delay := min(backoff(tool, action.Status.Lookups+1, 0, rand.Float64), deadline.Sub(now))
	next := action.DeepCopy()
	setLookupScheduled(next, now, now.Add(delay), fmt.Sprintf("lookup %d could not tell whether attempt %d applied: %v; next lookup in %s",
		action.Status.Lookups+1, action.Status.Attempts, lookupErr, delay.Round(time.Millisecond)))
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ctrl.Result{}, ignoreConflict(err, "cannot schedule the next lookup of %s", action.Name)
	}
	return ctrl.Result{RequeueAfter: delay}, nil
}

func (r *ToolActionReconciler) lookup(ctx context.Context, tool *v1alpha1.Tool, action *v1alpha1.ToolAction) (adapter.Outcome, error) {
	executor, err := r.Connector.Connect(ctx, tool)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("tool %q cannot be used: %w", tool.Name, err)
	}
	key := action.Status.IdempotencyKey
	if key == "" {
		key = v1alpha1.IdempotencyKey(action.Namespace, action.Name)
	}
	return executor.Lookup(ctx, key)
}

// escalate hands an action to a human: Stalled=True, phase Escalated, an
// event, and a place in the queue of actions awaiting a ToolResolution.
func (r *ToolActionReconciler) escalate(ctx context.Context, action *v1alpha1.ToolAction, reason, message string) error {
	next := action.DeepCopy()
	setEscalated(next, r.Clock.Now(), r.Executor, reason, message)
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ignoreConflict(err, "cannot escalate %s", action.Name)
	}
	outcomes.WithLabelValues(string(v1alpha1.PhaseEscalated), string(v1alpha1.ErrorClassOutcomeUnknown)).Inc()
	r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, ReasonEscalated, "Reconcile", message)
	return nil
}

// attempt validates the request, claims the next attempt and dispatches it.
// reason says why this attempt happens, for the history.
func (r *ToolActionReconciler) attempt(ctx context.Context, action *v1alpha1.ToolAction, reason string) (ctrl.Result, error) {
	tool, err := r.resolveTool(ctx, action)
	if err != nil {
		return ctrl.Result{}, r.rejectIfInvalid(ctx, action, err)
	}
	requestDigest, parameters, err := r.verifyRequest(action, tool)
	if err != nil {
		return ctrl.Result{}, r.rejectIfInvalid(ctx, action, err)
	}
	if action.Spec.Compensates != "" {
		if err := r.checkCompensationTarget(ctx, action); err != nil {
			var pending *pendingError
			if errors.As(err, &pending) {
				return ctrl.Result{}, r.wait(ctx, action, requestDigest, ReasonCompensationPending, pending.message)
			}
			return ctrl.Result{}, r.rejectIfInvalid(ctx, action, err)
		}
	}
	if tool.Spec.ApprovalRequired {
		// No approval can be granted yet (ToolApproval is not served), so
		// the action waits, visibly, and is never dispatched.
		return ctrl.Result{}, r.awaitApproval(ctx, action, requestDigest)
	}
	executor, err := r.Connector.Connect(ctx, tool)
	if err != nil {
		return ctrl.Result{}, r.wait(ctx, action, requestDigest, ReasonToolNotReady,
			fmt.Sprintf("tool %q cannot be used yet: %v", action.Spec.ToolRef.Name, err))
	}
	if !controllerutil.ContainsFinalizer(action, v1alpha1.Finalizer) {
		// The finalizer must be in place before anything can be in flight.
		action = action.DeepCopy()
		controllerutil.AddFinalizer(action, v1alpha1.Finalizer)
		if err := r.Client.Update(ctx, action); err != nil {
			if apierrors.IsConflict(err) {
				claimConflicts.WithLabelValues("finalizer").Inc()
			}
			return ctrl.Result{}, ignoreConflict(err, "cannot add the finalizer to %s", action.Name)
		}
	}

	claimed, ok, err := r.claim(ctx, action, tool, requestDigest, reason)
	if err != nil || !ok {
		return ctrl.Result{}, err
	}
	// The dispatch and its record outlive a manager shutdown: an attempt that
	// finishes while the process drains leaves a known outcome, not a lapsed claim.
	dispatchCtx := context.WithoutCancel(ctx)
	outcome, err := executor.Execute(dispatchCtx, adapter.Request{
		IdempotencyKey: claimed.Status.IdempotencyKey,
		Parameters:     parameters,
		Provenance:     claimed.Spec.Provenance,
	})
	return r.recordOutcome(dispatchCtx, claimed, tool, outcome, err)
}

// claim writes the Executing phase with the resourceVersion the action was
// read at. The API server accepts exactly one such write per version, so only
// one executor ever dispatches a given attempt; a conflict means another
// executor (or a newer version of the record) won, and nothing is dispatched.
func (r *ToolActionReconciler) claim(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, requestDigest, reason string) (*v1alpha1.ToolAction, bool, error) {
	now := r.Clock.Now()
	next := action.DeepCopy()
	attempt := next.Status.Attempts + 1
	next.Status.Attempts = attempt
	next.Status.RequestDigest = requestDigest
	next.Status.IdempotencyKey = v1alpha1.IdempotencyKey(action.Namespace, action.Name)
	next.Status.Claim = &v1alpha1.ExecutorClaim{
		Executor:    r.Executor,
		Attempt:     attempt,
		LeaseExpiry: metaTime(now.Add(toolTimeout(tool) + r.LeaseGrace)),
	}
	if next.Status.StartTime == nil {
		next.Status.StartTime = metaTimePtr(now)
	}
	setExecuting(next, now, r.Executor, reason, fmt.Sprintf("attempt %d claimed by %s", attempt, r.Executor))

	if err := r.Client.Status().Update(ctx, next); err != nil {
		if apierrors.IsConflict(err) {
			claimConflicts.WithLabelValues("claim").Inc()
			log.FromContext(ctx).V(1).Info("Claim lost to a newer version", "attempt", attempt)
			return nil, false, nil
		}
		return nil, false, client.IgnoreNotFound(fmt.Errorf("cannot claim %s/%s: %w", action.Namespace, action.Name, err))
	}
	return next, true, nil
}

// recordOutcome maps the adapter's answer to the ledger. This is the only
// place where adapter errors become error classes.
func (r *ToolActionReconciler) recordOutcome(ctx context.Context, claimed *v1alpha1.ToolAction, tool *v1alpha1.Tool, outcome adapter.Outcome, dispatchErr error) (ctrl.Result, error) {
	now := r.Clock.Now()
	var (
		mutate    func(*v1alpha1.ToolAction)
		result    ctrl.Result
		eventType = corev1.EventTypeWarning
		reason    string
		message   string
		permanent *adapter.PermanentError
		retryable *adapter.RetryableError
		ambiguous *adapter.AmbiguousError
	)
	switch {
	case dispatchErr == nil:
		eventType, reason = corev1.EventTypeNormal, ReasonSucceeded
		message = "the downstream applied the request"
		if outcome.ExternalRef != "" {
			message += "; external reference " + outcome.ExternalRef
		}
		mutate = func(a *v1alpha1.ToolAction) { setSucceeded(a, now, r.Executor, ReasonSucceeded, outcome) }
	case errors.As(dispatchErr, &permanent):
		class := v1alpha1.ErrorClassInvalidInput
		if permanent.Kind == adapter.Denied {
			class = v1alpha1.ErrorClassDenied
		}
		reason, message = permanent.Reason, permanent.Error()
		mutate = func(a *v1alpha1.ToolAction) { setFailed(a, now, r.Executor, class, reason, message) }
	case errors.As(dispatchErr, &retryable):
		reason, message = retryable.Reason, retryable.Error()
		if claimed.Status.Attempts >= maxAttempts(tool) {
			if hadUnknownOutcome(claimed) {
				// An earlier attempt may have applied (and a 409 may mean it
				// is still being applied): "failed" would be a guess.
				reason = ReasonOutcomeUnknown
				message = fmt.Sprintf("all %d attempts are used, but an earlier attempt's outcome was unknown and may have applied (last: %s); resolve it with a ToolResolution",
					maxAttempts(tool), message)
				mutate = func(a *v1alpha1.ToolAction) { setEscalated(a, now, r.Executor, reason, message) }
				break
			}
			message = fmt.Sprintf("%d of %d attempts failed; last: %s", claimed.Status.Attempts, maxAttempts(tool), message)
			mutate = func(a *v1alpha1.ToolAction) {
				setFailed(a, now, r.Executor, v1alpha1.ErrorClassRetriesExhausted, reason, message)
			}
			break
		}
		delay := backoff(tool, claimed.Status.Attempts, retryable.RetryAfter, rand.Float64)
		result.RequeueAfter = delay
		mutate = func(a *v1alpha1.ToolAction) { setRetryScheduled(a, now, now.Add(delay), r.Executor, reason, message) }
	default:
		// An adapter that cannot say what happened leaves the outcome unknown.
		reason, message = ReasonUnclassifiedError, dispatchErr.Error()
		if errors.As(dispatchErr, &ambiguous) {
			reason, message = ambiguous.Reason, ambiguous.Error()
		}
		message += "; the request may have applied, so it is not re-sent blindly"
		// The downstream may still be working on the request: the first
		// lookup waits one tool timeout, so that it does not report absent
		// what is about to be committed.
		settle := toolTimeout(tool)
		result.RequeueAfter = settle
		mutate = func(a *v1alpha1.ToolAction) {
			setUnknown(a, now, r.Executor, reason, message)
			a.Status.NextAttemptTime = metaTimePtr(now.Add(settle))
		}
	}

	recorded, err := r.writeOutcome(ctx, claimed, mutate)
	if err != nil || recorded == nil {
		return ctrl.Result{}, err
	}
	if recorded.Status.Phase == v1alpha1.PhaseSucceeded {
		if err := r.linkCompensation(ctx, recorded); err != nil {
			return ctrl.Result{}, err
		}
	}
	outcomes.WithLabelValues(string(recorded.Status.Phase), errorClass(recorded)).Inc()
	if eventType == corev1.EventTypeWarning || r.SuccessEvents {
		r.Recorder.Eventf(recorded, nil, eventType, reason, "Dispatch", "attempt %d: %s", claimed.Status.Attempts, message)
	}
	for _, warning := range outcome.Warnings {
		r.Recorder.Eventf(recorded, nil, corev1.EventTypeWarning, ReasonIncompleteResponse, "Dispatch", warning)
	}
	if recorded.Status.Phase.IsTerminal() {
		// The finished action leaves the cache; its key's expiry is
		// scheduled here, by the executor that finished it.
		return r.expireUnder(ctx, recorded, tool)
	}
	return result, nil
}

// writeOutcome records an attempt's outcome. The record may have changed
// since the claim (labels, annotations), so on a conflict it is re-read and
// the outcome applied again as long as the claim is still this attempt's.
// It returns nil when the record moved on without this outcome.
func (r *ToolActionReconciler) writeOutcome(ctx context.Context, claimed *v1alpha1.ToolAction, mutate func(*v1alpha1.ToolAction)) (*v1alpha1.ToolAction, error) {
	next := claimed.DeepCopy()
	mutate(next)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := r.Client.Status().Update(ctx, next)
		if !apierrors.IsConflict(err) {
			return err
		}
		var current v1alpha1.ToolAction
		if getErr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claimed), &current); getErr != nil {
			return getErr
		}
		if !holdsClaim(&current, claimed.Status.Claim) {
			next = nil
			return nil
		}
		next = current.DeepCopy()
		mutate(next)
		return err
	})
	if err != nil {
		// The claim's lease ends the attempt: the action then becomes Unknown.
		return nil, fmt.Errorf("cannot record the outcome of attempt %d of %s/%s: %w", claimed.Status.Attempts, claimed.Namespace, claimed.Name, err)
	}
	if next == nil {
		log.FromContext(ctx).Info("Outcome not recorded: the record moved on", "attempt", claimed.Status.Attempts)
	}
	return next, nil
}

// hadUnknownOutcome reports whether an earlier attempt of the action ended
// with an unknown outcome: it may have applied, whatever later attempts say.
func hadUnknownOutcome(action *v1alpha1.ToolAction) bool {
	return slices.ContainsFunc(action.Status.History, func(t v1alpha1.Transition) bool {
		return t.To == v1alpha1.PhaseUnknown
	})
}

// holdsClaim reports whether the record still belongs to this attempt: it is
// Executing under the claim, or Unknown because the claim lapsed meanwhile,
// in which case this attempt's answer settles what the lapse left open.
func holdsClaim(action *v1alpha1.ToolAction, claim *v1alpha1.ExecutorClaim) bool {
	current := action.Status.Claim
	phase := action.Status.Phase
	return (phase == v1alpha1.PhaseExecuting || phase == v1alpha1.PhaseUnknown) &&
		current != nil && claim != nil && current.Executor == claim.Executor && current.Attempt == claim.Attempt
}

// resolveTool finds the referenced Tool, or the ClusterTool if it admits
// the action's namespace. A ClusterTool is returned as a Tool in the
// operator's namespace, where its Secrets live. A miss in the cache is
// confirmed with the API server, so that a tool applied together with the
// action is not mistaken for a missing one.
func (r *ToolActionReconciler) resolveTool(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	ref := action.Spec.ToolRef
	if ref.Kind == v1alpha1.KindClusterTool {
		return r.resolveClusterTool(ctx, action)
	}
	key := types.NamespacedName{Namespace: action.Namespace, Name: ref.Name}
	var tool v1alpha1.Tool
	if err := r.getConfirmed(ctx, key, &tool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
				message: fmt.Sprintf("tool %q not found in namespace %q", key.Name, key.Namespace)}
		}
		return nil, fmt.Errorf("cannot get tool %s: %w", key, err)
	}
	return &tool, nil
}

func (r *ToolActionReconciler) resolveClusterTool(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	name := action.Spec.ToolRef.Name
	var clusterTool v1alpha1.ClusterTool
	if err := r.getConfirmed(ctx, types.NamespacedName{Name: name}, &clusterTool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
				message: fmt.Sprintf("clustertool %q not found", name)}
		}
		return nil, fmt.Errorf("cannot get clustertool %s: %w", name, err)
	}
	var namespace corev1.Namespace
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: action.Namespace}, &namespace); err != nil {
		return nil, fmt.Errorf("cannot get namespace %s: %w", action.Namespace, err)
	}
	admitted, err := admits(clusterTool.Spec.NamespaceSelector, namespace.Labels)
	if err != nil {
		return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotAdmitted,
			message: fmt.Sprintf("clustertool %q has an invalid namespaceSelector: %v", name, err)}
	}
	if !admitted {
		return nil, &invalidError{class: v1alpha1.ErrorClassDenied, reason: ReasonToolNotAdmitted,
			message: fmt.Sprintf("clustertool %q does not admit namespace %q", name, action.Namespace)}
	}
	return &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Name: clusterTool.Name, Namespace: r.OperatorNamespace},
		Spec:       clusterTool.Spec.ToolSpec,
	}, nil
}

func admits(selector *metav1.LabelSelector, namespaceLabels map[string]string) (bool, error) {
	if selector == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(namespaceLabels)), nil
}

// getConfirmed reads from the cache and confirms a miss with the API server.
func (r *ToolActionReconciler) getConfirmed(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	err := r.Client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, obj)
	}
	return err
}

// verifyRequest computes the request digest and checks it against the
// client's and, on a retry, against the one recorded at the first attempt. It
// returns the digest and the parameters to send.
func (r *ToolActionReconciler) verifyRequest(action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (string, json.RawMessage, error) {
	parameters := json.RawMessage("{}")
	if len(action.Spec.Parameters) > 0 {
		encoded, err := json.Marshal(action.Spec.Parameters)
		if err != nil {
			return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters,
				message: fmt.Sprintf("spec.parameters cannot be encoded: %v", err)}
		}
		parameters = encoded
	}
	schema, err := catalog.CompileSchema(tool.Spec.ParametersSchema)
	if err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidToolContract,
			message: fmt.Sprintf("tool %q: %v", tool.Name, err)}
	}
	if err := schema.Validate(parameters); err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters, message: err.Error()}
	}
	consequential, err := catalog.Consequential(parameters, tool.Spec.ConsequentialFields)
	if err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters, message: err.Error()}
	}
	requestDigest, err := digest.Compute(digest.Request{
		Tenant:     action.Namespace,
		Tool:       tool.Name,
		Operation:  tool.Spec.Operation,
		Version:    tool.Spec.Version,
		Parameters: consequential,
	})
	if err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters,
			message: fmt.Sprintf("spec.parameters: %v", err)}
	}
	if want := action.Spec.RequestDigest; want != "" && want != requestDigest {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonRequestDigestMismatch,
			message: fmt.Sprintf("spec.requestDigest %s does not match the request's digest %s (tenant %q, tool %q, operation %q, version %q)",
				want, requestDigest, action.Namespace, tool.Name, tool.Spec.Operation, tool.Spec.Version)}
	}
	if recorded := action.Status.RequestDigest; recorded != "" && recorded != requestDigest {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassDuplicateConflict, reason: ReasonRequestChanged,
			message: fmt.Sprintf("the request's digest changed from %s to %s since its first attempt (the tool's operation or version changed); it is not retried as a different request",
				recorded, requestDigest)}
	}
	return requestDigest, parameters, nil
}

// rejectIfInvalid records a final failure found before anything was
// dispatched; other errors are returned for a retry with backoff.
func (r *ToolActionReconciler) rejectIfInvalid(ctx context.Context, action *v1alpha1.ToolAction, err error) error {
	var invalid *invalidError
	if !errors.As(err, &invalid) {
		return err
	}
	next := action.DeepCopy()
	setRejected(next, r.Clock.Now(), r.Executor, invalid.class, invalid.reason, invalid.message)
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ignoreConflict(err, "cannot record rejection of %s", action.Name)
	}
	outcomes.WithLabelValues(string(v1alpha1.PhaseFailed), string(invalid.class)).Inc()
	r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, invalid.reason, "Validate", invalid.message)
	return nil
}

// wait records that the action is accepted but cannot be dispatched yet (a
// missing Secret, a compensation whose original is still in flight); the
// returned error requeues with backoff.
func (r *ToolActionReconciler) wait(ctx context.Context, action *v1alpha1.ToolAction, requestDigest, reason, message string) error {
	next := action.DeepCopy()
	setWaiting(next, r.Clock.Now(), requestDigest, reason, message)
	if !statusEqual(action, next) {
		if err := r.Client.Status().Update(ctx, next); err != nil {
			return ignoreConflict(err, "cannot record waiting state of %s", action.Name)
		}
		r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, reason, "Wait", message)
	}
	return errors.New(message)
}

// awaitApproval records that the action waits for an approval.
func (r *ToolActionReconciler) awaitApproval(ctx context.Context, action *v1alpha1.ToolAction, requestDigest string) error {
	next := action.DeepCopy()
	now := r.Clock.Now()
	message := fmt.Sprintf("tool %q requires an approval of request %s before it is dispatched", action.Spec.ToolRef.Name, requestDigest)
	setWaiting(next, now, requestDigest, ReasonAwaitingApproval, message)
	set(next, now, v1alpha1.ConditionApproved, metav1.ConditionFalse, ReasonAwaitingApproval, message)
	if statusEqual(action, next) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ignoreConflict(err, "cannot record that %s awaits approval", action.Name)
	}
	r.Recorder.Eventf(next, nil, corev1.EventTypeNormal, ReasonAwaitingApproval, "Approve", message)
	return nil
}

// expire deletes a finished action once its tool's keyRetention has passed
// since completion, freeing the key; it requeues until then.
func (r *ToolActionReconciler) expire(ctx context.Context, action *v1alpha1.ToolAction) (ctrl.Result, error) {
	if action.Status.CompletionTime == nil {
		return ctrl.Result{}, nil
	}
	tool, err := r.resolveTool(ctx, action)
	var invalid *invalidError
	switch {
	case errors.As(err, &invalid):
		// Without its tool there is no retention to apply: keep the record.
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	return r.expireUnder(ctx, action, tool)
}

// expireUnder is expire with the action's tool already resolved, as it is
// by the reconcile that records the outcome.
func (r *ToolActionReconciler) expireUnder(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (ctrl.Result, error) {
	if action.Status.CompletionTime == nil || tool.Spec.KeyRetention == nil {
		return ctrl.Result{}, nil
	}
	if wait := action.Status.CompletionTime.Add(tool.Spec.KeyRetention.Duration).Sub(r.Clock.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.Client.Delete(ctx, action, client.Preconditions{UID: &action.UID}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("cannot delete expired %s: %w", action.Name, err))
	}
	log.FromContext(ctx).Info("Deleted a finished action whose key retention passed", "retention", tool.Spec.KeyRetention.Duration)
	return ctrl.Result{}, nil
}

// release removes the finalizer from an action whose effect is settled or
// never started, letting a pending deletion finish.
func (r *ToolActionReconciler) release(ctx context.Context, action *v1alpha1.ToolAction) error {
	if !controllerutil.ContainsFinalizer(action, v1alpha1.Finalizer) {
		return nil
	}
	// A patch, guarded by the resourceVersion: only the finalizer changes.
	next := action.DeepCopy()
	controllerutil.RemoveFinalizer(next, v1alpha1.Finalizer)
	patch := client.MergeFromWithOptions(action, client.MergeFromWithOptimisticLock{})
	return ignoreConflict(r.Client.Patch(ctx, next, patch), "cannot remove the finalizer of %s", action.Name)
}

// checkCompensationTarget requires the action being compensated to exist and
// to have succeeded: there is nothing to offset otherwise. While it is still
// in flight the compensation waits.
func (r *ToolActionReconciler) checkCompensationTarget(ctx context.Context, action *v1alpha1.ToolAction) error {
	key := types.NamespacedName{Namespace: action.Namespace, Name: action.Spec.Compensates}
	var original v1alpha1.ToolAction
	err := r.Client.Get(ctx, key, &original)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, &original)
	}
	switch {
	case apierrors.IsNotFound(err):
		return &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid,
			message: fmt.Sprintf("spec.compensates: ToolAction %q not found in namespace %q", key.Name, key.Namespace)}
	case err != nil:
		return fmt.Errorf("cannot get ToolAction %s: %w", key, err)
	}
	switch original.Status.Phase {
	case v1alpha1.PhaseSucceeded:
		return nil
	case v1alpha1.PhaseFailed:
		return &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid,
			message: fmt.Sprintf("spec.compensates: ToolAction %q failed, so there is no effect to compensate", key.Name)}
	default:
		return &pendingError{message: fmt.Sprintf("waiting for ToolAction %q to succeed before compensating it (it is %s)", key.Name, phaseOrPending(original.Status.Phase))}
	}
}

// linkCompensation records a succeeded compensation on the original. It runs
// again on every reconcile of the succeeded compensation until the original
// shows it, so a crash between the two writes loses nothing.
func (r *ToolActionReconciler) linkCompensation(ctx context.Context, action *v1alpha1.ToolAction) error {
	if action.Spec.Compensates == "" {
		return nil
	}
	key := types.NamespacedName{Namespace: action.Namespace, Name: action.Spec.Compensates}
	var cached v1alpha1.ToolAction
	if err := r.Client.Get(ctx, key, &cached); err == nil && slices.Contains(cached.Status.CompensatedBy, action.Name) {
		return nil
	}
	var linked *v1alpha1.ToolAction
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var original v1alpha1.ToolAction
		if err := r.APIReader.Get(ctx, key, &original); err != nil {
			return err
		}
		if !setCompensatedBy(&original, r.Clock.Now(), r.Executor, action.Name) {
			return nil
		}
		if err := r.Client.Status().Update(ctx, &original); err != nil {
			return err
		}
		linked = &original
		return nil
	})
	if err != nil {
		return client.IgnoreNotFound(fmt.Errorf("cannot record compensation %s on %s: %w", action.Name, key, err))
	}
	if linked != nil {
		r.Recorder.Eventf(linked, action, corev1.EventTypeNormal, ReasonCompensated, "Compensate",
			"compensated by ToolAction %s; the original effect happened and stays recorded", action.Name)
	}
	return nil
}

func phaseOrPending(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return v1alpha1.PhasePending
	}
	return p
}

// ownClaim reports an update that records a new claim of this executor. The
// reconcile that wrote it goes on to dispatch and record the outcome (or
// returns an error and is retried), so the claim needs no reconcile of its
// own; one would read a cache that has not caught up with the outcome and
// leave a requeue behind. Any other change to a claimed action, a deletion
// for one, still triggers a reconcile.
func (r *ToolActionReconciler) ownClaim(previous, current client.Object) bool {
	before, ok := previous.(*v1alpha1.ToolAction)
	if !ok {
		return false
	}
	after, ok := current.(*v1alpha1.ToolAction)
	if !ok {
		return false
	}
	claim := after.Status.Claim
	if after.Status.Phase != v1alpha1.PhaseExecuting || claim == nil || claim.Executor != r.Executor {
		return false
	}
	return before.Status.Phase != v1alpha1.PhaseExecuting || before.Status.Claim == nil || before.Status.Claim.Attempt != claim.Attempt
}

// SetupWithManager registers the reconciler.
func (r *ToolActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		// An action leaving the cache is finishing (its executor scheduled
		// what follows) or gone: neither needs a reconcile. Deletions of
		// finished actions arrive from the DeletionWatch.
		For(&v1alpha1.ToolAction{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return !r.ownClaim(e.ObjectOld, e.ObjectNew) },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		WatchesRawSource(source.Channel(r.Deleting, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			// A missing Secret or an unreachable API is retried at least
			// once a minute, so a fix is picked up without a watch on Secrets.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, time.Minute),
		}).
		Named("toolaction").
		Complete(r)
}

type invalidError struct {
	class   v1alpha1.ErrorClass
	reason  string
	message string
}

func (e *invalidError) Error() string { return e.message }

// pendingError: the action cannot be dispatched yet, but may be later.
type pendingError struct{ message string }

func (e *pendingError) Error() string { return e.message }

func ignoreConflict(err error, format string, args ...any) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A newer version of the record exists; its watch event brings us back.
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
