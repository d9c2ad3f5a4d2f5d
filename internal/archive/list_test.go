package archive_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

func TestListSelectsByEveryFilter(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	keep := func(key, tool string, phase v1alpha1.Phase, requester, approver string, completed time.Time) {
		t.Helper()
		a := finished(key, 1, completed)
		a.Name, a.Spec.ToolRef.Name, a.Status.Phase = key, tool, phase
		a.Annotations = map[string]string{v1alpha1.RequestedByAnnotation: requester}
		if approver != "" {
			a.Status.Approval = &v1alpha1.ApprovalRecord{Name: key, Decision: v1alpha1.Approved, DecidedBy: approver}
		}
		if err := s.Keep(ctx, record(t, a)); err != nil {
			t.Fatal(err)
		}
	}
	keep("order-1", "charge", v1alpha1.PhaseSucceeded, "alice", "bob", t0)
	keep("order-2", "charge", v1alpha1.PhaseFailed, "alice", "", t0.Add(time.Hour))
	keep("order-3", "refund", v1alpha1.PhaseSucceeded, "carol", "bob", t0.Add(2*time.Hour))
	keep("refund-4", "refund", v1alpha1.PhaseSucceeded, "alice", "", t0.Add(3*time.Hour))
	for _, c := range []struct {
		name   string
		filter archive.Filter
		want   []string
	}{
		{"nothing", archive.Filter{}, []string{"order-1", "order-2", "order-3", "refund-4"}},
		{"tool", archive.Filter{Tool: "refund"}, []string{"order-3", "refund-4"}},
		{"phase", archive.Filter{Phase: "Failed"}, []string{"order-2"}},
		{"requester", archive.Filter{RequestedBy: "alice"}, []string{"order-1", "order-2", "refund-4"}},
		{"approver", archive.Filter{DecidedBy: "bob"}, []string{"order-1", "order-3"}},
		{"external reference", archive.Filter{ExternalRef: "ch_order-3"}, []string{"order-3"}},
		{"completed from", archive.Filter{CompletedFrom: t0.Add(2 * time.Hour)}, []string{"order-3", "refund-4"}},
		{"completed until", archive.Filter{CompletedUntil: t0.Add(time.Hour)}, []string{"order-1"}},
		{"key prefix", archive.Filter{KeyPrefix: "order-"}, []string{"order-1", "order-2", "order-3"}},
		{"a prefix with LIKE's wildcards", archive.Filter{KeyPrefix: "order_"}, nil},
		{"several", archive.Filter{RequestedBy: "alice", Tool: "charge", Phase: "Succeeded"}, []string{"order-1"}},
	} {
		got, next, err := s.List(ctx, "shop", c.filter, archive.Position{}, 10)
		if err != nil || next != nil {
			t.Fatalf("%s: %v, next %v", c.name, err, next)
		}
		var keys []string
		for _, r := range got {
			keys = append(keys, r.Key)
		}
		if !slices.Equal(keys, c.want) {
			t.Errorf("%s: %v, want %v", c.name, keys, c.want)
		}
	}
	// Pages of a filtered list follow each other.
	first, next, err := s.List(ctx, "shop", archive.Filter{RequestedBy: "alice"}, archive.Position{}, 2)
	if err != nil || len(first) != 2 || next == nil {
		t.Fatalf("first page: %d records, next %v, %v", len(first), next, err)
	}
	rest, next, err := s.List(ctx, "shop", archive.Filter{RequestedBy: "alice"}, *next, 2)
	if err != nil || len(rest) != 1 || rest[0].Key != "refund-4" || next != nil {
		t.Fatalf("second page: %+v, next %v, %v", rest, next, err)
	}
}
