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
// holds every transition whatever is decided here. Warnings are always
// told, and an action with a warning keeps its routine events: what went
// wrong is told whole.
//
// Up to a rate of actions per second, each action's story is told from its
// claim to its outcome, never half: a success is told only when its claim
// was. A nil *RoutineEvents tells every event.
type RoutineEvents struct {
	// limiter admits new stories; nil admits every one.
	limiter *rate.Limiter
	mu      sync.Mutex
	// told holds the actions whose story is being told, since when.
	told map[types.UID]time.Time
}

// maxStories bounds the actions remembered as told; beyond it, those told
// for more than an hour (actions deleted in flight) are forgotten.
const maxStories = 10000

// NewRoutineEvents tells the happy path of up to perSecond actions a
// second, in bursts of up to five seconds' worth; +Inf tells every action's,
// 0 none.
func NewRoutineEvents(perSecond float64) *RoutineEvents {
	if math.IsInf(perSecond, 1) {
		return nil
	}
	burst := int(math.Ceil(5 * perSecond))
	return &RoutineEvents{limiter: rate.NewLimiter(rate.Limit(perSecond), burst), told: map[types.UID]time.Time{}}
}

// tell reports whether e, an event of the action uid, is emitted.
func (r *RoutineEvents) tell(uid types.UID, e report, now time.Time) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, told := r.told[uid]; told {
		return true
	}
	switch {
	case !e.routine:
	case !e.opensStory, !r.limiter.AllowN(now, 1):
		return false
	}
	r.remember(uid, now)
	return true
}

func (r *RoutineEvents) remember(uid types.UID, now time.Time) {
	if len(r.told) >= maxStories {
		for old, since := range r.told {
			if now.Sub(since) > time.Hour {
				delete(r.told, old)
			}
		}
		if len(r.told) >= maxStories {
			return
		}
	}
	r.told[uid] = now
}

// finished forgets the action uid: its story is over.
func (r *RoutineEvents) finished(uid types.UID) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.told, uid)
	r.mu.Unlock()
}
