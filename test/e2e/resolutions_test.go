//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// Two resolvers, one escalation: both look at attempt 1 of an escalated
// action and find the same; resolver B records it with `kubectl
// toolledger resolve`; resolver A, still holding a page of attempt 1,
// submits the same finding a moment later or only once the action has
// moved on (attempt 2 sent, its answer lost, escalated again). A finding
// about attempt 1 must never re-send attempt 2, which may have applied.

const resolutionParallel = 4

// How resolver A's stale finding reached the ledger, for the notes.
const (
	staleRightAway    = "stale page submitted right away"
	staleAfterMove    = "stale page submitted after the action moved on"
	staleRefusedByCLI = "refused by kubectl toolledger before anything was created"
)

func staleResolutions(s *suite, sc *run) error {
	if err := s.steadyManagers(); err != nil {
		return err
	}
	if err := testenv.ApplyFile(s.ctx, s.cluster.cfg, filepath.Join("..", "..", "config", "rbac", "toolresolution_resolver_role.yaml"), "e2e"); err != nil {
		return err
	}
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)

	var outcomes, injected tally
	err = s.parallelTrialsOf(sc, max(s.trials*2/5, 20), resolutionParallel, func(_ int, rng *rand.Rand) error {
		return s.staleResolutionTrial(sc, d, rng, &outcomes, &injected)
	})
	verifyErr := s.verify(sc)
	sc.row.Notes = append(sc.row.Notes, "resolver A's stale findings: "+outcomes.String(), "faults injected: "+injected.String(), s.paths(sc))
	return errors.Join(err, verifyErr)
}

func (s *suite) staleResolutionTrial(sc *run, d *downstream, rng *rand.Rand, outcomes, injected *tally) error {
	tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.NonRepeatable})
	if err != nil {
		return err
	}
	for _, user := range []string{"resolver-a", "resolver-b"} {
		if err := s.cluster.client.Create(s.ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-resolver"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}); err != nil {
			return fmt.Errorf("cannot bind %s in %s: %w", user, tr.ns, err)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()

	keys := intents(tr, rng, "transfer", intRange(rng, 1, 3))
	// Each intent's first attempt is lost before it applies, its second
	// applies and its answer is lost: a NonRepeatable tool escalates both.
	// Trials share the downstream, so a neighbour's request may take a
	// fault instead: the resolvers look downstream before they decide.
	for _, f := range []demo.Fault{{Mode: demo.FaultDropBeforeCommit, Count: len(keys)}, {Mode: demo.FaultDropAfterCommit, Count: len(keys)}} {
		injected.add(string(f.Mode), f.Count)
		if err := d.inject(s.ctx, f); err != nil {
			return err
		}
	}
	path, err := s.manifest("intents", tr, keys, tr.amount)
	if err != nil {
		return err
	}
	if out, err := s.kubectl(ctx, "apply", "-f", path); err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.resolveTwice(ctx, tr, key, rng.IntN(2) == 0, outcomes)
		}()
	}
	wg.Wait()
	return nil
}

// resolveTwice has resolvers A and B judge the first escalation of key,
// then resolves every later one as an honest resolver would, until the
// action finishes.
func (s *suite) resolveTwice(ctx context.Context, tr *trial, key string, holdPage bool, outcomes *tally) {
	page, ok := s.waitEscalated(ctx, tr, key, 1)
	if !ok {
		return
	}
	finding, ok := s.look(ctx, tr, key)
	if !ok {
		return
	}
	// B records it through the plugin; it may find A was faster.
	_, _ = s.resolveWithPlugin(ctx, tr, "resolver-b", key, page.Status.Attempts, finding)
	if holdPage {
		// A's page stays on attempt 1 until the action has moved on.
		if _, ok := s.waitMoved(ctx, tr, key, page.Status.Attempts); !ok {
			return
		}
		out, err := s.resolveWithPlugin(ctx, tr, "resolver-a", key, page.Status.Attempts, finding)
		switch {
		case err == nil:
			tr.violation(key, "kubectl toolledger resolve --attempt %d succeeded after the action moved on: %s", page.Status.Attempts, out)
		case strings.Contains(out, "nothing was created"):
			outcomes.add(staleRefusedByCLI, 1)
		default:
			tr.violation(key, "kubectl toolledger resolve of a stale attempt: want it refused, nothing created; got %v: %s", err, out)
		}
		outcomes.add(staleAfterMove, 1)
	} else {
		outcomes.add(staleRightAway, 1)
	}
	// A's client (a stale page that checks nothing) submits the finding
	// about attempt 1 all the same.
	name := "stale-" + key
	if out, err := s.kubectlApply(ctx, tr, "resolver-a", name, resolutionManifest(tr.ns, name, key, page, finding)); err != nil {
		tr.violation(key, "resolver A's resolution: %v: %s", err, out)
		return
	}
	applied, ok := s.appliedCondition(ctx, tr, key, name)
	if !ok {
		return
	}
	outcomes.add("A's resolution "+string(applied.Status)+"/"+applied.Reason, 1)
	if applied.Status == metav1.ConditionTrue && holdPage {
		tr.violation(key, "resolver A's finding about attempt %d was applied after the action moved on", page.Status.Attempts)
	}

	// Later escalations are judged on their own evidence.
	for attempt := page.Status.Attempts + 1; attempt <= page.Status.Attempts+4; attempt++ {
		current, ok := s.waitMoved(ctx, tr, key, attempt-1)
		if !ok || current.Status.Phase.IsTerminal() {
			return
		}
		if current.Status.Phase != v1alpha1.PhaseEscalated {
			current, ok = s.waitEscalated(ctx, tr, key, current.Status.Attempts)
			if !ok || current.Status.Phase.IsTerminal() {
				return
			}
		}
		finding, ok := s.look(ctx, tr, key)
		if !ok {
			return
		}
		if out, err := s.resolveWithPlugin(ctx, tr, "resolver-b", key, current.Status.Attempts, finding); err != nil {
			tr.violation(key, "resolving attempt %d: %v: %s", current.Status.Attempts, err, out)
			return
		}
		attempt = current.Status.Attempts
	}
}

// finding is what a resolver established downstream.
type finding struct {
	found bool
	id    string
}

func (f finding) args() []string {
	if f.found {
		return []string{"--outcome", "Succeeded", "--external-ref", f.id}
	}
	return []string{"--outcome", "RetrySafe"}
}

func resolutionManifest(ns, name, key string, page *v1alpha1.ToolAction, f finding) string {
	outcome := "RetrySafe"
	if f.found {
		outcome = "Succeeded\n  externalRef: " + f.id
	}
	return fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: ToolResolution
metadata:
  name: %s
  namespace: %s
spec:
  actionName: %s
  actionUID: %s
  attempt: %d
  outcome: %s
  reason: "e2e: judged on a page of attempt %d"
`, name, ns, key, page.UID, page.Status.Attempts, outcome, page.Status.Attempts)
}

// look asks the downstream whether the key's charge exists, waiting out a
// request in progress.
func (s *suite) look(ctx context.Context, tr *trial, key string) (finding, bool) {
	for {
		status, c, err := tr.d.lookup(ctx, tr.ns+"/"+key)
		switch {
		case err != nil:
			tr.violation(key, "looking the key up downstream: %v", err)
			return finding{}, false
		case status == http.StatusOK:
			return finding{found: true, id: c.ID}, true
		case status == http.StatusNotFound:
			return finding{}, true
		}
		if testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			tr.violation(key, "the downstream's lookup answered %d until the trial's deadline", status)
			return finding{}, false
		}
	}
}

func (s *suite) resolveWithPlugin(ctx context.Context, tr *trial, user, key string, attempt int32, f finding) (string, error) {
	args := append([]string{"resolve", key, "-n", tr.ns, "--attempt", strconv.Itoa(int(attempt))}, f.args()...)
	return s.toolledger(ctx, user, append(args, "--reason", "e2e: checked downstream", "--wait")...)
}

// waitEscalated waits until key is Escalated at attempt minAttempt or
// later, or finished.
func (s *suite) waitEscalated(ctx context.Context, tr *trial, key string, minAttempt int32) (*v1alpha1.ToolAction, bool) {
	return s.waitAction(ctx, tr, key, "Escalated at attempt "+strconv.Itoa(int(minAttempt)), func(a *v1alpha1.ToolAction) bool {
		return a.Status.Phase.IsTerminal() || a.Status.Phase == v1alpha1.PhaseEscalated && a.Status.Attempts >= minAttempt
	})
}

// waitMoved waits until key has left attempt and settled again, or finished.
func (s *suite) waitMoved(ctx context.Context, tr *trial, key string, attempt int32) (*v1alpha1.ToolAction, bool) {
	return s.waitAction(ctx, tr, key, "settled past attempt "+strconv.Itoa(int(attempt)), func(a *v1alpha1.ToolAction) bool {
		return a.Status.Phase.IsTerminal() || a.Status.Phase == v1alpha1.PhaseEscalated && a.Status.Attempts > attempt
	})
}

func (s *suite) waitAction(ctx context.Context, tr *trial, key, what string, done func(*v1alpha1.ToolAction) bool) (*v1alpha1.ToolAction, bool) {
	for {
		var a v1alpha1.ToolAction
		err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: key}, &a)
		if err == nil && done(&a) {
			return &a, true
		}
		if testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			tr.violation(key, "not %s before the trial's deadline (last: %s at attempt %d, %v)", what, a.Status.Phase, a.Status.Attempts, err)
			return nil, false
		}
	}
}

// appliedCondition waits for the Applied condition of resolution name.
func (s *suite) appliedCondition(ctx context.Context, tr *trial, key, name string) (*metav1.Condition, bool) {
	for {
		var r v1alpha1.ToolResolution
		if err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: name}, &r); err == nil {
			if c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionApplied); c != nil {
				return c, true
			}
		}
		if testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			tr.violation(key, "resolution %s has no Applied condition before the trial's deadline", name)
			return nil, false
		}
	}
}
