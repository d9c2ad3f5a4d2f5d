package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// op is one unit of work of a load run: worker w's seq-th object or action.
type op func(ctx context.Context, worker, seq int) error

// opTimeout bounds every single operation, so that no run can hang.
const opTimeout = 2 * time.Minute

// runResult is what a load run measured inside its window.
type runResult struct {
	Concurrency int
	Window      time.Duration
	Completed   int // operations that finished inside the window
	Total       int // operations that succeeded, warmup and drain included
	Throughput  float64
	Latencies   []time.Duration // of operations that started and finished inside the window
	Errors      int
	FirstError  error
}

func (r runResult) percentile(p float64) time.Duration { return percentile(r.Latencies, p) }

// closedLoop runs concurrency workers, each doing one operation after the
// other, for warmup+measure; it counts what finished within the measured
// window and then lets every worker finish its last operation.
func closedLoop(ctx context.Context, concurrency int, warmup, measure time.Duration, fn op) runResult {
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+measure)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		completed int
		total     int
		errs      int
		firstErr  error
		wg        sync.WaitGroup
	)
	for w := range concurrency {
		wg.Go(func() {
			for seq := 0; ; seq++ {
				began := time.Now()
				if !began.Before(until) || ctx.Err() != nil {
					return
				}
				opCtx, cancel := context.WithTimeout(ctx, opTimeout)
				err := fn(opCtx, w, seq)
				cancel()
				ended := time.Now()
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					total++
					if !ended.Before(from) && !ended.After(until) {
						completed++
						if !began.Before(from) {
							latencies = append(latencies, ended.Sub(began))
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return runResult{
		Concurrency: concurrency, Window: measure, Completed: completed, Total: total,
		Throughput: float64(completed) / measure.Seconds(),
		Latencies:  latencies, Errors: errs, FirstError: firstErr,
	}
}

// openLoopResult is what a fixed-rate run measured.
type openLoopResult struct {
	Rate      float64 // arrivals per second offered
	Offered   int
	Latencies []time.Duration // of arrivals after the warmup
	Errors    int
	Dropped   int // arrivals not started because maxOutstanding were in flight
	FirstErr  error
	Achieved  float64 // completions per second over the run
}

// openLoop starts operations at a fixed rate for duration, whatever the
// system's latency, as independent callers would; at most maxOutstanding
// run at once. Latencies of arrivals in the first warmup are not kept.
func openLoop(ctx context.Context, rate float64, warmup, duration time.Duration, maxOutstanding int, fn op) openLoopResult {
	res := openLoopResult{Rate: rate}
	if rate <= 0 {
		return res
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var (
		mu          sync.Mutex
		wg          sync.WaitGroup
		outstanding atomic.Int64
		done        int
	)
	total := int(duration.Seconds() * rate)
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		res.Offered++
		if outstanding.Load() >= int64(maxOutstanding) {
			res.Dropped++
			continue
		}
		outstanding.Add(1)
		keep := at.Sub(start) >= warmup
		wg.Go(func() {
			defer outstanding.Add(-1)
			opCtx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			began := time.Now()
			err := fn(opCtx, 0, i)
			elapsed := time.Since(began)
			mu.Lock()
			defer mu.Unlock()
			done++
			if err != nil {
				res.Errors++
				if res.FirstErr == nil {
					res.FirstErr = err
				}
				return
			}
			if keep {
				res.Latencies = append(res.Latencies, elapsed)
			}
		})
	}
	wg.Wait()
	res.Achieved = float64(done-res.Errors) / time.Since(start).Seconds()
	return res
}

// percentile is the nearest-rank percentile p (0..100) of d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(rank, len(s)-1))]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// parallel runs fn for 0..n-1 with at most concurrency at once and returns
// the first error; it stops starting new work after one.
func parallel(ctx context.Context, n, concurrency int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range min(concurrency, max(n, 1)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				opCtx, opCancel := context.WithTimeout(ctx, opTimeout)
				err := fn(opCtx, i)
				opCancel()
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return firstErr
}
