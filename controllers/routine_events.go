package controllers

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// RoutineEvents decides which actions' happy paths are told as Normal
// events (the claim's Executing, the Succeeded). An event is an etcd write
// beside the record's three, so at every action's pace they would cost the
// API server about a third more writes (docs/operations.md); status.history
// holds every transition whatever is decided here.
//
// Up to a rate of actions per second, each action's story is told from its
// claim to its outcome, never half: a success is told only when its claim
// was. A transition with any other event (a warning, an approval) is told
// whole, and the action's story from then on. A nil *RoutineEvents tells
// every event.
type RoutineEvents struct {
	// limiter admits new stories; none tells no routine event at all.
	limiter *rate.Limiter
	none    bool
	mu      sync.Mutex
	// told holds the actions whose story is being told, since when;
	// evicted is when it was last cleared of the stale.
	told    map[types.UID]time.Time
	evicted time.Time
}

// maxStories bounds the actions remembered as told; beyond it, no new
// story begins until those told for more than an hour (actions deleted in
// flight, or waiting long) are forgotten, at most once a minute.
const maxStories = 10000

// NewRoutineEvents tells the happy path of up to perSecond actions a
// second, in bursts of up to five seconds' worth; +Inf (or a rate too high
// to limit) tells every action's, 0 or less none.
func NewRoutineEvents(perSecond float64) *RoutineEvents {
	switch {
	case perSecond >= 1e6:
		return nil
	case !(perSecond > 0): // NaN too
		return &RoutineEvents{none: true}
	}
	burst := int(math.Ceil(5 * perSecond))
	return &RoutineEvents{limiter: rate.NewLimiter(rate.Limit(perSecond), burst), told: map[types.UID]time.Time{}}
}

// tell returns which of events, a transition's of the action uid, are
// emitted.
func (r *RoutineEvents) tell(uid types.UID, events []report, now time.Time) []report {
	if r == nil {
		return events
	}
	if r.none {
		var told []report
		for _, e := range events {
			if !e.routine {
				told = append(told, e)
			}
		}
		return told
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, told := r.told[uid]; told || len(events) == 0 {
		return events
	}
	routineOnly, opens := true, false
	for _, e := range events {
		routineOnly = routineOnly && e.routine
		opens = opens || e.opensStory
	}
	switch {
	case !routineOnly:
		r.remember(uid, now)
		return events
	case opens && r.room(now) && r.limiter.AllowN(now, 1):
		r.remember(uid, now)
		return events
	}
	return nil
}

// room reports whether a story can be remembered, forgetting the stale
// when it is full.
func (r *RoutineEvents) room(now time.Time) bool {
	if len(r.told) < maxStories {
		return true
	}
	if now.Sub(r.evicted) >= time.Minute {
		r.evicted = now
		for uid, since := range r.told {
			if now.Sub(since) > time.Hour {
				delete(r.told, uid)
			}
		}
	}
	return len(r.told) < maxStories
}

func (r *RoutineEvents) remember(uid types.UID, now time.Time) {
	if r.room(now) {
		r.told[uid] = now
	}
}

// finished forgets the action uid: its story is over.
func (r *RoutineEvents) finished(uid types.UID) {
	if r == nil || r.none {
		return
	}
	r.mu.Lock()
	delete(r.told, uid)
	r.mu.Unlock()
}
