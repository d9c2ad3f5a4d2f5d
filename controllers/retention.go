package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// expiry is the retention rule: a finished action is deleted, freeing its
// key, once its tool's keyRetention has passed since completion. It reports
// whether that time has come, and otherwise how long until it does (zero:
// never, as without a retention).
func expiry(a *v1alpha1.ToolAction, tool *v1alpha1.Tool, now time.Time) (due bool, after time.Duration) {
	if a.Status.CompletionTime == nil || tool.Spec.KeyRetention == nil {
		return false, 0
	}
	wait := a.Status.CompletionTime.Add(tool.Spec.KeyRetention.Duration).Sub(now)
	return wait <= 0, max(wait, 0)
}

// expire applies the retention rule to a finished action.
func (r *ToolActionReconciler) expire(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (ctrl.Result, error) {
	due, after := expiry(action, tool, r.Clock.Now())
	if !due {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	if err := r.Client.Delete(ctx, action, client.Preconditions{UID: &action.UID}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("cannot delete expired %s: %w", action.Name, err))
	}
	log.FromContext(ctx).Info("Deleted a finished action whose key retention passed", "retention", tool.Spec.KeyRetention.Duration)
	return ctrl.Result{}, nil
}

// RetentionSweep deletes finished actions whose tool's keyRetention has
// passed. The executor that finishes an action schedules its expiry itself;
// the sweep covers the rest: actions finished by a ToolResolution, by
// another manager that has since stopped, or before a restart.
type RetentionSweep struct {
	Reconciler *ToolActionReconciler
	Every      time.Duration
}

// Start sweeps at once and then every Every.
func (s *RetentionSweep) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("retention-sweep")
	for {
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Cannot sweep expired ToolActions; retrying", "after", s.Every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.Every):
		}
	}
}

// sweep visits only the finished actions of tools with a retention, through
// the selectable fields status.phase and spec.toolRef.name.
func (s *RetentionSweep) sweep(ctx context.Context) error {
	r := s.Reconciler
	var tools v1alpha1.ToolList
	if err := r.Client.List(ctx, &tools); err != nil {
		return fmt.Errorf("cannot list Tools: %w", err)
	}
	var clusterTools v1alpha1.ClusterToolList
	if err := r.Client.List(ctx, &clusterTools); err != nil {
		return fmt.Errorf("cannot list ClusterTools: %w", err)
	}
	var errs []error
	visit := func(kind, namespace, name string, retention *metav1.Duration) {
		if retention == nil {
			return
		}
		for _, phase := range []v1alpha1.Phase{v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
			errs = append(errs, s.sweepTool(ctx, kind, namespace, name, retention.Duration, phase))
		}
	}
	for _, tool := range tools.Items {
		visit(v1alpha1.KindTool, tool.Namespace, tool.Name, tool.Spec.KeyRetention)
	}
	for _, tool := range clusterTools.Items {
		visit(v1alpha1.KindClusterTool, "", tool.Name, tool.Spec.KeyRetention)
	}
	return errors.Join(errs...)
}

// sweepTool hands the state machine only the actions whose retention has
// passed by the listed tool's figure: it resolves the tool again (for a
// ClusterTool, with a read of the namespace) and must not do so for every record.
func (s *RetentionSweep) sweepTool(ctx context.Context, kind, namespace, name string, retention time.Duration, phase v1alpha1.Phase) error {
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector("spec.toolRef.name", name),
		fields.OneTermEqualSelector("status.phase", string(phase)),
	)
	opts := []client.ListOption{client.MatchingFieldsSelector{Selector: selector}, client.Limit(listPage)}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	for {
		var page v1alpha1.ToolActionList
		if err := s.Reconciler.APIReader.List(ctx, &page, opts...); err != nil {
			return fmt.Errorf("cannot list %s actions of %s %s: %w", phase, kind, name, err)
		}
		for i := range page.Items {
			action := &page.Items[i]
			if action.Spec.ToolRef.Kind != kind || !action.DeletionTimestamp.IsZero() || action.Status.CompletionTime == nil ||
				action.Status.CompletionTime.Add(retention).After(s.Reconciler.Clock.Now()) {
				continue
			}
			if _, err := s.Reconciler.advance(ctx, action); err != nil {
				return err
			}
		}
		if page.Continue == "" {
			return nil
		}
		opts = append(opts, client.Continue(page.Continue))
	}
}
