package retention

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// Pacer spreads the retention work (retiring records into tombstones,
// deleting tombstones past their key retention) at a bounded rate, so that a
// backlog of many thousand records never crowds out live actions: the
// controller's workers never wait on it, they requeue a record for its turn.
// Turns are taken in real time, whatever clock judges the retentions: the
// pace bounds the load on the API server, which real time measures.
type Pacer struct {
	limiter *rate.Limiter
	mu      sync.Mutex
	// turns holds the time reserved for each record sent away to wait.
	turns map[types.UID]time.Time
	// pruned is when turns was last cleared of records that never came
	// back (deleted meanwhile).
	pruned time.Time
}

// stale is how long past its turn a record's reservation is kept.
const stale = 10 * time.Minute

// NewPacer allows perSecond retention writes a second, in bursts of burst.
func NewPacer(perSecond float64, burst int) *Pacer {
	return &Pacer{limiter: rate.NewLimiter(rate.Limit(perSecond), max(burst, 1)), turns: map[types.UID]time.Time{}}
}

// Turn reports how long the record uid must wait before its retention work;
// zero means now. A record that comes back at its reserved time takes that
// turn, not another.
func (p *Pacer) Turn(uid types.UID, now time.Time) time.Duration {
	return p.schedule(uid, now, false)
}

// Reserve takes uid's turn for a caller that waits for it itself (the
// sweep) and hands it on: the record's own turn call at or after the
// returned wait goes ahead without taking another.
func (p *Pacer) Reserve(uid types.UID, now time.Time) time.Duration {
	return p.schedule(uid, now, true)
}

// schedule is how long uid waits for its turn, taken now unless it holds
// one; the turn is kept while it is ahead, or to be handed on.
func (p *Pacer) schedule(uid types.UID, now time.Time, handOn bool) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	at, held := p.turns[uid]
	if !held {
		at = now.Add(p.take(now))
	}
	if handOn || now.Before(at) {
		p.turns[uid] = at
		return max(at.Sub(now), 0)
	}
	delete(p.turns, uid)
	return 0
}

// take takes a token at now, first dropping the turns of records that
// never came back (deleted meanwhile). p.mu is held.
func (p *Pacer) take(now time.Time) time.Duration {
	if now.Sub(p.pruned) > stale {
		for uid, at := range p.turns {
			if now.Sub(at) > stale {
				delete(p.turns, uid)
			}
		}
		p.pruned = now
	}
	return p.limiter.ReserveN(now, 1).DelayFrom(now)
}
