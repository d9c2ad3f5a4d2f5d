//go:build e2e && linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The archive scenarios run managers with --archive-dsn on a database of
// their own in the suite's PostgreSQL server (Debian's binaries, on
// 127.0.0.1), and read it as an auditor would, with SQL.

// archiveRecordRetention is the archive managers' --archive-record-retention.
// The scenarios' Tools set their own short recordRetention; with the
// manager's default, the archive managers would also retire the records of
// every scenario run before them.
const archiveRecordRetention = 24 * time.Hour

// archiveBindingSettle is the archive managers' --archive-binding-settle:
// all of a scenario's managers use its archive, so none needs the time to
// learn of a new binding.
const archiveBindingSettle = 100 * time.Millisecond

// archiveRetention is the recordRetention of the Tools of the scenarios
// whose records must leave etcd while they run.
const archiveRetention = time.Second

// archiveDB is one scenario's archive: a database the scenario's managers
// keep records in, and the suite reads.
type archiveDB struct {
	dsn  string
	pool *pgxpool.Pool
	// ledger is the operator namespace of the managers that keep records
	// in it, which holds their archive binding.
	ledger string
}

// archivedRecord is one row of the archive.
type archivedRecord struct {
	guardsKey bool
	cause     string
	action    v1alpha1.ToolAction
}

// records are the namespace's archived ToolActions, newest first, each as
// the row keeps it. Rows moved from Tombstones have no ToolAction to give.
func (db *archiveDB) records(ctx context.Context, ns string) ([]archivedRecord, error) {
	rows, err := db.pool.Query(ctx, `SELECT guards_key, cause, action FROM toolledger_records
		WHERE namespace = $1 AND coalesce(action->>'kind', '') <> 'Tombstone' ORDER BY completion_time DESC`, ns)
	if err != nil {
		return nil, fmt.Errorf("cannot read the archive of %s: %w", ns, err)
	}
	defer rows.Close()
	var out []archivedRecord
	for rows.Next() {
		var (
			r   archivedRecord
			doc []byte
		)
		if err := rows.Scan(&r.guardsKey, &r.cause, &doc); err != nil {
			return nil, fmt.Errorf("cannot read the archive of %s: %w", ns, err)
		}
		if err := json.Unmarshal(doc, &r.action); err != nil {
			return nil, fmt.Errorf("an archived record of %s is not a ToolAction: %w", ns, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// archivedUIDs are the UIDs of the namespace's archived records.
func (db *archiveDB) archivedUIDs(ctx context.Context, ns string) (map[types.UID]bool, error) {
	rows, err := db.pool.Query(ctx, `SELECT uid FROM toolledger_records WHERE namespace = $1`, ns)
	if err != nil {
		return nil, fmt.Errorf("cannot read the archive of %s: %w", ns, err)
	}
	defer rows.Close()
	uids := map[types.UID]bool{}
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return nil, err
		}
		uids[types.UID(uid)] = true
	}
	return uids, rows.Err()
}

// archiveTrials is how many trials an archive scenario runs: a quarter of
// E2E_TRIALS (12 by default), as each adds PostgreSQL to the machine's load.
func (s *suite) archiveTrials() int { return max(s.trials/4, 1) }

// startArchive gives the scenario a database of its own, starting the
// suite's PostgreSQL server on first use.
func (s *suite) startArchive(sc *run) (*archiveDB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.postgres == nil {
		began := time.Now()
		pg, err := testenv.StartPostgres(s.ctx, "")
		if err != nil {
			return nil, err
		}
		s.postgres = pg
		if err := s.cluster.watchAlso(pg.PID()); err != nil {
			return nil, err
		}
		s.t.Logf("PostgreSQL up in %s (%s)", time.Since(began).Round(100*time.Millisecond), pg.DSN)
	}
	dsn, err := s.postgres.Database(s.ctx, "e2e-"+sc.name)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(s.ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the archive %s: %w", dsn, err)
	}
	// Each scenario's database is another archive: its managers bind a
	// ledger of their own, in an operator namespace of their own.
	ledger := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-ledger-" + sc.name + "-"}}
	if err := s.cluster.client.Create(s.ctx, ledger); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot create the operator namespace of %s: %w", sc.name, err)
	}
	sc.archive = &archiveDB{dsn: dsn, pool: pool, ledger: ledger.Name}
	return sc.archive, nil
}

// haltPostgres stops the suite's PostgreSQL server, keeping its data.
func (s *suite) haltPostgres() error {
	return s.postgres.Halt()
}

// resumePostgres starts the halted server again, and has the watchdog kill
// its new process group should the suite die.
func (s *suite) resumePostgres() error {
	if err := s.postgres.Resume(s.ctx); err != nil {
		return err
	}
	return s.cluster.watchAlso(s.postgres.PID())
}

// stopPostgres stops the suite's PostgreSQL server and removes its data,
// keeping its log with the others when the suite failed.
func (s *suite) stopPostgres() {
	if s.postgres == nil {
		return
	}
	if s.t.Failed() {
		if log, err := os.ReadFile(filepath.Join(s.postgres.Dir, "postgres.log")); err == nil {
			_ = os.WriteFile(filepath.Join(s.procs.dir, "postgres.log"), log, 0o600)
		}
	}
	if err := s.postgres.Stop(); err != nil {
		s.t.Logf("stopping PostgreSQL: %v", err)
	}
}

// archiveManagers stops the steady managers (they keep keys in Tombstones
// and would take a share of the actions), gives the scenario its archive
// and starts n managers on it. stop stops the pool as it stands then.
func (s *suite) archiveManagers(sc *run, prefix string, n int) (pool []*manager, stop func(*[]*manager), err error) {
	if err := s.stopSteadyManagers(); err != nil {
		return nil, nil, err
	}
	db, err := s.startArchive(sc)
	if err != nil {
		return nil, nil, err
	}
	stop = func(pool *[]*manager) {
		stopAll(pool)
		db.pool.Close()
	}
	var earlier v1alpha1.TombstoneList
	if err := s.cluster.client.List(s.ctx, &earlier); err != nil {
		return nil, nil, err
	}
	began := time.Now()
	for range n {
		m, err := s.startArchiveManager(prefix, db)
		if err != nil {
			stop(&pool)
			return nil, nil, err
		}
		pool = append(pool, m)
	}
	if len(earlier.Items) > 0 {
		if err := s.waitTombstonesMoved(sc, len(earlier.Items), began); err != nil {
			stop(&pool)
			return nil, nil, err
		}
	}
	return pool, stop, nil
}

// waitTombstonesMoved waits until the managers, started at began, moved the
// n Tombstones of the scenarios before (the first archive scenario finds
// them) into the archive, so that the move does not take the trials' turns
// at the retention pace.
func (s *suite) waitTombstonesMoved(sc *run, n int, began time.Time) error {
	for {
		var list v1alpha1.TombstoneList
		if err := s.cluster.client.List(s.ctx, &list); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			sc.row.Notes = append(sc.row.Notes, fmt.Sprintf("%d Tombstones of the earlier scenarios moved into the archive by the managers' first sweep, within %s of their start",
				n, time.Since(began).Round(100*time.Millisecond)))
			return nil
		}
		if time.Since(began) > 2*time.Minute {
			return fmt.Errorf("%d of %d Tombstones of the earlier scenarios are not in the archive 2m after the managers started", len(list.Items), n)
		}
		if err := testenv.Sleep(s.ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// startArchiveManager starts a manager that keeps records in db.
func (s *suite) startArchiveManager(prefix string, db *archiveDB) (*manager, error) {
	m, err := s.procs.startManager(s.cluster.kubeconfig, s.nextManagerID(prefix),
		"--archive-dsn="+db.dsn, "--archive-record-retention="+archiveRecordRetention.String(),
		"--operator-namespace="+db.ledger, "--archive-binding-settle="+archiveBindingSettle.String())
	if err != nil {
		return nil, err
	}
	return m, m.waitReady(s.ctx)
}

// archiveKeeper is the archive as the keeper of keys taken away for cause:
// the archive holds exactly one row that guards the key, the taken
// action's, with its outcome, and there is no Tombstone.
func archiveKeeper(cause string) keeper {
	return keeper{
		name: "archived record", reason: v1alpha1.ReasonSettledByArchive,
		start: func(s *suite, sc *run) (func(), error) {
			pool, stop, err := s.archiveManagers(sc, "archive", 2)
			return func() { stop(&pool) }, err
		},
		trials: (*suite).archiveTrials,
		kept: func(s *suite, ctx context.Context, tr *trial, key string, deleted *v1alpha1.ToolAction, counts *tally) {
			s.checkArchived(ctx, tr, key, deleted, cause, counts)
		},
	}
}

// checkArchived checks that the archive keeps the key of deleted, which
// left etcd for cause, and that no Tombstone does.
func (s *suite) checkArchived(ctx context.Context, tr *trial, key string, deleted *v1alpha1.ToolAction, cause string, counts *tally) {
	all, err := tr.archive.records(ctx, tr.ns)
	if err != nil {
		tr.violation(key, "%v", err)
		return
	}
	var guarding []archivedRecord
	for _, r := range all {
		if r.action.Name == key && r.guardsKey {
			guarding = append(guarding, r)
		}
	}
	switch {
	case len(guarding) != 1:
		tr.violation(key, "%d archived rows guard the key, want 1 (that of %s)", len(guarding), deleted.UID)
	case guarding[0].action.UID != deleted.UID || guarding[0].cause != cause ||
		guarding[0].action.Status.ExternalRef != deleted.Status.ExternalRef || guarding[0].action.Status.Phase != v1alpha1.PhaseSucceeded:
		g := guarding[0]
		tr.violation(key, "the archived row guarding the key is %s (cause %s, %s, external reference %q); the action that left etcd (%s) was %s, %q",
			g.action.UID, g.cause, g.action.Status.Phase, g.action.Status.ExternalRef, cause, deleted.UID, deleted.Status.ExternalRef)
	default:
		counts.add(fmt.Sprintf("records that left etcd (%s) with exactly one archived row guarding their key", cause), 1)
	}
	switch err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: key}, &v1alpha1.Tombstone{}); {
	case err == nil:
		tr.violation(key, "a Tombstone was written, with an archive")
	case !apierrors.IsNotFound(err):
		tr.violation(key, "cannot read the key's Tombstone: %v", err)
	}
}

// tombstonesIn counts the Tombstones of the scenario's tenants.
func (s *suite) tombstonesIn(sc *run) (int, error) {
	n := 0
	for _, tr := range sc.trials {
		var list v1alpha1.TombstoneList
		if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
			return 0, err
		}
		n += len(list.Items)
	}
	return n, nil
}

// noTombstones is a scenario's last word on Tombstones: with an archive,
// none is written.
func (s *suite) noTombstones(sc *run) error {
	// A manager without the archive keeps the keys of the records it retires
	// in Tombstones; the managers with it move them into the archive at
	// their sweep's pace.
	deadline := time.Now().Add(settleTimeout)
	n, err := s.tombstonesIn(sc)
	for ; err == nil && n > 0 && time.Now().Before(deadline); n, err = s.tombstonesIn(sc) {
		if err := testenv.Sleep(s.ctx, time.Second); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d Tombstones in the tenants, with an archive, %s after the scenario: want none", n, settleTimeout)
	}
	sc.row.Notes = append(sc.row.Notes, "Tombstones in the tenants: 0")
	return nil
}

// --- a manager killed between the archive commit and the etcd delete ---------

// archiveKillRetire SIGKILLs the only manager while it retires a trial's
// records: aimed at the moment the archive holds rows of records still in
// etcd. A replacement must retire them again, each with one row, and the
// key of each must answer the same manifest applied again.
func archiveKillRetire(s *suite, sc *run) error {
	pool, stop, err := s.archiveManagers(sc, "retire", 1)
	if err != nil {
		return err
	}
	defer stop(&pool)
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var (
		counts, caught tally
		firsts         = map[*trial]map[string]*v1alpha1.ToolAction{}
		manifests      = map[*trial]string{}
		keysOf         = map[*trial][]string{}
		started        = 1
	)
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	for i := range s.archiveTrials() {
		if s.ctx.Err() != nil {
			break
		}
		rng := s.rngFor(sc.name, i)
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true, recordRetention: archiveRetention})
		if err != nil {
			return err
		}
		keys := intents(tr, rng, "order", intRange(rng, 5, 10))
		path, err := s.labelledManifest(tr, keys)
		if err != nil {
			return err
		}
		keysOf[tr], manifests[tr] = keys, path
		if err := s.kubectlCounting(ctx, &counts, []string{"apply", "-f", path}, " created", "created by kubectl apply"); err != nil {
			return err
		}
		first := s.waitActions(ctx, tr, len(keys), nil)
		for _, key := range keys {
			if a := first[key]; a == nil || a.Status.Phase != v1alpha1.PhaseSucceeded || a.Status.Attempts != 1 {
				tr.violation(key, "the applied action did not succeed after one attempt: %s", describe(a))
			}
		}
		firsts[tr] = first
		k, err := s.killWhileRetiring(pool[0], tr, rng)
		if err != nil {
			return err
		}
		caught.add("trials", 1)
		caught.add("trials whose kill caught records archived and still in etcd", boolToInt(k.inBoth > 0))
		caught.add("records archived and still in etcd", k.inBoth)
		caught.add("of them with the finalizer already released", k.released)
		caught.add("records still in etcd, not yet archived", k.inEtcd-k.inBoth)
		caught.add("records archived and gone from etcd", k.archived-k.inBoth)
		m, err := s.startArchiveManager("retire", sc.archive)
		if err != nil {
			return err
		}
		started++
		pool[0] = m
	}
	var errs []error
	killed := time.Now()
	for tr, first := range firsts {
		if err := s.waitRetired(ctx, tr, first, killed.Add(settleTimeout+10*time.Second)); err != nil {
			errs = append(errs, err)
		}
	}
	retired := time.Since(killed)
	s.logf("%s: every first record left etcd %s after the last kill", sc.name, retired.Round(100*time.Millisecond))
	// The same manifests again: every key answered from the archive.
	for _, path := range manifests {
		if err := s.kubectlCounting(ctx, &counts, []string{"apply", "-f", path}, " created", "created again by kubectl apply"); err != nil {
			errs = append(errs, err)
		}
	}
	reapplied := time.Now()
	errs = append(errs, s.checkAnsweredAgain(ctx, firsts, keysOf, &counts, v1alpha1.TombstoneCauseRecordRetention))
	s.logf("%s: every key applied again settled within %s", sc.name, time.Since(reapplied).Round(100*time.Millisecond))
	errs = append(errs, s.verify(sc))
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d SIGKILLs of the only manager while it retired a trial's records (recordRetention %s), each replaced at once; %d manager processes started in all",
			len(firsts), archiveRetention, started),
		"at the kills: "+caught.String(),
		fmt.Sprintf("every record left etcd %s after the last kill (the victim's share of the records is swept by the replacement once the victim's member Lease lapses)", retired.Round(100*time.Millisecond)),
		counts.String(), s.paths(sc))
	return errors.Join(append(errs, s.noTombstones(sc))...)
}

// retireKill is what a kill during retirement caught of the trial's records.
type retireKill struct {
	// inEtcd: records still in etcd; archived: rows in the archive;
	// inBoth: records in both, between the archive commit and the etcd
	// delete, of which released had lost their finalizer already.
	inEtcd, archived, inBoth, released int
	probes                             int
}

// killWhileRetiring freezes the manager (SIGSTOP) at random moments, reads
// the trial's records in etcd and in the archive, and SIGKILLs it once
// some record is in both — or once none is left in etcd, or after 8s or 400
// probes.
func (s *suite) killWhileRetiring(m *manager, tr *trial, rng *rand.Rand) (retireKill, error) {
	began := time.Now()
	for probes := 1; ; probes++ {
		if err := m.proc.signal(syscall.SIGSTOP); err != nil {
			return retireKill{}, fmt.Errorf("cannot freeze %s: %w\n%s", m.id, err, m.proc.tail(3000))
		}
		// Let writes the manager already sent land.
		if err := testenv.Sleep(s.ctx, 5*time.Millisecond); err != nil {
			return retireKill{}, err
		}
		k, err := s.retireSnapshot(tr)
		if err != nil {
			_ = m.proc.signal(syscall.SIGCONT)
			return k, err
		}
		k.probes = probes
		if k.inBoth > 0 || k.inEtcd == 0 || probes >= 400 || time.Since(began) > 8*time.Second {
			m.proc.kill()
			return k, nil
		}
		if err := m.proc.signal(syscall.SIGCONT); err != nil {
			return k, err
		}
		if err := testenv.Sleep(s.ctx, between(rng, time.Millisecond, 12*time.Millisecond)); err != nil {
			return k, err
		}
	}
}

func (s *suite) retireSnapshot(tr *trial) (retireKill, error) {
	var k retireKill
	var list v1alpha1.ToolActionList
	if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
		return k, err
	}
	archived, err := tr.archive.archivedUIDs(s.ctx, tr.ns)
	if err != nil {
		return k, err
	}
	k.inEtcd, k.archived = len(list.Items), len(archived)
	for _, a := range list.Items {
		if archived[a.UID] {
			k.inBoth++
			k.released += boolToInt(len(a.Finalizers) == 0)
		}
	}
	return k, nil
}

// waitRetired waits, until deadline, until none of the trial's first
// records is left in etcd; a record left is a violation.
func (s *suite) waitRetired(ctx context.Context, tr *trial, first map[string]*v1alpha1.ToolAction, deadline time.Time) error {
	for {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err != nil {
			return err
		}
		left := slices.DeleteFunc(list.Items, func(a v1alpha1.ToolAction) bool { return first[a.Name] == nil || first[a.Name].UID != a.UID })
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, a := range left {
				tr.violation(a.Name, "the finished record is still in etcd, past its recordRetention and a retention sweep: %s", describe(&a))
			}
			return nil
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// checkAnsweredAgain waits until every key of firsts was created again and
// settled, and checks that the archive answered each: the original outcome
// and reference, no attempt, one downstream request for the key in all.
func (s *suite) checkAnsweredAgain(ctx context.Context, firsts map[*trial]map[string]*v1alpha1.ToolAction,
	keysOf map[*trial][]string, counts *tally, cause string,
) error {
	k := archiveKeeper(cause)
	var errs []error
	for tr, first := range firsts {
		again := s.waitActions(ctx, tr, len(first), first)
		st, err := tr.d.stats(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, key := range keysOf[tr] {
			s.checkRecreated(ctx, tr, key, first[key], again[key], st.Requests[tr.ns+"/"+key], counts, k)
		}
	}
	return errors.Join(errs...)
}

// --- a manager killed during the key check -------------------------------------

// archivedTrial is a trial whose keys were archived: its archived keys and
// their first records, fresh keys, and the manifest of both, mixed.
type archivedTrial struct {
	tr              *trial
	archived, fresh []string
	first           map[string]*v1alpha1.ToolAction
	again           string
}

// archivedTrials runs the scenario's trials, a few at a time: each applies
// 3–6 intents, which must succeed after one attempt and leave etcd for the
// archive, and gets 2–4 fresh keys to apply with them again.
func (s *suite) archivedTrials(ctx context.Context, sc *run, d *downstream, counts *tally) ([]*archivedTrial, error) {
	var (
		mu  sync.Mutex
		all []*archivedTrial
	)
	err := s.parallelTrialsOf(sc, s.archiveTrials(), 4, func(_ int, rng *rand.Rand) error {
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true, recordRetention: archiveRetention})
		if err != nil {
			return err
		}
		t := &archivedTrial{tr: tr, archived: intents(tr, rng, "order", intRange(rng, 3, 6))}
		path, err := s.labelledManifest(tr, t.archived)
		if err != nil {
			return err
		}
		if err := s.kubectlCounting(ctx, counts, []string{"apply", "-f", path}, " created", "created by kubectl apply"); err != nil {
			return err
		}
		t.first = s.waitActions(ctx, tr, len(t.archived), nil)
		for _, key := range t.archived {
			if a := t.first[key]; a == nil || a.Status.Phase != v1alpha1.PhaseSucceeded || a.Status.Attempts != 1 {
				tr.violation(key, "the applied action did not succeed after one attempt: %s", describe(a))
			}
		}
		if err := s.waitRetired(ctx, tr, t.first, time.Now().Add(settleTimeout)); err != nil {
			return err
		}
		t.fresh = intents(tr, rng, "fresh", intRange(rng, 2, 4))
		// kubectl creates them in the manifest's order: mixed.
		again := append(slices.Clone(t.archived), t.fresh...)
		rng.Shuffle(len(again), func(i, j int) { again[i], again[j] = again[j], again[i] })
		if t.again, err = s.labelledManifest(tr, again); err != nil {
			return err
		}
		mu.Lock()
		all = append(all, t)
		mu.Unlock()
		return nil
	})
	return all, err
}

// archiveKillKeyCheck archives a few keys of each trial, then applies them
// again with fresh keys and SIGKILLs the only manager while the new actions
// have not passed their key check; the replacement must answer the
// archived keys from the archive and execute each fresh key once.
func archiveKillKeyCheck(s *suite, sc *run) error {
	pool, stop, err := s.archiveManagers(sc, "keycheck", 1)
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
	var (
		counts, caught tally
		started        = 1
	)
	all, err := s.archivedTrials(ctx, sc, d, &counts)
	if err != nil {
		return err
	}
	// Then, trial by trial, the archived keys again with fresh ones, and a
	// kill while they wait for their key check.
	for i, t := range all {
		if s.ctx.Err() != nil {
			break
		}
		rng := s.rngFor(sc.name, 1000+i)
		applied := make(chan error, 1)
		go func() {
			applied <- s.kubectlCounting(ctx, &counts, []string{"apply", "-f", t.again}, " created", "created by the second kubectl apply")
		}()
		k, err := s.killDuringKeyCheck(pool[0], t.tr, t.first, rng)
		if err != nil {
			return err
		}
		caught.add("trials", 1)
		caught.add("trials whose kill caught actions before their key check", boolToInt(k.archived+k.fresh > 0))
		caught.add("actions under archived keys not yet answered", k.archived)
		caught.add("actions under fresh keys not yet checked", k.fresh)
		m, err := s.startArchiveManager("keycheck", sc.archive)
		if err != nil {
			return err
		}
		started++
		pool[0] = m
		if err := <-applied; err != nil {
			return err
		}
	}
	var errs []error
	k := archiveKeeper(v1alpha1.TombstoneCauseRecordRetention)
	for _, t := range all {
		again := s.waitActions(ctx, t.tr, len(t.archived)+len(t.fresh), t.first)
		st, err := d.stats(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, key := range t.archived {
			s.checkRecreated(ctx, t.tr, key, t.first[key], again[key], st.Requests[t.tr.ns+"/"+key], &counts, k)
		}
		for _, key := range t.fresh {
			// A kill after the claim and before the send leaves an attempt
			// never sent: the replacement's is the second, and the first
			// request.
			a, requests := again[key], st.Requests[t.tr.ns+"/"+key]
			executed := a != nil && a.Status.Phase == v1alpha1.PhaseSucceeded && a.Status.Attempts >= 1 && requests == 1
			if !executed {
				t.tr.violation(key, "the fresh key's action is %s with %d downstream requests; want Succeeded, 1 request", describe(a), requests)
			}
			counts.add("fresh keys executed once (1 downstream request)", boolToInt(executed))
			counts.add("of them on a second attempt, the first claimed by the victim and never sent", boolToInt(executed && a.Status.Attempts > 1))
		}
	}
	errs = append(errs, s.verify(sc))
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d SIGKILLs of the only manager while a trial's new actions (archived keys applied again, and fresh keys) waited for their key check, each replaced at once; %d manager processes started in all",
			len(all), started),
		"at the kills: "+caught.String(), counts.String(), s.paths(sc))
	return errors.Join(append(errs, s.noTombstones(sc))...)
}

// keyCheckKill counts the new actions that had not passed their key check
// at a kill: under archived keys, not answered; under fresh keys, neither
// claimed nor attempted.
type keyCheckKill struct {
	archived, fresh int
	probes          int
}

// killDuringKeyCheck freezes the manager at random moments while the
// trial's new actions are being created, and SIGKILLs it once one of them
// exists and has not passed its key check — or after 5s or 400 probes.
func (s *suite) killDuringKeyCheck(m *manager, tr *trial, first map[string]*v1alpha1.ToolAction, rng *rand.Rand) (keyCheckKill, error) {
	began := time.Now()
	for probes := 1; ; probes++ {
		if err := m.proc.signal(syscall.SIGSTOP); err != nil {
			return keyCheckKill{}, fmt.Errorf("cannot freeze %s: %w\n%s", m.id, err, m.proc.tail(3000))
		}
		if err := testenv.Sleep(s.ctx, 5*time.Millisecond); err != nil {
			return keyCheckKill{}, err
		}
		var k keyCheckKill
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
			_ = m.proc.signal(syscall.SIGCONT)
			return k, err
		}
		for _, a := range list.Items {
			unchecked := !a.Status.Phase.IsSettled() && a.Status.Claim == nil && a.Status.Attempts == 0
			switch {
			case !unchecked:
			case first[a.Name] != nil:
				k.archived++
			default:
				k.fresh++
			}
		}
		k.probes = probes
		if k.archived+k.fresh > 0 || probes >= 400 || time.Since(began) > 5*time.Second {
			m.proc.kill()
			return k, nil
		}
		if err := m.proc.signal(syscall.SIGCONT); err != nil {
			return k, err
		}
		if err := testenv.Sleep(s.ctx, between(rng, time.Millisecond, 12*time.Millisecond)); err != nil {
			return k, err
		}
	}
}

// --- PostgreSQL stopped under load ---------------------------------------------------

// archivePostgresRestart halts PostgreSQL, once per round of trials, while
// intents are being invoked, and invokes more during the outage: those
// must wait, ArchiveUnavailable, with no request downstream, until the
// server is back; then each must execute once.
func archivePostgresRestart(s *suite, sc *run) error {
	const perRound = 6
	pool, stop, err := s.archiveManagers(sc, "pgdown", 2)
	if err != nil {
		return err
	}
	defer stop(&pool)
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var (
		counts                    tally
		outages, recoveries, wait []time.Duration
		errs                      []error
	)
	trials := s.archiveTrials()
	rounds := (trials + perRound - 1) / perRound
	for round := range rounds {
		if s.ctx.Err() != nil {
			break
		}
		rng := s.rngFor(sc.name, 1000+round)
		var batch []*trial
		for range min(perRound, trials-round*perRound) {
			tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
			if err != nil {
				return err
			}
			batch = append(batch, tr)
		}
		ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
		var agents sync.WaitGroup
		for _, tr := range batch {
			keys := intents(tr, rng, "before", intRange(rng, 2, 4))
			startAt := between(rng, 0, time.Second)
			agents.Go(func() {
				if testenv.Sleep(ctx, startAt) == nil {
					s.invokeAll(ctx, tr, keys, &agents)
				}
			})
		}
		if err := testenv.Sleep(s.ctx, between(rng, 300*time.Millisecond, time.Second)); err != nil {
			cancel()
			return err
		}
		began := time.Now()
		if err := s.haltPostgres(); err != nil {
			cancel()
			return fmt.Errorf("cannot halt PostgreSQL: %w", err)
		}
		// The intents that arrive while the archive is down.
		during := map[*trial][]string{}
		for _, tr := range batch {
			during[tr] = intents(tr, rng, "during", intRange(rng, 2, 4))
			s.invokeAll(ctx, tr, during[tr], &agents)
			counts.add("intents invoked while PostgreSQL was down", len(during[tr]))
		}
		waited, err := s.watchOutage(batch, during, between(rng, 3*time.Second, 5*time.Second))
		if err != nil {
			cancel()
			return err
		}
		wait = append(wait, waited)
		if err := s.resumePostgres(); err != nil {
			cancel()
			return fmt.Errorf("cannot start PostgreSQL again: %w", err)
		}
		back := time.Now()
		outages = append(outages, back.Sub(began))
		agents.Wait()
		cancel()
		recoveries = append(recoveries, time.Since(back))
		st, err := d.stats(s.ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for tr, keys := range during {
			for _, key := range keys {
				if n := st.Requests[tr.ns+"/"+key]; n != 1 {
					tr.violation(key, "invoked while PostgreSQL was down: %d downstream requests once it was back, want 1", n)
				} else {
					counts.add("of them sent once PostgreSQL was back, once", 1)
				}
			}
		}
		s.logf("%s: round %d/%d: PostgreSQL down for %s; the intents invoked meanwhile all waited ArchiveUnavailable after %s; every intent settled %s after it was back",
			sc.name, round+1, rounds, outages[len(outages)-1].Round(100*time.Millisecond), waited.Round(100*time.Millisecond), recoveries[len(recoveries)-1].Round(100*time.Millisecond))
	}
	errs = append(errs, s.verify(sc))
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d PostgreSQL outages (one per round of %d trials, 2 managers), down %s each; every intent invoked meanwhile waited with ArchiveUnavailable within %s of the halt, none sent while it was down; every intent of the round settled %s after PostgreSQL was back",
			len(outages), perRound, spread(outages), spread(wait), spread(recoveries)),
		counts.String(), s.paths(sc))
	return errors.Join(append(errs, s.noTombstones(sc))...)
}

// watchOutage watches, for down, the intents invoked while PostgreSQL is
// down: none may reach the downstream, and each must be seen waiting with
// the reason ArchiveUnavailable. It returns how long until all were seen.
func (s *suite) watchOutage(batch []*trial, during map[*trial][]string, down time.Duration) (time.Duration, error) {
	began := time.Now()
	seen := map[string]bool{}
	var allSeen time.Duration
	sent := map[string]bool{}
	for time.Since(began) < down {
		st, err := batch[0].d.stats(s.ctx)
		if err != nil {
			return 0, err
		}
		for _, tr := range batch {
			var list v1alpha1.ToolActionList
			if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
				return 0, err
			}
			for _, key := range during[tr] {
				full := tr.ns + "/" + key
				if st.Requests[full] > 0 && !sent[full] {
					sent[full] = true
					tr.violation(key, "sent downstream while PostgreSQL was down (%d requests)", st.Requests[full])
				}
			}
			for _, a := range list.Items {
				if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == "ArchiveUnavailable" &&
					a.Status.Phase == v1alpha1.PhaseAccepted && strings.HasPrefix(a.Name, "during-") {
					seen[a.Namespace+"/"+a.Name] = true
				}
			}
		}
		if allSeen == 0 && len(seen) == countKeys(during) {
			allSeen = time.Since(began)
		}
		if err := testenv.Sleep(s.ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
	for tr, keys := range during {
		for _, key := range keys {
			if !seen[tr.ns+"/"+key] {
				tr.violation(key, "never seen waiting (Accepted, ArchiveUnavailable) in the %s PostgreSQL was down", down.Round(100*time.Millisecond))
			}
		}
	}
	return allSeen, nil
}

func countKeys(m map[*trial][]string) int {
	n := 0
	for _, keys := range m {
		n += len(keys)
	}
	return n
}

// spread is durations as min–max (median).
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return fmt.Sprintf("%s–%s (median %s)", sorted[0].Round(100*time.Millisecond), sorted[len(sorted)-1].Round(100*time.Millisecond),
		sorted[len(sorted)/2].Round(100*time.Millisecond))
}
