// Package controllers holds the ToolAction state machine. The rules
// (decide.go, transitions.go) say what to do next with an action and what an
// adapter's answer means, without I/O, from facts read beforehand (facts.go);
// one file per step carries them out (attempt, lookup, compensation,
// retention, deletion), and every transition, the claim included, is
// written by one writer, the Ledger (ledger.go).
// The controller never speaks to a downstream itself: adapters do, and
// adapters never write status.
package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/dispatch"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/requeue"
	"github.com/toolledger/toolledger/internal/retention"
	"github.com/toolledger/toolledger/internal/shard"
	"github.com/toolledger/toolledger/pkg/adapter"
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
	// Adapters are the adapters tools may name.
	Adapters *adapter.Registry
	// Recorder emits events on transitions.
	Recorder events.EventRecorder
	// Clock is injected so that leases and backoff can be tested.
	Clock clock.PassiveClock
	// Executor identifies this reconciler in claims; unique per process.
	Executor string
	// LeaseGrace is added to the tool's timeout to give the claim's lease: the
	// time an executor has to dispatch an attempt and record its outcome.
	LeaseGrace time.Duration
	// LeaseMargin is how much earlier than its lease's end an executor
	// stops sending an attempt: the bound on how far the replicas' clocks
	// may disagree. It is less than LeaseGrace.
	LeaseMargin time.Duration
	// MaxConcurrentReconciles is the number of actions handled in parallel.
	MaxConcurrentReconciles int
	// OperatorNamespace holds the Secrets of ClusterTools.
	OperatorNamespace string
	// Pacer bounds the rate of retention work; nil leaves it unbounded.
	Pacer *retention.Pacer
	// Retention are the retentions of a tool that sets none: with an
	// archive, how long finished records stay in etcd and keys are kept.
	Retention retention.Defaults
	// Dispatcher makes the downstream calls, off the reconcile workers.
	Dispatcher *dispatch.Dispatcher
	// Ledger writes every transition, the claim included.
	Ledger *Ledger
	// Tools finds the tool an action names.
	Tools *Tools
	// TrustCallerTraceContext has the spans of an action's calls continue
	// the trace its caller supplied (the traceparent annotation, the
	// provenance), and its events carry that context. Otherwise, as a
	// tenant may name any trace, the spans start traces of their own that
	// link to it, and the events carry none.
	TrustCallerTraceContext bool
	// Shards says which active actions this manager handles; nil handles
	// every one.
	Shards *shard.Members
	// Queue is the one way back into the controller's work queue, and
	// holds each key for one reconcile, or one call, at a time.
	Queue *requeue.Queue
	// Archive keeps finished records and their keys outside etcd; nil
	// keeps keys in Tombstones.
	Archive *archive.Store
	// Binding says whether the ledger's archive binding lets this manager
	// check a new key, and keep records in its archive.
	Binding *archivebinding.Guard
	// History keeps a key's earlier life: in the archive when the manager
	// has one, else in Tombstones.
	History keyhistory.History
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=toolledger.dev,resources=toolactions/status,verbs=update
// +kubebuilder:rbac:groups=toolledger.dev,resources=tools;clustertools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one action a step towards its outcome: the rules decide
// the step (decide.go), and perform carries it out.
func (r *ToolActionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// A slot the dispatcher held for this action and this reconcile did
	// not use goes to the next action waiting.
	defer r.Dispatcher.Forget(req.NamespacedName, time.Now())
	var action v1alpha1.ToolAction
	// The cache holds active actions only (ActiveActions): a finished one,
	// requeued for its key's expiry or reported by the DeletionWatch, is read
	// from the API server, and so is a revisited one; one the retention
	// sweep hands over comes with the version its list just read.
	var err error
	fresh, listed := r.Queue.TakeFresh(req.NamespacedName), r.Queue.TakeListed(req.NamespacedName)
	switch listedAction, ok := listed.(*v1alpha1.ToolAction); {
	case fresh:
		err = r.APIReader.Get(ctx, req.NamespacedName, &action)
	case ok:
		action = *listedAction
	default:
		err = r.getConfirmed(ctx, req.NamespacedName, &action)
	}
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Another live manager owns this active action; a change of members
	// hands it back (ResyncOwned). Finished actions are handled by whichever
	// manager is told of them, as few events concern them.
	if !action.Status.Phase.IsTerminal() && !r.Shards.Owns(req.NamespacedName) {
		return ctrl.Result{}, nil
	}
	return r.advance(withActionLog(ctx, &action, r.Executor), &action)
}

// advance decides and performs the action's next step. The tool is resolved
// only when a rule asks for it.
func (r *ToolActionReconciler) advance(ctx context.Context, action *v1alpha1.ToolAction) (ctrl.Result, error) {
	next := r.rules().decide(action, nil)
	if next.kind != stepResolveTool {
		return r.perform(ctx, action, nil, next)
	}
	tool := r.resolveTool(ctx, action)
	return r.perform(ctx, action, &tool, r.rules().decide(action, &tool))
}

// perform carries out a step; tool is nil when no rule needed it.
func (r *ToolActionReconciler) perform(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool, next step) (ctrl.Result, error) {
	switch next.kind {
	case stepWait:
		return ctrl.Result{RequeueAfter: next.after}, nil
	case stepFail:
		return ctrl.Result{}, next.err
	case stepRelease:
		return ctrl.Result{}, r.release(ctx, action)
	case stepBury:
		var resolved *v1alpha1.Tool
		if tool != nil {
			resolved = tool.tool
		}
		if err := r.bury(ctx, action, resolved, v1alpha1.TombstoneCauseDeleted); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.release(ctx, action)
	case stepRecord:
		var resolved *v1alpha1.Tool
		if tool != nil {
			resolved = tool.tool
		}
		return r.commit(ctx, action, resolved, next.record)
	case stepFinish:
		return r.finish(ctx, action, tool.tool)
	case stepLookup:
		return r.lookup(ctx, action, tool)
	case stepAttempt:
		return r.attempt(ctx, action, tool, next.reason)
	}
	return ctrl.Result{}, fmt.Errorf("no step of kind %d is performed for %s", next.kind, action.Name)
}

// rules are the state machine's decisions, at the clock's time.
func (r *ToolActionReconciler) rules() rules {
	p := rulesAt(r.Clock, r.Executor)
	p.keepsEveryRecord = r.Archive != nil
	return p
}
