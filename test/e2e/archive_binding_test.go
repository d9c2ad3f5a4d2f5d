//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// --- the ledger run without its archive -------------------------------------

// archiveRollback runs a ledger whose records left etcd for its archive
// without the archive: first alone, as after `helm rollback` or an upgrade
// without the archive's values, then beside a manager that has it, as in
// the rollout that turns the archive on. No archived key may be dispatched
// again: the keys wait, and say why, until a manager with the archive
// checks them.
func archiveRollback(s *suite, sc *run) error {
	pool, stop, err := s.archiveManagers(sc, "bound", 1)
	if err != nil {
		return err
	}
	defer stop(&pool)
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	var counts tally
	all, err := s.archivedTrials(ctx, sc, d, &counts)
	if err != nil {
		return err
	}

	// The rollback: the manager with the archive stops, one without it
	// starts on the same ledger.
	pool[0].proc.stop(10 * time.Second)
	bare, err := s.procs.startManager(s.cluster.kubeconfig, s.nextManagerID("unbound"),
		"--operator-namespace="+sc.archive.ledger, "--health-probe-bind-address=127.0.0.1:0")
	if err != nil {
		return err
	}
	defer bare.proc.stop(10 * time.Second)
	if err := bare.waitReady(s.ctx); err != nil {
		return err
	}
	probe, err := bare.listening(s.ctx, bare.probeAddr)
	if err != nil {
		return err
	}
	if err := s.saysWhyAtStart(ctx, bare, probe, &counts); err != nil {
		return err
	}
	for _, t := range all {
		if err := s.kubectlCounting(ctx, &counts, []string{"apply", "-f", t.again}, " created", "created again by kubectl apply"); err != nil {
			return err
		}
	}
	var errs []error
	for _, t := range all {
		waiting, err := s.waitRefused(ctx, t.tr, append(slices.Clone(t.archived), t.fresh...))
		errs = append(errs, err)
		counts.add("actions waiting, ArchiveRequired, under the manager without the archive", waiting)
	}
	// Long enough for a dispatch that should not happen to reach the
	// downstream.
	if err := testenv.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	st, err := d.stats(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		checkRequests(t.tr, t.archived, st.Requests, 1, "while only the manager without the archive runs", &counts)
		checkRequests(t.tr, t.fresh, st.Requests, 0, "while only the manager without the archive runs", &counts)
	}

	// The rolling pair: a manager with the archive joins; the one without
	// it holds no member Lease, so the one with it settles every key.
	m, err := s.startArchiveManager("bound", sc.archive)
	if err != nil {
		return err
	}
	pool[0] = m
	firsts := map[*trial]map[string]*v1alpha1.ToolAction{}
	for _, t := range all {
		firsts[t.tr] = t.first
	}
	settledPaired, waitingPaired, err := s.waitPairSplit(ctx, firsts)
	if err != nil {
		return err
	}
	counts.add("actions settled by the manager with the archive while paired", settledPaired)
	counts.add("actions still waiting, ArchiveRequired, while paired", waitingPaired)
	if settledPaired == 0 || waitingPaired != 0 {
		errs = append(errs, fmt.Errorf("the manager without the archive held a share of the keys while paired: %d settled, %d waiting", settledPaired, waitingPaired))
	}
	if st, err = d.stats(ctx); err != nil {
		return err
	}
	for _, t := range all {
		checkRequests(t.tr, t.archived, st.Requests, 1, "while paired", &counts)
	}

	// The rollout completes: the manager without the archive stops, and
	// the one with it checks every key.
	bare.proc.stop(10 * time.Second)
	k := archiveKeeper(v1alpha1.TombstoneCauseRecordRetention)
	for _, t := range all {
		again := s.waitActions(ctx, t.tr, len(t.archived)+len(t.fresh), t.first)
		if st, err = d.stats(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, key := range t.archived {
			s.checkRecreated(ctx, t.tr, key, t.first[key], again[key], st.Requests[t.tr.ns+"/"+key], &counts, k)
		}
		for _, key := range t.fresh {
			a, requests := again[key], st.Requests[t.tr.ns+"/"+key]
			executed := a != nil && a.Status.Phase == v1alpha1.PhaseSucceeded && a.Status.Attempts == 1 && requests == 1
			if !executed {
				t.tr.violation(key, "the fresh key's action is %s with %d downstream requests; want Succeeded, 1 attempt, 1 request", describe(a), requests)
			}
			counts.add("fresh keys executed once, after the rollout (1 downstream request)", boolToInt(executed))
		}
	}
	errs = append(errs, s.verify(sc))
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d trials: their keys archived by a manager with the archive, which then stopped; a manager without it started on the same ledger (its readiness failing, its log refusing), then a manager with it beside that one (which settled every key: the one without it held no share), then the one without it stopped", len(all)),
		counts.String(), s.paths(sc))
	return errors.Join(append(errs, s.noTombstones(sc))...)
}

// saysWhyAtStart checks that a manager without the ledger's archive logs
// its refusal and fails its readiness check.
func (s *suite) saysWhyAtStart(ctx context.Context, m *manager, probe string, counts *tally) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		logged := strings.Contains(m.proc.tail(1<<20), "Refusing to dispatch new keys")
		status, body, err := get(ctx, "http://"+probe+"/readyz?verbose")
		notReady := err == nil && status != http.StatusOK && strings.Contains(body, "[-]archive-binding failed")
		if logged && notReady {
			counts.add("managers without the archive that logged their refusal and were not ready", 1)
			return nil
		}
		if time.Now().After(deadline) {
			why := fmt.Sprintf("the manager without the archive did not say why within 30s (logged: %t; /readyz: %d %q)", logged, status, body)
			if err != nil {
				return fmt.Errorf("%s: %w", why, err)
			}
			return errors.New(why)
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitRefused waits until each of keys has an action in etcd waiting,
// Accepted, ArchiveRequired, with a message that says this manager runs
// without the ledger's archive, and returns how many wait so.
func (s *suite) waitRefused(ctx context.Context, tr *trial, keys []string) (int, error) {
	deadline := time.Now().Add(settleTimeout)
	for {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err != nil {
			return 0, err
		}
		waiting := 0
		for _, a := range list.Items {
			if slices.Contains(keys, a.Name) && refusedForTheArchive(&a) {
				waiting++
			}
		}
		if waiting == len(keys) {
			return waiting, nil
		}
		if time.Now().After(deadline) {
			for _, a := range list.Items {
				if slices.Contains(keys, a.Name) && !refusedForTheArchive(&a) {
					tr.violation(a.Name, "under a manager without the ledger's archive the action is %s; want Accepted, waiting, ArchiveRequired", describe(&a))
				}
			}
			return waiting, nil
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return waiting, err
		}
	}
}

// refusedForTheArchive is whether the action waits for the ledger's
// archive, and says so.
func refusedForTheArchive(a *v1alpha1.ToolAction) bool {
	c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReconciling)
	return a.Status.Phase == v1alpha1.PhaseAccepted && a.Status.Attempts == 0 && c != nil && c.Reason == "ArchiveRequired" &&
		strings.Contains(c.Message, "runs without an archive")
}

// waitPairSplit waits until the manager with the archive has settled the
// trials' new actions (those not among their first records) and the member
// Leases have stood still for a while, then counts the settled and the
// still refused.
func (s *suite) waitPairSplit(ctx context.Context, firsts map[*trial]map[string]*v1alpha1.ToolAction) (settled, waiting int, err error) {
	deadline := time.Now().Add(settleTimeout)
	last, still := -1, time.Now()
	for {
		settled, waiting = 0, 0
		for tr, first := range firsts {
			all, err := s.records(ctx, tr)
			if err != nil {
				return 0, 0, err
			}
			for _, a := range all {
				switch {
				case first[a.Name] != nil && first[a.Name].UID == a.UID:
				case a.Status.Phase.IsSettled():
					settled++
				case refusedForTheArchive(&a):
					waiting++
				}
			}
		}
		if settled != last {
			last, still = settled, time.Now()
		}
		// Three member Lease durations without a change: the split stands.
		if settled > 0 && time.Since(still) > 3*memberLeaseDuration || time.Now().After(deadline) {
			return settled, waiting, nil
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return settled, waiting, err
		}
	}
}

// checkRequests checks that the downstream saw want requests for each key.
func checkRequests(tr *trial, keys []string, requests map[string]int, want int, when string, counts *tally) {
	for _, key := range keys {
		if got := requests[tr.ns+"/"+key]; got != want {
			tr.violation(key, "%s the downstream received %d requests for the key, want %d", when, got, want)
			counts.add("keys dispatched again "+when, 1)
		}
	}
}
