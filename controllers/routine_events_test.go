package controllers

import (
	"fmt"
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestRoutineEventsBudget: the happy path is told for a budget of actions,
// each from its claim to its outcome; warnings always, and an action with
// one keeps its routine events.
func TestRoutineEventsBudget(t *testing.T) {
	claim := report{reason: ReasonExecuting, routine: true, opensStory: true}
	success := report{reason: ReasonSucceeded, routine: true}
	lost := warning("ConnectionLost", "Dispatch", "connection lost")
	at := time.Unix(1_800_000_000, 0)

	r := NewRoutineEvents(1)
	var told []string
	for i := range 7 {
		uid := types.UID(fmt.Sprint(i))
		if r.tell(uid, claim, at) {
			told = append(told, string(uid))
		}
	}
	if want := []string{"0", "1", "2", "3", "4"}; fmt.Sprint(told) != fmt.Sprint(want) {
		t.Fatalf("claims told in a burst: %v, want %v (five seconds' worth at 1/s)", told, want)
	}
	if !r.tell("0", success, at) {
		t.Error("the success of an action whose claim was told is not told")
	}
	if r.tell("5", success, at.Add(time.Minute)) {
		t.Error("the success of an action whose claim was not told is told: half a story")
	}
	if !r.tell("6", lost, at) || !r.tell("6", success, at) {
		t.Error("an action with a warning is not told on to its outcome")
	}
	r.finished("0")
	if r.tell("0", success, at) {
		t.Error("a finished action's story is still remembered")
	}
	if !r.tell("7", claim, at.Add(time.Second)) || r.tell("8", claim, at.Add(time.Second)) {
		t.Error("a second later, not exactly one more story is told")
	}

	if NewRoutineEvents(math.Inf(1)) != nil {
		t.Error("an infinite rate does not tell every event")
	}
	var every *RoutineEvents
	if !every.tell("9", success, at) {
		t.Error("a nil budget does not tell every event")
	}
	none := NewRoutineEvents(0)
	if none.tell("10", claim, at) || !none.tell("10", lost, at) {
		t.Error("a rate of 0 tells a routine event, or not a warning")
	}
}
