package archive_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolledger/toolledger/internal/archive"
)

// BenchmarkKeep keeps records one after another, each appended to its
// namespace's hash chain, as one manager retiring a backlog does:
// go test -run '^$' -bench Keep ./internal/archive
func BenchmarkKeep(b *testing.B) {
	dsn, err := server.Database(context.Background(), fmt.Sprintf("bench_keep_%d", b.N))
	if err != nil {
		b.Fatal(err)
	}
	s := open(b, dsn)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		a := finished(fmt.Sprintf("u-%d", i), 1, t0)
		a.Name = fmt.Sprintf("order-%d", i)
		if _, err := s.Keep(ctx, record(b, a), archive.Link{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
