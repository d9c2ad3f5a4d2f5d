package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Delays between attempts to re-establish a watch that failed: short enough
// to notice an outcome soon after an API server comes back, long enough not
// to hammer one that is struggling.
const (
	minRewatchDelay = 100 * time.Millisecond
	maxRewatchDelay = 5 * time.Second
)

// errWatchClosed means the API server ended a watch stream, as it does
// after its request timeout; the watch resumes from the last version seen.
var errWatchClosed = errors.New("the watch stream ended")

// follower follows one ToolAction, by watch, until it settles.
type follower struct {
	client  *Client
	outcome *Outcome
	// uid tells the recorded action from one created again under its name
	// after a deletion that a re-list would not show.
	uid types.UID
	// resourceVersion is where the next watch starts; empty when the action
	// must be listed afresh because the watch window moved past it.
	resourceVersion string
}

// await watches until the action settles, is deleted, a permanent error
// occurs, or ctx ends. It never polls: it lists only to learn a version to
// watch from when the API server no longer has the one it had.
func (f *follower) await(ctx context.Context) (*Outcome, error) {
	delay := minRewatchDelay
	for {
		before := f.resourceVersion
		err := f.followOnce(ctx)
		switch {
		case err == nil && settled(f.outcome.Phase):
			return f.outcome, nil
		case ctx.Err() != nil:
			return f.outcome, f.interrupted(ctx)
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			f.resourceVersion = ""
			continue
		case !retriable(err):
			return f.outcome, err
		}
		if f.resourceVersion != before {
			delay = minRewatchDelay
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return f.outcome, f.interrupted(ctx)
		case <-timer.C:
		}
		delay = min(2*delay, maxRewatchDelay)
	}
}

// interrupted is the error of a wait that ctx ended; it wraps ctx.Err().
func (f *follower) interrupted(ctx context.Context) error {
	return fmt.Errorf("toolaction %s/%s has not settled, last phase %q: %w",
		f.outcome.Namespace, f.outcome.Key, f.outcome.Phase, ctx.Err())
}

// followOnce lists the action if needed and watches it once, until the
// stream ends or the action settles.
func (f *follower) followOnce(ctx context.Context) error {
	if f.resourceVersion == "" {
		if err := f.relist(ctx); err != nil || settled(f.outcome.Phase) {
			return err
		}
	}
	return f.watch(ctx)
}

func (f *follower) relist(ctx context.Context) error {
	var list v1alpha1.ToolActionList
	err := f.client.rest.Get().
		Namespace(f.outcome.Namespace).
		Resource(toolActions).
		VersionedParams(&metav1.ListOptions{FieldSelector: f.nameSelector()}, f.client.params).
		Do(ctx).
		Into(&list)
	if err != nil {
		return fmt.Errorf("cannot list toolaction %s/%s: %w", f.outcome.Namespace, f.outcome.Key, err)
	}
	if len(list.Items) == 0 {
		return f.deleted()
	}
	if err := f.observe(&list.Items[0]); err != nil {
		return err
	}
	// The list's version, not the object's: an action unchanged for longer
	// than the watch window would expire again at its own version.
	f.resourceVersion = list.ResourceVersion
	return nil
}

func (f *follower) watch(ctx context.Context) error {
	w, err := f.client.rest.Get().
		Namespace(f.outcome.Namespace).
		Resource(toolActions).
		VersionedParams(&metav1.ListOptions{
			Watch:               true,
			FieldSelector:       f.nameSelector(),
			ResourceVersion:     f.resourceVersion,
			AllowWatchBookmarks: true,
		}, f.client.params).
		Watch(ctx)
	if err != nil {
		return fmt.Errorf("cannot watch toolaction %s/%s: %w", f.outcome.Namespace, f.outcome.Key, err)
	}
	defer w.Stop()
	for event := range w.ResultChan() {
		switch event.Type {
		case watch.Added, watch.Modified:
			action, ok := event.Object.(*v1alpha1.ToolAction)
			if !ok {
				return fmt.Errorf("watching toolaction %s/%s: unexpected %T in a %s event", f.outcome.Namespace, f.outcome.Key, event.Object, event.Type)
			}
			if err := f.observe(action); err != nil || settled(f.outcome.Phase) {
				return err
			}
		case watch.Bookmark:
			if object, err := meta.Accessor(event.Object); err == nil {
				f.resourceVersion = object.GetResourceVersion()
			}
		case watch.Deleted:
			return f.deleted()
		case watch.Error:
			return fmt.Errorf("watching toolaction %s/%s: %w", f.outcome.Namespace, f.outcome.Key, apierrors.FromObject(event.Object))
		}
	}
	return errWatchClosed
}

// observe records the state of the action.
func (f *follower) observe(action *v1alpha1.ToolAction) error {
	if action.UID != f.uid {
		return f.deleted()
	}
	f.outcome = newOutcome(action, f.outcome.Deduplicated)
	f.resourceVersion = action.ResourceVersion
	return nil
}

func (f *follower) deleted() error {
	return fmt.Errorf("toolaction %s/%s: %w", f.outcome.Namespace, f.outcome.Key, ErrDeleted)
}

func (f *follower) nameSelector() string {
	return fields.OneTermEqualSelector("metadata.name", f.outcome.Key).String()
}

// retriable reports whether a failed list or watch may succeed if repeated:
// the stream ended, the connection failed, or the API server was overloaded
// or failing. Refusals (403, 404, 400 …) are not.
func retriable(err error) bool {
	var transport *url.Error
	if errors.Is(err, errWatchClosed) || errors.As(err, &transport) || utilnet.IsProbableEOF(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
	}
	return false
}
