package archive_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// A flood of history reads holds every connection users read through; the
// key check, which every tenant's new actions wait for, has its own.
func TestAKeyCheckAnswersWhileEveryReadConnectionIsHeld(t *testing.T) {
	s := open(t, database(t))
	ctx := context.Background()
	if _, err := s.Keep(ctx, record(t, finished("u-1", 1, t0)), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	archive.HoldReadConnections(t, s)

	reading, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := s.Namespaces(reading); err == nil {
		t.Fatal("a read answered while every read connection was held: the hold holds nothing")
	}

	answered := make(chan error, 1)
	began := time.Now()
	go func() {
		r, err := guarding(s, ctx, namespaceOf("shop"), "order-1")
		if err == nil && (r == nil || r.UID != "u-1") {
			err = fmt.Errorf("answered with %+v, want the record u-1", r)
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil || time.Since(began) > time.Second {
			t.Errorf("the key check beside held reads: %v after %s, want the record within a second", err, time.Since(began))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the key check waited 10s behind the held reads")
	}
}

// A key check that cannot be answered (its connections all held, a
// database that hangs) fails within its deadline, and the action waits
// ArchiveUnavailable and is retried, rather than holding a worker.
func TestAKeyCheckGivesUpAtItsDeadline(t *testing.T) {
	s := open(t, database(t))
	archive.HoldKeyConnections(t, s)
	answered := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := guarding(s, context.Background(), namespaceOf("shop"), "order-1")
		answered <- err
	}()
	select {
	case err := <-answered:
		if !errors.Is(err, archive.ErrUnavailable) || time.Since(began) > 7*time.Second {
			t.Errorf("the key check without a connection: %v after %s, want ErrUnavailable within its deadline", err, time.Since(began))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the key check without a connection waited 15s: it has no deadline")
	}
}

// The history filters that select by a field of the action's document,
// and by the external reference, are answered from indexes of their own,
// in the list's order, not by reading every record of the namespace.
func TestTheHistoryFiltersUseTheirIndexes(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	for i := range 400 {
		a := finished(fmt.Sprintf("u-%d", i), 1, t0.Add(time.Duration(i)*time.Minute))
		a.Name = fmt.Sprintf("order-%d", i)
		a.Annotations = map[string]string{v1alpha1.RequestedByAnnotation: fmt.Sprintf("agent-%d", i%40)}
		a.Status.Approval = &v1alpha1.ApprovalRecord{Name: a.Name, Decision: v1alpha1.Approved, DecidedBy: fmt.Sprintf("approver-%d", i%40)}
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := execSQL(ctx, dsn, `ANALYZE toolledger_records`); err != nil {
		t.Fatal(err)
	}
	// The conditions history.Filter.Where writes, in the list's statement.
	for _, c := range []struct{ index, condition string }{
		{"toolledger_records_by_requester", `action->'metadata'->'annotations'->>'` + v1alpha1.RequestedByAnnotation + `' = 'agent-7'`},
		{"toolledger_records_by_approver", `action->'status'->'approval'->>'decidedBy' = 'approver-7'`},
		{"toolledger_records_by_external_ref", `external_ref = 'ch_u-7'`},
	} {
		plan, err := execSQL(ctx, dsn, `EXPLAIN SELECT uid FROM toolledger_records
WHERE namespace = 'shop' AND (namespace, key, completion_time, uid) > ('', '', '0001-01-01', '') AND `+c.condition+`
ORDER BY namespace, key, completion_time, uid LIMIT 501`)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, c.index) {
			t.Errorf("a list that selects by %s does not use %s:\n%s", c.condition, c.index, plan)
		}
	}
}

// execSQL runs sql on dsn outside the Store and returns the text of its
// rows' first column, a line each: an EXPLAIN's plan.
func execSQL(ctx context.Context, dsn, sql string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("%s: %w", sql, err)
	}
	return strings.Join(lines, "\n"), nil
}
