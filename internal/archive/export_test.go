package archive

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// HoldReadConnections acquires every connection the store's user reads
// (the archive API's lists and gets, verifications) use, until the test
// ends: as a flood of slow history reads would.
func HoldReadConnections(t testing.TB, s *Store) { hold(t, s.reads) }

// HoldKeyConnections acquires every connection the key check uses.
func HoldKeyConnections(t testing.TB, s *Store) { hold(t, s.keys) }

func hold(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for range pool.Config().MaxConns - pool.Stat().AcquiredConns() {
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Release)
	}
}

// LinkHash is the hash of r's link at sequence after previous, with the
// action's text as the database keeps it: what a benchmark that loads a
// chain whole with COPY writes.
func LinkHash(sequence int64, previous string, r *Record, actionText string) (string, error) {
	return linkHash(sequence, previous, r, actionText)
}
