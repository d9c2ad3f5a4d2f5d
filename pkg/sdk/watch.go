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
	"k8s.io/apimachinery/pkg/util/resourceversion"
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

// watchLinger is how long a namespace watch stays open after the last
// invocation waiting in it returned: the next invocation in the namespace
// then joins it and costs its apply alone, instead of opening another one.
const watchLinger = 5 * time.Second

// errWatchClosed means the API server ended a watch stream, as it does
// after its request timeout; the watch resumes from the last version seen.
var errWatchClosed = errors.New("the watch stream ended")

// namespaceWatch is one watch of every ToolAction in a namespace, shared by
// the Invokes of a Client that wait there. It opens when an Invoke needs it
// and none is open, and closes when no one has waited in it for
// watchLinger, so invocations cost one request each instead of two, and the
// API server serves one watcher instead of one per invocation. It never
// reconnects, or reads, for no one.
//
// Everything but client, namespace and cancel is guarded by the Client's mu.
type namespaceWatch struct {
	client    *Client
	namespace string
	cancel    context.CancelFunc
	// waiters by key.
	waiters map[string]map[*waiter]struct{}
	count   int
	// idle counts the times count fell to zero; a lingering close applies
	// only if no one came and left meanwhile.
	idle int
	// position is the resourceVersion up to which the watch has delivered
	// events, where it resumes. It is empty while the waiters' actions must
	// be read afresh first, because the API server no longer keeps the
	// events after it (410 Gone); resumeFrom then collects the oldest
	// version those reads saw.
	position   string
	resumeFrom string
}

// waiter is one Invoke waiting in a namespaceWatch. Observations arrive
// under the Client's mu from the watch, or from a read; the first one that
// settles the action, shows it deleted, or fails the watch ends the wait.
type waiter struct {
	key string
	// joined is where the waiter waits; nil once it has stopped waiting.
	joined *namespaceWatch
	// follower is nil until the apply answered: observations made before
	// are kept in early and judged once the recorded action is known.
	follower *follower
	early    []observation
	// unread asks the namespaceWatch to read the action before it watches
	// again.
	unread bool
	err    error
	done   chan struct{}
}

// observation is the state of a key at a resourceVersion: the action, or
// nil when it was deleted or is absent.
type observation struct {
	action          *v1alpha1.ToolAction
	resourceVersion string
}

// follower is what an Invoke knows of its action.
type follower struct {
	outcome *Outcome
	// uid tells the recorded action from one created again under its name
	// after a deletion that a read would not show.
	uid             types.UID
	resourceVersion string
	// waitForApproval waits through AwaitingApproval (WaitForApproval).
	waitForApproval bool
}

// done reports whether the wait is over at the outcome known: the action
// settled, or awaits a human's approval and the caller did not ask to wait.
func (f *follower) done() bool {
	phase := f.outcome.Phase
	return phase.IsSettled() || (phase == v1alpha1.PhaseAwaitingApproval && !f.waitForApproval)
}

// observe takes o into account and reports whether the wait is over: the
// action settled or awaits approval (done; nil error), or is gone
// (ErrDeleted). Observations at or
// before the version already known are stale, whatever order they arrive in.
func (f *follower) observe(o observation) (bool, error) {
	if !newer(o.resourceVersion, f.resourceVersion) {
		return false, nil
	}
	if o.action == nil || o.action.UID != f.uid {
		return true, fmt.Errorf("toolaction %s/%s: %w", f.outcome.Namespace, f.outcome.Key, ErrDeleted)
	}
	f.outcome = newOutcome(o.action, f.outcome.Deduplicated)
	f.resourceVersion = o.resourceVersion
	return f.done(), nil
}

// newer reports whether resourceVersion a comes after b. Kubernetes
// resourceVersions of one resource compare as integers; should a server's
// not, every observation is taken, in the order it arrives.
func newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c > 0
}

// interrupted is the error of a wait that ctx ended; it wraps ctx.Err().
func (f *follower) interrupted(ctx context.Context) error {
	return fmt.Errorf("toolaction %s/%s has not settled, last phase %q: %w",
		f.outcome.Namespace, f.outcome.Key, f.outcome.Phase, ctx.Err())
}

// joinOpen makes an Invoke of key wait in the namespace's watch if one is
// open, before the apply: every event after the apply is then still to
// come. It returns nil when none is open, so that a duplicate of a settled
// action opens none.
func (c *Client) joinOpen(namespace, key string) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	nw := c.watches[namespace]
	if nw == nil {
		return nil
	}
	return nw.add(key)
}

// joinAfterApply makes an Invoke wait for the action the apply returned.
// With no watch open it opens one from the action's version. An open one
// may have delivered events after that version already (it was opened by
// another Invoke meanwhile); then the caller must read the action
// (readNeeded).
func (c *Client) joinAfterApply(namespace string, f *follower) (w *waiter, readNeeded bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nw := c.watches[namespace]
	if nw == nil {
		ctx, cancel := context.WithCancel(context.Background())
		nw = &namespaceWatch{client: c, namespace: namespace, cancel: cancel,
			waiters: map[string]map[*waiter]struct{}{}, position: f.resourceVersion}
		c.watches[namespace] = nw
		go nw.run(ctx)
	} else if nw.position != "" {
		readNeeded = !newer(f.resourceVersion, nw.position)
	}
	w = nw.add(f.outcome.Key)
	c.follow(w, f)
	return w, readNeeded
}

// add registers a waiter for key. Called with the Client's mu held.
func (nw *namespaceWatch) add(key string) *waiter {
	w := &waiter{key: key, joined: nw, done: make(chan struct{}), unread: nw.position == ""}
	if nw.waiters[key] == nil {
		nw.waiters[key] = map[*waiter]struct{}{}
	}
	nw.waiters[key][w] = struct{}{}
	nw.count++
	return w
}

// follow gives a joined waiter the action the apply returned and judges
// what it observed before. Called with the Client's mu held.
func (c *Client) follow(w *waiter, f *follower) {
	w.follower = f
	early := w.early
	w.early = nil
	for _, o := range early {
		if c.deliver(w, o) {
			return
		}
	}
}

// deliver hands o to w and reports whether w's wait ended. Called with the
// Client's mu held.
func (c *Client) deliver(w *waiter, o observation) bool {
	if w.joined == nil {
		return true
	}
	if w.follower == nil {
		w.early = append(w.early, o)
		return false
	}
	over, err := w.follower.observe(o)
	if over {
		c.finish(w, err)
	}
	return over
}

// finish ends w's wait with err (nil when the action settled). Called with
// the Client's mu held.
func (c *Client) finish(w *waiter, err error) {
	nw := w.joined
	if nw == nil {
		return
	}
	w.joined, w.err = nil, err
	close(w.done)
	delete(nw.waiters[w.key], w)
	if len(nw.waiters[w.key]) == 0 {
		delete(nw.waiters, w.key)
	}
	nw.count--
	if nw.count == 0 {
		nw.idle++
		idle := nw.idle
		time.AfterFunc(c.linger, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if nw.count == 0 && nw.idle == idle {
				nw.close()
			}
		})
	}
}

// closeIfIdle closes the watch if no one waits in it, and reports whether
// it did.
func (nw *namespaceWatch) closeIfIdle() bool {
	nw.client.mu.Lock()
	defer nw.client.mu.Unlock()
	if nw.count > 0 {
		return false
	}
	nw.close()
	return true
}

// leave stops w waiting, if it still does.
func (c *Client) leave(w *waiter) {
	if w == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finish(w, nil)
}

// close stops the watch and forgets it, so that the next Invoke opens a
// new one. Called with the Client's mu held.
func (nw *namespaceWatch) close() {
	nw.cancel()
	if nw.client.watches[nw.namespace] == nw {
		delete(nw.client.watches, nw.namespace)
	}
}

// await waits until w's action settles, is deleted, the watch fails for
// good, or ctx ends.
func (c *Client) await(ctx context.Context, w *waiter) (*Outcome, error) {
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.joined != nil {
		c.finish(w, nil)
		return w.follower.outcome, w.follower.interrupted(ctx)
	}
	return w.follower.outcome, w.err
}

// catchUp reads w's action once, for a waiter that joined a watch which
// may have passed its events already; events arriving meanwhile are judged
// by version, so their order does not matter.
func (c *Client) catchUp(ctx context.Context, namespace string, w *waiter) {
	delay := minRewatchDelay
	for {
		o, _, err := c.read(ctx, namespace, w.key)
		c.mu.Lock()
		switch {
		case err == nil:
			c.deliver(w, o)
			c.mu.Unlock()
			return
		case w.joined == nil:
			c.mu.Unlock()
			return
		case !retriable(err):
			c.finish(w, err)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if !pause(ctx, delay, w.done) {
			return
		}
		delay = min(2*delay, maxRewatchDelay)
	}
}

// pause waits for d and reports whether it did, rather than ctx ending or
// stop closing first (a nil stop never does).
func pause(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-timer.C:
		return true
	}
}

// read lists the one action named key: its observation and the list's
// resourceVersion.
func (c *Client) read(ctx context.Context, namespace, key string) (observation, string, error) {
	var list v1alpha1.ToolActionList
	err := c.rest.Get().
		Namespace(namespace).
		Resource(toolActions).
		VersionedParams(&metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", key).String()}, metav1.ParameterCodec).
		Do(ctx).
		Into(&list)
	if err != nil {
		return observation{}, "", fmt.Errorf("cannot list toolaction %s/%s: %w", namespace, key, err)
	}
	// Absent as of the list's version, not of any version of the action.
	if len(list.Items) == 0 {
		return observation{resourceVersion: list.ResourceVersion}, list.ResourceVersion, nil
	}
	return observation{action: &list.Items[0], resourceVersion: list.Items[0].ResourceVersion}, list.ResourceVersion, nil
}

// run watches until it is closed or refused for good. It never polls: it
// reads actions only when the API server no longer has the events after the
// position. When the stream ends with no one waiting, it closes instead of
// watching again.
func (nw *namespaceWatch) run(ctx context.Context) {
	delay := minRewatchDelay
	for !nw.closeIfIdle() {
		before := nw.currentPosition()
		err := nw.readUnread(ctx)
		if err == nil && !nw.closeIfIdle() {
			err = nw.watch(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			nw.expire()
			continue
		case !retriable(err):
			nw.fail(err)
			return
		}
		if nw.currentPosition() != before {
			delay = minRewatchDelay
		}
		if !pause(ctx, delay, nil) {
			return
		}
		delay = min(2*delay, maxRewatchDelay)
	}
}

func (nw *namespaceWatch) currentPosition() string {
	nw.client.mu.Lock()
	defer nw.client.mu.Unlock()
	return nw.position
}

// expire marks every waiter's action to be read afresh: the API server no
// longer has the events after the position.
func (nw *namespaceWatch) expire() {
	nw.client.mu.Lock()
	defer nw.client.mu.Unlock()
	nw.position, nw.resumeFrom = "", ""
	for _, byKey := range nw.waiters {
		for w := range byKey {
			w.unread = true
		}
	}
}

// fail ends every wait with err and closes the watch.
func (nw *namespaceWatch) fail(err error) {
	c := nw.client
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, byKey := range nw.waiters {
		for w := range byKey {
			c.finish(w, err)
		}
	}
	nw.close()
}

// readUnread reads the action of every waiter marked unread, one key at a
// time, and then resumes from the oldest list version seen: every event
// after each read is still to come, and older ones are stale.
func (nw *namespaceWatch) readUnread(ctx context.Context) error {
	c := nw.client
	for ctx.Err() == nil {
		c.mu.Lock()
		key := nw.nextUnread()
		if key == "" {
			if nw.position == "" {
				nw.position, nw.resumeFrom = nw.resumeFrom, ""
			}
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()

		o, listVersion, err := c.read(ctx, nw.namespace, key)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if nw.resumeFrom == "" || newer(nw.resumeFrom, listVersion) {
			nw.resumeFrom = listVersion
		}
		for w := range nw.waiters[key] {
			w.unread = false
			c.deliver(w, o)
		}
		c.mu.Unlock()
	}
	return ctx.Err()
}

// nextUnread returns the first key, in order, with a waiter marked unread,
// or "": reads go in a predictable order. Called with the Client's mu held.
func (nw *namespaceWatch) nextUnread() string {
	next := ""
	for key, byKey := range nw.waiters {
		if next != "" && key >= next {
			continue
		}
		for w := range byKey {
			if w.unread {
				next = key
				break
			}
		}
	}
	return next
}

// watch watches the namespace from the position once, until the stream
// ends or fails.
func (nw *namespaceWatch) watch(ctx context.Context) error {
	c := nw.client
	from := nw.currentPosition()
	w, err := c.rest.Get().
		Namespace(nw.namespace).
		Resource(toolActions).
		VersionedParams(&metav1.ListOptions{
			Watch:               true,
			ResourceVersion:     from,
			AllowWatchBookmarks: true,
		}, metav1.ParameterCodec).
		Watch(ctx)
	if err != nil {
		return fmt.Errorf("cannot watch toolactions in namespace %s: %w", nw.namespace, err)
	}
	defer w.Stop()
	for event := range w.ResultChan() {
		switch event.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			action, ok := event.Object.(*v1alpha1.ToolAction)
			if !ok {
				return fmt.Errorf("watching toolactions in namespace %s: unexpected %T in a %s event", nw.namespace, event.Object, event.Type)
			}
			o := observation{action: action, resourceVersion: action.ResourceVersion}
			if event.Type == watch.Deleted {
				o.action = nil
			}
			c.mu.Lock()
			nw.position = action.ResourceVersion
			for w := range nw.waiters[action.Name] {
				c.deliver(w, o)
			}
			c.mu.Unlock()
		case watch.Bookmark:
			if object, err := meta.Accessor(event.Object); err == nil {
				c.mu.Lock()
				nw.position = object.GetResourceVersion()
				c.mu.Unlock()
			}
		case watch.Error:
			return fmt.Errorf("watching toolactions in namespace %s: %w", nw.namespace, apierrors.FromObject(event.Object))
		}
	}
	return errWatchClosed
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
