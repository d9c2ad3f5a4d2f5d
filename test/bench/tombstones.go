package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

// tombstoneResults are what section 7 measured beyond the writes batch's
// tombstone check (writesResult); a part is nil when it did not run.
type tombstoneResults struct {
	Sizes *tombstoneSizes
	Sweep *sweepResult
	State *tombstoneState
}

// etcdStorage reads values straight from the control plane's etcd, through
// the v3 JSON gateway (POST /v3/kv/range) etcd serves on its client URL by
// default, so the harness needs no etcd client library.
type etcdStorage struct{ url string }

func (c *cluster) etcd() (*etcdStorage, error) {
	e := c.suite.Env.ControlPlane.Etcd
	if e == nil || e.URL == nil {
		return nil, errors.New("the control plane does not tell its etcd's URL")
	}
	return &etcdStorage{url: e.URL.String()}, nil
}

// storageKey is where the kube-apiserver keeps an object of toolledger's
// API: its default --etcd-prefix (/registry), then group, resource,
// namespace and name.
func storageKey(resource, namespace, name string) string {
	return "/registry/" + v1alpha1.GroupVersion.Group + "/" + resource + "/" + namespace + "/" + name
}

// call posts a request to one of the gateway's endpoints and decodes its
// answer into out.
func (e *etcdStorage) call(ctx context.Context, endpoint string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach etcd's gateway: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd's gateway answered %s to %s: %.200s", resp.Status, endpoint, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("cannot decode etcd's answer to %s: %w", endpoint, err)
	}
	return nil
}

// get returns the value etcd stores under key.
func (e *etcdStorage) get(ctx context.Context, key string) ([]byte, error) {
	var out struct {
		Kvs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	// The gateway takes and returns bytes as base64.
	if err := e.call(ctx, "/v3/kv/range", map[string][]byte{"key": []byte(key)}, &out); err != nil {
		return nil, err
	}
	if len(out.Kvs) == 0 {
		return nil, fmt.Errorf("etcd holds no key %s", key)
	}
	return out.Kvs[0].Value, nil
}

// compact drops every revision older than the current one and defragments
// the database, as a cluster's periodic compaction (the kube-apiserver's,
// every 5 minutes) and an operator's defragmentation eventually do, and
// returns the database's size before and after.
func (e *etcdStorage) compact(ctx context.Context) (before, after int64, err error) {
	var status struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
		DBSize int64 `json:"dbSize,string"`
	}
	if err := e.call(ctx, "/v3/maintenance/status", struct{}{}, &status); err != nil {
		return 0, 0, err
	}
	before = status.DBSize
	var ignored json.RawMessage
	compaction := map[string]any{"revision": status.Header.Revision, "physical": true}
	if err := e.call(ctx, "/v3/kv/compaction", compaction, &ignored); err != nil {
		return before, 0, err
	}
	if err := e.call(ctx, "/v3/maintenance/defragment", struct{}{}, &ignored); err != nil {
		return before, 0, err
	}
	if err := e.call(ctx, "/v3/maintenance/status", struct{}{}, &status); err != nil {
		return before, 0, err
	}
	return before, status.DBSize, nil
}

// storageEncoding names how the kube-apiserver encoded a stored value.
func storageEncoding(v []byte) string {
	switch {
	case bytes.HasPrefix(v, []byte("k8s\x00")):
		return "protobuf"
	case bytes.HasPrefix(v, []byte{0xd9, 0xd9, 0xf7}):
		return "CBOR"
	case len(v) > 0 && v[0] == '{':
		return "JSON"
	}
	return "unknown"
}

// tombstoneSizes is what a tombstone weighs against the finished record it
// replaced, per object, averaged over a sample.
type tombstoneSizes struct {
	Namespace string
	Sampled   int
	// Written counts the sample's tombstones found; Time runs from the
	// first delete until every record was gone and its tombstone there.
	Written int
	Time    time.Duration
	// Etcd is whether etcd was read; EtcdError says why not. The value
	// and key bytes etcd stores, per object, and the values' encoding.
	Etcd                        bool
	EtcdError                   string
	Encoding                    string
	RecordValue, TombstoneValue float64
	RecordKey, TombstoneKey     float64
	// The object as the API server returns it, in JSON, managedFields
	// included, and its managedFields alone.
	RecordJSON, TombstoneJSON                   float64
	RecordManagedFields, TombstoneManagedFields float64
	// RecordStatus is the record's status alone, in JSON; CeilingStatus
	// the one the ceiling writes as its outcome (succeededStatus).
	RecordStatus, CeilingStatus float64
}

// tombstoneSizes deletes a sample of the writes batch's actions (Succeeded
// through the SDK, dispatched once) with the manager running, as a user or
// a GitOps prune would, and weighs the tombstones the manager leaves
// against the records: read straight from etcd, and as the API server
// returns them.
func (b *bench) tombstoneSizes(ctx context.Context) (*tombstoneSizes, error) {
	if err := b.useManager(ctx, b.baseline().manager()); err != nil {
		return nil, err
	}
	ns := "tl-writes"
	n := min(b.settings.TombstoneSample, b.settings.WritesActions)
	res := &tombstoneSizes{Namespace: ns, Sampled: n, Etcd: true}
	store, err := b.c.etcd()
	if err != nil {
		res.Etcd, res.EtcdError = false, err.Error()
	}
	// weigh adds the value and key bytes of an object to the sums.
	weigh := func(resource, name string, value, key *float64) {
		if !res.Etcd {
			return
		}
		k := storageKey(resource, ns, name)
		v, err := store.get(ctx, k)
		if err != nil {
			res.Etcd, res.EtcdError = false, err.Error()
			return
		}
		if res.Encoding == "" {
			res.Encoding = storageEncoding(v)
		}
		*value += float64(len(v))
		*key += float64(len(k))
	}
	jsonSize := func(obj client.Object, total, managed *float64) {
		all, _ := json.Marshal(obj)
		fields, _ := json.Marshal(obj.GetManagedFields())
		*total += float64(len(all))
		*managed += float64(len(fields))
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("writes-%06d", i)
		var a v1alpha1.ToolAction
		if err := b.c.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: names[i]}, &a); err != nil {
			return nil, fmt.Errorf("tombstone sample: %w", err)
		}
		jsonSize(&a, &res.RecordJSON, &res.RecordManagedFields)
		status, _ := json.Marshal(a.Status)
		res.RecordStatus += float64(len(status))
		weigh("toolactions", names[i], &res.RecordValue, &res.RecordKey)
	}
	began := time.Now()
	if err := parallel(ctx, n, min(16, n), func(ctx context.Context, i int) error {
		return b.c.k8s.Delete(ctx, &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]}})
	}); err != nil {
		return nil, fmt.Errorf("tombstone sample: cannot delete: %w", err)
	}
	pending := map[string]bool{}
	for _, name := range names {
		pending[name] = true
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(pending) > 0 && time.Now().Before(deadline) {
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
		for name := range pending {
			key := client.ObjectKey{Namespace: ns, Name: name}
			if err := b.c.k8s.Get(ctx, key, &v1alpha1.ToolAction{}); !apierrors.IsNotFound(err) {
				continue // still there, or unknown
			}
			var tomb v1alpha1.Tombstone
			if err := b.c.k8s.Get(ctx, key, &tomb); err != nil {
				continue
			}
			delete(pending, name)
			res.Written++
			jsonSize(&tomb, &res.TombstoneJSON, &res.TombstoneManagedFields)
			weigh("tombstones", name, &res.TombstoneValue, &res.TombstoneKey)
		}
	}
	res.Time = time.Since(began)
	if len(pending) > 0 {
		b.fail("tombstone sample: %d of %d deleted actions still there or gone without a tombstone after 2 minutes", len(pending), n)
	}
	if n > 0 {
		f := float64(n)
		res.RecordJSON, res.RecordManagedFields, res.RecordValue, res.RecordKey = res.RecordJSON/f, res.RecordManagedFields/f, res.RecordValue/f, res.RecordKey/f
		res.RecordStatus /= f
	}
	ceiling, _ := json.Marshal(succeededStatus(ns, "writes-000000", 1, time.Now()))
	res.CeilingStatus = float64(len(ceiling))
	if w := float64(res.Written); w > 0 {
		res.TombstoneJSON, res.TombstoneManagedFields, res.TombstoneValue, res.TombstoneKey = res.TombstoneJSON/w, res.TombstoneManagedFields/w, res.TombstoneValue/w, res.TombstoneKey/w
	}
	if res.Etcd {
		b.logf("tombstones: %d deleted with the manager running, %d tombstones in %s; in etcd (%s) a tombstone is %.0f bytes against %.0f for the record (key %.0f and %.0f); JSON with managedFields %.0f against %.0f; the record's status %.0f (the ceiling's %.0f)",
			n, res.Written, dur(res.Time), res.Encoding, res.TombstoneValue, res.RecordValue, res.TombstoneKey, res.RecordKey, res.TombstoneJSON, res.RecordJSON, res.RecordStatus, res.CeilingStatus)
	} else {
		b.logf("tombstones: %d deleted with the manager running, %d tombstones in %s; etcd not read (%s); JSON with managedFields %.0f bytes against %.0f for the record",
			n, res.Written, dur(res.Time), res.EtcdError, res.TombstoneJSON, res.RecordJSON)
	}
	return res, nil
}

// liveRun is one open-loop run of live actions, timed as the latency run
// times them, with the control plane's load around it.
type liveRun struct {
	Namespace                         string
	Offered, Samples, Errors, Dropped int
	Achieved                          float64
	P50, P95, P99                     time.Duration
	FirstError                        string
	Plane                             planeLoad
	// OtherLoad is the share of the machine other processes took meanwhile.
	OtherLoad float64
}

// liveRun offers rate SDK invocations a second in namespace ns for the
// latency run's duration, whichever manager runs, and times each from the
// apply to Succeeded. It is not repeated when other processes were busy:
// what runs beside it (a retention sweep) cannot be replayed.
func (b *bench) liveRun(ctx context.Context, ns string, rate float64) (liveRun, error) {
	run := liveRun{Namespace: ns}
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return run, err
	}
	warmup := min(2*time.Second, b.settings.LatencyDuration/5)
	var r openLoopResult
	var planeErr error
	run.OtherLoad, _ = b.othersShare(func() error {
		run.Plane, planeErr = b.duringRun(ctx, func() {
			r = openLoop(ctx, rate, warmup, b.settings.LatencyDuration, 4096, func(ctx context.Context, _, seq int) error {
				_, err := invokeSucceeded(ctx, b.sdk, request(ns, fmt.Sprintf("live-%06d", seq), seq+1))
				return err
			})
		})
		return nil
	})
	if planeErr != nil {
		return run, planeErr
	}
	run.Offered, run.Samples, run.Achieved, run.Errors, run.Dropped = r.Offered, len(r.Latencies), r.Achieved, r.Errors, r.Dropped
	run.P50, run.P95, run.P99 = percentile(r.Latencies, 50), percentile(r.Latencies, 95), percentile(r.Latencies, 99)
	if r.FirstErr != nil {
		run.FirstError = r.FirstErr.Error()
		b.fail("live run in %s: %d errors, first: %v", ns, r.Errors, r.FirstErr)
	}
	return run, nil
}

// sweepResult is live create→Succeeded latency while the shipped manager's
// retention sweep retires a backlog of finished records, against the same
// run without it.
type sweepResult struct {
	Namespace string
	// Records finished CompletedAgo before the run; their tool's
	// RecordRetention makes every one of them due.
	Records         int
	RecordRetention time.Duration
	CompletedAgo    time.Duration
	CreateTime      time.Duration
	// RetentionRate is the manager's --retention-rate, as shipped. Rate is
	// the live actions offered a second: half of MaxRate, the most this
	// plane completed with the records stored, unless -retention-live-rate
	// gave it (MaxRate 0).
	RetentionRate float64
	Rate, MaxRate float64
	// Lead is how long the sweep runs alone before With, and
	// RequestsPerRetirement the manager's API requests meanwhile ÷ the
	// records it retired.
	Lead                  time.Duration
	RequestsPerRetirement float64
	Without, With         liveRun
	// QueueWaitWithout and QueueWaitWith are the mean wait of an item in
	// the ToolAction controller's work queue during Without and With.
	QueueWaitWithout, QueueWaitWith time.Duration
	// Retired counts the records the sweep replaced during With, and
	// RetiredBefore those between the process start and With.
	RetiredBefore, Retired int
	// Quarter is the live run at a quarter of the maximum (half Rate)
	// right after With, beside the same process, and RetiredQuarter the
	// records the sweep retired meanwhile.
	Quarter        liveRun
	RetiredQuarter int
	// Tombstones is what the namespace held once the process stopped;
	// Exhausted is whether the sweep had retired every record by then.
	Tombstones int
	Exhausted  bool
	// Compared is the same live run beside a sweep at another
	// --retention-rate, on what the first left; nil when not run.
	Compared *sweepCompared
}

// sweepCompared is a live run beside a sweep at CompareRate.
type sweepCompared struct {
	RetentionRate float64
	Run           liveRun
	Retired       int
	Exhausted     bool
}

// onlyRetention is the -only value that runs the retention sweep's step
// alone, its figures logged.
const onlyRetention = "retention"

// retentionNamespace holds the records the retention sweep retires.
const retentionNamespace = "tl-retention"

// retentionSweep creates a backlog of finished records under a Tool without
// recordRetention, times live actions with the manager binary on its
// shipped defaults, then gives the tool a recordRetention the records are
// long past and times the same live run with a new manager process, whose
// retention sweep starts at once. The records the sweep has not reached
// stay, their tool without recordRetention again, and count towards the
// memory steps.
func (b *bench) retentionSweep(ctx context.Context) error {
	s := b.settings
	b.stopManager()
	res := &sweepResult{Namespace: retentionNamespace, Records: s.RetentionRecords, RecordRetention: time.Minute,
		CompletedAgo: 10 * time.Minute, RetentionRate: app.DefaultRetentionRate, Rate: s.RetentionLiveRate, Lead: min(sweepLead, s.LatencyDuration)}
	b.results.Tombstones.Sweep = res
	if err := b.c.namespace(ctx, b.fastTool(retentionNamespace)); err != nil {
		return err
	}
	completed := time.Now().Add(-res.CompletedAgo)
	began := time.Now()
	if err := parallel(ctx, res.Records, s.MemoryCreateConcurrency, func(ctx context.Context, i int) error {
		return createFinished(ctx, b.c.k8s, retentionNamespace, fmt.Sprintf("due-%06d", i), i+1, completed)
	}); err != nil {
		return fmt.Errorf("cannot create the records for the retention sweep: %w", err)
	}
	res.CreateTime = time.Since(began)
	b.logf("retention: created %d finished records in %s, completed %s ago, under a tool without recordRetention", res.Records, dur(res.CreateTime), res.CompletedAgo)

	p, err := b.settledManager(ctx, "bench-retention-without")
	if err != nil {
		return err
	}
	if res.Rate <= 0 {
		if res.MaxRate, err = b.planeMaximum(ctx, "tl-retention-max"); err != nil {
			p.stop()
			return err
		}
		res.Rate = res.MaxRate / 2
		b.logf("retention: the plane completes at most %.1f actions/s with the records stored; the live runs offer half, %.1f/s", res.MaxRate, res.Rate)
	}
	res.Without, res.QueueWaitWithout, err = b.liveRunWaits(ctx, p, "tl-retention-without", res.Rate)
	p.stop()
	if err != nil {
		return err
	}
	b.logf("retention: without a sweep, live p50 %s ms, p95 %s ms, p99 %s ms (%d samples); work-queue wait %s ms",
		ms(res.Without.P50), ms(res.Without.P95), ms(res.Without.P99), res.Without.Samples, ms(res.QueueWaitWithout))

	if err := b.setRecordRetention(ctx, retentionNamespace, &metav1.Duration{Duration: res.RecordRetention}); err != nil {
		return err
	}
	// Not settled: its sweep starts at once and is not quiet until the
	// backlog is gone. It runs alone for the lead, then beside the runs.
	p, err = startManagerProcess(ctx, b.managerBin, b.kubeconfig, filepath.Join(b.tmp, "bench-retention-with-manager.log"), "--executor-id=bench-retention-with")
	if err != nil {
		return err
	}
	defer p.stop()
	if err := p.synced(ctx); err != nil {
		return err
	}
	alone, err := b.sweepAlone(ctx, p, res.Lead)
	if err != nil {
		return err
	}
	res.RetiredBefore, res.RequestsPerRetirement = res.Records-alone.left, safeDiv(alone.requests, float64(alone.retired))
	left := alone.left
	res.With, res.QueueWaitWith, err = b.liveRunWaits(ctx, p, "tl-retention-with", res.Rate)
	if err != nil {
		return err
	}
	after, err := b.recordsLeft(ctx)
	if err != nil {
		return err
	}
	res.Retired, left = left-after, after
	if res.Quarter, err = b.liveRun(ctx, "tl-retention-quarter", res.Rate/2); err != nil {
		return err
	}
	if after, err = b.recordsLeft(ctx); err != nil {
		return err
	}
	res.RetiredQuarter = left - after
	p.stop()
	b.logf("retention: during the sweep, live p50 %s ms, p95 %s ms, p99 %s ms (%d samples); work-queue wait %s ms; the sweep retired %d records in the %s run (%.1f/s at --retention-rate %.0f), %d alone before it, %.2f API requests each",
		ms(res.With.P50), ms(res.With.P95), ms(res.With.P99), res.With.Samples, ms(res.QueueWaitWith), res.Retired, dur(seconds(res.With.Plane.Seconds)),
		safeDiv(float64(res.Retired), res.With.Plane.Seconds), res.RetentionRate, res.RetiredBefore, res.RequestsPerRetirement)
	b.logf("retention: at a quarter of the maximum (%.1f/s), live p99 %s ms; the sweep retired %d records in %s (%.1f/s)",
		res.Rate/2, ms(res.Quarter.P99), res.RetiredQuarter, dur(seconds(res.Quarter.Plane.Seconds)), safeDiv(float64(res.RetiredQuarter), res.Quarter.Plane.Seconds))
	if s.RetentionCompareRate > 0 && after > 0 {
		if res.Compared, err = b.comparedSweep(ctx, s.RetentionCompareRate, res.Rate, res.Lead, after); err != nil {
			return err
		}
	}
	if res.Tombstones, err = countIn(ctx, b.c.k8s, &v1alpha1.TombstoneList{}, retentionNamespace); err != nil {
		return err
	}
	left, err = b.recordsLeft(ctx)
	if err != nil {
		return err
	}
	if res.Exhausted = left == 0; res.Exhausted {
		b.logf("retention: the sweep retired every record before the live runs ended; raise -retention-records to keep it busy throughout")
	}
	// The records left are ordinary finished actions again: no manager
	// after this one retires them.
	return b.setRecordRetention(ctx, retentionNamespace, nil)
}

// planeMaximum is the actions a second the plane completes, create to
// Succeeded, with 32 callers one action after the other in namespace ns,
// beside the manager that runs.
func (b *bench) planeMaximum(ctx context.Context, ns string) (float64, error) {
	r, err := b.closedInvokes(ctx, ns, 32, min(2*time.Second, b.settings.LatencyDuration/5), b.settings.LatencyDuration)
	if err != nil {
		return 0, err
	}
	if r.FirstError != nil {
		return 0, fmt.Errorf("cannot measure the plane's maximum in %s: %d errors, first: %w", ns, r.Errors, r.FirstError)
	}
	return r.Throughput, nil
}

// recordsLeft counts the records the retention sweep has yet to retire.
func (b *bench) recordsLeft(ctx context.Context) (int, error) {
	return countIn(ctx, b.c.k8s, &v1alpha1.ToolActionList{}, retentionNamespace)
}

// liveRunWaits is liveRun beside manager p, with the mean wait of an item
// in its ToolAction work queue meanwhile.
func (b *bench) liveRunWaits(ctx context.Context, p *managerProcess, ns string, rate float64) (liveRun, time.Duration, error) {
	before, err := p.metrics(ctx)
	if err != nil {
		return liveRun{}, 0, err
	}
	run, err := b.liveRun(ctx, ns, rate)
	if err != nil {
		return run, 0, err
	}
	after, err := p.metrics(ctx)
	if err != nil {
		return run, 0, err
	}
	queue := map[string]string{"name": "toolaction"}
	waited := after.since(before, "workqueue_queue_duration_seconds_sum", queue)
	items := after.since(before, "workqueue_queue_duration_seconds_count", queue)
	return run, seconds(safeDiv(waited, items)), nil
}

// sweptAlone is what a sweep did alone: the records it retired, those
// left, and the manager's API requests meanwhile.
type sweptAlone struct {
	retired, left int
	requests      float64
}

// sweepLead is how long, at most the length of a live run, a sweeping
// process runs alone before a live run beside it: the run meets the sweep
// at its pace.
const sweepLead = 20 * time.Second

// sweepAlone lets p's sweep run alone for lead.
func (b *bench) sweepAlone(ctx context.Context, p *managerProcess, lead time.Duration) (sweptAlone, error) {
	var out sweptAlone
	before, err := b.recordsLeft(ctx)
	if err != nil {
		return out, err
	}
	first, err := p.metrics(ctx)
	if err != nil {
		return out, err
	}
	select {
	case <-ctx.Done():
		return out, ctx.Err()
	case <-time.After(lead):
	}
	last, err := p.metrics(ctx)
	if err != nil {
		return out, err
	}
	if out.left, err = b.recordsLeft(ctx); err != nil {
		return out, err
	}
	out.retired, out.requests = before-out.left, last.since(first, "rest_client_requests_total", nil)
	return out, nil
}

// comparedSweep times the live run beside a new process sweeping the
// left records at retentionRate, after it swept alone for lead.
func (b *bench) comparedSweep(ctx context.Context, retentionRate, liveRate float64, lead time.Duration, left int) (*sweepCompared, error) {
	id := fmt.Sprintf("bench-retention-at-%.0f", retentionRate)
	p, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, filepath.Join(b.tmp, id+"-manager.log"),
		"--executor-id="+id, fmt.Sprintf("--retention-rate=%g", retentionRate))
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := p.synced(ctx); err != nil {
		return nil, err
	}
	alone, err := b.sweepAlone(ctx, p, lead)
	if err != nil {
		return nil, err
	}
	c := &sweepCompared{RetentionRate: retentionRate}
	if c.Run, err = b.liveRun(ctx, "tl-retention-compared", liveRate); err != nil {
		return nil, err
	}
	after, err := b.recordsLeft(ctx)
	if err != nil {
		return nil, err
	}
	c.Retired, c.Exhausted = alone.left-after, after == 0
	b.logf("retention: beside a sweep at --retention-rate %g, live p50 %s ms, p95 %s ms, p99 %s ms (%d samples); it retired %d records in %s (%.1f/s) of the %d left",
		retentionRate, ms(c.Run.P50), ms(c.Run.P95), ms(c.Run.P99), c.Run.Samples, c.Retired, dur(seconds(c.Run.Plane.Seconds)),
		safeDiv(float64(c.Retired), c.Run.Plane.Seconds), left)
	return c, nil
}

// settledManager starts the manager binary with its shipped defaults and
// waits until it has settled.
func (b *bench) settledManager(ctx context.Context, id string) (*managerProcess, error) {
	p, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, filepath.Join(b.tmp, id+"-manager.log"), "--executor-id="+id)
	if err != nil {
		return nil, err
	}
	if _, err := p.settle(ctx, 2*time.Second); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// setRecordRetention sets (or, nil, removes) the recordRetention of the
// benchmark Tool in namespace.
func (b *bench) setRecordRetention(ctx context.Context, namespace string, d *metav1.Duration) error {
	var tool v1alpha1.Tool
	if err := b.c.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: toolName}, &tool); err != nil {
		return err
	}
	tool.Spec.RecordRetention = d
	if err := b.c.k8s.Update(ctx, &tool); err != nil {
		return fmt.Errorf("cannot change the recordRetention of tool %s/%s: %w", namespace, toolName, err)
	}
	return nil
}

// tombstoneState is the latency run repeated once every stored ToolAction
// has been deleted with the manager running, leaving its tombstone.
type tombstoneState struct {
	// Records and Tombstones are the runs before and after (both in
	// results.Latency).
	Records, Tombstones *latencyResult
	// Deleted counts the ToolActions deleted; Dispatched those of them
	// that were dispatched, and Expected those among them whose key had no
	// tombstone yet: each must leave one. Written counts the tombstones
	// added, Remaining the ToolActions left when the wait ended.
	Deleted, Dispatched, Expected, Written, Remaining int
	// Concurrency is the harness's parallel deletes, Workers the manager's.
	Concurrency, Workers int
	ConvertTime          time.Duration
	// ConvertCPU is the CPU milliseconds per deleted action of each
	// process during the deletion (the harness's: the deletes and the
	// in-process manager).
	ConvertCPU processCPU
	// SharedCPUs is whether every process had every CPU during the
	// deletion (the layout splits them otherwise).
	SharedCPUs bool
	// Settle is the idle time after each restart, before the run.
	Settle time.Duration
	// AtRest are the control plane's stores and heap, idle, after each
	// restart, before each run.
	AtRestRecords, AtRestTombstones planeLoad
	// Etcd are etcd's database sizes, in bytes, once each state was
	// compacted and defragmented before its restart.
	EtcdRecords, EtcdTombstones float64
}

// tombstoneState compares the latency run with every finished action
// stored (named recordsState) against the same run once each of them is a
// tombstone. It deletes every ToolAction stored, with the in-process
// manager (as shipped) running: its deletion watches report each, and it
// writes the tombstone and releases the finalizer, the path of kubectl
// delete or a GitOps prune. Each state is measured at rest (steady).
func (b *bench) tombstoneState(ctx context.Context, recordsState string) error {
	s, base := b.settings, b.baseline()
	res := &tombstoneState{Concurrency: s.MemoryCreateConcurrency, Workers: base.Workers, Settle: s.TombstoneSettle}
	var err error
	if res.AtRestRecords, res.EtcdRecords, err = b.steady(ctx); err != nil {
		return err
	}
	if err := b.latency(ctx, recordsState); err != nil {
		return err
	}
	res.Records = b.results.Latency[len(b.results.Latency)-1]
	if err := b.useManager(ctx, base.manager()); err != nil {
		return err
	}
	buried := map[types.NamespacedName]bool{}
	if err := eachPage(ctx, b.c.k8s, &v1alpha1.TombstoneList{}, func(l client.ObjectList) {
		for _, t := range l.(*v1alpha1.TombstoneList).Items {
			buried[types.NamespacedName{Namespace: t.Namespace, Name: t.Name}] = true
		}
	}); err != nil {
		return err
	}
	var keys []types.NamespacedName
	if err := eachPage(ctx, b.c.k8s, &v1alpha1.ToolActionList{}, func(l client.ObjectList) {
		for _, a := range l.(*v1alpha1.ToolActionList).Items {
			key := types.NamespacedName{Namespace: a.Namespace, Name: a.Name}
			keys = append(keys, key)
			if a.Status.Phase.IsTerminal() && a.Status.Attempts > 0 {
				res.Dispatched++
				if !buried[key] {
					res.Expected++
				}
			}
		}
	}); err != nil {
		return err
	}
	res.Deleted = len(keys)
	b.logf("tombstones: deleting the %d ToolActions stored (%d dispatched) with the manager running, %d at a time", res.Deleted, res.Dispatched, res.Concurrency)
	// Preparation, not a measurement: every process may use every CPU.
	if err := b.layout.share(true); err != nil {
		return err
	}
	res.SharedCPUs = b.layout.split
	cpuBefore := readProcessCPU()
	began := time.Now()
	err = parallel(ctx, len(keys), res.Concurrency, func(ctx context.Context, i int) error {
		a := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: keys[i].Namespace, Name: keys[i].Name}}
		return client.IgnoreNotFound(b.c.k8s.Delete(ctx, a))
	})
	if err == nil {
		res.Remaining, err = b.waitGone(ctx, began, len(keys))
	}
	res.ConvertTime = time.Since(began)
	res.ConvertCPU = readProcessCPU().perOp(cpuBefore, len(keys))
	if err := errors.Join(err, b.layout.share(false)); err != nil {
		return err
	}
	tombstones, err := countObjects(ctx, b.c.k8s, &v1alpha1.TombstoneList{})
	if err != nil {
		return err
	}
	res.Written = tombstones - len(buried)
	b.logf("tombstones: %d ToolActions left, %d tombstones written (%d expected) in %s (%.0f/s); CPU ms per action: kube-apiserver %.1f, etcd %.1f, harness and manager %.1f",
		res.Remaining, res.Written, res.Expected, dur(res.ConvertTime), safeDiv(float64(res.Deleted), res.ConvertTime.Seconds()),
		res.ConvertCPU.APIServer, res.ConvertCPU.Etcd, res.ConvertCPU.Harness)
	if res.Remaining > 0 || res.Written < res.Expected {
		b.fail("tombstones: after deleting %d ToolActions, %d are left and %d of %d tombstones were written", res.Deleted, res.Remaining, res.Written, res.Expected)
	}
	if err := b.waitQuiet(ctx); err != nil {
		return err
	}
	if res.AtRestTombstones, res.EtcdTombstones, err = b.steady(ctx); err != nil {
		return err
	}
	if err := b.latency(ctx, fmt.Sprintf("%s finished actions turned into tombstones", count(res.Deleted))); err != nil {
		return err
	}
	res.Tombstones = b.results.Latency[len(b.results.Latency)-1]
	b.results.Tombstones.State = res
	return nil
}

// steady brings the control plane to the steady state of what it stores,
// as a long-running cluster reaches it: etcd's history is compacted and
// defragmented, then kube-apiserver and etcd restart on the same data, so
// that no watch cache or heap still holds the events of a mass deletion
// or a bulk load. After Settle idle it returns what the plane holds at
// rest and etcd's database size.
func (b *bench) steady(ctx context.Context) (planeLoad, float64, error) {
	e, err := b.c.etcd()
	if err != nil {
		return planeLoad{}, 0, err
	}
	before, after, err := e.compact(ctx)
	if err != nil {
		return planeLoad{}, 0, err
	}
	size := float64(after)
	b.logf("etcd compacted and defragmented: %s → %s", mib(float64(before)), mib(size))
	if err := b.reopenPlane(ctx); err != nil {
		return planeLoad{}, size, err
	}
	if err := b.warmCaches(ctx); err != nil {
		return planeLoad{}, size, err
	}
	if err := testenv.Sleep(ctx, b.settings.TombstoneSettle); err != nil {
		return planeLoad{}, size, err
	}
	load, err := b.planeLoad(ctx)
	return load, size, err
}

// warmCaches waits until the kube-apiserver serves ToolActions and
// Tombstones from its watch caches. After a start it builds a custom
// resource's storage, and fills its watch cache from etcd, on the first
// request for the resource: the manager lists ToolActions at once, but
// reads tombstones one key at a time, so without this the first run after
// the restart would measure the filling of the tombstones' cache. A list at
// resourceVersion 0 is answered from the cache, once it is full.
func (b *bench) warmCaches(ctx context.Context) error {
	began := time.Now()
	for _, kind := range []string{"ToolActionList", "TombstoneList"} {
		for {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
			err := b.c.k8s.List(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
			if err == nil {
				break
			}
			if time.Since(began) > 5*time.Minute {
				return fmt.Errorf("the kube-apiserver served no %s from its watch cache within 5 minutes: %w", kind, err)
			}
			if err := testenv.Sleep(ctx, time.Second); err != nil {
				return err
			}
		}
	}
	b.logf("the kube-apiserver's watch caches of ToolActions and Tombstones were full %s after its start", dur(time.Since(began)))
	return nil
}

// waitGone waits until no ToolAction is left, at most 30 ms per deleted
// action (2 minutes at least) from began, and returns how many are left.
func (b *bench) waitGone(ctx context.Context, began time.Time, deleted int) (int, error) {
	deadline := began.Add(max(2*time.Minute, time.Duration(deleted)*30*time.Millisecond))
	lastLog := time.Now()
	for {
		left, err := countToolActions(ctx, b.c.k8s)
		if err != nil || left == 0 || time.Now().After(deadline) {
			return left, err
		}
		if time.Since(lastLog) >= 30*time.Second {
			b.logf("tombstones: %d of %d ToolActions left after %s", left, deleted, dur(time.Since(began)))
			lastLog = time.Now()
		}
		if err := testenv.Sleep(ctx, 2*time.Second); err != nil {
			return left, err
		}
	}
}

// countIn counts the objects of list's kind in namespace.
func countIn(ctx context.Context, k8s client.Client, list client.ObjectList, namespace string) (int, error) {
	if err := k8s.List(ctx, list, client.InNamespace(namespace), client.Limit(1)); err != nil {
		return 0, err
	}
	return listCount(list), nil
}

// eachPage lists every object of list's kind, a page at a time, and hands
// each page to fn.
func eachPage(ctx context.Context, k8s client.Client, list client.ObjectList, fn func(client.ObjectList)) error {
	opts := []client.ListOption{client.Limit(500)}
	for {
		if err := k8s.List(ctx, list, opts...); err != nil {
			return err
		}
		fn(list)
		next := list.GetContinue()
		if next == "" {
			return nil
		}
		opts = []client.ListOption{client.Limit(500), client.Continue(next)}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
