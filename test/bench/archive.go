package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/testenv"
)

// onlyArchive is the -only value that runs the archive section alone.
const onlyArchive = "archive"

// archiveResult is section 10: the manager with a PostgreSQL archive, its
// own ceiling and half-load rate measured in the same run, the half-load
// run with an empty archive and with a large one, the key check's cost,
// retirement into the archive, and what a record takes in PostgreSQL.
type archiveResult struct {
	// Records are the archived rows loaded with COPY before the full run,
	// in LoadTime; TableBytes is pg_total_relation_size of the records'
	// table (indexes and TOAST included) after the load.
	Records    int
	LoadTime   time.Duration
	TableBytes float64
	// Ceiling is the best closed-loop throughput of the manager with the
	// empty archive, at CeilingAt callers; Rate is Load × Ceiling.
	Ceiling   float64
	CeilingAt int
	Load      float64
	Rate      float64
	// Empty and Full are the half-load runs, each on an empty etcd, with
	// the empty archive and with Records archived rows.
	Empty, Full liveRun
	Check       archiveCheck
	// Retire are the retirement runs: at the configured --retention-rate,
	// then at 1.25 × the ceiling's rate, rounded up, when that is higher.
	Retire []retirement
	// Sustained is the long run at Rate; nil when it did not run.
	Sustained *sustainedRun
}

// archiveCheck is what the key check adds to a new action.
type archiveCheck struct {
	Actions int
	// Counted is whether pg_stat_statements counted the statements;
	// CountError says why not.
	Counted    bool
	CountError string
	// CheckQueries are the key check's query calls per new action, and
	// Statements every statement the database ran for the manager per
	// new action (the keeps and pings of the batch included).
	CheckQueries, Statements float64
	// CheckMeanExec is the server's mean execution time of the check query.
	CheckMeanExec time.Duration
	// TombstoneRequests are the API requests to tombstones per new action.
	TombstoneRequests float64
	Rows              []writeRow
	// Samples are the checks of absent keys timed from the harness,
	// through the manager's own archive.Store, against the full archive.
	Samples       int
	P50, P95, P99 time.Duration
}

// retirement is records past their retention archived and removed from
// etcd by the manager's retention sweep.
type retirement struct {
	Namespace string
	Records   int
	// Rate is the configured --retention-rate.
	Rate float64
	// Retired counts the records gone from etcd by the end, Archived the
	// rows of their namespace in the archive.
	Retired, Archived int
	// Time runs from the first record gone to the last one (or the end of
	// the wait); Achieved is Retired ÷ Time.
	Time     time.Duration
	Achieved float64
	// WritesPerRecord are the API server's successful writes from the
	// manager's start to its stop ÷ Retired; MarkWritesPerRecord the part
	// of them that wrote ConfigMaps: the chains' marks, moved forward
	// before each batch of records leaves etcd (and, once, the binding and
	// a checkpoint).
	WritesPerRecord, MarkWritesPerRecord float64
}

// archiveBench is the run's PostgreSQL server and its two databases.
type archiveBench struct {
	pg              *testenv.Postgres
	emptyDSN        string
	fullDSN         string
	statementsError error
}

const (
	archiveCheckNamespace = "archive-check"
	archivedNamespaces    = 100
)

// archive measures section 10 on control planes of its own: it replaces
// the plane before each half-load run, so that etcd holds only that run's
// hot set.
func (b *bench) archive(ctx context.Context) error {
	s := b.settings
	res := &archiveResult{Records: s.ArchiveRecords, Load: s.LatencyLoad}
	b.results.Archive = res
	a, err := b.startArchive(ctx)
	if err != nil {
		return err
	}
	defer func() {
		b.stopManager()
		if err := a.pg.Stop(); err != nil {
			b.logf("archive: stopping PostgreSQL: %v", err)
		}
	}()
	if err := b.loadArchive(ctx, a, res); err != nil {
		return err
	}
	if err := b.archiveCeiling(ctx, a, res); err != nil {
		return err
	}
	for _, run := range []struct {
		name, dsn string
		into      *liveRun
	}{{"archive-empty", a.emptyDSN, &res.Empty}, {"archive-full", a.fullDSN, &res.Full}} {
		if err := b.restartPlane(ctx, run.name); err != nil {
			return err
		}
		if err := b.useManager(ctx, b.archiveManager(run.dsn, 0)); err != nil {
			return err
		}
		if *run.into, err = b.liveRun(ctx, "tl-"+run.name, res.Rate); err != nil {
			return err
		}
		b.logf("archive: %s, %.1f actions/s offered: p50 %s ms, p95 %s ms, p99 %s ms (%d samples); kube-apiserver heap in use %s",
			run.name, res.Rate, ms(run.into.P50), ms(run.into.P95), ms(run.into.P99), run.into.Samples, mib(run.into.Plane.HeapInuse))
	}
	if err := b.archiveCheck(ctx, a, res); err != nil {
		return err
	}
	// A pace a quarter above the ceiling's rate is one that keeps up even
	// at the low end of ±20%.
	rates := []float64{cmp.Or(s.ArchiveRetentionRate, app.DefaultRetentionRate)}
	if atCeiling := math.Ceil(1.25 * res.Ceiling); atCeiling > rates[0] {
		rates = append(rates, atCeiling)
	}
	for i, rate := range rates {
		ret := retirement{Namespace: fmt.Sprintf("archive-retire-%d", i+1), Records: s.ArchiveRetire, Rate: rate}
		if err := b.archiveRetire(ctx, a.fullDSN, &ret); err != nil {
			return err
		}
		b.logf("archive: retirement of %d records at --retention-rate=%.0f: %d gone from etcd, %d rows archived, %.1f/s over %s; %.2f writes a record, %.2f of them the marks'; the ceiling finishes %.1f actions/s",
			ret.Records, ret.Rate, ret.Retired, ret.Archived, ret.Achieved, dur(ret.Time), ret.WritesPerRecord, ret.MarkWritesPerRecord, res.Ceiling)
		res.Retire = append(res.Retire, ret)
	}
	return b.archiveSustained(ctx, a, res)
}

// archiveManager is the in-process manager as shipped, with the archive.
func (b *bench) archiveManager(dsn string, rate float64) managerConfig {
	c := b.baseline().manager()
	c.ArchiveDSN, c.RetentionRate = dsn, rate
	return c
}

// startArchive starts PostgreSQL with pg_stat_statements loaded, and
// creates and migrates the two databases.
func (b *bench) startArchive(ctx context.Context) (*archiveBench, error) {
	b.logf("archive: starting PostgreSQL")
	// Under the system's temporary directory: when the harness runs as
	// root, the server runs as nobody, who cannot enter b.tmp.
	pg, err := testenv.StartPostgres(ctx, "")
	if err != nil {
		return nil, err
	}
	a := &archiveBench{pg: pg}
	a.statementsError = enableStatements(ctx, pg)
	if a.statementsError != nil {
		b.logf("archive: pg_stat_statements not available, statements not counted: %v", a.statementsError)
	}
	for _, db := range []struct {
		name string
		dsn  *string
	}{{"archive_empty", &a.emptyDSN}, {"archive_full", &a.fullDSN}} {
		if *db.dsn, err = pg.Database(ctx, db.name); err == nil {
			err = migrateArchive(ctx, *db.dsn, a.statementsError == nil)
		}
		if err != nil {
			return nil, errors.Join(err, pg.Stop())
		}
	}
	return a, nil
}

// enableStatements loads pg_stat_statements, which counts every statement
// the server runs, by query: it must be preloaded, so the server restarts.
func enableStatements(ctx context.Context, pg *testenv.Postgres) error {
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	if err = errors.Join(err, conn.Close(ctx)); err != nil {
		return err
	}
	if err := pg.Halt(); err != nil {
		return fmt.Errorf("cannot restart PostgreSQL: %w", err)
	}
	return pg.Resume(ctx)
}

// migrateArchive creates the archive's schema as the manager does, and the
// pg_stat_statements view when statements are counted.
func migrateArchive(ctx context.Context, dsn string, statements bool) error {
	store, err := archive.Open(ctx, dsn)
	if err != nil {
		return err
	}
	store.Close()
	if !statements {
		return nil
	}
	return withConn(ctx, dsn, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
		return err
	})
}

func withConn(ctx context.Context, dsn string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("cannot connect to the archive: %w", err)
	}
	return errors.Join(fn(conn), conn.Close(ctx))
}

// loadArchive writes res.Records archived records straight into the full
// database with COPY, as a long-lived archive holds them: finished a day
// to a year ago, spread over archivedNamespaces namespaces, each row the
// archive's record of a real finished action (archive.NewRecord), its
// document naming the row's own key. It then weighs the table.
func (b *bench) loadArchive(ctx context.Context, a *archiveBench, res *archiveResult) error {
	template, err := archivedRecord(0, time.Now())
	if err != nil {
		return err
	}
	document := string(template.Action)
	now := time.Now()
	began := time.Now()
	err = withConn(ctx, a.fullDSN, func(conn *pgx.Conn) error {
		i := 0
		rows := pgx.CopyFromFunc(func() ([]any, error) {
			if i == res.Records {
				return nil, nil
			}
			r := loadedRecord(template, document, i, now)
			i++
			return recordRow(r), nil
		})
		// Written as rows of an archive from before its chains: outside
		// them, which the append trigger refuses to anyone but a superuser
		// that turns triggers off (the harness's role is one).
		if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
			return fmt.Errorf("cannot turn the append trigger off for the load: %w", err)
		}
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"toolledger_records"}, recordColumnNames, rows)
		if err != nil {
			return fmt.Errorf("cannot COPY the archived records: %w", err)
		}
		_, err = conn.Exec(ctx, `ANALYZE toolledger_records`)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT pg_total_relation_size('toolledger_records')`).Scan(&res.TableBytes)
		}
		return err
	})
	res.LoadTime = time.Since(began)
	if err != nil {
		return err
	}
	b.logf("archive: %d records loaded with COPY in %s (%.0f/s), %s in PostgreSQL, %.0f bytes per record",
		res.Records, dur(res.LoadTime), safeDiv(float64(res.Records), res.LoadTime.Seconds()), mib(res.TableBytes), res.BytesPerRecord())
	return nil
}

// BytesPerRecord is what one archived record takes in PostgreSQL, its
// share of the indexes and TOAST included.
func (r *archiveResult) BytesPerRecord() float64 { return safeDiv(r.TableBytes, float64(r.Records)) }

// InsertRate is the archived records COPY wrote a second.
func (r *archiveResult) InsertRate() float64 {
	return safeDiv(float64(r.Records), r.LoadTime.Seconds())
}

// benchNamespace is the namespace the loaded records of name were archived
// from: a made-up uid, the same for every record of the name.
func benchNamespace(name string) archive.Namespace {
	return archive.Namespace{Name: name, UID: types.UID("uid-" + name)}
}

// loadedRecord is the i-th record loadArchive writes: template, with
// document (its action) naming the row's UID, namespace and key.
func loadedRecord(template archive.Record, document string, i int, now time.Time) archive.Record {
	r := template
	r.UID = types.UID(fmt.Sprintf("archived-%08d", i))
	r.Namespace = fmt.Sprintf("archived-%03d", i%archivedNamespaces)
	r.NamespaceUID = benchNamespace(r.Namespace).UID
	r.Key = fmt.Sprintf("key-%08d", i)
	r.CompletionTime = now.Add(-24*time.Hour - time.Duration(i%365)*24*time.Hour)
	r.DeletionTime = r.CompletionTime.Add(5 * time.Minute)
	r.Action = []byte(strings.NewReplacer(templateUID, string(r.UID), templateNamespace, r.Namespace, templateKey, r.Key).Replace(document))
	return r
}

// The template record's UID, namespace and key, which each loaded row's
// replace: as long as theirs, so that every document is as large.
const (
	templateUID       = "tmpl-uid-00000000" // archived-%08d
	templateNamespace = "tmpl-ns-0000"      // archived-%03d
	templateKey       = "tmpl-key-000"      // key-%08d
)

// archivedRecord is the archive's record of a benchmark action that
// Succeeded at completed and left etcd by its record retention, under the
// template's UID, namespace and key.
func archivedRecord(amount int, completed time.Time) (archive.Record, error) {
	a := &v1alpha1.ToolAction{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolAction"},
		ObjectMeta: metav1.ObjectMeta{Namespace: templateNamespace, Name: templateKey, UID: templateUID, Finalizers: []string{v1alpha1.Finalizer}},
		Spec:       spec(amount),
		Status:     succeededStatus(templateNamespace, templateKey, amount, completed),
	}
	tool := &v1alpha1.Tool{Spec: v1alpha1.ToolSpec{IdempotencyClass: v1alpha1.KeyProtected}}
	return archive.NewRecord(a, benchNamespace(templateNamespace).UID, tool, v1alpha1.TombstoneCauseRecordRetention, "", completed.Add(5*time.Minute))
}

// recordColumnNames are the columns archive.Store.Keep writes (docs/archive.md).
var recordColumnNames = []string{"uid", "namespace", "namespace_uid", "key", "tool_kind", "tool_name", "idempotency_class", "request_digest",
	"phase", "error_class", "error_reason", "external_ref", "attempts", "guards_key", "completion_time", "cause", "deleted_by",
	"deletion_time", "action"}

func recordRow(r archive.Record) []any {
	return []any{string(r.UID), r.Namespace, string(r.NamespaceUID), r.Key, r.Tool.Kind, r.Tool.Name, string(r.IdempotencyClass), r.RequestDigest,
		string(r.Phase), string(r.ErrorClass), r.ErrorReason, r.ExternalRef, r.Attempts, r.GuardsKey,
		r.CompletionTime, r.Cause, r.DeletedBy, r.DeletionTime, []byte(r.Action)}
}

// archiveCeiling measures the manager's best closed-loop throughput with
// the empty archive, at each concurrency level, on an empty etcd, and sets
// the half-load rate from it.
func (b *bench) archiveCeiling(ctx context.Context, a *archiveBench, res *archiveResult) error {
	if err := b.restartPlane(ctx, "archive-ceiling"); err != nil {
		return err
	}
	if err := b.useManager(ctx, b.archiveManager(a.emptyDSN, 0)); err != nil {
		return err
	}
	s := b.settings
	for _, c := range s.Concurrency {
		r, err := b.closedInvokes(ctx, fmt.Sprintf("tl-archive-ceiling-%d", c), c, s.Warmup, s.Measure)
		if err != nil {
			return err
		}
		if r.FirstError != nil {
			b.fail("archive ceiling at %d callers: %d errors, first: %v", c, r.Errors, r.FirstError)
		}
		b.logf("archive: ceiling with the empty archive at %d callers: %.1f actions/s, p99 %s ms", c, r.Throughput, ms(r.percentile(99)))
		if r.Throughput > res.Ceiling {
			res.Ceiling, res.CeilingAt = r.Throughput, c
		}
		if err := b.waitQuiet(ctx); err != nil {
			return err
		}
	}
	if res.Ceiling == 0 {
		return errors.New("archive: no action succeeded in the ceiling runs")
	}
	res.Rate = res.Load * res.Ceiling
	return nil
}

// closedInvokes has concurrency SDK callers in a new namespace ns invoke
// one action after the other, each until Succeeded, for warmup+measure.
func (b *bench) closedInvokes(ctx context.Context, ns string, concurrency int, warmup, measure time.Duration) (runResult, error) {
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return runResult{}, err
	}
	return closedLoop(ctx, concurrency, warmup, measure, func(ctx context.Context, w, seq int) error {
		_, err := invokeSucceeded(ctx, b.sdk, request(ns, objectName(w, seq), amount(w, seq)))
		return err
	}), nil
}

// archiveCheck runs a batch of new actions against the full archive and
// counts what their key checks did: statements in PostgreSQL (from
// pg_stat_statements, reset before the batch) and requests to the API
// server (from its metrics, as the writes step counts the tombstone
// check's); then it times the check of absent keys through archive.Store.
func (b *bench) archiveCheck(ctx context.Context, a *archiveBench, res *archiveResult) error {
	s := b.settings
	check := &res.Check
	check.Actions = s.WritesActions
	if err := b.c.namespace(ctx, b.fastTool(archiveCheckNamespace)); err != nil {
		return err
	}
	if err := b.waitQuiet(ctx); err != nil {
		return err
	}
	counted := a.statementsError == nil
	if counted {
		if err := withConn(ctx, a.fullDSN, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`)
			return err
		}); err != nil {
			return err
		}
	}
	rows, _, _, err := b.countBatch(ctx, check.Actions, func(ctx context.Context, i int) error {
		_, err := invokeSucceeded(ctx, b.sdk, request(archiveCheckNamespace, fmt.Sprintf("check-%06d", i), i+1))
		return err
	}, min(16, check.Actions))
	if err != nil {
		return err
	}
	check.Rows = rows
	for _, r := range rows {
		if r.Resource == "tombstones" {
			check.TombstoneRequests += r.PerAction
		}
	}
	if counted {
		err = b.countStatements(ctx, a.fullDSN, check)
	} else {
		check.CountError = a.statementsError.Error()
	}
	if err != nil {
		return err
	}
	if err := b.timeChecks(ctx, a.fullDSN, check); err != nil {
		return err
	}
	b.logf("archive: key check per new action (%d actions): %.2f check queries, %.2f statements in all (server mean %s ms), %.2f requests to tombstones; timed from the harness over %d absent keys: p50 %s ms, p99 %s ms",
		check.Actions, check.CheckQueries, check.Statements, ms(check.CheckMeanExec), check.TombstoneRequests, check.Samples, ms(check.P50), ms(check.P99))
	return nil
}

// checkQueryMatch picks the key check's statement out of pg_stat_statements
// (archive.Store.newest).
const checkQueryMatch = `%FROM toolledger_records%WHERE namespace = $1 AND key = $2%`

// countStatements reads the statements the full database ran since the
// reset, leaving out the harness's own reads of pg_stat_statements.
func (b *bench) countStatements(ctx context.Context, dsn string, check *archiveCheck) error {
	return withConn(ctx, dsn, func(conn *pgx.Conn) error {
		var checks, all float64
		var mean float64
		err := conn.QueryRow(ctx, `
SELECT coalesce(sum(calls) FILTER (WHERE query LIKE $1), 0),
	coalesce(sum(calls), 0),
	coalesce(sum(total_exec_time) FILTER (WHERE query LIKE $1) / nullif(sum(calls) FILTER (WHERE query LIKE $1), 0), 0)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND query NOT LIKE '%pg_stat_statements%'`, checkQueryMatch).Scan(&checks, &all, &mean)
		if err != nil {
			return fmt.Errorf("cannot read pg_stat_statements: %w", err)
		}
		check.Counted = true
		n := float64(check.Actions)
		check.CheckQueries, check.Statements = checks/n, all/n
		check.CheckMeanExec = time.Duration(mean * float64(time.Millisecond))
		return nil
	})
}

// timeChecks times the key check of absent keys, a new action's, one after
// another through the manager's own archive.Store.
func (b *bench) timeChecks(ctx context.Context, dsn string, check *archiveCheck) error {
	store, err := archive.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	latencies := make([]time.Duration, 0, b.settings.ArchiveCheckSamples)
	for i := range b.settings.ArchiveCheckSamples {
		began := time.Now()
		check, err := store.CheckKey(ctx, benchNamespace(fmt.Sprintf("archived-%03d", i%archivedNamespaces)), fmt.Sprintf("absent-%08d", i), archive.Link{})
		if err != nil {
			return err
		}
		if check.Current != nil || len(check.Earlier) > 0 || check.Decommissioned {
			return fmt.Errorf("archive: absent key %d found in the archive, or the archive read as decommissioned", i)
		}
		latencies = append(latencies, time.Since(began))
	}
	check.Samples = len(latencies)
	check.P50, check.P95, check.P99 = percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)
	return nil
}

// archiveRetire creates finished records past their tool's recordRetention
// with no manager running, then starts the manager with the archive at dsn
// and ret's --retention-rate, and follows the records leaving etcd: every
// one must also be a row in the archive.
func (b *bench) archiveRetire(ctx context.Context, dsn string, ret *retirement) error {
	ns := ret.Namespace
	b.stopManager()
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return err
	}
	if err := b.setRecordRetention(ctx, ns, &metav1.Duration{Duration: time.Minute}); err != nil {
		return err
	}
	completed := time.Now().Add(-10 * time.Minute)
	if err := parallel(ctx, ret.Records, b.settings.MemoryCreateConcurrency, func(ctx context.Context, i int) error {
		return createFinished(ctx, b.c.k8s, ns, fmt.Sprintf("due-%06d", i), i+1, completed)
	}); err != nil {
		return fmt.Errorf("cannot create the records to retire: %w", err)
	}
	before, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return err
	}
	m, err := startInProcess(b.c, b.archiveManager(dsn, ret.Rate))
	if err != nil {
		return err
	}
	b.mgr = m
	var first, last time.Time
	left, atFirst := ret.Records, 0
	// Twice the time the configured pace needs, and a sweep's period.
	deadline := time.Now().Add(time.Minute + 2*time.Duration(float64(ret.Records)/ret.Rate*float64(time.Second)))
	for left > 0 && time.Now().Before(deadline) {
		if err := testenv.Sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
		n, err := countIn(ctx, b.c.k8s, &v1alpha1.ToolActionList{}, ns)
		if err != nil {
			return err
		}
		if n < left {
			if first.IsZero() {
				first, atFirst = time.Now(), ret.Records-n
			}
			last = time.Now()
		}
		left = n
	}
	b.stopManager()
	after, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return err
	}
	ret.Retired = ret.Records - left
	var writes, marks float64
	for k, n := range after.requests().minus(before.requests()) {
		if !mutating(k.Verb) || !successful(k.Code) || k.Resource == "leases" || k.Resource == "events" {
			continue
		}
		writes += n
		if k.Resource == "configmaps" {
			marks += n
		}
	}
	ret.WritesPerRecord, ret.MarkWritesPerRecord = safeDiv(writes, float64(ret.Retired)), safeDiv(marks, float64(ret.Retired))
	if !first.IsZero() && ret.Retired > atFirst {
		// Records retired after the first poll that saw any, over the time
		// they took: the pace, without the manager's start.
		ret.Time = last.Sub(first)
		ret.Achieved = safeDiv(float64(ret.Retired-atFirst), ret.Time.Seconds())
	}
	if err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FROM toolledger_records WHERE namespace = $1`, ns).Scan(&ret.Archived)
	}); err != nil {
		return err
	}
	if left > 0 {
		b.fail("archive: %d of %d records due still in etcd after the wait", left, ret.Records)
	}
	if ret.Archived < ret.Retired {
		b.fail("archive: %d records left etcd but only %d are in the archive", ret.Retired, ret.Archived)
	}
	return nil
}

// writeArchiveSection renders section 10 alone into dir, for a run of
// -only archive: it goes into docs/benchmarks.md by hand, beside the last
// full run's sections.
func (b *bench) writeArchiveSection(dir string) error {
	var w strings.Builder
	if err := reportPage.ExecuteTemplate(&w, "archive", b.view().Archive); err != nil {
		return fmt.Errorf("cannot render the archive section: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "benchmarks-archive.md")
	if err := os.WriteFile(path, []byte(w.String()), 0o644); err != nil {
		return err
	}
	b.logf("wrote %s", path)
	return b.writeSustainedPlot(dir)
}

// archiveView is section 10's figures: each ratio is the full archive's
// run ÷ the empty archive's, from the same run.
type archiveView struct {
	Result              *archiveResult
	P99Ratio, HeapRatio float64
	// Etcd is this run's latency run with many finished actions stored in
	// etcd (section 7), to set beside the full archive's; nil when it did
	// not run.
	Etcd   *latencyResult
	Retire []retireRow
	// Sustained is the sustained run's figures; nil when it did not run.
	Sustained *sustainedView
	// Marks judge each row against its target; empty in a smoke run,
	// whose counts prove nothing.
	P99Mark, HeapMark, GoalMark, CheckMark string
}

// sustainedView is the sustained run: Level is its level(); Last the
// final counts.
type sustainedView struct {
	Run   *sustainedRun
	Level float64
	Last  storedSample
	// Served is whether the live actions kept up: at most sustainedBacklog
	// of the offered load in flight at the end.
	Served bool
	// Mark judges Growth against its target, sustainedGrowth, and Served.
	Mark string
}

// sustainedBacklog is the most offered load, in seconds of it, that may be
// in flight at the sustained run's end for the live actions to count as
// served.
const sustainedBacklog = 10 * time.Second

// sustainedGrowth is the most etcd may gain over the sustained run's last
// quarter, as a share of the actions offered in it, for its records to
// count as levelled off.
const sustainedGrowth = 0.05

// retireRow is a retirement run: Pace is its rate achieved ÷ the
// configured one, Ceiling the same ÷ the rate actions finish at the
// ceiling.
type retireRow struct {
	Run                  retirement
	Pace, Ceiling        float64
	PaceMark, KeepUpMark string
}

// archiveGoal is the create→Succeeded p99 the product aims for at half load.
const archiveGoal = 250 * time.Millisecond

func archiveFigures(a *archiveResult, t *tombstoneState, smoke bool) *archiveView {
	if a == nil {
		return nil
	}
	v := &archiveView{Result: a,
		P99Ratio:  durRatio(a.Full.P99, a.Empty.P99),
		HeapRatio: safeDiv(a.Full.Plane.HeapInuse, a.Empty.Plane.HeapInuse),
	}
	for _, run := range a.Retire {
		row := retireRow{Run: run, Pace: safeDiv(run.Achieved, run.Rate), Ceiling: safeDiv(run.Achieved, a.Ceiling)}
		if !smoke {
			row.PaceMark, row.KeepUpMark = mark(math.Abs(row.Pace-1) <= 0.2, false), mark(row.Ceiling >= 1, false)
		}
		v.Retire = append(v.Retire, row)
	}
	if t != nil {
		v.Etcd = t.Records
	}
	if run := a.Sustained; run != nil && len(run.Samples) > 0 {
		v.Sustained = &sustainedView{Run: run, Level: run.level(), Last: run.Samples[len(run.Samples)-1]}
		// Records level off trivially when live actions stop finishing:
		// the mark also asks that they kept up with the load.
		v.Sustained.Served = float64(v.Sustained.Last.InFlight) <= run.Rate*sustainedBacklog.Seconds()
		if !smoke {
			v.Sustained.Mark = mark(run.Growth <= sustainedGrowth && v.Sustained.Served, false)
		}
	}
	if smoke {
		return v
	}
	v.P99Mark = mark(v.P99Ratio > 0 && v.P99Ratio <= 1.2, false)
	v.HeapMark = mark(v.HeapRatio > 0 && v.HeapRatio <= 1.2, false)
	v.GoalMark = mark(a.Full.P99 > 0 && a.Full.P99 <= archiveGoal, false)
	v.CheckMark = mark(a.Check.Counted && math.Abs(a.Check.CheckQueries-1) < 0.05 && a.Check.TombstoneRequests == 0, false)
	return v
}
