package archive_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/history"
)

// BenchmarkKeyCheckBesideHistoryReads times key checks of absent keys, one
// after another, alone and then beside a flood of history lists (32
// readers listing a namespace of 2,000 records, 500 at a time, half of them
// by requester), in one run, and reports both latencies and their ratio:
// go test -run '^$' -bench KeyCheckBesideHistoryReads -benchtime 2000x ./internal/archive
func BenchmarkKeyCheckBesideHistoryReads(b *testing.B) {
	const (
		records = 2000
		readers = 32
	)
	ctx := context.Background()
	dsn, err := server.Database(ctx, fmt.Sprintf("bench_keycheck_%d", b.N))
	if err != nil {
		b.Fatal(err)
	}
	s := open(b, dsn)
	for i := range records {
		a := finished(fmt.Sprintf("u-%d", i), 1, t0.Add(time.Duration(i)*time.Second))
		a.Name = fmt.Sprintf("order-%05d", i)
		a.Annotations = map[string]string{v1alpha1.RequestedByAnnotation: fmt.Sprintf("agent-%d", i%20)}
		if _, err := s.Keep(ctx, record(b, a), archive.Link{}); err != nil {
			b.Fatal(err)
		}
	}
	checks := func() []time.Duration {
		latencies := make([]time.Duration, 0, b.N)
		for i := range b.N {
			began := time.Now()
			if r, err := guarding(s, ctx, namespaceOf("shop"), fmt.Sprintf("absent-%d", i)); err != nil || r != nil {
				b.Fatalf("key check: %v, %v", r, err)
			}
			latencies = append(latencies, time.Since(began))
		}
		slices.Sort(latencies)
		return latencies
	}
	b.ResetTimer()
	alone := checks()

	flooding, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	lists := make([]int, readers)
	for r := range readers {
		filter := history.Filter{}
		if r%2 == 1 {
			filter.RequestedBy = fmt.Sprintf("agent-%d", r%20)
		}
		wg.Go(func() {
			for flooding.Err() == nil {
				// A failure here is the flood's end: its context cancelled.
				_ = s.List(flooding, archive.Scope{Namespace: "shop"}, filter, archive.Position{}, 500, func(*archive.Record) bool { return true })
				lists[r]++
			}
		})
	}
	beside := checks()
	stop()
	wg.Wait()
	b.StopTimer()

	p := func(latencies []time.Duration, q int) float64 {
		return float64(latencies[(len(latencies)-1)*q/100].Microseconds()) / 1000
	}
	var listed int
	for _, n := range lists {
		listed += n
	}
	b.ReportMetric(p(alone, 50), "alone-p50-ms")
	b.ReportMetric(p(alone, 99), "alone-p99-ms")
	b.ReportMetric(p(beside, 50), "flood-p50-ms")
	b.ReportMetric(p(beside, 99), "flood-p99-ms")
	b.ReportMetric(p(beside, 99)/p(alone, 99), "p99-ratio")
	b.ReportMetric(float64(listed), "flood-lists")
}
