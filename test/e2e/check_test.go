package e2e

import (
	"strings"
	"testing"
	"time"
)

// settledTrial is a clean trial of three intents: two succeeded with their one
// effect each, one failed without any.
func settledTrial() Trial {
	return Trial{
		Name:   "shop",
		Prefix: "shop/",
		Keys:   []string{"shop/a", "shop/b", "shop/c"},
		Actions: map[string]Action{
			"shop/a": {Key: "shop/a", Phase: PhaseSucceeded, ExternalRef: "ch_a"},
			"shop/b": {Key: "shop/b", Phase: PhaseSucceeded, ExternalRef: "ch_b"},
			"shop/c": {Key: "shop/c", Phase: PhaseFailed, ErrorClass: "RetriesExhausted", Reason: "HTTP503"},
		},
		Effects: map[string]int{"shop/a": 1, "shop/b": 1, "other/a": 3},
		Charges: map[string]Charge{"shop/a": {ID: "ch_a"}, "shop/b": {ID: "ch_b"}},
	}
}

func TestCheckPassesACleanTrial(t *testing.T) {
	r := Check(settledTrial())
	if !r.OK() {
		t.Fatalf("violations in a clean trial: %v", r.Violations)
	}
	if r.Actions != 3 || r.Effects != 2 || r.Succeeded != 2 || r.Failed != 1 || r.Duplicates != 0 || r.Lost != 0 {
		t.Errorf("tally = %+v", r)
	}
}

// TestCheckReportsASecondEffect is the proof that the suite fails when the
// downstream counts a second effect for a key: the run fails on any
// violation, and a second effect is one.
func TestCheckReportsASecondEffect(t *testing.T) {
	trial := settledTrial()
	trial.Effects["shop/b"] = 2
	r := Check(trial)
	if r.OK() {
		t.Fatal("a second effect for shop/b passed the check")
	}
	if r.Duplicates != 1 || len(r.Violations) != 1 {
		t.Fatalf("duplicates = %d, violations = %v; want exactly the duplicate", r.Duplicates, r.Violations)
	}
	if v := r.Violations[0]; v.Kind != Duplicate || v.Key != "shop/b" || !strings.Contains(v.Detail, "2 effects") {
		t.Errorf("violation = %v", v)
	}
	row := Row{Scenario: "duplicated", Trials: 1, Result: r}
	if row.OK() {
		t.Error("a row with a duplicate is OK")
	}
	table := Table([]Row{row})
	if !strings.Contains(table, "| duplicated | 1 | 3 | 3 | 1 | 0 |") || !strings.Contains(table, "VIOLATION duplicate shop/b") {
		t.Errorf("the table does not show the duplicate:\n%s", table)
	}

	// A second effect under a key whose action escalated or failed counts as well.
	trial = settledTrial()
	trial.Actions["shop/b"] = Action{Key: "shop/b", Phase: PhaseEscalated, Reason: "OutcomeUnknown", Message: "no lookup proved it"}
	trial.Effects["shop/b"] = 2
	if r := Check(trial); r.Duplicates != 1 {
		t.Errorf("escalated key with 2 effects: duplicates = %d, violations %v", r.Duplicates, r.Violations)
	}
}

func TestCheckReportsLostIntents(t *testing.T) {
	trial := settledTrial()
	trial.Keys = append(trial.Keys, "shop/d", "shop/e")
	trial.Actions["shop/e"] = Action{Key: "shop/e", Phase: "Unknown", Reason: "OutcomeUnknown"}
	r := Check(trial)
	if r.Lost != 2 || len(r.Violations) != 2 {
		t.Fatalf("lost = %d, violations = %v; want shop/d missing and shop/e unsettled", r.Lost, r.Violations)
	}
	for _, v := range r.Violations {
		if v.Kind != Lost {
			t.Errorf("violation %v, want lost", v)
		}
	}
}

func TestCheckOtherProperties(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Trial)
		want   Kind
	}{
		"succeeded without an effect": {func(t *Trial) { t.Effects["shop/a"] = 0 }, MissingEffect},
		"failed with an effect":       {func(t *Trial) { t.Effects["shop/c"] = 1 }, PhantomEffect},
		"another charge's reference": {func(t *Trial) {
			t.Actions["shop/a"] = Action{Key: "shop/a", Phase: PhaseSucceeded, ExternalRef: "ch_other"}
		}, WrongReference},
		"escalated without a reason": {func(t *Trial) { t.Actions["shop/c"] = Action{Key: "shop/c", Phase: PhaseEscalated} }, EscalatedWithoutReason},
		"an effect nobody asked for": {func(t *Trial) { t.Effects["shop/z"] = 1 }, StrayEffect},
		"a changed request charged": {func(t *Trial) {
			t.Amounts = map[string]int64{"shop/a": 100}
			t.Actions["shop/a"] = Action{Key: "shop/a", Phase: PhaseSucceeded, ExternalRef: "ch_a", Amount: 100}
			t.Charges["shop/a"] = Charge{ID: "ch_a", Amount: 999}
		}, WrongRequest},
		"what the driver saw": {func(t *Trial) { t.Extra = []Violation{{Key: "shop/a", Detail: "a changed payload was accepted"}} }, DriverObserved},
	} {
		t.Run(name, func(t *testing.T) {
			trial := settledTrial()
			tc.mutate(&trial)
			r := Check(trial)
			if len(r.Violations) != 1 || r.Violations[0].Kind != tc.want {
				t.Fatalf("violations = %v, want one %s", r.Violations, tc.want)
			}
			if r.Other() != 1 {
				t.Errorf("Other() = %d, want 1", r.Other())
			}
		})
	}
}

func TestTable(t *testing.T) {
	var a, b Row
	a = Row{Scenario: "crash", Trials: 50, Wall: 61*time.Second + 340*time.Millisecond, Notes: []string{"kill points: …"}}
	a.Add(Result{Actions: 400, Effects: 398, Succeeded: 398, Failed: 2})
	b = Row{Scenario: "storm", Trials: 50, Wall: 30 * time.Second}
	b.Add(Result{Actions: 1000, Effects: 1000, Succeeded: 999, Escalated: 1})
	got := Table([]Row{a, b})
	for _, want := range []string{
		"| scenario | trials | actions | effects | duplicates | lost | escalated | failed | other violations | wall time |",
		"| crash | 50 | 400 | 398 | 0 | 0 | 0 | 2 | 0 | 1m1.3s |",
		"| storm | 50 | 1000 | 1000 | 0 | 0 | 1 | 0 | 0 | 30s |",
		"| **total** | 100 | 1400 | 1398 | 0 | 0 | 1 | 2 | 0 | 1m31s |",
		"**crash**\n- kill points: …",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "**storm**") {
		t.Errorf("a scenario without notes or violations has a notes section:\n%s", got)
	}
}

// A Failed action with an unseen attempt is a violation even when the
// downstream shows no effect yet: the held request may still commit.
func TestCheckRefusesFailedAfterAnUnseenOutcome(t *testing.T) {
	trial := settledTrial()
	trial.Keys = append(trial.Keys, "shop/f", "shop/g")
	trial.Actions["shop/f"] = Action{Key: "shop/f", Phase: PhaseFailed, ErrorClass: "RetriesExhausted", Reason: "HTTP409", Message: "3 of 3 attempts failed", Unseen: true}
	trial.Actions["shop/g"] = Action{Key: "shop/g", Phase: PhaseFailed, ErrorClass: "RetriesExhausted", Reason: "HTTP503", Message: "3 of 3 attempts failed"}
	r := Check(trial)
	if len(r.Violations) != 1 || r.Violations[0].Kind != FailedAfterUnseen || r.Violations[0].Key != "shop/f" {
		t.Fatalf("violations = %v; want shop/f failed after an unseen outcome", r.Violations)
	}
	want := "Failed, each on a definite answer (error class/reason): `RetriesExhausted/HTTP503` 2 (every attempt refused with 503, none unseen), " +
		"`RetriesExhausted/HTTP409` 1 (every attempt refused with 409, none unseen)"
	if got := failedNote(r.FailedBy); got != want {
		t.Errorf("failedNote = %q, want %q", got, want)
	}
}
