package history

import (
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// The archive API's query, as the plugin and the console send it, and as
// the API reads it back: the times are whole seconds on the wire, from
// rounded down and until up.
func TestTheQueryIsTheArchiveAPIsWireFormat(t *testing.T) {
	f := Filter{Tool: "charge", Phase: "Succeeded", ExternalRef: "ch_1", RequestedBy: "alice", DecidedBy: "bob",
		CompletedFrom: t0.Add(1500 * time.Millisecond), CompletedUntil: t0.Add(time.Hour + time.Millisecond), KeyPrefix: "order-"}
	const wire = "completedFrom=2026-12-01T09%3A00%3A01Z&completedUntil=2026-12-01T10%3A00%3A01Z&" +
		"fieldSelector=spec.toolRef.name%3Dcharge%2Cstatus.phase%3DSucceeded%2Cstatus.externalRef%3Dch_1%2C" +
		"metadata.annotations.toolledger.dev%2Frequested-by%3Dalice%2Cstatus.approval.decidedBy%3Dbob&keyPrefix=order-"
	if got := f.Query().Encode(); got != wire {
		t.Errorf("Query:\n%s\nwant\n%s", got, wire)
	}
	if got := (Filter{}).Query().Encode(); got != "" {
		t.Errorf("the zero filter's query: %q, want none", got)
	}
	query, _ := url.ParseQuery(wire)
	read, err := ParseQuery(query)
	want := f
	want.CompletedFrom, want.CompletedUntil = t0.Add(time.Second), t0.Add(time.Hour+time.Second)
	if err != nil || !cmp.Equal(read, want) {
		t.Errorf("ParseQuery(%s): %v (-got +want):\n%s", wire, err, cmp.Diff(read, want))
	}
}

func TestToolActionSelectorSaysWhatToolActionsSelectBy(t *testing.T) {
	for _, c := range []struct {
		filter Filter
		want   string
	}{
		{Filter{}, ""},
		{Filter{Tool: "charge", RequestedBy: "alice"}, "spec.toolRef.name=charge"},
		{Filter{Tool: "charge", Phase: "Failed", KeyPrefix: "order-"}, "spec.toolRef.name=charge,status.phase=Failed"},
	} {
		if got := c.filter.ToolActionSelector(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.filter, got, c.want)
		}
	}
}

func TestMatches(t *testing.T) {
	completed := metav1.NewTime(t0)
	done := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Name: "order-1", Annotations: map[string]string{v1alpha1.RequestedByAnnotation: "alice"}},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status: v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, ExternalRef: "ch_1", CompletionTime: &completed,
			Approval: &v1alpha1.ApprovalRecord{DecidedBy: "bob"}},
	}
	running := done.DeepCopy()
	running.Status.CompletionTime, running.Status.Phase, running.Status.Approval = nil, v1alpha1.PhaseExecuting, nil
	for _, c := range []struct {
		name          string
		filter        Filter
		done, running bool
	}{
		{"nothing", Filter{}, true, true},
		{"the tool", Filter{Tool: "charge"}, true, true},
		{"another tool", Filter{Tool: "refund"}, false, false},
		{"the phase", Filter{Phase: "Succeeded"}, true, false},
		{"the external reference", Filter{ExternalRef: "ch_1"}, true, true},
		{"the requester", Filter{RequestedBy: "alice"}, true, true},
		{"the approver", Filter{DecidedBy: "bob"}, true, false},
		{"the key's prefix", Filter{KeyPrefix: "order-"}, true, true},
		{"another prefix", Filter{KeyPrefix: "refund-"}, false, false},
		{"from its completion", Filter{CompletedFrom: t0}, true, false},
		{"from a nanosecond later", Filter{CompletedFrom: t0.Add(time.Nanosecond)}, false, false},
		{"until its completion", Filter{CompletedUntil: t0}, false, false},
		{"until a nanosecond later", Filter{CompletedUntil: t0.Add(time.Nanosecond)}, true, false},
	} {
		if got := c.filter.Matches(done); got != c.done {
			t.Errorf("%s: matches the finished action %v, want %v", c.name, got, c.done)
		}
		if got := c.filter.Matches(running); got != c.running {
			t.Errorf("%s: matches the running action %v, want %v", c.name, got, c.running)
		}
	}
}
