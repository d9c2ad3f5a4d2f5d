package retention

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// Pacer spreads the retention work (retiring records into tombstones or the
// archive, deleting tombstones past their key retention) so that a backlog
// of many thousand records never crowds out live actions: the controller's
// workers never wait on it, they requeue a record for its turn. Turns are
// taken in real time, whatever clock judges the retentions: the pace
// bounds the load on the API server, which real time measures.
//
// The pace is the configured rate on top of the rate at which records came
// due on their own over the last minute (a finished record's reconcile at
// its retention): that steady flow is what live actions leave behind, one
// record each, and paced below it the finished records in etcd would grow
// without bound. The configured rate is the budget of the backlog beyond
// it: what the sweep finds, and a burst of records coming due at once.
type Pacer struct {
	limiter *rate.Limiter
	// most is the configured rate.
	most float64
	mu   sync.Mutex
	// turns holds the time reserved for each record sent away to wait.
	turns map[types.UID]time.Time
	// pruned is when turns was last cleared of records that never came
	// back (deleted meanwhile).
	pruned time.Time
	// due counts the records that asked for a first turn on their own.
	due dueWindow
}

// stale is how long past its turn a record's reservation is kept.
const stale = 10 * time.Minute

// NewPacer allows perSecond retention writes a second beyond the records
// coming due on their own, in bursts of burst.
func NewPacer(perSecond float64, burst int) *Pacer {
	return &Pacer{limiter: rate.NewLimiter(rate.Limit(perSecond), max(burst, 1)), most: perSecond, turns: map[types.UID]time.Time{}}
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

// Rate is the pace now: the configured rate and the rate at which records
// came due on their own over the last minute.
func (p *Pacer) Rate(now time.Time) float64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pace(now)
}

// pace is the rate Rate reports. p.mu is held.
func (p *Pacer) pace(now time.Time) float64 {
	return p.most + p.due.rate(now)
}

// schedule is how long uid waits for its turn, taken now unless it holds
// one; the turn is kept while it is ahead, or to be handed on. A first
// turn that is not handed on is a record come due on its own.
func (p *Pacer) schedule(uid types.UID, now time.Time, handOn bool) time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	at, held := p.turns[uid]
	if !held {
		if !handOn {
			p.due.add(now)
		}
		at = now.Add(p.take(now))
	}
	if handOn || now.Before(at) {
		p.turns[uid] = at
		return max(at.Sub(now), 0)
	}
	delete(p.turns, uid)
	return 0
}

// take takes a token at now, at the pace now, first dropping the turns of
// records that never came back (deleted meanwhile). p.mu is held.
func (p *Pacer) take(now time.Time) time.Duration {
	if now.Sub(p.pruned) > stale {
		for uid, at := range p.turns {
			if now.Sub(at) > stale {
				delete(p.turns, uid)
			}
		}
		p.pruned = now
	}
	perSecond := p.pace(now)
	p.limiter.SetLimitAt(now, rate.Limit(perSecond))
	pace.Set(perSecond)
	return p.limiter.ReserveN(now, 1).DelayFrom(now)
}

// dueWindow counts events per second over the last minute.
type dueWindow struct {
	counts  [60]int
	seconds [60]int64
}

func (w *dueWindow) add(now time.Time) {
	s := now.Unix()
	i := s % int64(len(w.counts))
	if w.seconds[i] != s {
		w.seconds[i], w.counts[i] = s, 0
	}
	w.counts[i]++
}

// rate is the events a second over the minute before now.
func (w *dueWindow) rate(now time.Time) float64 {
	s, n := now.Unix(), 0
	for i, at := range w.seconds {
		if s-at < int64(len(w.counts)) && at <= s {
			n += w.counts[i]
		}
	}
	return float64(n) / float64(len(w.counts))
}
