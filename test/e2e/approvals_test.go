//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// Approvals, as people give them: alice (the shipped agent role, and the
// approver role too, so that only the separation of duties stops her)
// applies a tenant's intents with `kubectl --as alice apply`; they wait for
// approval; bob (the approver role) decides each with `kubectl toolledger
// approve|deny --as bob`, after a refused attempt for some: an approval of
// another intent's digest, or alice approving her own. Lost responses and
// requests are injected so that approved intents go Unknown and are
// settled by lookup, or retried, under the approval they have.

const approvalParallel = 3

// The decisions a trial makes for an intent, and the notes' names for them.
const (
	approveOnly    = "approved"
	denied         = "denied"
	afterDigest    = "approved after an approval of another digest was refused"
	afterSelf      = "approved after alice's own approval was refused"
	approvalReason = "e2e: checked"
)

func approvals(s *suite, sc *run) error {
	if err := s.steadyManagers(); err != nil {
		return err
	}
	remove, err := testenv.InstallIdentityPolicy(s.ctx, s.cluster.cfg, s.cluster.client, "default", "e2e")
	if err != nil {
		return err
	}
	defer func() { _ = remove() }()
	for _, role := range []string{"role_agent.yaml", "role_approver.yaml"} {
		if err := testenv.ApplyFile(s.ctx, s.cluster.cfg, filepath.Join("..", "..", "config", "rbac", role), "e2e"); err != nil {
			return err
		}
	}
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)

	var (
		decisions, injected tally
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		errs                []error
	)
	sem := make(chan struct{}, approvalParallel)
	for i := range max(s.trials/5, 1) {
		if s.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.approvalTrial(sc, d, s.rngFor(sc.name, i), &decisions, &injected); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	verifyErr := s.verify(sc)
	sc.row.Notes = append(sc.row.Notes, "decisions: "+decisions.String(), "faults injected: "+injected.String(), s.paths(sc))
	return errors.Join(append(errs, verifyErr)...)
}

func (s *suite) approvalTrial(sc *run, d *downstream, rng *rand.Rand, decisions, injected *tally) error {
	tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true, approval: true})
	if err != nil {
		return err
	}
	for _, b := range []struct{ user, role string }{
		{"alice", "toolledger-agent"}, {"alice", "toolledger-approver"}, {"bob", "toolledger-approver"},
	} {
		if err := s.cluster.client.Create(s.ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: b.user + "-" + b.role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: b.user}},
		}); err != nil {
			return fmt.Errorf("cannot bind %s to %s in %s: %w", b.user, b.role, tr.ns, err)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()

	keys := intents(tr, rng, "order", intRange(rng, 4, 6))
	path, err := s.manifest("intents", tr, keys, tr.amount)
	if err != nil {
		return err
	}
	if out, err := s.kubectl(ctx, "--as=alice", "apply", "-f", path); err != nil {
		return fmt.Errorf("kubectl --as=alice apply: %w: %s", err, out)
	}
	digests, err := s.awaitingApproval(ctx, tr, keys)
	if err != nil {
		return err
	}
	faults := []demo.Fault{
		{Mode: demo.FaultDropAfterCommit, Count: rng.IntN(len(keys))},
		{Mode: demo.FaultDropBeforeCommit, Count: rng.IntN(len(keys))},
	}
	for _, f := range faults {
		if f.Count > 0 {
			injected.add(string(f.Mode), f.Count)
			if err := d.inject(s.ctx, f); err != nil {
				return err
			}
		}
	}

	for i, key := range keys {
		decision := []string{approveOnly, approveOnly, denied, afterDigest, afterSelf}[rng.IntN(5)]
		other := digests[keys[(i+1)%len(keys)]]
		if decision == afterDigest && other == digests[key] {
			decision = approveOnly // the same parameters: the digest is the same
		}
		decisions.add(decision, 1)
		switch decision {
		case afterDigest:
			s.refusedApproval(ctx, tr, key, "DigestMismatch", func() (string, error) {
				return s.kubectlApply(ctx, tr, "bob", "wrong-"+key, fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: ToolApproval
metadata:
  name: wrong-%s
  namespace: %s
spec:
  actionName: %s
  requestDigest: %s
  decision: Approved
  reason: %q
`, key, tr.ns, key, other, approvalReason))
			})
		case afterSelf:
			s.refusedApproval(ctx, tr, key, "SelfApproval", func() (string, error) {
				out, err := s.toolledger(ctx, "alice", "approve", key, "-n", tr.ns, "--digest", digests[key], "--reason", approvalReason, "--wait")
				var exit *exec.ExitError
				if !errors.As(err, &exit) || !strings.Contains(out, "Applied=False (SelfApproval)") {
					tr.violation(key, "alice approving her own action: want exit 1 and Applied=False (SelfApproval), got %v: %s", err, out)
				}
				return out, nil
			})
		}
		verb := "approve"
		if decision == denied {
			verb = "deny"
		}
		if out, err := s.toolledger(ctx, "bob", verb, key, "-n", tr.ns, "--digest", digests[key], "--reason", approvalReason); err != nil {
			tr.violation(key, "kubectl toolledger %s --as=bob: %v: %s", verb, err, out)
		}
	}
	s.waitSettled([]*trial{tr}, settleTimeout)
	for _, key := range keys {
		s.checkDecided(ctx, tr, key, digests[key])
	}
	return nil
}

// awaitingApproval waits until every key awaits approval, and returns
// their digests.
func (s *suite) awaitingApproval(ctx context.Context, tr *trial, keys []string) (map[string]string, error) {
	for {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err != nil {
			return nil, err
		}
		digests := map[string]string{}
		for _, a := range list.Items {
			if a.Status.Phase == v1alpha1.PhaseAwaitingApproval {
				digests[a.Name] = a.Status.RequestDigest
			}
		}
		if len(digests) == len(keys) {
			return digests, nil
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%s: %d of %d intents await approval: %w", tr.ns, len(digests), len(keys), err)
		}
	}
}

// refusedApproval makes a refused attempt to approve key and checks that
// it was refused for reason and that nothing was sent meanwhile.
func (s *suite) refusedApproval(ctx context.Context, tr *trial, key, reason string, attempt func() (string, error)) {
	if out, err := attempt(); err != nil {
		tr.violation(key, "refused approval attempt: %v: %s", err, out)
		return
	}
	var approvals v1alpha1.ToolApprovalList
	for {
		if err := s.cluster.client.List(ctx, &approvals, client.InNamespace(tr.ns), client.MatchingFields{"spec.actionName": key}); err != nil {
			tr.violation(key, "cannot list the approvals: %v", err)
			return
		}
		if len(approvals.Items) == 0 {
			tr.violation(key, "the refused attempt (%s) created no ToolApproval", reason)
			return
		}
		reasons := map[string]bool{}
		for _, a := range approvals.Items {
			if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionApplied); c != nil {
				reasons[string(c.Status)+"/"+c.Reason] = true
			}
		}
		if reasons["False/"+reason] {
			break
		}
		if len(reasons) > 0 || testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			tr.violation(key, "want an approval refused with %s, got %v", reason, reasons)
			return
		}
	}
	var action v1alpha1.ToolAction
	if err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: key}, &action); err != nil {
		tr.violation(key, "cannot read the action: %v", err)
		return
	}
	if action.Status.Phase != v1alpha1.PhaseAwaitingApproval || action.Status.Attempts != 0 {
		tr.violation(key, "after a refused approval (%s) the action is %s with %d attempts; want AwaitingApproval, never dispatched",
			reason, action.Status.Phase, action.Status.Attempts)
	}
}

// checkDecided checks the settled action against bob's decision: approved
// by bob for its digest and requested by alice, or denied and never sent.
func (s *suite) checkDecided(ctx context.Context, tr *trial, key, digest string) {
	var action v1alpha1.ToolAction
	if err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: key}, &action); err != nil {
		tr.violation(key, "cannot read the action: %v", err)
		return
	}
	if by := action.Annotations[v1alpha1.RequestedByAnnotation]; by != "alice" {
		tr.violation(key, "requested-by is %q, want alice", by)
	}
	a := action.Status.Approval
	if a == nil || a.DecidedBy != "bob" || a.RequestDigest != digest {
		tr.violation(key, "status.approval is %+v, want bob's decision about %s", a, digest)
		return
	}
	switch a.Decision {
	case v1alpha1.Approved:
		if action.Status.Phase != v1alpha1.PhaseSucceeded {
			tr.violation(key, "approved, but %s", action.Status.Phase)
		}
	case v1alpha1.Denied:
		if action.Status.Phase != v1alpha1.PhaseFailed || action.Status.Error == nil ||
			action.Status.Error.Class != v1alpha1.ErrorClassDenied || action.Status.Attempts != 0 {
			tr.violation(key, "denied, but %s with %d attempts (%+v)", action.Status.Phase, action.Status.Attempts, action.Status.Error)
		}
	}
}

// kubectlApply applies docs as user from the trial's manifest file name.
func (s *suite) kubectlApply(ctx context.Context, tr *trial, user, name, docs string) (string, error) {
	path, err := s.writeManifest(name, tr, docs)
	if err != nil {
		return "", err
	}
	return s.kubectl(ctx, "--as="+user, "apply", "-f", path)
}

// toolledger runs `kubectl toolledger args --as=user`. kubectl finds a
// plugin by the arguments before the first flag, so the connection flags
// come after the plugin's.
func (s *suite) toolledger(ctx context.Context, user string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append(append([]string{"toolledger"}, args...), "--kubeconfig="+s.cluster.kubeconfig, "--as="+user)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}
