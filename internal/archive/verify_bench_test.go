package archive_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// BenchmarkVerifyALongChain loads one namespace's chain of
// $TOOLLEDGER_BENCH_CHAIN_RECORDS records (100,000 by default) with COPY,
// then verifies it as the archive API does, in steps of 20 seconds that
// each go on from where the last stopped, and then, after 1,000 records
// more, from where that complete verification ended. It reports the full
// verification's records a second, its steps and its longest step, and the
// incremental one's time:
// TOOLLEDGER_BENCH_CHAIN_RECORDS=10000000 go test -run '^$' -bench VerifyALongChain -benchtime 1x -timeout 3h ./internal/archive
func BenchmarkVerifyALongChain(b *testing.B) {
	records := 100_000
	if n, err := strconv.Atoi(os.Getenv("TOOLLEDGER_BENCH_CHAIN_RECORDS")); err == nil && n > 0 {
		records = n
	}
	ctx := context.Background()
	dsn, err := server.Database(ctx, fmt.Sprintf("bench_chain_%d_%d", records, b.N))
	if err != nil {
		b.Fatal(err)
	}
	s := open(b, dsn)
	began := time.Now()
	head := loadChain(b, dsn, records)
	b.Logf("%d records loaded with COPY in %s", records, time.Since(began).Round(time.Second))
	b.ResetTimer()
	for range b.N {
		var (
			from    archive.VerifyFrom
			steps   int
			longest time.Duration
			v       *archive.Verification
		)
		began := time.Now()
		for v == nil || !v.Complete {
			stepBegan := time.Now()
			if v, err = s.Verify(ctx, "shop", archive.VerifyFrom{After: from.After, Budget: 20 * time.Second}); err != nil || v.Broken != nil {
				b.Fatalf("step %d: %+v, %v", steps+1, v, err)
			}
			steps, longest, from.After = steps+1, max(longest, time.Since(stepBegan)), v.Head
		}
		full := time.Since(began)
		if v.Head != head || v.Records != int64(records) {
			b.Fatalf("verified to %+v, %d records; want %+v, %d", v.Head, v.Records, head, records)
		}
		for i := range 1000 {
			a := finished(fmt.Sprintf("more-%d", i), 1, t0)
			a.Name = fmt.Sprintf("more-%04d", i)
			if _, err := s.Keep(ctx, record(b, a), archive.Link{}); err != nil {
				b.Fatal(err)
			}
		}
		began = time.Now()
		if v, err = s.Verify(ctx, "shop", archive.VerifyFrom{After: v.Head, Budget: 20 * time.Second}); err != nil || !v.Complete || v.Broken != nil || v.Checked != 1000 {
			b.Fatalf("incremental: %+v, %v", v, err)
		}
		incremental := time.Since(began)
		b.ReportMetric(float64(records)/full.Seconds(), "records/s")
		b.ReportMetric(full.Seconds(), "full-s")
		b.ReportMetric(float64(steps), "steps")
		b.ReportMetric(longest.Seconds(), "longest-step-s")
		b.ReportMetric(float64(incremental.Milliseconds()), "incremental-1000-ms")
	}
}

// loadChain writes n chained records of namespace shop straight into the
// database, as the manager would have kept them one by one, and returns
// the chain's head.
func loadChain(b *testing.B, dsn string, n int) archive.Link {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	// The superuser writes them past the append trigger, which takes one
	// link at a time.
	var archivedAt time.Time
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		b.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&archivedAt); err != nil {
		b.Fatal(err)
	}
	var head archive.Link
	i := 0
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		i++
		key := fmt.Sprintf("k%09d", i)
		action := fmt.Sprintf(`{"kind": "ToolAction", "metadata": {"name": "%s", "namespace": "shop"}}`, key)
		r := archive.Record{UID: types.UID(fmt.Sprintf("u-%09d", i)), Namespace: "shop", NamespaceUID: "shop-uid", Key: key,
			Tool: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"}, IdempotencyClass: v1alpha1.KeyProtected,
			RequestDigest: "sha256:" + key, Phase: v1alpha1.PhaseSucceeded, ExternalRef: "ch_" + key, Attempts: 1, GuardsKey: true,
			CompletionTime: t0, Cause: v1alpha1.TombstoneCauseRecordRetention, DeletionTime: t0, ArchivedAt: archivedAt.UTC()}
		hash, err := archive.LinkHash(int64(i), head.Hash, &r, action)
		if err != nil {
			return nil, err
		}
		previous := head.Hash
		head = archive.Link{Sequence: int64(i), Hash: hash}
		return []any{string(r.UID), r.Namespace, string(r.NamespaceUID), r.Key, r.Tool.Kind, r.Tool.Name, string(r.IdempotencyClass),
			r.RequestDigest, string(r.Phase), "", "", r.ExternalRef, r.Attempts, r.GuardsKey, r.CompletionTime, r.Cause, "", r.DeletionTime,
			action, int64(i), previous, hash, r.ArchivedAt}, nil
	})
	columns := []string{"uid", "namespace", "namespace_uid", "key", "tool_kind", "tool_name", "idempotency_class", "request_digest", "phase",
		"error_class", "error_reason", "external_ref", "attempts", "guards_key", "completion_time", "cause", "deleted_by", "deletion_time",
		"action", "chain_seq", "chain_prev", "chain_hash", "archived_at"}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"toolledger_records"}, columns, rows); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO toolledger_chain_heads (namespace, seq, hash, started_at) VALUES ('shop', $1, $2, $3)`,
		head.Sequence, head.Hash, archivedAt); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE toolledger_records`); err != nil {
		b.Fatal(err)
	}
	return head
}
