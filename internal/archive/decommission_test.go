package archive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/internal/archive"
)

// Every connection to one database names the same archive, and another
// database another: the cluster's binding tells them apart.
func TestAnArchiveHasOneIdentity(t *testing.T) {
	dsn := database(t)
	first, again := open(t, dsn), open(t, dsn)
	if first.Identity() == "" || first.Identity() != again.Identity() {
		t.Fatalf("identities %q and %q of one database", first.Identity(), again.Identity())
	}
	otherDSN, err := server.Database(context.Background(), "another_archive")
	if err != nil {
		t.Fatal(err)
	}
	if other := open(t, otherDSN); other.Identity() == first.Identity() {
		t.Fatalf("two databases share the identity %s", first.Identity())
	}
}

// Once decommissioned, the archive keeps nothing more, and GuardingKeys
// lists, for each key, the record the key check answers from.
func TestADecommissionedArchiveKeepsNothingMore(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t))
	older, newer := finished("u-1", 1, t0), finished("u-2", 1, t0.Add(time.Hour))
	other := finished("u-3", 1, t0)
	other.Name = "order-2"
	undispatched := finished("u-4", 0, t0)
	undispatched.Name = "order-3"
	for _, r := range []archive.Record{record(t, older), record(t, newer), record(t, other), record(t, undispatched)} {
		if _, err := s.Keep(ctx, r, archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	if decommissioned, err := s.Decommissioned(ctx); err != nil || decommissioned {
		t.Fatalf("Decommissioned before = %v, %v", decommissioned, err)
	}
	at, err := s.Decommission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.Decommission(ctx); err != nil || !again.Equal(at) {
		t.Fatalf("decommissioning again: %s, %v; want %s, unchanged", again, err, at)
	}
	if decommissioned, err := s.Decommissioned(ctx); err != nil || !decommissioned {
		t.Fatalf("Decommissioned after = %v, %v", decommissioned, err)
	}
	late := finished("u-5", 1, t0)
	late.Name = "order-4"
	_, err = s.Keep(ctx, record(t, late), archive.Link{})
	if !errors.Is(err, archive.ErrDecommissioned) || errors.Is(err, archive.ErrUnavailable) {
		t.Fatalf("Keep after decommissioning: %v, want ErrDecommissioned and not ErrUnavailable", err)
	}
	// Nor a record it kept: the retention sweep would take that answer for
	// a move done, and delete a Tombstone decommissioning wrote back.
	if _, err := s.Keep(ctx, record(t, newer), archive.Link{}); !errors.Is(err, archive.ErrDecommissioned) {
		t.Fatalf("Keep of a record kept before decommissioning: %v, want ErrDecommissioned", err)
	}
	var guarded []string
	if err := s.GuardingKeys(ctx, func(lives []*archive.Record) error {
		for _, r := range lives {
			guarded = append(guarded, r.Key+"="+string(r.UID))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"order-1=u-2", "order-2=u-3"}; !slices.Equal(guarded, want) {
		t.Fatalf("GuardingKeys = %v, want %v", guarded, want)
	}
}

// A record being kept while the archive is decommissioned is either kept
// before it is (and listed by GuardingKeys), or refused: never lost.
func TestDecommissioningWaitsForTheRecordsBeingKept(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	s := open(t, dsn)
	const n = 200
	kept := make(chan string, n)
	refused := make(chan string, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			a := finished(fmt.Sprintf("u-%d", i), 1, t0)
			a.Name = fmt.Sprintf("order-%03d", i)
			_, err := s.Keep(ctx, record(t, a), archive.Link{})
			switch {
			case err == nil:
				kept <- a.Name
			case errors.Is(err, archive.ErrDecommissioned):
				refused <- a.Name
			default:
				t.Error(err)
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := s.Decommission(ctx); err != nil {
		t.Fatal(err)
	}
	guarded := map[string]bool{}
	if err := s.GuardingKeys(ctx, func(lives []*archive.Record) error {
		guarded[lives[0].Key] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	<-done
	close(kept)
	close(refused)
	var keptCount int
	for key := range kept {
		keptCount++
		if !guarded[key] {
			t.Errorf("%s was kept but is not listed after decommissioning", key)
		}
	}
	if keptCount+len(refused) != n || len(guarded) != keptCount {
		t.Errorf("kept %d, refused %d, listed %d of %d", keptCount, len(refused), len(guarded), n)
	}
}

// A key check reads, with the key's record, whether the archive was
// decommissioned: the moment Tombstones are written again, which a check
// that leaves them unread must then read.
func TestAKeyCheckSaysWhenTheArchiveWasDecommissioned(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t))
	if _, err := s.Keep(ctx, record(t, finished("u-1", 1, t0)), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	check := func(key string) (string, bool) {
		t.Helper()
		check, err := s.CheckKey(ctx, namespaceOf("shop"), key, archive.Link{})
		if err != nil {
			t.Fatalf("CheckKey(%s): %v", key, err)
		}
		if check.Current == nil {
			return "", check.Decommissioned
		}
		return string(check.Current.UID), check.Decommissioned
	}
	for when, decommission := range []bool{false, true} {
		if decommission {
			if _, err := s.Decommission(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if uid, decommissioned := check("order-1"); uid != "u-1" || decommissioned != decommission {
			t.Errorf("check %d of a kept key: record %q, decommissioned %v; want u-1, %v", when, uid, decommissioned, decommission)
		}
		if uid, decommissioned := check("order-9"); uid != "" || decommissioned != decommission {
			t.Errorf("check %d of an absent key: record %q, decommissioned %v; want none, %v", when, uid, decommissioned, decommission)
		}
	}
}

// GuardingKeys lists each key with the newest record of each life of its
// namespace's name that guards it, newest first, in pages of keys, however
// many records a key has.
func TestGuardingKeysListsEachLifeOfAKey(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t))
	for i, life := range []types.UID{"shop-1", "shop-1", "shop-2"} {
		for k := range 3 {
			a := finished(fmt.Sprintf("u-%d-%d", i, k), 1, t0.Add(time.Duration(i)*time.Hour))
			a.Name = fmt.Sprintf("order-%d", k)
			r, err := archive.NewRecord(a, life, nil, "Deleted", "", t0.Add(time.Duration(i)*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Keep(ctx, r, archive.Link{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var listed []string
	if err := s.GuardingKeys(ctx, func(lives []*archive.Record) error {
		entry := lives[0].Key + ":"
		for _, r := range lives {
			entry += " " + string(r.NamespaceUID) + "=" + string(r.UID)
		}
		listed = append(listed, entry)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"order-0: shop-2=u-2-0 shop-1=u-1-0", "order-1: shop-2=u-2-1 shop-1=u-1-1", "order-2: shop-2=u-2-2 shop-1=u-1-2"}
	if !slices.Equal(listed, want) {
		t.Errorf("GuardingKeys = %q, want %q", listed, want)
	}
}
