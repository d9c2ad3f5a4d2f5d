package sdk

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func observed(uid types.UID, resourceVersion string, phase v1alpha1.Phase) observation {
	return observation{
		action: &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Name: "order-1", Namespace: "shop", UID: uid, ResourceVersion: resourceVersion},
			Status:     v1alpha1.ToolActionStatus{Phase: phase},
		},
		resourceVersion: resourceVersion,
	}
}

func absent(resourceVersion string) observation {
	return observation{resourceVersion: resourceVersion}
}

func following(resourceVersion string) *follower {
	return &follower{
		outcome:         &Outcome{Namespace: "shop", Key: "order-1", Phase: v1alpha1.PhaseAccepted},
		uid:             "u1",
		resourceVersion: resourceVersion,
	}
}

// A shared watch and reads deliver observations out of order and from
// before the apply; only the version decides what counts.
func TestFollowerJudgesObservationsByVersion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		o         observation
		wantOver  bool
		wantErr   error
		wantPhase v1alpha1.Phase
	}{
		{"a later state", observed("u1", "12", v1alpha1.PhaseExecuting), false, nil, v1alpha1.PhaseExecuting},
		{"the outcome", observed("u1", "12", v1alpha1.PhaseSucceeded), true, nil, v1alpha1.PhaseSucceeded},
		{"an earlier state", observed("u1", "9", v1alpha1.PhaseSucceeded), false, nil, v1alpha1.PhaseAccepted},
		{"the same version", observed("u1", "10", v1alpha1.PhaseSucceeded), false, nil, v1alpha1.PhaseAccepted},
		{"a deletion of an earlier action of the same name", absent("8"), false, nil, v1alpha1.PhaseAccepted},
		{"a later deletion", absent("11"), true, ErrDeleted, v1alpha1.PhaseAccepted},
		{"another action under the name later", observed("u2", "15", v1alpha1.PhaseSucceeded), true, ErrDeleted, v1alpha1.PhaseAccepted},
		{"versions compare as numbers, not text", observed("u1", "100", v1alpha1.PhaseSucceeded), true, nil, v1alpha1.PhaseSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := following("10")
			over, err := f.observe(tc.o)
			if over != tc.wantOver || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("observe = %v, %v; want %v, %v", over, err, tc.wantOver, tc.wantErr)
			}
			if f.outcome.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", f.outcome.Phase, tc.wantPhase)
			}
		})
	}
}

// openWatch registers a namespaceWatch at position without running it.
func openWatch(c *Client, position string) *namespaceWatch {
	_, cancel := context.WithCancel(context.Background())
	nw := &namespaceWatch{client: c, namespace: "shop", cancel: cancel,
		waiters: map[string]map[*waiter]struct{}{}, position: position}
	c.watches["shop"] = nw
	return nw
}

// An Invoke that finds a watch open only after its apply must read its
// action when that watch may have delivered its events already.
func TestJoiningAfterTheApplyReadsWhenTheWatchIsAhead(t *testing.T) {
	for _, tc := range []struct {
		position, applied string
		wantRead          bool
		wantUnread        bool
	}{
		{position: "20", applied: "15", wantRead: true},
		{position: "15", applied: "15", wantRead: true},
		{position: "9", applied: "15", wantRead: false},
		{position: "", applied: "15", wantRead: false, wantUnread: true},
	} {
		c := &Client{watches: map[string]*namespaceWatch{}}
		nw := openWatch(c, tc.position)
		w, read := c.joinAfterApply("shop", following(tc.applied))
		if read != tc.wantRead || w.unread != tc.wantUnread {
			t.Errorf("position %q, applied %q: read %v, unread %v; want %v, %v", tc.position, tc.applied, read, w.unread, tc.wantRead, tc.wantUnread)
		}
		if nw.count != 1 || len(nw.waiters["order-1"]) != 1 {
			t.Errorf("position %q: %d waiters, want 1", tc.position, nw.count)
		}
	}
}

// What an open watch delivers between joining and the apply's answer is
// judged once the applied action is known. The watch outlives its last
// waiter by the linger, for the next invocation to join, then closes.
func TestEarlyObservationsAreJudgedAfterTheApply(t *testing.T) {
	c := &Client{linger: time.Hour, watches: map[string]*namespaceWatch{}}
	nw := openWatch(c, "5")
	w := c.joinOpen("shop", "order-1")
	other := c.joinOpen("shop", "order-2")
	c.mu.Lock()
	c.deliver(w, absent("7"))                                   // an earlier action of the name, deleted
	c.deliver(w, observed("u1", "12", v1alpha1.PhaseSucceeded)) // after the apply
	c.follow(w, following("10"))
	c.mu.Unlock()

	outcome, err := c.await(context.Background(), w)
	if err != nil || outcome.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("await = %+v, %v; want Succeeded", outcome, err)
	}
	if c.watches["shop"] != nw || nw.count != 1 {
		t.Fatalf("the watch closed with a waiter left (%d waiting)", nw.count)
	}
	c.leave(other)
	if c.watches["shop"] != nw || nw.count != 0 {
		t.Fatalf("the watch closed as its last waiter left (%d waiting); want it kept for the next invocation", nw.count)
	}
	next := c.joinOpen("shop", "order-3")
	if next == nil {
		t.Fatal("the next invocation did not join the open watch")
	}
	c.mu.Lock()
	c.linger = 10 * time.Millisecond
	c.mu.Unlock()
	c.leave(next)
	for range 100 {
		c.mu.Lock()
		closed := c.watches["shop"] == nil
		c.mu.Unlock()
		if closed {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("the watch stayed open a second after its linger of 10ms with no one waiting")
}
