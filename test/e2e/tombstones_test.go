//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// Re-created keys: a trial applies intents with kubectl, waits until they
// succeed, has kubectl take them away and create them again, and checks that
// each key's tombstone answered the new action and that the naive
// downstream saw one request per key.

const (
	recreateParallel = 8
	recreateIntents  = 2
	// partOf labels a trial's manifest, as a GitOps tool labels what one
	// application owns; the value is the trial's namespace.
	partOf = "app.kubernetes.io/part-of"
)

// recreation removes the actions of the manifest at path with kubectl and
// creates them again, counting what kubectl reported.
type recreation func(s *suite, ctx context.Context, tr *trial, path string, counts *tally) error

func deleteThenApply(s *suite, ctx context.Context, tr *trial, path string, counts *tally) error {
	// kubectl delete waits until the records are gone, finalizer and all.
	if err := s.kubectlCounting(ctx, counts, []string{"delete", "-f", path}, " deleted", "deleted by kubectl delete"); err != nil {
		return err
	}
	return s.kubectlCounting(ctx, counts, []string{"apply", "-f", path}, " created", "created again by kubectl apply")
}

func replaceForce(s *suite, ctx context.Context, tr *trial, path string, counts *tally) error {
	// replace --force deletes, waits until the objects are gone, creates.
	return s.kubectlCounting(ctx, counts, []string{"replace", "--force", "-f", path}, " replaced", "replaced by kubectl replace --force")
}

// pruneArgs make kubectl apply a GitOps sync of the trial's application:
// kubectl 1.32 prunes only its built-in kinds unless the allowlist names
// the custom resource.
func pruneArgs(tr *trial) []string {
	return []string{"--prune", "-l", partOf + "=" + tr.ns, "--prune-allowlist=toolledger.dev/v1alpha1/ToolAction"}
}

// pruneThenResync syncs the application without its intents (a ConfigMap
// remains: kubectl refuses an empty set), so that kubectl prunes them, and
// once they are gone syncs the original again. A prune does not wait for
// the finalizer; a sync meeting the records still Terminating would create
// nothing.
func pruneThenResync(s *suite, ctx context.Context, tr *trial, path string, counts *tally) error {
	without, err := s.writeManifest("without-intents", tr, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: %s
  labels:
    %s: %s
data:
  intents: none
`, tr.ns, partOf, tr.ns))
	if err != nil {
		return err
	}
	if err := s.kubectlCounting(ctx, counts, append([]string{"apply", "-f", without}, pruneArgs(tr)...), " pruned", "pruned by kubectl apply --prune"); err != nil {
		return err
	}
	if err := s.waitGone(ctx, tr); err != nil {
		return err
	}
	return s.kubectlCounting(ctx, counts, append([]string{"apply", "-f", path}, pruneArgs(tr)...), " created", "created again by kubectl apply --prune")
}

// keeper is where a scenario's managers keep the key of a record taken
// away: its Tombstone, or the archive.
type keeper struct {
	// name is what the notes call it.
	name string
	// reason is that of an action answered from it.
	reason string
	// start readies the scenario's managers and returns what stops those
	// it started.
	start func(s *suite, sc *run) (stop func(), err error)
	// trials is how many trials the scenario runs.
	trials func(s *suite) int
	// kept checks that it keeps the key of deleted, the action taken away.
	kept func(s *suite, ctx context.Context, tr *trial, key string, deleted *v1alpha1.ToolAction, counts *tally)
}

// tombstones are the steady managers' keeper, without an archive.
var tombstones = keeper{
	name: "tombstone", reason: v1alpha1.ReasonSettledByTombstone,
	start:  func(s *suite, _ *run) (func(), error) { return func() {}, s.steadyManagers() },
	trials: func(s *suite) int { return s.trials },
	kept:   (*suite).checkTombstone,
}

// recreateScenario runs recreateParallel trials at a time of recreateIntents
// intents each, against a naive downstream with a NonRepeatable tool:
// applied (with syncArgs, if any), settled, taken away and created again by
// recreate, and answered from where k keeps the key.
func recreateScenario(k keeper, syncArgs func(*trial) []string, recreate recreation) func(s *suite, sc *run) error {
	return func(s *suite, sc *run) error {
		stop, err := k.start(s, sc)
		if err != nil {
			return err
		}
		defer stop()
		d, err := s.procs.startDownstream(sc.name, true)
		if err != nil {
			return err
		}
		defer d.proc.stop(5 * time.Second)
		var counts tally
		err = s.parallelTrialsOf(sc, k.trials(s), recreateParallel, func(_ int, rng *rand.Rand) error {
			tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.NonRepeatable})
			if err != nil {
				return err
			}
			keys := intents(tr, rng, "order", recreateIntents)
			path, err := s.labelledManifest(tr, keys)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
			defer cancel()
			apply := []string{"apply", "-f", path}
			if syncArgs != nil {
				apply = append(apply, syncArgs(tr)...)
			}
			counts.add("intents", len(keys))
			if err := s.kubectlCounting(ctx, &counts, apply, " created", "created by kubectl apply"); err != nil {
				return err
			}
			first := s.waitActions(ctx, tr, len(keys), nil)
			for _, key := range keys {
				if a := first[key]; a == nil || a.Status.Phase != v1alpha1.PhaseSucceeded || a.Status.Attempts != 1 {
					tr.violation(key, "the applied action did not succeed after one attempt: %s", describe(a))
				}
			}
			if err := recreate(s, ctx, tr, path, &counts); err != nil {
				return err
			}
			again := s.waitActions(ctx, tr, len(keys), first)
			st, err := d.stats(ctx)
			if err != nil {
				return err
			}
			for _, key := range keys {
				s.checkRecreated(ctx, tr, key, first[key], again[key], st.Requests[tr.ns+"/"+key], &counts, k)
			}
			return nil
		})
		verifyErr := s.verify(sc)
		st, statsErr := d.stats(s.ctx)
		sc.row.Notes = append(sc.row.Notes, counts.String())
		if statsErr == nil {
			sc.row.Notes = append(sc.row.Notes, fmt.Sprintf("downstream: %d requests, %d effects, over %d keys", st.TotalRequests, st.TotalEffects, len(st.Requests)))
		}
		sc.row.Notes = append(sc.row.Notes, s.paths(sc))
		return errors.Join(err, verifyErr, statsErr)
	}
}

// checkRecreated checks a key whose first action (before) was taken away
// and created again (after): where k keeps the first action's key answered
// the new one with the original outcome, and the downstream saw one request.
func (s *suite) checkRecreated(ctx context.Context, tr *trial, key string, before, after *v1alpha1.ToolAction, requests int, counts *tally, k keeper) {
	switch {
	case before == nil:
		// Reported when it did not settle.
	case after == nil:
		tr.violation(key, "the action was not created again and settled within %s", settleTimeout)
	default:
		k.kept(s, ctx, tr, key, before, counts)
		answered := after.Status.Phase == v1alpha1.PhaseSucceeded && after.Status.Attempts == 0 &&
			after.Status.ExternalRef == before.Status.ExternalRef && reasons(after) == k.reason+"/"+k.reason
		if !answered {
			tr.violation(key, "the re-created action is %s; want Succeeded, reasons %s/%s, external reference %q, 0 attempts",
				describe(after), k.reason, k.reason, before.Status.ExternalRef)
		}
		counts.add(fmt.Sprintf("re-created actions answered by their %s (Succeeded/%s, the original external reference, 0 attempts)", k.name, k.reason), boolToInt(answered))
		counts.add("re-created actions dispatched again", boolToInt(after.Status.Attempts > 0))
	}
	if requests != 1 {
		tr.violation(key, "the downstream received %d requests for the key, want 1", requests)
	}
	counts.add("keys with more than one downstream request", boolToInt(requests > 1))
}

// checkTombstone checks that the key's tombstone is the deleted action's.
func (s *suite) checkTombstone(ctx context.Context, tr *trial, key string, deleted *v1alpha1.ToolAction, counts *tally) {
	var tomb v1alpha1.Tombstone
	switch err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: key}, &tomb); {
	case err != nil:
		tr.violation(key, "no Tombstone for the deleted action: %v", err)
	case tomb.Record.ActionUID != deleted.UID || tomb.Record.ExternalRef != deleted.Status.ExternalRef:
		tr.violation(key, "the Tombstone records action %s, external reference %q; the deleted action was %s, %q",
			tomb.Record.ActionUID, tomb.Record.ExternalRef, deleted.UID, deleted.Status.ExternalRef)
	default:
		counts.add("tombstones of the deleted actions", 1)
	}
}

// reasons is an action's Succeeded condition reason and its last history
// entry's reason, as condition/history.
func reasons(a *v1alpha1.ToolAction) string {
	var condition, history string
	if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionSucceeded); c != nil {
		condition = c.Reason
	}
	if n := len(a.Status.History); n > 0 {
		history = a.Status.History[n-1].Reason
	}
	return condition + "/" + history
}

func describe(a *v1alpha1.ToolAction) string {
	if a == nil {
		return "not found settled"
	}
	return fmt.Sprintf("%s (reasons %s), external reference %q, %d attempts, uid %s", a.Status.Phase, reasons(a), a.Status.ExternalRef, a.Status.Attempts, a.UID)
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// kubectlCounting runs kubectl and counts the lines of its output that
// contain marker under name.
func (s *suite) kubectlCounting(ctx context.Context, counts *tally, args []string, marker, name string) error {
	out, err := s.kubectl(ctx, args...)
	if err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	counts.add(name, strings.Count(out, marker))
	return nil
}

// labelledManifest writes the trial's intents labelled as part of its
// application.
func (s *suite) labelledManifest(tr *trial, keys []string) (string, error) {
	label := fmt.Sprintf("metadata:\n  labels:\n    %s: %s\n", partOf, tr.ns)
	var b strings.Builder
	for _, key := range keys {
		b.WriteString("---\n" + strings.Replace(testenv.ChargeManifest(tr.ns, key, tr.amount(key), "cus_e2e"), "metadata:\n", label, 1))
	}
	return s.writeManifest("intents", tr, b.String())
}

// waitActions waits, for at most settleTimeout, until the trial has n
// settled actions other than those of before (by uid), in etcd or archived,
// and returns the settled actions it found, by name.
func (s *suite) waitActions(ctx context.Context, tr *trial, n int, before map[string]*v1alpha1.ToolAction) map[string]*v1alpha1.ToolAction {
	deadline := time.Now().Add(settleTimeout)
	for {
		found := map[string]*v1alpha1.ToolAction{}
		if all, err := s.records(ctx, tr); err == nil {
			for i := range all {
				a := &all[i]
				if a.Status.Phase.IsSettled() && (before[a.Name] == nil || before[a.Name].UID != a.UID) {
					found[a.Name] = a
				}
			}
		}
		if len(found) >= n || time.Now().After(deadline) || testenv.Sleep(ctx, 100*time.Millisecond) != nil {
			return found
		}
	}
}

// waitGone waits until the trial has no ToolActions left.
func (s *suite) waitGone(ctx context.Context, tr *trial) error {
	for {
		var list v1alpha1.ToolActionList
		err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns))
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("the pruned actions of %s are still there (%d): %w", tr.ns, len(list.Items), err)
		}
	}
}
