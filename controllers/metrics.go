package controllers

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/deletions"
	"github.com/toolledger/toolledger/internal/dispatch"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/retention"
	"github.com/toolledger/toolledger/internal/shard"
	"github.com/toolledger/toolledger/pkg/duplicates"
)

// Metric labels. An action is counted by its tenant and tool, never by its
// key: actionLabels are the action's namespace, its tool's kind and name and
// the tool's idempotency class; toolOfActionLabels leave the class out, for
// the series the SDK counts too (it reads no tools).
var (
	toolOfActionLabels = []string{"namespace", "tool_kind", "tool"}
	actionLabels       = slices.Concat(toolOfActionLabels, []string{"class"})
)

// Sources of duplicate hits and key conflicts the manager sees. The SDK
// counts its own (source "sdk") in the agent's process: a duplicate apply
// writes nothing, so it never reaches the controller.
const (
	sourceTombstone        = "tombstone"
	sourceArchive          = "archive"
	sourceDownstreamReplay = "downstream_replay"
)

var (
	claimConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_claim_conflicts_total",
		Help: "Compare-and-set writes lost to a newer version of the record, by step (finalizer, claim); each claim conflict is a dispatch that did not happen twice.",
	}, []string{"step"})
	actionsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_actions_created_total",
		Help: "Actions the controller recorded for the first time (their first status write).",
	}, actionLabels)
	actionsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_actions_finished_total",
		Help: "Actions that reached Succeeded or Failed, by phase and error class (empty on success).",
	}, slices.Concat(actionLabels, []string{"phase", "error_class"}))
	duplicateHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: duplicates.HitsName,
		Help: "Repeats of a recorded intent answered without a second effect, by where they were seen: tombstone (a key re-created after its record went), downstream_replay (the downstream answered with its stored response); the SDK counts sdk in the agent's process.",
	}, slices.Concat(toolOfActionLabels, []string{"source"}))
	keyConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: duplicates.KeyConflictsName,
		Help: "Keys used again for a different request, refused without executing it, by where they were seen: tombstone here; the SDK counts sdk.",
	}, slices.Concat(toolOfActionLabels, []string{"source"}))
	lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_lookups_total",
		Help: "Downstream lookups of an unknown outcome, by result: found (it applied), absent (it did not), inconclusive (the lookup could not tell).",
	}, slices.Concat(actionLabels, []string{"result"}))
	dispatchAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_dispatch_attempts_total",
		Help: "Attempts sent downstream, by what the answer meant: succeeded, failed (permanent), retryable (definitely not applied), unknown (may have applied).",
	}, slices.Concat(actionLabels, []string{"result"}))
	retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_retries_total",
		Help: "Retries scheduled: transitions to RetryScheduled.",
	}, actionLabels)
	escalations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_escalations_total",
		Help: "Actions handed to a human (Escalated), by reason.",
	}, slices.Concat(actionLabels, []string{"reason"}))
	resolutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_resolutions_total",
		Help: "ToolResolutions applied, by outcome (Succeeded, Failed, RetrySafe).",
	}, slices.Concat(actionLabels, []string{"outcome"}))
	compensations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_compensations_total",
		Help: "Compensating actions (spec.compensates set) recorded for the first time, by the compensating action's tool.",
	}, actionLabels)
	dispatchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolledger_dispatch_duration_seconds",
		Help:    "Duration of one downstream call, by operation (attempt, lookup).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, slices.Concat(actionLabels, []string{"operation"}))
	actionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolledger_action_duration_seconds",
		Help:    "Time from an action's creation to Succeeded or Failed, by phase.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
	}, slices.Concat(actionLabels, []string{"phase"}))
	duplicateAge = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    duplicates.AgeName,
		Help:    "How long after the first attempt's completion a duplicate arrived, by source: whether key retention covers the delayed retries that really happen.",
		Buckets: duplicates.AgeBuckets,
	}, slices.Concat(toolOfActionLabels, []string{"source"}))
	duplicateRetentionRatio = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    duplicates.RetentionRatioName,
		Help:    "A duplicate's age as a fraction of its tool's keyRetention, by source (tools with a keyRetention only); above 0.8 the retention is close to too short.",
		Buckets: duplicates.RetentionRatioBuckets,
	}, slices.Concat(toolOfActionLabels, []string{"source"}))
)

// Metrics are the collectors toolledger registers in controller-runtime's
// registry, which the manager serves on its metrics endpoint.
func Metrics() []prometheus.Collector {
	return slices.Concat(dispatch.Metrics(), shard.Metrics(), archive.Metrics(), keyhistory.Metrics(), notify.Metrics(), deletions.Metrics(), retention.Metrics(), []prometheus.Collector{
		claimConflicts, actionsCreated, actionsFinished, duplicateHits, keyConflicts, lookups, dispatchAttempts,
		retries, escalations, resolutions, compensations, dispatchDuration, actionDuration, duplicateAge,
		duplicateRetentionRatio, ledgerGauges,
	})
}

func init() {
	metrics.Registry.MustRegister(Metrics()...)
}

// unresolvedTool is the tool label of an action whose tool was never
// resolved: it names no Tool, or a ClusterTool that does not admit its
// namespace. A name is whatever the action's author typed, so each would
// leave a set of series behind for good; this value, which no Kubernetes
// name can be, leaves one set per namespace.
const unresolvedTool = "<unresolved>"

// toolLabel is the tool label of an action: its tool's name, once the tool
// was resolved (now, or when the action was accepted: its request digest
// is recorded), else unresolvedTool.
func toolLabel(action *v1alpha1.ToolAction, tool *v1alpha1.Tool) string {
	if tool == nil && action.Status.RequestDigest == "" {
		return unresolvedTool
	}
	return action.Spec.ToolRef.Name
}

// classOf is the class label of an action of tool; empty when the tool
// could not be read.
func classOf(tool *v1alpha1.Tool) string {
	if tool == nil {
		return ""
	}
	return string(tool.Spec.IdempotencyClass)
}
