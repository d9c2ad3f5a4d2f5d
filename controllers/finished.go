package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// listPage bounds what one list request of the finished ledger brings into
// memory at once.
const listPage = 500

// DeletionWatch reports finished actions being deleted while they carry the
// finalizer. The manager caches only active actions (ActiveActions), so the
// deletion of a finished one would otherwise go unseen and the record would
// hang in Terminating. It watches the metadata of the actions in one final
// phase, so it hears of each action once when it finishes and again if it
// is deleted, and keeps none of it: its memory does not grow with the ledger.
type DeletionWatch struct {
	Client metadata.Interface
	// Phase is the final phase watched, Succeeded or Failed.
	Phase v1alpha1.Phase
	// Deleting receives each action seen with a deletion timestamp and the
	// finalizer; the ToolAction controller reconciles it.
	Deleting chan<- event.GenericEvent
	// Retry is the pause after a failed list or watch.
	Retry time.Duration
}

// Start lists, then watches from the list's version, and lists again when
// the watch can no longer resume (the version was compacted away).
func (w *DeletionWatch) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("deletion-watch").WithValues("phase", w.Phase)
	resource := w.Client.Resource(v1alpha1.GroupVersion.WithResource("toolactions"))
	synced := deletionWatchSynced.WithLabelValues(string(w.Phase))
	defer synced.Set(0)
	for {
		synced.Set(0)
		version, err := w.list(ctx, resource)
		if err == nil {
			synced.Set(1)
			err = w.watch(ctx, resource, version)
		}
		// An expired version only means listing again.
		if ctx.Err() == nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			logger.Error(err, "Cannot watch ToolAction deletions; retrying", "after", w.Retry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.Retry):
		}
	}
}

func (w *DeletionWatch) list(ctx context.Context, resource metadata.Getter) (string, error) {
	opts := metav1.ListOptions{FieldSelector: w.selector(), Limit: listPage}
	for {
		page, err := resource.List(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("cannot list ToolActions: %w", err)
		}
		for i := range page.Items {
			if err := w.consider(ctx, &page.Items[i]); err != nil {
				return "", err
			}
		}
		if page.Continue == "" {
			return page.ResourceVersion, nil
		}
		opts.Continue = page.Continue
	}
}

// watch follows changes from version until the watch fails; a watch the
// server closes (its request timeout) is resumed where it stopped.
func (w *DeletionWatch) watch(ctx context.Context, resource metadata.Getter, version string) error {
	for {
		watcher, err := resource.Watch(ctx, metav1.ListOptions{FieldSelector: w.selector(), ResourceVersion: version, AllowWatchBookmarks: true})
		if err != nil {
			return fmt.Errorf("cannot watch ToolActions: %w", err)
		}
		version, err = w.drain(ctx, watcher, version)
		if err != nil {
			return err
		}
	}
}

func (w *DeletionWatch) selector() string {
	return fields.OneTermEqualSelector("status.phase", string(w.Phase)).String()
}

func (w *DeletionWatch) drain(ctx context.Context, watcher watch.Interface, version string) (string, error) {
	defer watcher.Stop()
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return version, ctx.Err()
		case ev, open = <-watcher.ResultChan():
		}
		if !open {
			return version, nil
		}
		if ev.Type == watch.Error {
			return version, apierrors.FromObject(ev.Object)
		}
		meta, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if !ok {
			return version, fmt.Errorf("unexpected %T in the ToolAction watch", ev.Object)
		}
		version = meta.ResourceVersion
		if ev.Type == watch.Added || ev.Type == watch.Modified {
			if err := w.consider(ctx, meta); err != nil {
				return version, err
			}
		}
	}
}

func (w *DeletionWatch) consider(ctx context.Context, meta *metav1.PartialObjectMetadata) error {
	if meta.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(meta, v1alpha1.Finalizer) {
		return nil
	}
	select {
	case w.Deleting <- event.GenericEvent{Object: meta}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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

// sweepTool hands expire only the actions whose retention has passed by the
// listed tool's figure: expire resolves the tool again (for a ClusterTool,
// with a read of the namespace) and must not do so for every record.
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
			if _, err := s.Reconciler.expire(ctx, action); err != nil {
				return err
			}
		}
		if page.Continue == "" {
			return nil
		}
		opts = append(opts, client.Continue(page.Continue))
	}
}
