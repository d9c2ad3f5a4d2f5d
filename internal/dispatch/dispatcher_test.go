package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// testDispatcher is a dispatcher on a fake clock whose wakes are recorded.
type testDispatcher struct {
	*Dispatcher
	t     *testing.T
	clock time.Time
	// tick advances the clock at each reading, so that unpaced tools
	// refill; zero holds it still.
	tick  time.Duration
	woken []types.NamespacedName
}

func newTestDispatcher(t *testing.T, maxInFlight, maxPerNamespace int) *testDispatcher {
	td := &testDispatcher{t: t, clock: time.Unix(1_000_000, 0), tick: time.Millisecond}
	td.Dispatcher = New(maxInFlight, maxPerNamespace, func(key types.NamespacedName) { td.woken = append(td.woken, key) })
	td.now = func() time.Time {
		td.clock = td.clock.Add(td.tick)
		return td.clock
	}
	t.Cleanup(func() {
		td.mu.Lock()
		defer td.mu.Unlock()
		for _, g := range td.grants {
			g.timer.Stop()
		}
		if td.pending != nil {
			td.pending.Stop()
		}
	})
	return td
}

var (
	toolA = Lane{kind: "Tool", namespace: "a", name: "charge"}
	toolB = Lane{kind: "Tool", namespace: "b", name: "ticket"}
	// shared is a ClusterTool that actions of several namespaces call.
	shared = Lane{kind: "ClusterTool", name: "shared"}
	// unpaced has rate limits far above what a test reaches.
	unpaced = func(n int) Limits { return Limits{maxInFlight: n, perSecond: 1e6} }
)

func key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// expectWoken fails the test unless exactly want were woken, in order,
// since the last look; when says at which point of the test.
func (td *testDispatcher) expectWoken(when string, want ...types.NamespacedName) {
	td.t.Helper()
	if got := td.takeWoken(); !slices.Equal(got, want) {
		td.t.Fatalf("woken %s: %v, want %v", when, got, want)
	}
}

func (td *testDispatcher) takeWoken() []types.NamespacedName {
	w := td.woken
	td.woken = nil
	return w
}

func TestDispatcherBoundsATool(t *testing.T) {
	td := newTestDispatcher(t, 64, 64)
	s1 := td.Reserve(toolA, unpaced(2), key("a", "1"))
	s2 := td.Reserve(toolA, unpaced(2), key("a", "2"))
	if s1 == nil || s2 == nil {
		t.Fatalf("the first two calls within maxInFlight 2 got no slot: %v, %v", s1, s2)
	}
	if s := td.Reserve(toolA, unpaced(2), key("a", "3")); s != nil {
		t.Fatal("a third call of a tool with maxInFlight 2 got a slot")
	}
	if s := td.Reserve(toolB, unpaced(2), key("b", "1")); s == nil {
		t.Fatal("another tool's call waited behind a full tool")
	}
	td.expectWoken("before any slot was freed")
	s1.Release()
	td.expectWoken("after a release", key("a", "3"))
	// The slot is held for a/3: a newcomer waits behind it.
	if s := td.Reserve(toolA, unpaced(2), key("a", "4")); s != nil {
		t.Fatal("a newcomer took the slot held for the woken action")
	}
	if s := td.Reserve(toolA, unpaced(2), key("a", "3")); s == nil {
		t.Fatal("the woken action got no slot")
	}
	s1.Release() // a second release of one slot frees nothing
	td.expectWoken("after a slot was released twice")
}

func TestDispatcherServesNamespacesOfAToolInTurn(t *testing.T) {
	td := newTestDispatcher(t, 64, 64)
	running := td.Reserve(shared, unpaced(1), key("x", "0"))
	for _, k := range []types.NamespacedName{key("x", "1"), key("x", "2"), key("x", "3"), key("y", "1"), key("z", "1"), key("y", "2")} {
		if s := td.Reserve(shared, unpaced(1), k); s != nil {
			t.Fatalf("%v got a slot of a full tool", k)
		}
	}
	var order []string
	for range 6 {
		running.Release()
		w := td.takeWoken()
		if len(w) != 1 {
			t.Fatalf("one release woke %v", w)
		}
		order = append(order, w[0].String())
		running = td.Reserve(shared, unpaced(1), w[0])
		if running == nil {
			t.Fatalf("woken %v got no slot", w[0])
		}
	}
	want := []string{"x/1", "y/1", "z/1", "x/2", "y/2", "x/3"}
	if !slices.Equal(order, want) {
		t.Fatalf("served %v, want %v: a namespace's backlog must not delay another's first call", order, want)
	}
}

func TestDispatcherServesToolsInTurnWithinTheProcessBound(t *testing.T) {
	td := newTestDispatcher(t, 1, 1)
	running := td.Reserve(toolA, unpaced(8), key("a", "0"))
	td.Reserve(toolA, unpaced(8), key("a", "1"))
	td.Reserve(toolA, unpaced(8), key("a", "2"))
	td.Reserve(toolB, unpaced(8), key("a", "b1"))
	var order []string
	for range 3 {
		running.Release()
		w := td.takeWoken()
		if len(w) != 1 {
			t.Fatalf("one release woke %v", w)
		}
		order = append(order, w[0].Name)
		lane := toolA
		if w[0].Name == "b1" {
			lane = toolB
		}
		running = td.Reserve(lane, unpaced(8), w[0])
	}
	if want := []string{"1", "b1", "2"}; !slices.Equal(order, want) {
		t.Fatalf("served %v, want %v", order, want)
	}
}

func TestDispatcherBoundsANamespace(t *testing.T) {
	td := newTestDispatcher(t, 4, 2)
	if td.Reserve(toolA, unpaced(8), key("a", "1")) == nil || td.Reserve(toolB, unpaced(8), key("a", "2")) == nil {
		t.Fatal("the first two calls of a namespace got no slot")
	}
	if td.Reserve(toolA, unpaced(8), key("a", "3")) != nil {
		t.Fatal("a namespace got a third slot with maxPerNamespace 2")
	}
	if td.Reserve(toolA, unpaced(8), key("c", "1")) == nil {
		t.Fatal("another namespace waited behind a namespace at its bound")
	}
	td.expectWoken("for a call that got its slot at once")
}

func TestDispatcherPacesATool(t *testing.T) {
	td := newTestDispatcher(t, 64, 64)
	td.tick = 0
	limits := Limits{maxInFlight: 2, perSecond: 2}
	for i := range 2 {
		s := td.Reserve(toolA, limits, key("a", fmt.Sprint(i)))
		if s == nil {
			t.Fatalf("call %d of the first burst got no slot", i)
		}
		s.Release()
	}
	if td.Reserve(toolA, limits, key("a", "2")) != nil {
		t.Fatal("a call beyond the burst got a slot without waiting")
	}
	td.mu.Lock()
	if td.pending == nil {
		t.Fatal("no timer serves the lane when its next token is due")
	}
	td.mu.Unlock()
	td.clock = td.clock.Add(400 * time.Millisecond)
	td.serveDue()
	td.expectWoken("before the next token (0.5 s at 2/s)")
	td.clock = td.clock.Add(100 * time.Millisecond)
	td.serveDue()
	td.expectWoken("once the token was due", key("a", "2"))
}

func TestDispatcherPassesOnAnUnusedSlot(t *testing.T) {
	td := newTestDispatcher(t, 64, 64)
	running := td.Reserve(toolA, unpaced(1), key("a", "0"))
	td.Reserve(toolA, unpaced(1), key("a", "1"))
	td.Reserve(toolA, unpaced(1), key("a", "2"))
	began := td.clock
	running.Release()
	td.takeWoken()
	// A reconcile of a/1 begun before the grant must not give it away: the
	// grant is for the reconcile its wake queued.
	td.Forget(key("a", "1"), began)
	td.expectWoken("when a reconcile begun before the grant ended")
	// That reconcile did not use it (the action was claimed elsewhere).
	td.Forget(key("a", "1"), td.now())
	td.expectWoken("when the unused slot passed on", key("a", "2"))
}

// stop stops the dispatcher and fails the test if it stops within 100 ms
// (early says what it must wait for); the function returned fails it
// unless the stop ends within 10 s (once says after what).
func (td *testDispatcher) stop(t *testing.T, early string) (stopped func(once string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- td.Start(ctx) }()
	cancel()
	select {
	case err := <-done:
		t.Fatalf("the dispatcher stopped %s: %v", early, err)
	case <-time.After(100 * time.Millisecond):
	}
	return func(once string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the dispatcher did not stop %s", once)
		}
	}
}

func TestDispatcherDrainsOnStop(t *testing.T) {
	td := newTestDispatcher(t, 64, 64)
	running := td.Reserve(toolA, unpaced(1), key("a", "0"))
	td.Reserve(toolA, unpaced(1), key("a", "1"))
	stopped := td.stop(t, "with a call in flight")
	running.Release()
	stopped("once its last call ended")
	td.expectWoken("while stopping")
	if td.Reserve(toolB, unpaced(1), key("b", "1")) != nil {
		t.Fatal("a slot was given after the stop")
	}
}

// TestDispatcherSlotFreedWhileTheOutcomeIsRecorded: a call that gives its
// slot back once the downstream answered lets the next action in while it
// records its outcome, and a stop still waits for that outcome.
func TestDispatcherSlotFreedWhileTheOutcomeIsRecorded(t *testing.T) {
	td := newTestDispatcher(t, 64, 64)
	slot := td.Reserve(toolA, unpaced(1), key("a", "0"))
	answered, recorded := make(chan struct{}), make(chan struct{})
	slot.Run(func() {
		slot.Release() // the downstream answered
		close(answered)
		<-recorded
	})
	<-answered
	next := td.Reserve(toolA, unpaced(1), key("a", "1"))
	if next == nil {
		t.Fatal("the next action waits for a slot given back while the first recorded its outcome")
	}
	next.Release()
	stopped := td.stop(t, "while a call was still recording its outcome")
	close(recorded)
	stopped("once the outcome was recorded")
}
