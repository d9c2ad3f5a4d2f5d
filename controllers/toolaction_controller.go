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
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/adapter"
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
	// Clock is injected so that leases and backoff can be tested.
	Clock clock.PassiveClock
	// Executor identifies this reconciler in claims; unique per process.
	Executor string
	// LeaseGrace is added to the tool's timeout to give the claim's lease: the
	// time an executor has to dispatch an attempt and record its outcome.
	LeaseGrace time.Duration
	// MaxConcurrentReconciles is the number of actions handled in parallel.
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolledger.dev,resources=tools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one action a step towards its outcome. Terminal actions are
// never reprocessed, and an action whose outcome is unknown is never re-sent.
func (r *ToolActionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var action v1alpha1.ToolAction
	if err := r.Client.Get(ctx, req.NamespacedName, &action); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	switch action.Status.Phase {
	case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return ctrl.Result{}, nil
	case v1alpha1.PhaseUnknown:
		// The request may have applied; only a lookup or a human may settle it.
		return ctrl.Result{}, nil
	case v1alpha1.PhaseExecuting:
		return r.reconcileExecuting(ctx, &action)
	case v1alpha1.PhaseRetryScheduled:
		if wait := action.Status.NextAttemptTime.Sub(r.Clock.Now()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	return r.attempt(ctx, &action)
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
	msg := "the executor's claim lapsed before it recorded an outcome; the request may have been sent, so it is not re-sent"
	if claim != nil {
		msg = fmt.Sprintf("executor %s's claim on attempt %d lapsed at %s before it recorded an outcome; the request may have been sent, so it is not re-sent",
			claim.Executor, claim.Attempt, claim.LeaseExpiry.UTC().Format(time.RFC3339))
	}
	setUnknown(next, now, ReasonLeaseExpired, msg)
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ctrl.Result{}, ignoreConflict(err, "cannot record lapsed claim of %s", action.Name)
	}
	r.Recorder.Eventf(next, nil, "Warning", ReasonLeaseExpired, "Reconcile", msg)
	outcomes.WithLabelValues(string(v1alpha1.PhaseUnknown), string(v1alpha1.ErrorClassOutcomeUnknown)).Inc()
	return ctrl.Result{}, nil
}

// attempt validates the request, claims the next attempt and dispatches it.
func (r *ToolActionReconciler) attempt(ctx context.Context, action *v1alpha1.ToolAction) (ctrl.Result, error) {
	tool, err := r.resolveTool(ctx, action)
	if err != nil {
		var invalid *invalidError
		if errors.As(err, &invalid) {
			return ctrl.Result{}, r.reject(ctx, action, invalid)
		}
		return ctrl.Result{}, err
	}
	requestDigest, parameters, err := r.verifyRequest(action, tool)
	if err != nil {
		var invalid *invalidError
		if errors.As(err, &invalid) {
			return ctrl.Result{}, r.reject(ctx, action, invalid)
		}
		return ctrl.Result{}, err
	}
	executor, err := r.Connector.Connect(ctx, tool)
	if err != nil {
		return ctrl.Result{}, r.waitForTool(ctx, action, requestDigest, err)
	}

	claimed, ok, err := r.claim(ctx, action, tool, requestDigest)
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
func (r *ToolActionReconciler) claim(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, requestDigest string) (*v1alpha1.ToolAction, bool, error) {
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
	next.Status.NextAttemptTime = nil
	setExecuting(next, now, fmt.Sprintf("attempt %d claimed by %s", attempt, r.Executor))

	if err := r.Client.Status().Update(ctx, next); err != nil {
		if apierrors.IsConflict(err) {
			claimConflicts.Inc()
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
		eventType = "Warning"
		reason    string
		message   string
		permanent *adapter.PermanentError
		retryable *adapter.RetryableError
		ambiguous *adapter.AmbiguousError
	)
	switch {
	case dispatchErr == nil:
		eventType, reason = "Normal", ReasonSucceeded
		message = "the downstream applied the request"
		if outcome.ExternalRef != "" {
			message += "; external reference " + outcome.ExternalRef
		}
		mutate = func(a *v1alpha1.ToolAction) { setSucceeded(a, now, outcome) }
	case errors.As(dispatchErr, &permanent):
		class := v1alpha1.ErrorClassInvalidInput
		if permanent.Kind == adapter.Denied {
			class = v1alpha1.ErrorClassDenied
		}
		reason, message = permanent.Reason, permanent.Error()
		mutate = func(a *v1alpha1.ToolAction) { setFailed(a, now, class, reason, message) }
	case errors.As(dispatchErr, &retryable):
		reason, message = retryable.Reason, retryable.Error()
		if claimed.Status.Attempts >= maxAttempts(tool) {
			message = fmt.Sprintf("%d of %d attempts failed; last: %s", claimed.Status.Attempts, maxAttempts(tool), message)
			mutate = func(a *v1alpha1.ToolAction) {
				setFailed(a, now, v1alpha1.ErrorClassRetriesExhausted, reason, message)
			}
			break
		}
		delay := backoff(tool, claimed.Status.Attempts, retryable.RetryAfter, rand.Float64)
		result.RequeueAfter = delay
		mutate = func(a *v1alpha1.ToolAction) { setRetryScheduled(a, now, now.Add(delay), reason, message) }
	case errors.As(dispatchErr, &ambiguous):
		reason, message = ambiguous.Reason, ambiguous.Error()+"; the request may have applied, so it is not re-sent"
		mutate = func(a *v1alpha1.ToolAction) { setUnknown(a, now, reason, message) }
	default:
		// An adapter that cannot say what happened leaves the outcome unknown.
		reason, message = ReasonUnclassifiedError, dispatchErr.Error()+"; the request may have applied, so it is not re-sent"
		mutate = func(a *v1alpha1.ToolAction) { setUnknown(a, now, reason, message) }
	}

	recorded, err := r.writeOutcome(ctx, claimed, mutate)
	if err != nil || recorded == nil {
		return ctrl.Result{}, err
	}
	outcomes.WithLabelValues(string(recorded.Status.Phase), errorClass(recorded)).Inc()
	r.Recorder.Eventf(recorded, nil, eventType, reason, "Dispatch", "attempt %d: %s", claimed.Status.Attempts, message)
	for _, warning := range outcome.Warnings {
		r.Recorder.Eventf(recorded, nil, "Warning", ReasonIncompleteResponse, "Dispatch", warning)
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

// holdsClaim reports whether the record still belongs to this attempt: it is
// Executing under the claim, or Unknown because the claim lapsed meanwhile,
// in which case this attempt's answer settles what the lapse left open.
func holdsClaim(action *v1alpha1.ToolAction, claim *v1alpha1.ExecutorClaim) bool {
	current := action.Status.Claim
	phase := action.Status.Phase
	return (phase == v1alpha1.PhaseExecuting || phase == v1alpha1.PhaseUnknown) &&
		current != nil && claim != nil && current.Executor == claim.Executor && current.Attempt == claim.Attempt
}

// resolveTool finds the referenced Tool. A miss in the cache is confirmed
// with the API server, so that a Tool applied together with the action is not
// mistaken for a missing one.
func (r *ToolActionReconciler) resolveTool(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	key := types.NamespacedName{Namespace: action.Namespace, Name: action.Spec.ToolRef.Name}
	var tool v1alpha1.Tool
	err := r.Client.Get(ctx, key, &tool)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, &tool)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
			message: fmt.Sprintf("tool %q not found in namespace %q", key.Name, key.Namespace)}
	case err != nil:
		return nil, fmt.Errorf("cannot get tool %s: %w", key, err)
	}
	return &tool, nil
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
	requestDigest, err := digest.Compute(digest.Request{
		Tenant:     action.Namespace,
		Tool:       tool.Name,
		Operation:  tool.Spec.Operation,
		Version:    tool.Spec.Version,
		Parameters: parameters,
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

// reject records a final failure found before anything was dispatched.
func (r *ToolActionReconciler) reject(ctx context.Context, action *v1alpha1.ToolAction, invalid *invalidError) error {
	next := action.DeepCopy()
	setRejected(next, r.Clock.Now(), invalid.class, invalid.reason, invalid.message)
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return ignoreConflict(err, "cannot record rejection of %s", action.Name)
	}
	outcomes.WithLabelValues(string(v1alpha1.PhaseFailed), string(invalid.class)).Inc()
	r.Recorder.Eventf(next, nil, "Warning", invalid.reason, "Validate", invalid.message)
	return nil
}

// waitForTool records that the action is accepted but its tool cannot be
// used yet (a missing Secret, say); the returned error requeues with backoff.
func (r *ToolActionReconciler) waitForTool(ctx context.Context, action *v1alpha1.ToolAction, requestDigest string, connectErr error) error {
	next := action.DeepCopy()
	message := fmt.Sprintf("tool %q cannot be used yet: %v", action.Spec.ToolRef.Name, connectErr)
	setWaiting(next, r.Clock.Now(), requestDigest, ReasonToolNotReady, message)
	if !statusEqual(action, next) {
		if err := r.Client.Status().Update(ctx, next); err != nil {
			return ignoreConflict(err, "cannot record waiting state of %s", action.Name)
		}
		r.Recorder.Eventf(next, nil, "Warning", ReasonToolNotReady, "Connect", message)
	}
	return fmt.Errorf("%s", message)
}

// SetupWithManager registers the reconciler.
func (r *ToolActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ToolAction{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("toolaction").
		Complete(r)
}

type invalidError struct {
	class   v1alpha1.ErrorClass
	reason  string
	message string
}

func (e *invalidError) Error() string { return e.message }

func ignoreConflict(err error, format string, args ...any) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A newer version of the record exists; its watch event brings us back.
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
