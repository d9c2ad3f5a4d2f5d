//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The archive's own failures: its database fails over to a standby, or is
// restored from a backup, as Debian's PostgreSQL does it: a primary and a
// standby started by the scenario (pg_basebackup, streaming replication), on
// 127.0.0.1, the managers given a DSN of both hosts that reaches whichever
// serves as primary (target_session_attrs=read-write), as a client of
// CloudNativePG's -rw Service or Patroni's is.

// failoverMode is what becomes of the archive's database.
type failoverMode int

const (
	// failoverSynchronous: the standby is synchronous; the primary is
	// SIGKILLed while agents apply intents, and the standby promoted.
	failoverSynchronous failoverMode = iota
	// failoverLagging: the standby is asynchronous and stops receiving the
	// WAL; records keep retiring into the primary alone; the primary is
	// SIGKILLed and the standby promoted.
	failoverLagging
	// restoredFromBackup: a base backup is taken, records retire, and the
	// database is restored from the backup in place.
	restoredFromBackup
)

// replicatedArchive is a scenario's archive on servers of its own.
type replicatedArchive struct {
	primary, standby *testenv.Postgres
}

// startReplicatedArchive starts the scenario's primary and, for a
// failover, its standby, and gives the scenario its archive on them.
func (s *suite) startReplicatedArchive(sc *run, mode failoverMode) (*replicatedArchive, error) {
	r := &replicatedArchive{}
	var err error
	if r.primary, err = testenv.StartPostgres(s.ctx, ""); err != nil {
		return nil, err
	}
	if err := s.cluster.watchAlso(r.primary.PID()); err != nil {
		return r, err
	}
	servers := []*testenv.Postgres{r.primary}
	if mode != restoredFromBackup {
		state := "async"
		if mode == failoverSynchronous {
			state = "sync"
			if err := r.primary.Exec(s.ctx, `ALTER SYSTEM SET synchronous_standby_names = 'standby'`, `SELECT pg_reload_conf()`); err != nil {
				return r, err
			}
		}
		if r.standby, err = r.primary.StartStandby(s.ctx, "", "standby"); err != nil {
			return r, err
		}
		if err := s.cluster.watchAlso(r.standby.PID()); err != nil {
			return r, err
		}
		if err := r.primary.WaitStreaming(s.ctx, "standby", state); err != nil {
			return r, err
		}
		servers = append(servers, r.standby)
	}
	dsn := testenv.FailoverDSN("postgres", servers...)
	pool, err := pgxpool.New(s.ctx, dsn)
	if err != nil {
		return r, err
	}
	ledger := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-ledger-" + sc.name + "-"}}
	if err := s.cluster.client.Create(s.ctx, ledger); err != nil {
		pool.Close()
		return r, fmt.Errorf("cannot create the operator namespace of %s: %w", sc.name, err)
	}
	sc.archive = &archiveDB{dsn: dsn, pool: pool, ledger: ledger.Name}
	return r, nil
}

func (r *replicatedArchive) stop() {
	for _, p := range []*testenv.Postgres{r.standby, r.primary} {
		if p != nil {
			_ = p.Stop()
		}
	}
}

// startFailoverManager starts a manager of the scenario's archive whose
// health probes listen, comparing the chains with the marks every second.
func (s *suite) startFailoverManager(sc *run) (*manager, string, error) {
	m, err := s.procs.startManager(s.cluster.kubeconfig, s.nextManagerID("failover"),
		"--archive-dsn="+sc.archive.dsn, "--archive-record-retention="+archiveRecordRetention.String(),
		"--operator-namespace="+sc.archive.ledger, "--archive-binding-settle="+archiveBindingSettle.String(),
		"--archive-compare-interval=1s", "--health-probe-bind-address=127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	if err := m.waitReady(s.ctx); err != nil {
		return m, "", err
	}
	probe, err := m.listening(s.ctx, m.probeAddr)
	return m, probe, err
}

// failoverTrial is one tenant of the scenario: intents applied, settled
// and retired into the archive, and the manifest to apply them again.
type failoverTrial struct {
	tr    *trial
	keys  []string
	first map[string]*v1alpha1.ToolAction
	path  string
	// retiredAt is when its records had all left etcd.
	retiredAt time.Time
}

// failoverTrials runs n trials, 4 at a time: each applies 3–6 intents
// with kubectl, which must succeed, and waits until their records left
// etcd for the archive. during, when set, runs beside them once a third of
// the trials have retired their records, while the others apply theirs.
func (s *suite) failoverTrials(ctx context.Context, sc *run, d *downstream, n, offset int, counts *tally, during func() error) ([]*failoverTrial, error) {
	var (
		mu      sync.Mutex
		all     []*failoverTrial
		fault   = make(chan error, 1)
		started sync.Once
		begin   = func() {
			if during != nil {
				started.Do(func() { go func() { fault <- during() }() })
			}
		}
	)
	err := s.parallelTrialsOf(sc, n, 4, func(i int, _ *rand.Rand) error {
		rng := s.rngFor(sc.name, offset+i)
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true, recordRetention: archiveRetention})
		if err != nil {
			return err
		}
		t := &failoverTrial{tr: tr, keys: intents(tr, rng, "order", intRange(rng, 3, 6))}
		if t.path, err = s.labelledManifest(tr, t.keys); err != nil {
			return err
		}
		if err := s.kubectlCounting(ctx, counts, []string{"apply", "-f", t.path}, " created", "created by kubectl apply"); err != nil {
			return err
		}
		t.first = s.waitActions(ctx, tr, len(t.keys), nil)
		for _, key := range t.keys {
			if a := t.first[key]; a == nil || a.Status.Phase != v1alpha1.PhaseSucceeded {
				tr.violation(key, "the applied action did not succeed: %s", describe(a))
			}
		}
		if err := s.waitRetired(ctx, tr, t.first, time.Now().Add(2*settleTimeout)); err != nil {
			return err
		}
		t.retiredAt = time.Now()
		mu.Lock()
		all = append(all, t)
		if len(all) >= max(n/3, 1) {
			begin()
		}
		mu.Unlock()
		return nil
	})
	if during != nil {
		begin()
		err = errors.Join(err, <-fault)
	}
	return all, err
}

// archiveFailover returns the scenario of an archive that fails over, or
// is restored, under agent load.
func archiveFailover(mode failoverMode) func(*suite, *run) error {
	return func(s *suite, sc *run) error {
		if err := s.stopSteadyManagers(); err != nil {
			return err
		}
		r, err := s.startReplicatedArchive(sc, mode)
		defer r.stop()
		if err != nil {
			return err
		}
		defer sc.archive.pool.Close()
		var (
			pool   []*manager
			probes []string
		)
		defer stopAll(&pool)
		for range 2 {
			m, probe, err := s.startFailoverManager(sc)
			if m != nil {
				pool = append(pool, m)
			}
			if err != nil {
				return err
			}
			probes = append(probes, probe)
		}
		d, err := s.procs.startDownstream(sc.name, true)
		if err != nil {
			return err
		}
		defer d.proc.stop(5 * time.Second)
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Minute)
		defer cancel()
		if mode == failoverSynchronous {
			return s.synchronousFailover(ctx, sc, r, d)
		}
		return s.archiveGoneBack(ctx, sc, r, d, mode, probes)
	}
}

// synchronousFailover SIGKILLs the primary while agents apply intents and
// their records retire, and promotes the synchronous standby: no record
// that left etcd is lost, so every retired key is answered from the
// archive when applied again, and nothing is dispatched twice.
func (s *suite) synchronousFailover(ctx context.Context, sc *run, r *replicatedArchive, d *downstream) error {
	var (
		counts            tally
		killedAt, upAgain time.Time
	)
	failover := func() error {
		killedAt = time.Now()
		if err := r.primary.Kill(); err != nil {
			return err
		}
		// As a failover manager would: the dead primary is noticed, then the
		// standby promoted.
		if err := testenv.Sleep(ctx, time.Second); err != nil {
			return err
		}
		if err := r.standby.Promote(ctx); err != nil {
			return err
		}
		upAgain = time.Now()
		return nil
	}
	all, err := s.failoverTrials(ctx, sc, d, s.archiveTrials(), 0, &counts, failover)
	if err != nil {
		return err
	}
	before, after := 0, 0
	for _, t := range all {
		if t.retiredAt.Before(killedAt) {
			before += len(t.keys)
		} else {
			after += len(t.keys)
		}
	}
	counts.add("keys retired into the archive before the primary's SIGKILL", before)
	counts.add("keys retired after it (into the promoted standby, or kept again there)", after)
	errs := s.applyAgainAnswered(ctx, d, all, &counts)
	errs = append(errs, s.verify(sc))
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d trials, 4 at a time; the primary (synchronous_standby_names 'standby') SIGKILLed once a third had retired their records, the others applying theirs, and the standby promoted %s later; the managers reach whichever serves as primary",
			len(all), upAgain.Sub(killedAt).Round(100*time.Millisecond)),
		counts.String(), s.paths(sc))
	return errors.Join(append(errs, s.noTombstones(sc))...)
}

// applyAgainAnswered applies every trial's manifest again: each key must be
// answered from the archive, with its original reference, and never
// dispatched again.
func (s *suite) applyAgainAnswered(ctx context.Context, d *downstream, all []*failoverTrial, counts *tally) []error {
	var errs []error
	for _, t := range all {
		if err := s.kubectlCounting(ctx, counts, []string{"apply", "-f", t.path}, " created", "created again by kubectl apply"); err != nil {
			errs = append(errs, err)
		}
	}
	k := archiveKeeper(v1alpha1.TombstoneCauseRecordRetention)
	for _, t := range all {
		again := s.waitActions(ctx, t.tr, len(t.keys), t.first)
		st, err := d.stats(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, key := range t.keys {
			s.checkRecreated(ctx, t.tr, key, t.first[key], again[key], st.Requests[t.tr.ns+"/"+key], counts, k)
		}
	}
	return errs
}

// archiveGoneBack runs a first batch of trials into the archive, then has
// the archive go back (a standby that stopped receiving the WAL, or a
// base backup taken), a second batch retire into the primary alone, and
// then the archive lose them: the lagging standby promoted, or the backup
// restored. The managers must find the archive behind the marks of the
// second batch's namespaces, hold their keys applied again (ArchiveBehind,
// not dispatched), fail their readiness and say why; the first batch's
// keys are answered as before. Once an operator acknowledges the loss with
// kubectl toolledger, the managers are ready again, the acknowledgement
// lists exactly the second batch's records as lost, and fresh intents run.
func (s *suite) archiveGoneBack(ctx context.Context, sc *run, r *replicatedArchive, d *downstream, mode failoverMode, probes []string) error {
	var counts tally
	n := max(s.archiveTrials()/2, 2)
	kept, err := s.failoverTrials(ctx, sc, d, n, 0, &counts, nil)
	if err != nil {
		return err
	}
	var backup string
	switch mode {
	case failoverLagging:
		if err := r.standby.StopStreaming(ctx); err != nil {
			return err
		}
	case restoredFromBackup:
		if backup, err = r.primary.BaseBackup(ctx, ""); err != nil {
			return err
		}
	}
	lost, err := s.failoverTrials(ctx, sc, d, n, 1000, &counts, nil)
	if err != nil {
		return err
	}
	lostRecords := map[string]int64{}
	for _, t := range lost {
		lostRecords[t.tr.ns] = int64(len(t.keys))
	}
	began := time.Now()
	switch mode {
	case failoverLagging:
		if err := r.primary.Kill(); err != nil {
			return err
		}
		if err := r.standby.Promote(ctx); err != nil {
			return err
		}
	case restoredFromBackup:
		if err := r.primary.RestoreBaseBackup(ctx, backup); err != nil {
			return err
		}
		if err := s.cluster.watchAlso(r.primary.PID()); err != nil {
			return err
		}
	}
	var errs []error
	// The lost keys applied again: held, never dispatched.
	for _, t := range lost {
		if err := s.kubectlCounting(ctx, &counts, []string{"apply", "-f", t.path}, " created", "lost keys applied again"); err != nil {
			return err
		}
	}
	for _, t := range lost {
		held, err := s.waitHeld(ctx, t.tr, t.keys, v1alpha1.ReasonArchiveBehind)
		errs = append(errs, err)
		counts.add("lost keys held, ArchiveBehind, not dispatched", held)
	}
	detected := time.Since(began)
	if err := s.allNotReady(ctx, probes, "[-]archive-marks failed"); err != nil {
		errs = append(errs, err)
	} else {
		counts.add("managers not ready while the archive is behind", len(probes))
	}
	// The first batch's keys are answered as before.
	errs = append(errs, s.applyAgainAnswered(ctx, d, kept, &counts)...)
	if err := testenv.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	st, err := d.stats(ctx)
	if err != nil {
		return err
	}
	for _, t := range lost {
		checkRequests(t.tr, t.keys, st.Requests, 1, "while the archive is behind", &counts)
	}
	// The agents give up the held intents; the operator acknowledges.
	for _, t := range lost {
		if err := s.cluster.client.DeleteAllOf(ctx, &v1alpha1.ToolAction{}, client.InNamespace(t.tr.ns)); err != nil {
			return err
		}
	}
	finding, err := s.waitFinding(ctx, sc, lostRecords)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	operator, err := s.archiveOperator(ctx, sc.archive.ledger)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	out, err := s.toolledger(ctx, operator, "archive", "acknowledge", "--operator-namespace", sc.archive.ledger, "--finding", finding,
		"--reason", "e2e: the archive went back; the records after it are lost", "--wait")
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("kubectl toolledger archive acknowledge: %w: %s", err, out))...)
	}
	acknowledged := 0
	for ns, records := range lostRecords {
		if strings.Contains(out, fmt.Sprintf("Lost: namespace %s, records 1 to %d", ns, records)) {
			acknowledged++
		} else {
			errs = append(errs, fmt.Errorf("the acknowledgement does not say that namespace %s lost records 1 to %d: %s", ns, records, out))
		}
	}
	counts.add("namespaces whose lost records the acknowledgement names exactly", acknowledged)
	if err := s.allReady(ctx, probes); err != nil {
		errs = append(errs, err)
	}
	// The ledger serves again: fresh intents of the namespaces that lost
	// records run once.
	for _, t := range lost {
		rng := s.rngFor(sc.name, 2000+len(t.keys))
		fresh := intents(t.tr, rng, "fresh", 2)
		path, err := s.labelledManifest(t.tr, fresh)
		if err != nil {
			return err
		}
		if err := s.kubectlCounting(ctx, &counts, []string{"apply", "-f", path}, " created", "fresh intents after the acknowledgement"); err != nil {
			return err
		}
		done := s.waitActions(ctx, t.tr, len(fresh), t.first)
		for _, key := range fresh {
			if a := done[key]; a == nil || a.Status.Phase != v1alpha1.PhaseSucceeded {
				t.tr.violation(key, "a fresh intent after the acknowledgement: %s", describe(a))
			}
		}
	}
	errs = append(errs, s.verify(sc))
	how := map[failoverMode]string{
		failoverLagging:    "the asynchronous standby stopped receiving the WAL, then the primary was SIGKILLed and the standby promoted",
		restoredFromBackup: "a base backup was taken, then the database restored from it in place",
	}[mode]
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d trials retired into the archive, then %s, after %d more trials had retired into it; the managers held their keys %s after",
			len(kept), how, len(lost), detected.Round(100*time.Millisecond)),
		counts.String(), s.paths(sc))
	return errors.Join(errs...)
}

// waitHeld waits until each of keys has an action in etcd waiting,
// Accepted, for reason, and returns how many wait so.
func (s *suite) waitHeld(ctx context.Context, tr *trial, keys []string, reason string) (int, error) {
	deadline := time.Now().Add(settleTimeout)
	for {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err != nil {
			return 0, err
		}
		held := 0
		for _, a := range list.Items {
			c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReconciling)
			if slices.Contains(keys, a.Name) && a.Status.Phase == v1alpha1.PhaseAccepted && a.Status.Attempts == 0 && c != nil && c.Reason == reason {
				held++
			}
		}
		if held == len(keys) {
			return held, nil
		}
		if time.Now().After(deadline) {
			return held, fmt.Errorf("%s: %d of %d keys held, %s, %s after they were applied again", tr.ns, held, len(keys), reason, settleTimeout)
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return held, err
		}
	}
}

// allNotReady waits until every manager's readiness fails with the check
// named in failed.
func (s *suite) allNotReady(ctx context.Context, probes []string, failed string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, probe := range probes {
		for {
			status, body, err := get(ctx, "http://"+probe+"/readyz?verbose")
			if err == nil && status != http.StatusOK && strings.Contains(body, failed) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("manager %s did not fail its readiness with %q within 30s: %d %q %v", probe, failed, status, body, err) //nolint:errorlint // err is nil when the probe answered
			}
			if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// allReady waits until every manager is ready.
func (s *suite) allReady(ctx context.Context, probes []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, probe := range probes {
		for {
			status, body, err := get(ctx, "http://"+probe+"/readyz?verbose")
			if err == nil && status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("manager %s is not ready 30s after the acknowledgement: %d %q %v", probe, status, body, err) //nolint:errorlint // err is nil when the probe answered
			}
			if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitFinding waits until the managers record in the binding a finding of
// exactly the namespaces that lost records, each from the first, and
// returns its digest.
func (s *suite) waitFinding(ctx context.Context, sc *run, lost map[string]int64) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := archivebinding.Read(ctx, s.cluster.client, sc.archive.ledger)
		if err != nil {
			return "", err
		}
		if b != nil && b.Behind != nil && len(b.Behind.Namespaces) == len(lost) {
			exact := true
			for _, n := range b.Behind.Namespaces {
				exact = exact && n.HeadSequence == 0 && n.MarkSequence == lost[n.Namespace]
			}
			if exact {
				return b.Behind.Digest, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the managers' finding is %+v, want the namespaces %v behind from their first record", b, lost)
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// archiveOperator binds the shipped toolledger-history-admin ClusterRole,
// and the toolledger-archive-status Role in the ledger's operator
// namespace, to a user of their own, and returns the user's name: the
// operator who acknowledges an archive's loss has those roles and no more.
func (s *suite) archiveOperator(ctx context.Context, ledger string) (string, error) {
	const user = "e2e-archive-operator"
	var admin rbacv1.ClusterRole
	if err := readRBAC("role_history_admin.yaml", &admin); err != nil {
		return "", err
	}
	var status rbacv1.Role
	if err := readRBAC("role_archive_status.yaml", &status); err != nil {
		return "", err
	}
	status.Namespace = ledger
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
	for _, obj := range []client.Object{
		&admin, &status,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: admin.Name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ledger, Name: user}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: status.Name}},
	} {
		if err := s.cluster.client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("cannot grant the archive operator %s: %w", obj.GetName(), err)
		}
	}
	return user, nil
}

// readRBAC reads a role of config/rbac.
func readRBAC(file string, into client.Object) error {
	raw, err := os.ReadFile(testenv.ConfigPath("rbac", file))
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(raw, into)
}
