// Package wake is the one way a loop that runs every period is also woken
// early: a sweep asked for now (a change of shard members, say) runs at
// once, or right after the one under way, and asks made meanwhile are one.
package wake

import (
	"context"
	"sync"
	"time"
)

// Early wakes a waiting loop before its period ends. The zero value is
// ready to use.
type Early struct {
	once sync.Once
	ch   chan struct{}
}

func (e *Early) woken() chan struct{} {
	e.once.Do(func() { e.ch = make(chan struct{}, 1) })
	return e.ch
}

// Wake asks the loop to run now, or right after the run under way.
func (e *Early) Wake() {
	select {
	case e.woken() <- struct{}{}:
	default: // a run is already asked for
	}
}

// Sleep waits d, or until Wake is called; false when ctx ended.
func (e *Early) Sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
	case <-e.woken():
	}
	return true
}
