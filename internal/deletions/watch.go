// Package deletions hears of finished ToolActions being deleted, which
// the manager's cache of active actions does not hold, and hands them to
// the ToolAction controller to release.
package deletions

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/pager"
	"github.com/toolledger/toolledger/internal/requeue"
)

// Watch reports finished actions being deleted while they carry the
// finalizer. The manager caches only active actions (ActiveActions), so the
// deletion of a finished one would otherwise go unseen and the record would
// hang in Terminating. It watches the metadata of the actions in one final
// phase, so it hears of each action once when it finishes and again if it
// is deleted, and keeps none of it: its memory does not grow with the ledger.
type Watch struct {
	Client metadata.Interface
	// Phase is the final phase watched, Succeeded or Failed.
	Phase v1alpha1.Phase
	// Queue has each action seen with a deletion timestamp and the
	// finalizer reconciled by the ToolAction controller.
	Queue *requeue.Queue
	// Retry is the pause after a failed list or watch.
	Retry time.Duration
}

// Start lists, then watches from the list's version, and lists again when
// the watch can no longer resume (the version was compacted away).
func (w *Watch) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("deletion-watch").WithValues("phase", w.Phase)
	resource := w.Client.Resource(v1alpha1.GroupVersion.WithResource("toolactions"))
	synced := watchSynced.WithLabelValues(string(w.Phase))
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

func (w *Watch) list(ctx context.Context, resource metadata.Getter) (string, error) {
	opts := metav1.ListOptions{FieldSelector: w.selector(), Limit: pager.PageSize}
	var version string
	err := pager.Walk(func(cont string) (string, error) {
		opts.Continue = cont
		page, err := resource.List(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("cannot list ToolActions: %w", err)
		}
		for i := range page.Items {
			w.consider(&page.Items[i])
		}
		version = page.ResourceVersion
		return page.Continue, nil
	})
	return version, err
}

// watch follows changes from version until the watch fails; a watch the
// server closes (its request timeout) is resumed where it stopped.
func (w *Watch) watch(ctx context.Context, resource metadata.Getter, version string) error {
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

func (w *Watch) selector() string {
	return fields.OneTermEqualSelector("status.phase", string(w.Phase)).String()
}

func (w *Watch) drain(ctx context.Context, watcher watch.Interface, version string) (string, error) {
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
			w.consider(meta)
		}
	}
}

// consider queues an action being deleted that still carries the finalizer.
func (w *Watch) consider(meta *metav1.PartialObjectMetadata) {
	if meta.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(meta, v1alpha1.Finalizer) {
		w.Queue.Add(client.ObjectKeyFromObject(meta))
	}
}

// Metrics are the watch's collectors, which the manager registers.
func Metrics() []prometheus.Collector { return []prometheus.Collector{watchSynced} }

var watchSynced = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "toolledger_deletion_watch_synced",
	Help: "1 while the watch for deletions of finished actions in a phase runs on a complete list; 0 while it lists, or retries a failed list or watch.",
}, []string{"phase"})
