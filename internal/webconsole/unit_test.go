package webconsole

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestCSRFTokenIsBoundToItsUserAndExpires(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := csrf{key: []byte("0123456789abcdef0123456789abcdef"), now: func() time.Time { return now }}
	token := c.token("ana")
	if !c.valid(token, "ana") {
		t.Fatal("a fresh token of ana is refused")
	}
	for name, tc := range map[string]struct{ token, subject string }{
		"another user":  {token, "bob"},
		"empty":         {"", "ana"},
		"no signature":  {"1800000000", "ana"},
		"changed time":  {"1800000001" + token[len("1800000000"):], "ana"},
		"another key":   {csrf{key: []byte("another key, as long as the other"), now: c.now}.token("ana"), "ana"},
		"not a number":  {"x." + token[len("1800000000."):], "ana"},
		"signature cut": {token[:len(token)-2], "ana"},
	} {
		if c.valid(tc.token, tc.subject) {
			t.Errorf("%s: accepted", name)
		}
	}
	later := csrf{key: c.key, now: func() time.Time { return now.Add(csrfLifetime + time.Second) }}
	if later.valid(token, "ana") {
		t.Error("an expired token is accepted")
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8087": true, "localhost:8087": true, "LOCALHOST": true, "[::1]:8087": true, "127.0.0.2": true,
		"evil.example:8087": false, "192.0.2.1:8087": false, "localhost.evil.example": false, "": false,
	} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestCountByTool(t *testing.T) {
	action := func(ns, tool string, kind string, phase v1alpha1.Phase) v1alpha1.ToolAction {
		a := v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns}}
		a.Spec.ToolRef = v1alpha1.ToolReference{Name: tool, Kind: kind}
		a.Status.Phase = phase
		return a
	}
	rows, totals := countByTool([]v1alpha1.ToolAction{
		action("shop", "refund", "", v1alpha1.PhaseSucceeded),
		action("shop", "charge", "", v1alpha1.PhaseEscalated),
		action("shop", "refund", "", v1alpha1.PhaseSucceeded),
		action("shop", "refund", "", ""), // not seen by the controller yet
		action("shop", "notify", v1alpha1.KindClusterTool, v1alpha1.PhaseFailed),
	})
	counts := func(byPhase map[v1alpha1.Phase]int) []int {
		out := make([]int, len(dashboardPhases))
		for phase, n := range byPhase {
			for i, p := range dashboardPhases {
				if p == phase {
					out[i] = n
				}
			}
		}
		return out
	}
	want := []countRow{
		{Namespace: "shop", Tool: "ClusterTool/notify", Counts: counts(map[v1alpha1.Phase]int{v1alpha1.PhaseFailed: 1}), Total: 1},
		{Namespace: "shop", Tool: "charge", Counts: counts(map[v1alpha1.Phase]int{v1alpha1.PhaseEscalated: 1}), Total: 1},
		{Namespace: "shop", Tool: "refund", Counts: counts(map[v1alpha1.Phase]int{v1alpha1.PhaseSucceeded: 2, v1alpha1.PhasePending: 1}), Total: 3},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if totals.Total != 5 {
		t.Errorf("total %d, want 5", totals.Total)
	}
}
