// Command bench measures toolledger on one machine against one control plane
// in one run, and writes docs/benchmarks.md and docs/benchmarks.png:
//
//   - the ceiling: a bare client doing create + two status writes per object
//     on a plain CRD with the ToolAction schema (and, labelled apart, with a
//     finalizer update as a fourth write), at each concurrency level;
//   - a controller's floor: the same bare client while the API server also
//     serves a controller's watch of the resource and its callers' watch of
//     the namespace, what any controller with waiting callers pays;
//   - toolledger: actions invoked through the SDK and driven to Succeeded by
//     the operator (an in-process manager) against a fast local downstream,
//     at the same levels, with the ratios to the floor and the ceiling, and the same for
//     alternative configurations that need no operator change;
//   - create→Succeeded latency at a fixed share of the maximum throughput;
//   - the duplicate path: an SDK Invoke of a Succeeded key, its requests and
//     whether anything was written;
//   - writes per action, from the kube-apiserver's own metrics;
//   - recovery: actions in flight against a slow downstream that does not
//     deduplicate, the manager process SIGKILLed and restarted;
//   - dispatch: throughput with a slow downstream against the ceiling, a
//     fast tool's latency beside a hung tool's backlog, and 1, 2 and 3
//     manager processes sharing the actions;
//   - a costly schema: a healthy tenant's create→Succeeded alone and while
//     another tenant's actions carry a worst-case uniqueItems payload,
//     refused at admission, then stored;
//   - the manager process's memory with few and many finished actions;
//   - tombstones: the check each new action makes, the bytes a tombstone
//     takes in etcd against a finished record, live latency while the
//     shipped manager's retention sweep retires a backlog, and the latency
//     run again once the many finished actions are tombstones instead;
//   - the archive: the manager with a PostgreSQL archive, its own ceiling and
//     half-load latency with an empty archive and with many records loaded
//     with COPY, what the key check adds to a new action, retirement into the
//     archive against its configured pace, and what a record takes there.
//
// Run it with `make bench`, or `make bench-smoke` for a small run that only
// proves it works; -only runs one step alone. Every knob is a flag and an environment variable; see
// `go run ./test/bench -h`.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// knob is a setting with a flag, an environment variable and a default for
// the full run and for the smoke run.
type knob struct {
	flag, env, full, smoke, help string
	value                        *string
}

var knobs = []*knob{
	{flag: "out", env: "BENCH_OUT", full: "docs", smoke: "bin/bench-smoke", help: "directory for benchmarks.md and benchmarks.png"},
	{flag: "concurrency", env: "BENCH_CONCURRENCY", full: "1,8,32,128", smoke: "4", help: "concurrency levels: callers each keeping one object or action in flight"},
	{flag: "warmup", env: "BENCH_WARMUP", full: "2s", smoke: "1s", help: "time at each level before measuring"},
	{flag: "measure", env: "BENCH_MEASURE", full: "6s", smoke: "3s", help: "measured time at each level"},
	{flag: "rounds", env: "BENCH_ROUNDS", full: "3", smoke: "1", help: "sweeps over all levels and configurations, pooled (every other one in reverse order within a level)"},
	{flag: "max-other-load", env: "BENCH_MAX_OTHER_LOAD", full: "0.2", smoke: "1", help: "repeat a timed run (up to 3 times) when processes outside this run took more than this share of the machine during it"},
	{flag: "cpu-layout", env: "BENCH_CPU_LAYOUT", full: "split", smoke: "split", help: "split: the control plane (kube-apiserver, etcd) on the first half of the CPUs and every other process of the run on the rest, as in a cluster; shared: every process on every CPU"},
	{flag: "compare-shared-cores", env: "BENCH_COMPARE_SHARED_CORES", full: "8,32", smoke: "4", help: "concurrency levels at which the split sweep also measures the 3-write ceiling and toolledger as shipped with every process on every CPU (\"\" for none)"},
	{flag: "workers", env: "BENCH_WORKERS", full: "8", smoke: "8", help: "the manager's MaxConcurrentReconciles as shipped (cmd/manager's default)"},
	{flag: "tune-workers", env: "BENCH_TUNE_WORKERS", full: "32", smoke: "16", help: "other MaxConcurrentReconciles to measure (comma-separated; \"\" for none)"},
	{flag: "compare-manifest", env: "BENCH_COMPARE_MANIFEST", full: "true", smoke: "true", help: "also measure actions applied as a plain manifest (without the finalizer the SDK sets), with the admission policy that adds it and without (4 writes instead of 3)"},
	{flag: "compare-watch-per-invoke", env: "BENCH_COMPARE_WATCH_PER_INVOKE", full: "true", smoke: "true", help: "also measure the SDK's apply with a watch per invocation, as the SDK did before its invocations shared one watch per namespace"},
	{flag: "compare-create", env: "BENCH_COMPARE_CREATE", full: "true", smoke: "true", help: "also measure the SDK's body created (POST) instead of applied, each with a watch per invocation: server-side apply's first write against a plain create"},
	{flag: "compare-events", env: "BENCH_COMPARE_EVENTS", full: "true", smoke: "true", help: "also measure the manager with an event for every change of phase (--routine-event-rate=inf) and with warnings only (--routine-events=false)"},
	{flag: "tune-min-concurrency", env: "BENCH_TUNE_MIN_CONCURRENCY", full: "8", smoke: "1", help: "run the alternative configurations only at levels from this one up"},
	{flag: "compare-sdk-qps", env: "BENCH_COMPARE_SDK_QPS", full: "true", smoke: "true", help: "also measure the SDK on client-go's default rate limit (5 requests/s, burst 10)"},
	{flag: "latency-load", env: "BENCH_LATENCY_LOAD", full: "0.5", smoke: "0.5", help: "share of the maximum measured throughput offered in the latency run"},
	{flag: "latency-duration", env: "BENCH_LATENCY_DURATION", full: "30s", smoke: "3s", help: "length of the latency run (and of the ceiling's run at the same rate)"},
	{flag: "writes-actions", env: "BENCH_WRITES_ACTIONS", full: "300", smoke: "30", help: "actions in the writes-per-action batch"},
	{flag: "duplicates", env: "BENCH_DUPLICATES", full: "200", smoke: "20", help: "duplicate invokes (of keys from the writes batch)"},
	{flag: "recovery-actions", env: "BENCH_RECOVERY_ACTIONS", full: "1000", smoke: "40", help: "actions in flight in the recovery run"},
	{flag: "recovery-workers", env: "BENCH_RECOVERY_WORKERS", full: "64", smoke: "8", help: "--max-concurrent-reconciles of the recovery manager process"},
	{flag: "recovery-delay", env: "BENCH_RECOVERY_DELAY", full: "2s", smoke: "500ms", help: "how long the recovery downstream holds each request"},
	{flag: "recovery-lease-grace", env: "BENCH_RECOVERY_LEASE_GRACE", full: "30s", smoke: "2s", help: "--lease-grace of the recovery manager process (30s is the default)"},
	{flag: "recovery-kill-at", env: "BENCH_RECOVERY_KILL_AT", full: "0.3", smoke: "0.3", help: "share of the recovery actions terminal when the manager is killed"},
	{flag: "recovery-timeout", env: "BENCH_RECOVERY_TIMEOUT", full: "10m", smoke: "2m", help: "longest wait for every recovery action to be terminal after the restart"},
	{flag: "dispatch-concurrency", env: "BENCH_DISPATCH_CONCURRENCY", full: "128", smoke: "8", help: "callers in the dispatch step's closed loops (the slow downstream against the ceiling, and the replica runs)"},
	{flag: "dispatch-delay", env: "BENCH_DISPATCH_DELAY", full: "300ms", smoke: "300ms", help: "the slow downstream's mean latency in the dispatch step"},
	{flag: "dispatch-jitter", env: "BENCH_DISPATCH_JITTER", full: "100ms", smoke: "100ms", help: "the slow downstream's latency spread (uniform, ± this)"},
	{flag: "dispatch-hung", env: "BENCH_DISPATCH_HUNG", full: "200", smoke: "20", help: "actions queued on a tool whose downstream answers nothing while a fast tool is timed (0 for none)"},
	{flag: "dispatch-rate", env: "BENCH_DISPATCH_RATE", full: "20", smoke: "5", help: "fast tool actions per second offered alone and beside the hung backlog"},
	{flag: "dispatch-duration", env: "BENCH_DISPATCH_DURATION", full: "20s", smoke: "3s", help: "length of each of those two runs"},
	{flag: "dispatch-replicas", env: "BENCH_DISPATCH_REPLICAS", full: "1,2,3", smoke: "1,2", help: "manager processes in each replica run (\"\" for none)"},
	{flag: "dispatch-bounded", env: "BENCH_DISPATCH_BOUNDED", full: "8", smoke: "8", help: "--max-concurrent-dispatches of the replica runs where each replica, not the API server, bounds the throughput"},
	{flag: "dispatch-bounded-delay", env: "BENCH_DISPATCH_BOUNDED_DELAY", full: "2s", smoke: "1s", help: "the downstream's mean latency in those runs: slow enough that replicas × dispatches ÷ it stays well below what the API server writes"},
	{flag: "dispatch-bounded-jitter", env: "BENCH_DISPATCH_BOUNDED_JITTER", full: "500ms", smoke: "250ms", help: "its latency spread (uniform, ± this)"},
	{flag: "dispatch-bounded-warmup", env: "BENCH_DISPATCH_BOUNDED_WARMUP", full: "10s", smoke: "3s", help: "time before measuring in those runs, whose callers (2 × replicas × dispatches) each take about 2 × the latency an action"},
	{flag: "dispatch-bounded-measure", env: "BENCH_DISPATCH_BOUNDED_MEASURE", full: "30s", smoke: "8s", help: "measured time in those runs"},
	{flag: "memory-steps", env: "BENCH_MEMORY_STEPS", full: "1000,50000", smoke: "100,300", help: "finished actions in the cluster at each memory reading (\"\" for none); the first is taken before anything else runs, the others at the end"},
	{flag: "memory-create-concurrency", env: "BENCH_MEMORY_CREATE_CONCURRENCY", full: "32", smoke: "16", help: "parallel creates of finished actions (and parallel deletes when they become tombstones)"},
	{flag: "large-param-actions", env: "BENCH_LARGE_PARAM_ACTIONS", full: "500", smoke: "20", help: "active actions (held for an approval) carrying large parameters, whose manager's memory is read at the end of the run (0 for none)"},
	{flag: "large-param-bytes", env: "BENCH_LARGE_PARAM_BYTES", full: "524288", smoke: "524288", help: "the encoded size of each of those actions' parameters"},
	{flag: "memory-gc-wait", env: "BENCH_MEMORY_GC_WAIT", full: "130s", smoke: "0s", help: "how long to wait, after the manager settled, for its next GC (the runtime forces one every 2 minutes); 0 reads the last GC's figures"},
	{flag: "tombstone-sample", env: "BENCH_TOMBSTONE_SAMPLE", full: "50", smoke: "10", help: "actions of the writes batch deleted with the manager running, whose tombstones are weighed in etcd (0 for none)"},
	{flag: "retention-records", env: "BENCH_RETENTION_RECORDS", full: "10000", smoke: "400", help: "finished records past their tool's recordRetention that the shipped manager's retention sweep retires while live actions are timed (0 for none); those it has not reached by the end count towards the memory steps"},
	{flag: "retention-live-rate", env: "BENCH_RETENTION_LIVE_RATE", full: "0", smoke: "0", help: "live actions a second offered beside the retention sweep; 0 offers half the most the plane completes with the sweep's records stored, measured first"},
	{flag: "retention-compare-rate", env: "BENCH_RETENTION_COMPARE_RATE", full: "10", smoke: "10", help: "another --retention-rate whose sweep is timed beside the same live run, on what the shipped one left (0 for none)"},
	{flag: "tombstone-state", env: "BENCH_TOMBSTONE_STATE", full: "true", smoke: "true", help: "run the last latency run at rest after a restart on the same etcd data, then delete every stored action with the manager running, so that tombstones replace them, restart again and run it again"},
	{flag: "tombstone-settle", env: "BENCH_TOMBSTONE_SETTLE", full: "30s", smoke: "0s", help: "idle time after each restart of the control plane on its etcd data, before the runs with the records and with the tombstones"},
	{flag: "costly-healthy", env: "BENCH_COSTLY_HEALTHY", full: "40", smoke: "4", help: "a healthy tenant's actions timed one after another, alone and then beside a tenant whose actions carry a costly uniqueItems payload, refused at admission and then stored (0 for none)"},
	{flag: "costly-hostile", env: "BENCH_COSTLY_HOSTILE", full: "8", smoke: "2", help: "the hostile tenant's actions, created at once before each run beside them, which starts once the API server has answered them all; those stored are kept until it ends"},
	{flag: "costly-items", env: "BENCH_COSTLY_ITEMS", full: "150000", smoke: "20000", help: "distinct numbers in each hostile action's uniqueItems array (150,000 encode under 1 MiB; more than the parameters policy's 10,000 values, so that it refuses them)"},
	{flag: "archive-records", env: "BENCH_ARCHIVE_RECORDS", full: "1000000", smoke: "2000", help: "archived records loaded with COPY into PostgreSQL for the archive's half-load run beside an empty archive"},
	{flag: "archive-check-samples", env: "BENCH_ARCHIVE_CHECK_SAMPLES", full: "2000", smoke: "100", help: "key checks of absent keys timed one after another against the full archive"},
	{flag: "archive-retire", env: "BENCH_ARCHIVE_RETIRE", full: "3000", smoke: "150", help: "finished records past their recordRetention that the manager with the archive retires into it"},
	{flag: "archive-retention-rate", env: "BENCH_ARCHIVE_RETENTION_RATE", full: "0", smoke: "0", help: "--retention-rate of the archive's retirement run (0: the shipped default)"},
	{flag: "archive-sustained", env: "BENCH_ARCHIVE_SUSTAINED", full: "10m", smoke: "40s", help: "length of the sustained run: live actions at half the archive's ceiling while the records stored in etcd are counted, to see retirement keep up (0 for none)"},
	{flag: "archive-sustained-record-retention", env: "BENCH_ARCHIVE_SUSTAINED_RECORD_RETENTION", full: "0s", smoke: "10s", help: "--archive-record-retention of the sustained run (0: the shipped default, five minutes)"},
	{flag: "only", env: "BENCH_ONLY", full: "", smoke: "", help: "run only this step on a control plane of its own: throughput, costly-schema or retention (their figures logged), or archive (section 10 written to benchmarks-archive.md in -out)"},
	{flag: "apiserver-profiles", env: "BENCH_APISERVER_PROFILES", full: "", smoke: "", help: "a directory for the kube-apiserver's CPU profile (pprof) of each measured throughput run, warm-up excluded (\"\" for none); profiling takes some of the API server's CPU, so use it with -only throughput, not for the page's figures"},
	{flag: "etcd-dir", env: "BENCH_ETCD_DIR", full: "", smoke: "", help: "where etcd's data directories go (one per control plane: the sweep's, then the other steps'); empty uses a temporary directory under $TMPDIR"},
	{flag: "manager-bin", env: "BENCH_MANAGER_BIN", full: "", smoke: "", help: "a built ./cmd/manager; empty builds one into a temporary directory"},
	{flag: "timeout", env: "BENCH_TIMEOUT", full: "150m", smoke: "12m", help: "bound on the whole run"},
}

// settings are the parsed knobs.
type settings struct {
	Smoke                   bool
	Out                     string
	Concurrency             []int
	Warmup, Measure         time.Duration
	Rounds                  int
	MaxOtherLoad            float64
	SplitCPUs               bool
	CompareSharedCores      []int
	Workers                 int
	TuneWorkers             []int
	CompareManifest         bool
	CompareWatchPerInvoke   bool
	CompareCreate           bool
	CompareEvents           bool
	CompareSDKQPS           bool
	TuneMinConcurrency      int
	LatencyLoad             float64
	LatencyDuration         time.Duration
	WritesActions           int
	Duplicates              int
	RecoveryActions         int
	RecoveryWorkers         int
	RecoveryDelay           time.Duration
	RecoveryLeaseGrace      time.Duration
	RecoveryKillAt          float64
	RecoveryTimeout         time.Duration
	DispatchConcurrency     int
	DispatchDelay           time.Duration
	DispatchJitter          time.Duration
	DispatchHung            int
	DispatchRate            float64
	DispatchDuration        time.Duration
	DispatchReplicas        []int
	DispatchBounded         int
	DispatchBoundedDelay    time.Duration
	DispatchBoundedJitter   time.Duration
	DispatchBoundedWarmup   time.Duration
	DispatchBoundedMeasure  time.Duration
	MemorySteps             []int
	MemoryCreateConcurrency int
	MemoryGCWait            time.Duration
	LargeParamActions       int
	LargeParamBytes         int
	TombstoneSample         int
	RetentionRecords        int
	TombstoneState          bool
	TombstoneSettle         time.Duration
	CostlyHealthy           int
	CostlyHostile           int
	CostlyItems             int
	ArchiveRecords          int
	ArchiveCheckSamples     int
	ArchiveRetire           int
	ArchiveRetentionRate    float64
	// ArchiveSustained is the sustained run's length, in which the
	// manager's --archive-record-retention is ArchiveSustainedRetention
	// (the shipped default when zero).
	ArchiveSustained, ArchiveSustainedRetention time.Duration
	Only                                        string
	RetentionLiveRate                           float64
	APIServerProfiles                           string
	RetentionCompareRate                        float64
	EtcdDir                                     string
	ManagerBin                                  string
	Timeout                                     time.Duration
}

func parseSettings(args []string) (settings, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	smoke := fs.Bool("smoke", os.Getenv("BENCH_SMOKE") == "true", "tiny run that proves the harness works (BENCH_SMOKE=true); writes to bin/bench-smoke")
	for _, k := range knobs {
		k.value = fs.String(k.flag, "", fmt.Sprintf("%s (env %s; default %q, smoke %q)", k.help, k.env, k.full, k.smoke))
	}
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	get := func(name string) string {
		for _, k := range knobs {
			if k.flag != name {
				continue
			}
			env, inEnv := os.LookupEnv(k.env)
			switch {
			case set[k.flag]:
				return *k.value
			case inEnv:
				return env
			case *smoke:
				return k.smoke
			default:
				return k.full
			}
		}
		panic("unknown knob " + name)
	}
	var errs []error
	dur := func(name string) time.Duration {
		d, err := time.ParseDuration(get(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", name, err))
		}
		return d
	}
	num := func(name string) int {
		n, err := strconv.Atoi(get(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", name, err))
		}
		return n
	}
	float := func(name string) float64 {
		f, err := strconv.ParseFloat(get(name), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", name, err))
		}
		return f
	}
	list := func(name string) []int {
		var out []int
		for part := range strings.SplitSeq(get(name), ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			n, err := strconv.Atoi(part)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("-%s: %q is not a positive integer", name, part))
				continue
			}
			out = append(out, n)
		}
		return out
	}
	s := settings{
		Smoke:                     *smoke,
		Out:                       get("out"),
		Concurrency:               list("concurrency"),
		Warmup:                    dur("warmup"),
		Measure:                   dur("measure"),
		Rounds:                    num("rounds"),
		MaxOtherLoad:              float("max-other-load"),
		SplitCPUs:                 get("cpu-layout") == "split",
		CompareSharedCores:        list("compare-shared-cores"),
		Workers:                   num("workers"),
		TuneWorkers:               list("tune-workers"),
		CompareManifest:           get("compare-manifest") == "true",
		CompareWatchPerInvoke:     get("compare-watch-per-invoke") == "true",
		CompareCreate:             get("compare-create") == "true",
		CompareEvents:             get("compare-events") == "true",
		CompareSDKQPS:             get("compare-sdk-qps") == "true",
		TuneMinConcurrency:        num("tune-min-concurrency"),
		LatencyLoad:               float("latency-load"),
		LatencyDuration:           dur("latency-duration"),
		WritesActions:             num("writes-actions"),
		Duplicates:                num("duplicates"),
		RecoveryActions:           num("recovery-actions"),
		RecoveryWorkers:           num("recovery-workers"),
		RecoveryDelay:             dur("recovery-delay"),
		RecoveryLeaseGrace:        dur("recovery-lease-grace"),
		RecoveryKillAt:            float("recovery-kill-at"),
		RecoveryTimeout:           dur("recovery-timeout"),
		DispatchConcurrency:       num("dispatch-concurrency"),
		DispatchDelay:             dur("dispatch-delay"),
		DispatchJitter:            dur("dispatch-jitter"),
		DispatchHung:              num("dispatch-hung"),
		DispatchRate:              float("dispatch-rate"),
		DispatchDuration:          dur("dispatch-duration"),
		DispatchReplicas:          list("dispatch-replicas"),
		DispatchBounded:           num("dispatch-bounded"),
		DispatchBoundedDelay:      dur("dispatch-bounded-delay"),
		DispatchBoundedJitter:     dur("dispatch-bounded-jitter"),
		DispatchBoundedWarmup:     dur("dispatch-bounded-warmup"),
		DispatchBoundedMeasure:    dur("dispatch-bounded-measure"),
		MemorySteps:               list("memory-steps"),
		MemoryCreateConcurrency:   num("memory-create-concurrency"),
		MemoryGCWait:              dur("memory-gc-wait"),
		LargeParamActions:         num("large-param-actions"),
		LargeParamBytes:           num("large-param-bytes"),
		TombstoneSample:           num("tombstone-sample"),
		RetentionRecords:          num("retention-records"),
		TombstoneState:            get("tombstone-state") == "true",
		TombstoneSettle:           dur("tombstone-settle"),
		CostlyHealthy:             num("costly-healthy"),
		CostlyHostile:             num("costly-hostile"),
		CostlyItems:               num("costly-items"),
		ArchiveRecords:            num("archive-records"),
		ArchiveCheckSamples:       num("archive-check-samples"),
		ArchiveRetire:             num("archive-retire"),
		ArchiveRetentionRate:      float("archive-retention-rate"),
		ArchiveSustained:          dur("archive-sustained"),
		ArchiveSustainedRetention: dur("archive-sustained-record-retention"),
		Only:                      get("only"),
		RetentionLiveRate:         float("retention-live-rate"),
		APIServerProfiles:         get("apiserver-profiles"),
		RetentionCompareRate:      float("retention-compare-rate"),
		EtcdDir:                   get("etcd-dir"),
		ManagerBin:                get("manager-bin"),
		Timeout:                   dur("timeout"),
	}
	if len(s.Concurrency) == 0 {
		errs = append(errs, errors.New("-concurrency: no level"))
	}
	if layout := get("cpu-layout"); layout != "split" && layout != "shared" {
		errs = append(errs, fmt.Errorf("-cpu-layout: %q is neither split nor shared", layout))
	}
	if s.Measure <= 0 || s.Rounds <= 0 || s.Workers <= 0 || s.WritesActions <= 0 || s.RecoveryActions <= 0 {
		errs = append(errs, errors.New("-measure, -rounds, -workers, -writes-actions and -recovery-actions must be positive"))
	}
	if s.DispatchConcurrency <= 0 || s.DispatchBounded <= 0 || s.DispatchRate <= 0 || s.DispatchDuration <= 0 || s.DispatchHung < 0 || s.DispatchJitter > s.DispatchDelay {
		errs = append(errs, errors.New("-dispatch-concurrency, -dispatch-bounded, -dispatch-rate and -dispatch-duration must be positive, -dispatch-hung not negative, and -dispatch-jitter at most -dispatch-delay"))
	}
	if s.DispatchBoundedDelay <= 0 || s.DispatchBoundedMeasure <= 0 || s.DispatchBoundedWarmup < 0 || s.DispatchBoundedJitter > s.DispatchBoundedDelay {
		errs = append(errs, errors.New("-dispatch-bounded-delay and -dispatch-bounded-measure must be positive, -dispatch-bounded-warmup not negative, and -dispatch-bounded-jitter at most -dispatch-bounded-delay"))
	}
	if s.TombstoneSample < 0 || s.RetentionRecords < 0 || s.TombstoneSettle < 0 {
		errs = append(errs, errors.New("-tombstone-sample, -retention-records and -tombstone-settle must not be negative"))
	}
	if s.CostlyHealthy < 0 || s.CostlyHostile <= 0 || s.CostlyItems <= 0 {
		errs = append(errs, errors.New("-costly-healthy must not be negative, -costly-hostile and -costly-items must be positive"))
	}
	if s.ArchiveRecords < 0 || s.ArchiveCheckSamples <= 0 || s.ArchiveRetire <= 0 || s.ArchiveRetentionRate < 0 ||
		s.ArchiveSustained < 0 || s.ArchiveSustainedRetention < 0 {
		errs = append(errs, errors.New("-archive-records, -archive-retention-rate, -archive-sustained and -archive-sustained-record-retention must not be negative, -archive-check-samples and -archive-retire must be positive"))
	}
	if s.Only != "" && s.Only != onlyThroughput && s.Only != onlyCostlySchema && s.Only != onlyArchive && s.Only != onlyRetention {
		errs = append(errs, fmt.Errorf("-only: %q is not a step that runs alone (%s, %s, %s, %s)", s.Only, onlyThroughput, onlyCostlySchema, onlyArchive, onlyRetention))
	}
	if s.RecoveryKillAt <= 0 || s.RecoveryKillAt >= 1 || s.LatencyLoad <= 0 || s.LatencyLoad > 1 {
		errs = append(errs, errors.New("-recovery-kill-at must be in (0, 1) and -latency-load in (0, 1]"))
	}
	return s, errors.Join(errs...)
}

// bench is one run: its settings, shared clients and what it measured.
type bench struct {
	settings  settings
	root, tmp string
	c         *cluster
	ceiling   *ceilingClient
	sdk       *sdk.Client
	manifest  *manifestInvoker
	// watchPerInvoke is the SDK as it was before its invocations shared a
	// watch.
	watchPerInvoke *manifestInvoker
	// createPerInvoke creates what watchPerInvoke applies.
	createPerInvoke *manifestInvoker
	cpu             *cpuWatcher
	layout          *cpuLayout
	mgr             *inProcess
	// policyOn is whether the outcome finalizer admission policy is
	// installed; nil before the first usePolicy.
	policyOn   *bool
	plane      string // the running control plane's name
	managerBin string
	kubeconfig string
	variants   []variant

	memoryCreated int
	started       time.Time
	results       results
}

// results is everything the report shows.
type results struct {
	Machine machine
	// SplitCPUs is whether the control plane had CPUs of its own (cpuLayout).
	SplitCPUs bool
	Levels    []levelResult
	Latency   []*latencyResult
	// SweepPlanes is what each level of each round of the sweep left on
	// its control plane.
	SweepPlanes []planeLoad
	Writes      *writesResult
	Duplicate   *duplicateResult
	Limiter     *limiterResult
	Recovery    *recoveryResult
	Dispatch    *dispatchResult
	Costly      *costlyResult
	Memory      []memoryStep
	LargeParams *largeParamsStep
	SizesSDK    objectSizes
	SizesMemory objectSizes
	Tombstones  tombstoneResults
	// Archive is section 10; nil when it did not run.
	Archive   *archiveResult
	Failures  []string
	Wall      time.Duration
	SetupTime time.Duration
	// CPU seconds: the machine's busy time during the run, the part of it
	// spent by this run's processes, and whether /proc told.
	CPUBusy, CPUOurs float64
	CPUKnown         bool
	// OtherLoad is the share of the machine other processes took during
	// each timed run kept; Repeated counts the runs repeated because it was
	// too high, KeptBusy those kept after the last attempt anyway.
	OtherLoad          []float64
	Repeated, KeptBusy int
	ManagerBuilt       bool
}

func (b *bench) logf(format string, args ...any) {
	fmt.Printf("%s bench: %s\n", time.Since(b.started).Round(time.Second), fmt.Sprintf(format, args...))
}

// fail records a measured failure: the run goes on, the report shows it,
// and the harness exits non-zero at the end.
func (b *bench) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.results.Failures = append(b.results.Failures, msg)
	b.logf("FAILURE: %s", msg)
}

// startPlane starts kube-apiserver and etcd on an empty data directory
// named name, and what every step shares on them: the manager's kubeconfig,
// the ceiling's CRD, the admission policy as shipped and the clients.
func (b *bench) startPlane(ctx context.Context, name string) (err error) {
	b.logf("starting kube-apiserver and etcd from bin/ (etcd data in %s)", b.etcdDir(name))
	if b.c, err = startCluster(b.etcdDir(name)); err != nil {
		return err
	}
	b.plane = name
	b.policyOn = nil
	b.kubeconfig = filepath.Join(b.tmp, "kubeconfig-"+name)
	if err := b.c.writeKubeconfig(b.kubeconfig); err != nil {
		return err
	}
	if err := installBenchCRD(ctx, b.c.cfg, b.root); err != nil {
		return err
	}
	if err := b.usePolicy(ctx, true); err != nil {
		return err
	}
	if b.ceiling, err = newCeilingClient(b.c.cfg); err != nil {
		return err
	}
	if b.sdk, err = sdk.NewClient(b.c.cfg); err != nil {
		return err
	}
	if b.manifest, err = newManifestInvoker(b.c.cfg, manifestFieldManager); err != nil {
		return err
	}
	if b.watchPerInvoke, err = newManifestInvoker(b.c.cfg, sdk.DefaultFieldManager, v1alpha1.Finalizer); err != nil {
		return err
	}
	b.createPerInvoke = b.watchPerInvoke.creating()
	return nil
}

// restartPlane replaces the control plane by one with an empty etcd,
// named name. What a run stores weighs on the runs after it: the
// kube-apiserver holds every stored object decoded, and its garbage
// collector's work grows with them. So each level of each round of the
// sweep, and the steps after it, start from an empty control plane.
func (b *bench) restartPlane(ctx context.Context, name string) error {
	load, err := b.planeLoad(ctx)
	if err != nil {
		return err
	}
	if strings.HasPrefix(b.plane, sweepPlane) {
		b.results.SweepPlanes = append(b.results.SweepPlanes, load)
	}
	b.logf("control plane %s held %d ToolActions and %d ceiling objects, kube-apiserver heap in use %s; replacing it by %s on an empty etcd",
		b.plane, load.ToolActions, load.CeilingObjects, mib(load.HeapInuse), name)
	if err := b.stopPlane(); err != nil {
		return err
	}
	if err := os.RemoveAll(b.etcdDir(b.plane)); err != nil {
		return err
	}
	return b.startPlane(ctx, name)
}

// reopenPlane restarts kube-apiserver and etcd on the plane's own etcd
// data: every client, the manager and the downstream start anew, and every
// object stored stays.
func (b *bench) reopenPlane(ctx context.Context) error {
	b.logf("restarting control plane %s on its etcd data", b.plane)
	if err := b.stopPlane(); err != nil {
		return err
	}
	return b.startPlane(ctx, b.plane)
}

// stopPlane stops the manager, then the control plane, keeping its data.
func (b *bench) stopPlane() error {
	b.stopManager()
	err := b.c.stop()
	b.c = nil
	if err != nil {
		return fmt.Errorf("cannot stop control plane %s: %w", b.plane, err)
	}
	return nil
}

// outDir is where the report goes: -out, under the repository's root when relative.
func (b *bench) outDir() string {
	if filepath.IsAbs(b.settings.Out) {
		return b.settings.Out
	}
	return filepath.Join(b.root, b.settings.Out)
}

func (b *bench) etcdDir(plane string) string {
	return filepath.Join(cmp.Or(b.settings.EtcdDir, b.tmp), "etcd-"+plane)
}

func (b *bench) baseline() variant { return b.variants[0] }

func (b *bench) fastTool(namespace string) *v1alpha1.Tool {
	return chargeTool(namespace, b.c.suite.DownstreamURL+"/charges", v1alpha1.KeyProtected, 5*time.Second)
}

func main() {
	s, err := parseSettings(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	b := &bench{settings: s, started: time.Now()}
	err = b.run(ctx)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: error: %v (logs kept in %s)\n", err, b.tmp)
		os.Exit(1)
	}
	if len(b.results.Failures) > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d failures (see the report; logs kept in %s):\n  %s\n", len(b.results.Failures), b.tmp, strings.Join(b.results.Failures, "\n  "))
		os.Exit(1)
	}
	// Nothing to look into: drop etcd's data, the manager binary and the logs.
	_ = os.RemoveAll(b.tmp)
}

func (b *bench) run(ctx context.Context) (err error) {
	s := b.settings
	if b.root, err = repoRoot(); err != nil {
		return err
	}
	if b.tmp, err = os.MkdirTemp("", "toolledger-bench-"); err != nil {
		return err
	}
	b.logf("working files (logs) in %s", b.tmp)
	b.cpu = watchCPU(ctx)
	b.layout = newCPULayout(s.SplitCPUs)
	if err := b.layout.keep(ctx); err != nil {
		return err
	}
	b.results.SplitCPUs = b.layout.split
	inProcessLog, err := os.Create(filepath.Join(b.tmp, "inprocess-manager.log"))
	if err != nil {
		return err
	}
	defer func() { _ = inProcessLog.Close() }()
	ctrl.SetLogger(zap.New(zap.WriteTo(inProcessLog), zap.Level(zapcore.InfoLevel)))

	b.variants = []variant{{ID: "base", Workers: s.Workers, Baseline: true}}
	for _, w := range s.TuneWorkers {
		if w != s.Workers {
			b.variants = append(b.variants, variant{ID: fmt.Sprintf("w%d", w), Workers: w})
		}
	}
	if s.CompareManifest {
		b.variants = append(b.variants, variant{ID: "manifest", Workers: s.Workers, Manifest: true},
			variant{ID: "manifest-nopolicy", Workers: s.Workers, Manifest: true, NoPolicy: true},
			variant{ID: "sdk-nopolicy", Workers: s.Workers, NoPolicy: true})
	}
	if s.CompareWatchPerInvoke {
		b.variants = append(b.variants, variant{ID: "watch-per-invoke", Workers: s.Workers, WatchPerInvoke: true})
	}
	if s.CompareCreate {
		b.variants = append(b.variants, variant{ID: "create-per-invoke", Workers: s.Workers, Create: true})
	}
	if s.CompareEvents {
		b.variants = append(b.variants, variant{ID: "every-event", Workers: s.Workers, Events: eventsEvery},
			variant{ID: "quiet-events", Workers: s.Workers, Events: eventsWarnings})
	}
	// Group by manager configuration so that the in-process manager restarts least.
	ordered := []variant{b.variants[0]}
	for _, v := range b.variants[1:] {
		if v.manager() == b.variants[0].manager() {
			ordered = append(ordered, v)
		}
	}
	for _, v := range b.variants[1:] {
		if v.manager() != b.variants[0].manager() {
			ordered = append(ordered, v)
		}
	}
	b.variants = ordered

	b.managerBin = s.ManagerBin
	if b.managerBin == "" && (s.Only == "" || s.Only == onlyRetention) {
		b.logf("building ./cmd/manager")
		if b.managerBin, err = buildManager(ctx, b.root, b.tmp); err != nil {
			return err
		}
		b.results.ManagerBuilt = true
	}
	defer func() {
		b.stopManager()
		if b.c != nil {
			if stopErr := b.c.stop(); stopErr != nil && err == nil {
				err = stopErr
			}
		}
	}()
	if err := b.startPlane(ctx, "first"); err != nil {
		return err
	}
	b.results.Machine = describeMachine(ctx, b.c, b.root)
	b.results.SetupTime = time.Since(b.started)
	if s.Only == onlyCostlySchema {
		return b.costlySchema(ctx)
	}
	if s.Only == onlyArchive {
		if err := b.archive(ctx); err != nil {
			return err
		}
		return b.writeArchiveSection(b.outDir())
	}
	if s.Only == onlyRetention {
		return b.retentionSweep(ctx)
	}
	if s.Only == onlyThroughput {
		if err := b.throughput(ctx); err != nil {
			return err
		}
		b.logThroughput()
		return nil
	}

	steps := s.MemorySteps
	if len(steps) > 0 {
		if err := b.memory(ctx, steps[0]); err != nil {
			return err
		}
	}
	if err := b.throughput(ctx); err != nil {
		return err
	}
	if err := b.restartPlane(ctx, "dispatch"); err != nil {
		return err
	}
	if err := b.dispatch(ctx); err != nil {
		return err
	}
	if s.CostlyHealthy > 0 {
		if err := b.costlySchema(ctx); err != nil {
			return err
		}
	}
	if err := b.restartPlane(ctx, "steps"); err != nil {
		return err
	}
	if err := b.latency(ctx, "only this run's actions stored"); err != nil {
		return err
	}
	if s.CompareSDKQPS {
		if err := b.sdkLimiter(ctx); err != nil {
			return err
		}
	}
	if err := b.writes(ctx); err != nil {
		return err
	}
	if err := b.duplicates(ctx); err != nil {
		return err
	}
	if b.results.SizesSDK, err = b.sizes(ctx, "tl-writes"); err != nil {
		return err
	}
	if s.TombstoneSample > 0 {
		if b.results.Tombstones.Sizes, err = b.tombstoneSizes(ctx); err != nil {
			return err
		}
	}
	if err := b.recovery(ctx); err != nil {
		return err
	}
	// Before the memory steps, which count the records the sweep leaves.
	if s.RetentionRecords > 0 {
		if err := b.retentionSweep(ctx); err != nil {
			return err
		}
	}
	for i, target := range steps {
		if i == 0 {
			continue
		}
		if err := b.memory(ctx, target); err != nil {
			return err
		}
	}
	if b.results.SizesMemory, err = b.sizes(ctx, memoryNamespace); err != nil {
		return err
	}
	if len(steps) > 1 {
		stored := b.results.Memory[len(b.results.Memory)-1].Present
		state := fmt.Sprintf("%s finished actions stored", count(stored))
		if s.TombstoneState {
			if err := b.tombstoneState(ctx, state); err != nil {
				return err
			}
		} else if err := b.latency(ctx, state); err != nil {
			return err
		}
	}
	// Its actions stay active, and would be cached by every manager after it.
	if err := b.largeParams(ctx); err != nil {
		return err
	}
	// Last: on control planes of its own, beside a PostgreSQL server.
	if err := b.archive(ctx); err != nil {
		return err
	}
	b.results.Wall = time.Since(b.started)
	b.results.CPUBusy, b.results.CPUOurs, _, b.results.CPUKnown = b.cpu.usage()
	if r := b.results; r.CPUKnown {
		b.logf("CPU: the machine was busy %.0f core-seconds, %.0f of them this run's processes", r.CPUBusy, r.CPUOurs)
	}
	out := b.outDir()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	mdPath := filepath.Join(out, "benchmarks.md")
	pngPath := filepath.Join(out, "benchmarks.png")
	if err := b.plot(pngPath); err != nil {
		return fmt.Errorf("cannot draw the plot: %w", err)
	}
	if err := b.writeSustainedPlot(out); err != nil {
		return fmt.Errorf("cannot draw the sustained run's plot: %w", err)
	}
	page, err := b.report()
	if err != nil {
		return err
	}
	if err := os.WriteFile(mdPath, []byte(page), 0o644); err != nil {
		return err
	}
	b.logf("wrote %s and %s in %s", mdPath, pngPath, b.results.Wall.Round(time.Second))
	return nil
}
