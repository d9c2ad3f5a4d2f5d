package controllers

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// reasons are the reasons of the events told.
func reasons(told []report) []string {
	var out []string
	for _, e := range told {
		out = append(out, e.reason)
	}
	return out
}

// TestRoutineEventsBudget: the happy path is told for a budget of actions,
// each from its claim to its outcome; a transition with another event is
// told whole, and its action's story from then on.
func TestRoutineEventsBudget(t *testing.T) {
	claim := []report{{reason: ReasonExecuting, routine: true, opensStory: true}}
	success := []report{{reason: ReasonSucceeded, routine: true}}
	lost := []report{warning("ConnectionLost", "Dispatch", "connection lost")}
	replayed := []report{success[0], warning("ReplayedByDownstream", "Dispatch", "replayed")}
	at := time.Unix(1_800_000_000, 0)
	expect := func(what string, got []report, want ...string) {
		t.Helper()
		if !slices.Equal(reasons(got), want) {
			t.Errorf("%s: told %v, want %v", what, reasons(got), want)
		}
	}

	r := NewRoutineEvents(1)
	var told []string
	for i := range 7 {
		uid := types.UID(fmt.Sprint(i))
		if len(r.tell(uid, claim, at)) == 1 {
			told = append(told, string(uid))
		}
	}
	if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(told, want) {
		t.Fatalf("claims told in a burst: %v, want %v (five seconds' worth at 1/s)", told, want)
	}
	expect("the success of an action whose claim was told", r.tell("0", success, at), ReasonSucceeded)
	expect("the success of an action whose claim was not", r.tell("5", success, at.Add(time.Minute)))
	expect("a success replayed by the downstream, its claim not told", r.tell("6", replayed, at), ReasonSucceeded, "ReplayedByDownstream")
	expect("a warning", r.tell("7", lost, at), "ConnectionLost")
	expect("the success after a warning", r.tell("7", success, at), ReasonSucceeded)
	r.finished("0")
	expect("a finished action's success again", r.tell("0", success, at))
	expect("a claim a second later", r.tell("8", claim, at.Add(time.Second)), ReasonExecuting)
	expect("another claim in the same second", r.tell("9", claim, at.Add(time.Second)))

	if NewRoutineEvents(math.Inf(1)) != nil {
		t.Error("an infinite rate does not tell every event")
	}
	var every *RoutineEvents
	expect("a nil budget's success", every.tell("9", success, at), ReasonSucceeded)
	for _, rate := range []float64{0, -1, math.NaN()} {
		none := NewRoutineEvents(rate)
		expect(fmt.Sprintf("rate %v: a claim", rate), none.tell("10", claim, at))
		expect(fmt.Sprintf("rate %v: a warning", rate), none.tell("10", lost, at), "ConnectionLost")
		expect(fmt.Sprintf("rate %v: the success after a warning", rate), none.tell("10", success, at))
	}
}

// TestRoutineEventsFull: at maxStories no new story begins, and the stale
// make room again after an hour.
func TestRoutineEventsFull(t *testing.T) {
	r := NewRoutineEvents(1e5)
	at := time.Unix(1_800_000_000, 0)
	lost := []report{warning("ConnectionLost", "Dispatch", "connection lost")}
	for i := range maxStories {
		r.tell(types.UID(fmt.Sprint(i)), lost, at)
	}
	claim := []report{{reason: ReasonExecuting, routine: true, opensStory: true}}
	if told := r.tell("new", claim, at.Add(time.Second)); len(told) != 0 {
		t.Fatal("a story began with the set full: its end could not be told")
	}
	if told := r.tell("new", claim, at.Add(2*time.Hour)); len(told) != 1 {
		t.Fatal("no story began once the stale were an hour old")
	}
}
