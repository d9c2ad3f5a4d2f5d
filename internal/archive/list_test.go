package archive_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/history"
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
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	keep("order-1", "charge", v1alpha1.PhaseSucceeded, "alice", "bob", t0)
	keep("order-2", "charge", v1alpha1.PhaseFailed, "alice", "", t0.Add(time.Hour))
	keep("order-3", "refund", v1alpha1.PhaseSucceeded, "carol", "bob", t0.Add(2*time.Hour))
	keep("refund-4", "refund", v1alpha1.PhaseSucceeded, "alice", "", t0.Add(3*time.Hour))
	for _, c := range []struct {
		name   string
		filter history.Filter
		want   []string
	}{
		{"nothing", history.Filter{}, []string{"order-1", "order-2", "order-3", "refund-4"}},
		{"tool", history.Filter{Tool: "refund"}, []string{"order-3", "refund-4"}},
		{"phase", history.Filter{Phase: "Failed"}, []string{"order-2"}},
		{"requester", history.Filter{RequestedBy: "alice"}, []string{"order-1", "order-2", "refund-4"}},
		{"approver", history.Filter{DecidedBy: "bob"}, []string{"order-1", "order-3"}},
		{"external reference", history.Filter{ExternalRef: "ch_order-3"}, []string{"order-3"}},
		{"completed from", history.Filter{CompletedFrom: t0.Add(2 * time.Hour)}, []string{"order-3", "refund-4"}},
		{"completed until", history.Filter{CompletedUntil: t0.Add(time.Hour)}, []string{"order-1"}},
		{"key prefix", history.Filter{KeyPrefix: "order-"}, []string{"order-1", "order-2", "order-3"}},
		{"a prefix with LIKE's wildcards", history.Filter{KeyPrefix: "order_"}, nil},
		{"several", history.Filter{RequestedBy: "alice", Tool: "charge", Phase: "Succeeded"}, []string{"order-1"}},
	} {
		if keys := list(t, s, c.filter, archive.Position{}, 10); !slices.Equal(keys, c.want) {
			t.Errorf("%s: %v, want %v", c.name, keys, c.want)
		}
		if n, err := s.Count(ctx, archive.Scope{Namespace: "shop"}, c.filter, 2); err != nil || n != min(len(c.want), 2) {
			t.Errorf("%s: counted %d up to 2 (%v), want %d", c.name, n, err, min(len(c.want), 2))
		}
	}
	// A filtered list goes on from where it stopped.
	first := list(t, s, history.Filter{RequestedBy: "alice"}, archive.Position{}, 2)
	from := archive.Position{Namespace: "shop", Key: "order-2", CompletionTime: t0.Add(time.Hour), UID: "order-2"}
	if rest := list(t, s, history.Filter{RequestedBy: "alice"}, from, 2); !slices.Equal(first, []string{"order-1", "order-2"}) || !slices.Equal(rest, []string{"refund-4"}) {
		t.Fatalf("two pages: %v then %v", first, rest)
	}
}

// list is the keys List hands over.
func list(t *testing.T, s *archive.Store, filter history.Filter, from archive.Position, limit int) []string {
	t.Helper()
	var keys []string
	err := s.List(context.Background(), archive.Scope{Namespace: "shop"}, filter, from, limit, func(r *archive.Record) bool {
		keys = append(keys, r.Key)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// A list's records leave the parameters, and kubectl's copy of them, out
// of their document, and say so; Read serves them.
func TestAListLeavesTheParametersOut(t *testing.T) {
	s := open(t, database(t))
	ctx := context.Background()
	a := finished("u-1", 1, t0)
	a.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":{"parameters":{"amount":1200}}}`, "team": "payments"}
	if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	var listed []archive.Record
	if err := s.List(ctx, archive.Scope{Namespace: "shop"}, history.Filter{}, archive.Position{}, 10, func(r *archive.Record) bool {
		listed = append(listed, *r)
		return false
	}); err != nil || len(listed) != 1 {
		t.Fatalf("List: %v, %d records", err, len(listed))
	}
	var doc v1alpha1.ToolAction
	if err := json.Unmarshal(listed[0].Action, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Spec.Parameters != nil || doc.Annotations[corev1.LastAppliedConfigAnnotation] != "" || doc.Annotations["team"] != "payments" ||
		doc.Status.ExternalRef != "ch_u-1" || !slices.Equal(listed[0].Omitted, []string{archive.OmittedParameters, archive.OmittedLastApplied}) {
		t.Errorf("listed %s, omitting %v; want it without its parameters and last-applied configuration, and saying so", listed[0].Action, listed[0].Omitted)
	}
	read, err := s.Read(ctx, namespaceOf("shop"), "order-1")
	if err != nil || read == nil {
		t.Fatalf("Read: %v, %v", read, err)
	}
	var whole v1alpha1.ToolAction
	if err := json.Unmarshal(read.Action, &whole); err != nil || read.Omitted != nil || string(whole.Spec.Parameters["amount"].Raw) != "1200" ||
		whole.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
		t.Errorf("Read: %s, omitting %v (%v); want the whole record", read.Action, read.Omitted, err)
	}
}
