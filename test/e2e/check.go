// Package e2e is toolledger's fault-injection end-to-end suite. The suite
// itself (files with the build tag e2e, run by `make test-e2e`) starts a real
// kube-apiserver and etcd, the built manager and demo downstream binaries as
// OS processes, drives load through the SDK and kubectl, injects faults —
// SIGKILLed managers, restarted API server and etcd, a misbehaving
// downstream — and checks every key of every trial with Check.
//
// This file holds the invariant checker and the summary table. It carries no
// build tag, so that its unit tests run with `go test ./...` and show that a
// second effect fails a trial.
package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Phases of a ToolAction, as the checker reads them.
const (
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
	PhaseEscalated = "Escalated"
)

// Action is what the ledger (the API server) holds for one key when a trial
// is checked. The zero Phase means the API server has no action for the key.
type Action struct {
	// Key is the idempotency key, <namespace>/<name>.
	Key         string
	Phase       string
	ErrorClass  string
	Reason      string
	Message     string
	ExternalRef string
	// Unseen: an attempt's outcome went unseen (the phase Unknown is in
	// its history) and no resolver settled it since.
	Unseen bool
	// Amount is spec.parameters.amount as recorded.
	Amount int64
}

// Charge is the downstream's first charge for a key, from its lookup.
type Charge struct {
	ID     string
	Amount int64
}

// Trial is the evidence of one trial: what it meant to do, what the ledger
// says, and what the downstream did.
type Trial struct {
	// Name identifies the trial in reports, usually its namespace.
	Name string
	// Prefix is the key prefix of the trial (its namespace and "/"): every
	// downstream effect under it must belong to one of Keys.
	Prefix string
	// Keys are the keys of every intent the trial created.
	Keys []string
	// Amounts are the amounts the intents were first sent with, by key;
	// optional. A recorded action or a charge with another amount means a
	// changed request was taken for the intent.
	Amounts map[string]int64
	// Actions is the ledger, by key.
	Actions map[string]Action
	// Effects counts the downstream's committed effects by key; keys outside
	// Prefix are ignored.
	Effects map[string]int
	// Charges are the downstream's first charges by key, when known.
	Charges map[string]Charge
	// Extra are violations the driver observed itself, such as a changed
	// payload that was accepted or duplicate callers that were told
	// different outcomes.
	Extra []Violation
}

// Kind names a violated property.
type Kind string

// The properties Check verifies.
const (
	// Duplicate: more than one downstream effect for one key.
	Duplicate Kind = "duplicate"
	// Lost: an intent the trial created is missing from the ledger or never
	// reached Succeeded, Failed or Escalated.
	Lost Kind = "lost"
	// EscalatedWithoutReason: an escalation that does not say why.
	EscalatedWithoutReason Kind = "escalated-without-reason"
	// MissingEffect: the ledger says Succeeded, the downstream has no effect.
	MissingEffect Kind = "missing-effect"
	// PhantomEffect: the ledger says Failed, the downstream has an effect.
	PhantomEffect Kind = "phantom-effect"
	// FailedAfterUnseen: Failed although an attempt's outcome went unseen
	// and nothing but a definite answer may fail an action.
	FailedAfterUnseen Kind = "failed-after-unseen"
	// WrongReference: Succeeded with an external reference other than the
	// key's charge.
	WrongReference Kind = "wrong-reference"
	// WrongRequest: the recorded request or the charge differs from the
	// intent as first sent.
	WrongRequest Kind = "wrong-request"
	// StrayEffect: an effect under the trial's prefix for a key the trial
	// never created.
	StrayEffect Kind = "stray-effect"
	// DriverObserved: a violation the load driver saw, reported in Extra.
	DriverObserved Kind = "driver"
)

// Violation is one broken property of one key.
type Violation struct {
	Kind   Kind
	Key    string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s: %s", v.Kind, v.Key, v.Detail)
}

// Result tallies one or more checked trials.
type Result struct {
	Actions    int
	Effects    int
	Succeeded  int
	Failed     int
	Escalated  int
	Duplicates int
	Lost       int
	// FailedBy counts the Failed actions by error class and reason: the
	// definite answer each was failed on.
	FailedBy   map[string]int
	Violations []Violation
}

// OK reports whether no property was violated.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// Other counts the violations that are neither duplicates nor lost actions.
func (r Result) Other() int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind != Duplicate && v.Kind != Lost {
			n++
		}
	}
	return n
}

// Add folds another result into r.
func (r *Result) Add(o Result) {
	r.Actions += o.Actions
	r.Effects += o.Effects
	r.Succeeded += o.Succeeded
	r.Failed += o.Failed
	r.Escalated += o.Escalated
	r.Duplicates += o.Duplicates
	r.Lost += o.Lost
	for by, n := range o.FailedBy {
		if r.FailedBy == nil {
			r.FailedBy = map[string]int{}
		}
		r.FailedBy[by] += n
	}
	r.Violations = append(r.Violations, o.Violations...)
}

// Check verifies the invariant for every key of a trial:
//
//   - the downstream has at most one effect per key, and exactly one for an
//     action that ended Succeeded, whose external reference names that
//     effect; none for an action that ended Failed;
//   - an action is Failed only on a definite answer: never once an
//     attempt's outcome went unseen and no resolver settled it;
//   - no intent is lost: each reaches Succeeded, Failed, or Escalated with a
//     reason;
//   - the ledger and the downstream hold the request as first sent, and the
//     downstream has no effect under the trial's prefix that no intent
//     explains.
func Check(t Trial) Result {
	var r Result
	add := func(kind Kind, key, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	keys := slices.Clone(t.Keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, key := range keys {
		r.Actions++
		effects := t.Effects[key]
		r.Effects += effects
		if effects > 1 {
			r.Duplicates++
			add(Duplicate, key, "%d effects downstream", effects)
		}
		a, recorded := t.Actions[key]
		switch {
		case !recorded || a.Phase == "":
			r.Lost++
			add(Lost, key, "the ledger has no action for this intent")
			continue
		case a.Phase == PhaseSucceeded:
			r.Succeeded++
			if effects == 0 {
				add(MissingEffect, key, "Succeeded (external reference %q) without an effect downstream", a.ExternalRef)
			}
			if c, ok := t.Charges[key]; ok && c.ID != a.ExternalRef {
				add(WrongReference, key, "external reference %q, but the key's charge is %q", a.ExternalRef, c.ID)
			}
		case a.Phase == PhaseFailed:
			r.Failed++
			if r.FailedBy == nil {
				r.FailedBy = map[string]int{}
			}
			r.FailedBy[a.ErrorClass+"/"+a.Reason]++
			if effects > 0 {
				add(PhantomEffect, key, "Failed (%s/%s: %s) with %d effects downstream", a.ErrorClass, a.Reason, a.Message, effects)
			}
			if a.Unseen {
				add(FailedAfterUnseen, key, "Failed (%s/%s: %s) although an attempt's outcome went unseen and nobody settled it", a.ErrorClass, a.Reason, a.Message)
			}
		case a.Phase == PhaseEscalated:
			r.Escalated++
			if a.Reason == "" || a.Message == "" {
				add(EscalatedWithoutReason, key, "Escalated with reason %q and message %q", a.Reason, a.Message)
			}
		default:
			r.Lost++
			add(Lost, key, "never settled: still %s (%s: %s)", a.Phase, a.Reason, a.Message)
		}
		if want, ok := t.Amounts[key]; ok {
			if a.Amount != want {
				add(WrongRequest, key, "the ledger records amount %d, the intent was %d", a.Amount, want)
			}
			if c, ok := t.Charges[key]; ok && c.Amount != want {
				add(WrongRequest, key, "the downstream charged %d, the intent was %d", c.Amount, want)
			}
		}
	}
	if t.Prefix != "" {
		var stray []string
		for key, n := range t.Effects {
			if n > 0 && strings.HasPrefix(key, t.Prefix) && !slices.Contains(keys, key) {
				stray = append(stray, key)
			}
		}
		slices.Sort(stray)
		for _, key := range stray {
			r.Effects += t.Effects[key]
			add(StrayEffect, key, "%d effects under a key the trial never created", t.Effects[key])
		}
	}
	for _, v := range t.Extra {
		if v.Kind == "" {
			v.Kind = DriverObserved
		}
		r.Violations = append(r.Violations, v)
	}
	return r
}

// Row is one scenario of the summary table.
type Row struct {
	Scenario string
	// Trials counts the trials; the notes say what one is where it is not
	// obvious (a namespace of a restart round, say).
	Trials int
	Result
	Wall  time.Duration
	Notes []string
}

// failedNote says which answer each Failed action of a scenario was failed
// on, by error class and reason, most frequent first; "" when none failed.
func failedNote(by map[string]int) string {
	if len(by) == 0 {
		return ""
	}
	reasons := slices.Collect(maps.Keys(by))
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(by[b]-by[a], strings.Compare(a, b)) })
	parts := make([]string, len(reasons))
	for i, reason := range reasons {
		parts[i] = fmt.Sprintf("`%s` %d (%s)", reason, by[reason], definiteAnswer(reason))
	}
	return "Failed, each on a definite answer (error class/reason): " + strings.Join(parts, ", ")
}

// definiteAnswer explains an error class/reason of a Failed action in words.
func definiteAnswer(classReason string) string {
	class, reason, _ := strings.Cut(classReason, "/")
	switch {
	case class == "RetriesExhausted" && strings.HasPrefix(reason, "HTTP"):
		return "every attempt refused with " + strings.TrimPrefix(reason, "HTTP") + ", none unseen"
	case class == "Denied" && reason == "ApprovalDenied":
		return "an approver denied it before any dispatch"
	case class == "InvalidInput" || class == "Denied":
		return "the downstream or the ledger refused the request itself"
	case class == "DuplicateConflict":
		return "the key held another request; nothing dispatched"
	case class == "OutcomeUnknown" && reason == "Resolved":
		return "a resolver found it not applied"
	}
	return "see the reason"
}

// Table renders rows as a Markdown table followed by each scenario's notes.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| scenario | trials | actions | effects | duplicates | lost | escalated | failed | other violations | wall time |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var total Row
	total.Scenario = "**total**"
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n",
			r.Scenario, r.Trials, r.Actions, r.Effects, r.Duplicates, r.Lost, r.Escalated, r.Failed, r.Other(), r.Wall.Round(100*time.Millisecond))
		total.Trials += r.Trials
		total.Add(r.Result)
		total.Wall += r.Wall
	}
	if len(rows) > 1 {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n",
			total.Scenario, total.Trials, total.Actions, total.Effects, total.Duplicates, total.Lost, total.Escalated, total.Failed, total.Other(), total.Wall.Round(time.Second))
	}
	for _, r := range rows {
		if len(r.Notes) == 0 && r.OK() {
			continue
		}
		fmt.Fprintf(&b, "\n**%s**\n", r.Scenario)
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		for i, v := range r.Violations {
			if i == 20 {
				fmt.Fprintf(&b, "- … and %d more violations\n", len(r.Violations)-i)
				break
			}
			fmt.Fprintf(&b, "- VIOLATION %s\n", v)
		}
	}
	return b.String()
}
