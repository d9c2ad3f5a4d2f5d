package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "write testdata/*.golden.md from the current renderer")

// TestReportGolden renders fixed results and compares them with the
// reviewed pages, so that any change to the rendering shows as a change to
// a golden file. Each fixture takes other branches of the report.
func TestReportGolden(t *testing.T) {
	for name, b := range map[string]*bench{
		"report":          fullBench(),
		"report-smoke":    smokeBench(),
		"report-verdicts": verdictsBench(),
	} {
		t.Run(name, func(t *testing.T) {
			got := render(t, b)
			path := filepath.Join("testdata", name+".golden.md")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("the report differs from %s (-update rewrites it): %s", path, firstDifference(got, string(want)))
			}
		})
	}
}

func render(t *testing.T, b *bench) string {
	t.Helper()
	page, err := b.report()
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// firstDifference shows the first line on which got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	line := func(lines []string, i int) string {
		if i < len(lines) {
			return lines[i]
		}
		return "(end of the page)"
	}
	for i := range max(len(g), len(w)) {
		if line(g, i) != line(w, i) {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, line(g, i), line(w, i))
		}
	}
	return "no line differs"
}

func msec(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// sampleRun is a pooled load run at throughput tp whose rounds spread ±15%
// around it, with a p99 of p99 ms.
func sampleRun(concurrency, rounds int, tp, p99 float64) runSummary {
	return runSummary{
		Concurrency: concurrency, Throughput: tp, ThroughputMin: tp * 0.85, ThroughputMax: tp * 1.15, Rounds: rounds,
		P50: msec(p99 / 4), P95: msec(p99 * 0.8), P99: msec(p99), Samples: int(tp * 6), Completed: int(tp * 6), Total: int(tp * 8),
		WritesPerOp: 3, RequestsPerOp: 3.01, ConflictsPerOp: 0.02, EventWritesPerOp: 0, ReconcilesPerOp: 1.04,
		CPUPerOp: processCPU{APIServer: 12.84, Etcd: 1.17, Harness: 2.37},
	}
}

// scaled is r with its throughput multiplied by f.
func scaled(r runSummary, f float64) runSummary {
	r.Throughput, r.ThroughputMin, r.ThroughputMax = r.Throughput*f, r.ThroughputMin*f, r.ThroughputMax*f
	return r
}

// allVariants are the configurations of a full run, in the order main
// runs them: the shipped manager's first.
func allVariants() []variant {
	return []variant{
		{ID: "base", Workers: 8, Baseline: true},
		{ID: "manifest", Workers: 8, Manifest: true},
		{ID: "manifest-nopolicy", Workers: 8, Manifest: true, NoPolicy: true},
		{ID: "sdk-nopolicy", Workers: 8, NoPolicy: true},
		{ID: "watch-per-invoke", Workers: 8, WatchPerInvoke: true},
		{ID: "create-per-invoke", Workers: 8, Create: true},
		{ID: "w32", Workers: 32},
		{ID: "every-event", Workers: 8, Events: eventsEvery},
		{ID: "quiet-events", Workers: 8, Events: eventsWarnings},
	}
}

// levels measures every variant from concurrency 8 up; gains are each
// variant's throughput relative to the shipped one.
func levels(rounds int, gains map[string]float64, shared ...int) []levelResult {
	var out []levelResult
	for i, c := range []int{1, 8, 32, 128} {
		tp := 60 + 5*float64(i)
		base := sampleRun(c, rounds, tp, 40*float64(c)+4)
		l := levelResult{Concurrency: c, Ceiling3: scaled(base, 1.12), Ceiling4: scaled(base, 0.9), Floor: scaled(base, 1.03),
			Toolledger: map[string]runSummary{"base": base}}
		l.Ceiling4.WritesPerOp = 4
		l.Ceiling3.CPUPerOp, l.Ceiling4.CPUPerOp = processCPU{APIServer: 11.22, Etcd: 1.1, Harness: 0.98}, processCPU{APIServer: 14.9, Etcd: 1.5, Harness: 1.3}
		if c >= 8 {
			for id, g := range gains {
				run := scaled(base, g)
				switch id {
				case "events":
					run.EventWritesPerOp = 1
				case "watch-per-invoke":
					run.RequestsPerOp = 4.02
				case "create-per-invoke":
					run.CPUPerOp.APIServer = 9.4
				}
				l.Toolledger[id] = run
			}
		}
		for _, s := range shared {
			if s == c {
				ceiling, shipped := scaled(base, 1.8), scaled(base, 1.4)
				shipped.CPUPerOp.Harness = 3.1
				l.SharedCeiling3, l.SharedToolledger = &ceiling, &shipped
			}
		}
		out = append(out, l)
	}
	return out
}

func fullSettings() settings {
	return settings{
		Warmup: 2 * time.Second, Measure: 6 * time.Second, Rounds: 3, MaxOtherLoad: 0.2, SplitCPUs: true,
		Workers: 8, TuneMinConcurrency: 8, LatencyLoad: 0.5, LatencyDuration: 30 * time.Second,
		WritesActions: 300, Duplicates: 200, RecoveryActions: 1000, RecoveryWorkers: 64,
		RecoveryDelay: 2 * time.Second, RecoveryLeaseGrace: 30 * time.Second, RecoveryKillAt: 0.3,
		MemorySteps: []int{1000, 50000}, MemoryCreateConcurrency: 32, MemoryGCWait: 130 * time.Second,
		DispatchConcurrency: 128, DispatchDelay: 300 * time.Millisecond, DispatchJitter: 100 * time.Millisecond,
		DispatchHung: 200, DispatchRate: 20, DispatchDuration: 20 * time.Second, DispatchReplicas: []int{1, 2, 3}, DispatchBounded: 8,
		DispatchBoundedDelay: 2 * time.Second, DispatchBoundedJitter: 500 * time.Millisecond, DispatchBoundedWarmup: 10 * time.Second,
		DispatchBoundedMeasure: 30 * time.Second,
	}
}

// fullDispatch is section 8 with scaling that meets its targets with the
// bounded dispatcher and not with the API server as the bound.
func fullDispatch() *dispatchResult {
	replica := func(downstream string, dispatches int, sharded bool, n int, tp, conflicts float64) replicaRun {
		r := replicaRun{Downstream: downstream, Dispatches: dispatches, Sharded: sharded, Replicas: n, Callers: 128, Run: sampleRun(128, 1, tp, 900), ClaimConflicts: conflicts}
		if dispatches == 8 {
			r.Bounded, r.Bound, r.Callers = true, float64(4*n), 16*n
		}
		return r
	}
	slow, bounded := "300ms ± 100ms", "2s ± 500ms"
	return &dispatchResult{Concurrency: 128, Delay: 300 * time.Millisecond, Jitter: 100 * time.Millisecond, MaxDispatches: 64, PerNamespace: 32,
		Ceiling: sampleRun(128, 1, 88.1, 2400), Slow: sampleRun(128, 1, 74.2, 2900),
		FastAlone: openLoopSummary{Samples: 360, P50: msec(31.2), P95: msec(52.3), P99: msec(70.4)},
		Beside:    openLoopSummary{Samples: 360, P50: msec(33.9), P95: msec(58.1), P99: msec(81.7)},
		Hung:      200, HungHeld: 32, HungWaiting: 168, Rate: 20, Duration: 20 * time.Second, Bounded: 8,
		BoundedDelay: 2 * time.Second, BoundedJitter: 500 * time.Millisecond, BoundedWarmup: 10 * time.Second, BoundedMeasure: 30 * time.Second,
		Replicas: []replicaRun{
			replica("fast", 64, true, 1, 80.3, 0), replica(slow, 64, true, 1, 70.2, 0), replica(bounded, 8, true, 1, 3.9, 0),
			replica("fast", 64, true, 2, 76.1, 0.004), replica(slow, 64, true, 2, 71.9, 0.002), replica(bounded, 8, true, 2, 7.7, 0.001),
			replica("fast", 64, false, 2, 61.5, 0.31),
			replica("fast", 64, true, 3, 73.5, 0.006), replica(slow, 64, true, 3, 70.8, 0.003), replica(bounded, 8, true, 3, 11.2, 0.002),
			replica("fast", 64, false, 3, 55.2, 0.52),
		},
	}
}

func fullMachine() machine {
	return machine{CPUs: 2, CPUModel: "Intel(R) Xeon(R) Processor", MemoryGiB: 23.5, GoVersion: "go1.26.8", OS: "linux/amd64",
		Kernel: "6.18.44", Kubernetes: "v1.37.2", Etcd: "v3.7.0", Date: "2026-11-30 22:50 UTC"}
}

func latencyRuns() []*latencyResult {
	fresh := &latencyResult{State: "only this run's actions stored", MaxThroughput: 75, MaxAt: 32, Load: 0.5, Rate: 37.5,
		Offered: 1125, Samples: 1050, P50: msec(18.4), P95: msec(73.2), P99: msec(101.3), Achieved: 37.4,
		Ceiling:      openLoopSummary{Samples: 1049, P50: msec(9.1), P95: msec(30.2), P99: msec(41.7)},
		Plane:        planeLoad{ToolActions: 1125, HeapInuse: 310 << 20, GCs: 4, Seconds: 30},
		CeilingPlane: planeLoad{ToolActions: 1125, CeilingObjects: 1125, HeapInuse: 330 << 20, GCs: 5, Seconds: 30}}
	full := *fresh
	full.State, full.P95, full.P99, full.Errors = "50k finished actions stored", msec(646.1), msec(835.2), 2
	full.Plane = planeLoad{ToolActions: 52250, HeapInuse: 2.5 * (1 << 30), GCs: 3, Seconds: 30}
	full.CeilingPlane = planeLoad{ToolActions: 52250, CeilingObjects: 1125, HeapInuse: 2.6 * (1 << 30), Seconds: 30}
	full.Plane.Tombstones, full.CeilingPlane.Tombstones = 1212, 1212
	tombs := full
	tombs.State, tombs.P50, tombs.P95, tombs.P99, tombs.Errors = "52250 finished actions turned into tombstones", msec(15.1), msec(88.4), msec(142.7), 0
	tombs.Plane = planeLoad{Tombstones: 53462, CeilingObjects: 2250, HeapInuse: 1.1 * (1 << 30), GCs: 5, Seconds: 30}
	tombs.CeilingPlane = planeLoad{ToolActions: 1125, Tombstones: 53462, CeilingObjects: 2250, HeapInuse: 1.2 * (1 << 30), GCs: 4, Seconds: 30}
	tombs.Ceiling = openLoopSummary{Samples: 1049, P50: msec(9.4), P95: msec(33.1), P99: msec(60.2)}
	return []*latencyResult{fresh, &full, &tombs}
}

func fullTombstones(latency []*latencyResult) tombstoneResults {
	live := func(ns string, p50, p95, p99 float64, heap float64, gcs float64) liveRun {
		return liveRun{Namespace: ns, Offered: 1125, Samples: 1050, Achieved: 37.4, P50: msec(p50), P95: msec(p95), P99: msec(p99),
			Plane: planeLoad{ToolActions: 13300, Tombstones: 50, CeilingObjects: 1125, HeapInuse: heap, GCs: gcs, Seconds: 30.4}, OtherLoad: 0.02}
	}
	quarter := live("tl-retention-quarter", 12.1, 40.3, 61.0, 850<<20, 3)
	quarter.Achieved = 18.7
	return tombstoneResults{
		Sizes: &tombstoneSizes{Namespace: "tl-writes", Sampled: 50, Written: 50, Time: msec(1840), Etcd: true, Encoding: "JSON",
			RecordValue: 4143, TombstoneValue: 1012, RecordKey: 55, TombstoneKey: 54,
			RecordJSON: 4210, TombstoneJSON: 1079, RecordManagedFields: 1630, TombstoneManagedFields: 402,
			RecordStatus: 1544, CeilingStatus: 1490},
		Sweep: &sweepResult{Namespace: retentionNamespace, Records: 10000, RecordRetention: time.Minute, CompletedAgo: 10 * time.Minute,
			CreateTime: msec(64200), RetentionRate: 30, Rate: 37.5, MaxRate: 75, Lead: sweepLead, RequestsPerRetirement: 4.02,
			Without: live("tl-retention-without", 17.9, 70.3, 118.2, 820<<20, 3), With: live("tl-retention-with", 19.2, 79.8, 131.5, 860<<20, 4),
			QueueWaitWithout: msec(0.1), QueueWaitWith: msec(3.4),
			RetiredBefore: 601, Retired: 905, Quarter: quarter, RetiredQuarter: 910, Tombstones: 2416,
			Compared: &sweepCompared{RetentionRate: 10, Run: live("tl-retention-compared", 18.1, 72.0, 121.9, 830<<20, 3), Retired: 301}},
		State: &tombstoneState{Records: latency[1], Tombstones: latency[2], Deleted: 52250, Dispatched: 52250, Expected: 52250,
			Written: 52250, Concurrency: 32, Workers: 8, ConvertTime: msec(471000), SharedCPUs: true,
			ConvertCPU: processCPU{APIServer: 11.9, Etcd: 2.4, Harness: 3.1}, Settle: 30 * time.Second,
			EtcdRecords: 231 << 20, EtcdTombstones: 88 << 20,
			AtRestRecords:    planeLoad{ToolActions: 52250, Tombstones: 1150, CeilingObjects: 2250, HeapInuse: 2.4 * (1 << 30)},
			AtRestTombstones: planeLoad{Tombstones: 52250 + 1150, CeilingObjects: 2250, HeapInuse: 0.9 * (1 << 30)}},
	}
}

// writeRows are the request counts of a batch of 300 actions.
func writeRows(finalizerUpdate bool) []writeRow {
	const n = 300.0
	rows := []writeRow{
		{Verb: "GET", Resource: "tombstones", Code: "404", Count: n, PerAction: 1},
		{Verb: "APPLY", Resource: "toolactions", Code: "201", Count: n, PerAction: 1},
		{Verb: "PUT", Resource: "toolactions", Subresource: "status", Code: "200", Count: 2 * n, PerAction: 2},
		{Verb: "WATCH", Resource: "toolactions", Code: "200", Count: 3, PerAction: 3 / n},
	}
	if finalizerUpdate {
		rows = append(rows, writeRow{Verb: "PUT", Resource: "toolactions", Code: "200", Count: n, PerAction: 1})
	}
	return rows
}

func fullWrites() *writesResult {
	return &writesResult{Actions: 300, Concurrency: 16, WritesPerAction: 3, ConflictsPerAction: 0.01, EventWritesPerAct: 0,
		EtcdWritesPerAction: 3.02, EtcdMetric: true, Rows: writeRows(false),
		TombstoneRequestsPerAction: 1, TombstoneGetsPerAction: 1,
		Manifest:         &writesVariant{Actions: 300, WritesPerAction: 3, Rows: writeRows(false)},
		ManifestNoPolicy: &writesVariant{Actions: 300, WritesPerAction: 4, Rows: writeRows(true)}}
}

func fullRecovery() *recoveryResult {
	return &recoveryResult{Actions: 1000, Workers: 64, Delay: 2 * time.Second, ToolTimeout: 5 * time.Second, LeaseGrace: 30 * time.Second,
		KillAfter: msec(4213), TerminalAtKill: 314, ExecutingAtKill: 64, HeldDownstreamAtKill: 61, RestartGap: msec(812),
		KillToAllTerminal: msec(36712), Total: msec(41020),
		Phases:     map[string]int{"Succeeded": 1000},
		Paths:      map[string]int{"Claimed → Succeeded": 936, "Claimed → LeaseExpired → Recovered": 64},
		Duplicates: 0, Lost: 0, RefMismatch: 0, Requests: 1003, Lookups: 64, Effects: 1000}
}

func fullResults() results {
	latency := latencyRuns()
	return results{
		Machine: fullMachine(), SplitCPUs: true,
		Levels: levels(3, map[string]float64{"manifest": 0.85, "manifest-nopolicy": 0.7, "sdk-nopolicy": 0.95,
			"watch-per-invoke": 0.78, "create-per-invoke": 0.8, "w32": 0.8, "events": 0.97}, 8, 32),
		Latency:    latency,
		Tombstones: fullTombstones(latency),
		SweepPlanes: []planeLoad{{ToolActions: 4922, CeilingObjects: 2257, HeapInuse: 700 << 20},
			{ToolActions: 3000, CeilingObjects: 1000, HeapInuse: 887.8 * (1 << 20)}},
		Writes: fullWrites(),
		Duplicate: &duplicateResult{Calls: 200, P50: msec(4.7), P95: msec(17), P99: msec(25.5), RequestsPerCall: 1, MaxRequests: 1,
			EtcdMetric: true, VerbsSeen: []writeRow{
				{Verb: "APPLY", Resource: "toolactions", Code: "200", Count: 200, PerAction: 1},
				{Verb: "GET", Resource: "toolactions", Code: "200", Count: 400, PerAction: 2},
			}},
		Limiter:  &limiterResult{Concurrency: 8, QPS: 5, Burst: 10, Limited: sampleRun(8, 1, 5.1, 1900), Unlimited: sampleRun(8, 1, 71.2, 250)},
		Recovery: fullRecovery(),
		Dispatch: fullDispatch(),
		Costly:   fullCostly(),
		Archive:  fullArchive(),
		Memory: []memoryStep{
			{Present: 1000, Created: 1000, CreateTime: msec(8200), SettleTime: msec(3400), HeapLive: 5.3e6, HeapInuse: 7e6, RSS: 40e6,
				AfterGC: true, GCWaited: msec(118000), HeapLiveAfterGC: 5.1e6, HeapInuseAfterGC: 6.8e6, RSSAfterGC: 41e6},
			{Present: 50000, Created: 48700, CreateTime: msec(402000), SettleTime: msec(9100), HeapLive: 5.6e6, HeapInuse: 8e6, RSS: 42e6,
				AfterGC: true, GCWaited: msec(96000), HeapLiveAfterGC: 10.98e6, HeapInuseAfterGC: 7.1e6, RSSAfterGC: 39.8e6},
		},
		LargeParams: &largeParamsStep{Actions: 500, ParamBytes: 512 << 10, CreateTime: msec(61000),
			PeakRSS: 71e6, HeapLive: 12e6, RSS: 64e6, RestartPeakRSS: 83e6, RestartHeapLive: 11e6, RestartRSS: 70e6},
		SizesSDK: objectSizes{Namespace: "tl-writes", Sampled: 50, Bytes: 4210, ManagedFields: 1630, History: 610},
		Failures: []string{"latency run (50k finished actions stored): 2 errors, first: context deadline exceeded", "create→Succeeded p99 835.2 ms > 250 ms"},
		Wall:     29*time.Minute + 44*time.Second, SetupTime: msec(9300),
		CPUBusy: 1749, CPUOurs: 1739, CPUKnown: true,
		OtherLoad: []float64{0.01, 0.03, 0.02}, Repeated: 1, KeptBusy: 0,
	}
}

// fullArchive is section 10 with a million records: within its ratios, the
// retirement at its pace but slower than the ceiling.
func fullArchive() *archiveResult {
	run := func(p99 float64, heap float64, tombstones int) liveRun {
		return liveRun{Namespace: "tl-archive", Offered: 1080, Samples: 1020, Achieved: 35.8,
			P50: msec(p99 / 3), P95: msec(p99 * 0.8), P99: msec(p99), Plane: planeLoad{Tombstones: tombstones, HeapInuse: heap * (1 << 20)}}
	}
	return &archiveResult{Records: 1000000, LoadTime: msec(74200), TableBytes: 1.61e9,
		Ceiling: 71.9, CeilingAt: 32, Load: 0.5, Rate: 35.95,
		Empty: run(212.4, 96.1, 0), Full: run(221.9, 99.4, 0),
		Check: archiveCheck{Actions: 300, Counted: true, CheckQueries: 1, Statements: 2.03, CheckMeanExec: msec(0.061),
			Rows:    []writeRow{{Verb: "APPLY", Resource: "toolactions", Code: "200", Count: 300, PerAction: 1}},
			Samples: 2000, P50: msec(0.21), P95: msec(0.34), P99: msec(0.52)},
		Retire: []retirement{
			{Namespace: "archive-retire-1", Records: 3000, Rate: 30, Retired: 3000, Archived: 3000, Time: msec(99100), Achieved: 29.8},
			{Namespace: "archive-retire-2", Records: 3000, Rate: 90, Retired: 3000, Archived: 3000, Time: msec(34800), Achieved: 86.2},
		},
		Sustained: sustained(35.95, 10*time.Minute, 5*time.Minute, 10812, 10790, 0.01),
	}
}

// sustained is a sustained run whose last counts are stored and archived,
// and whose last quarter gained growth of the actions offered.
func sustained(rate float64, d, retention time.Duration, stored, archived int, growth float64) *sustainedRun {
	return &sustainedRun{Namespace: sustainedNamespace, Rate: rate, Duration: d, RecordRetention: retention, Every: d / 60,
		Samples: []storedSample{{At: 0}, {At: d / 2, Stored: stored, Archived: 0}, {At: d, Stored: stored + 12, Archived: archived, InFlight: 12}},
		Live:    openLoopResult{Latencies: make([]time.Duration, 20000)}, P50: msec(41.2), P99: msec(187.5), Growth: growth}
}

// fullCostly is section 9 within its target.
func fullCostly() *costlyResult {
	return &costlyResult{Healthy: 40, Hostile: 8, Items: 150000, PayloadBytes: 938898,
		ToolReady: `Ready=False UnsupportedSchema: spec.parametersSchema: parametersSchema.properties[ids]: "uniqueItems" is not supported: checking it takes time quadratic in the array's length, as a CRD schema refuses it too`,
		Quiet:     openLoopSummary{Samples: 40, P50: msec(21.4), P95: msec(35.2), P99: msec(41.9)},
		Refused: hostileRun{
			Beside:   openLoopSummary{Samples: 40, P50: msec(20.8), P95: msec(30.1), P99: msec(44.0)},
			Reasons:  map[string]int{refusedAtAdmission: 8},
			Answered: openLoopSummary{Samples: 8, P50: msec(610), P95: msec(700), P99: msec(720)},
			Slowest:  msec(44.0), SlowestCreate: msec(5.2),
			BesideCreate: openLoopSummary{Samples: 40, P50: msec(3.9), P95: msec(5.0), P99: msec(5.2)}},
		InFlight: hostileRun{
			Beside:   openLoopSummary{Samples: 40, P50: msec(22.3), P95: msec(41.0), P99: msec(2383.0)},
			Reasons:  map[string]int{refusedAtAdmission: 8},
			Answered: openLoopSummary{Samples: 8, P50: msec(2922), P95: msec(3200), P99: msec(3239)},
			Slowest:  msec(2383.0), SlowestCreate: msec(1242.0),
			BesideCreate: openLoopSummary{Samples: 40, P50: msec(4.8), P95: msec(9.0), P99: msec(1242.0)}},
		Stored: hostileRun{
			Beside:   openLoopSummary{Samples: 40, P50: msec(24.8), P95: msec(48.1), P99: msec(3055.3)},
			Reasons:  map[string]int{"Failed/InvalidToolContract": 8},
			Answered: openLoopSummary{Samples: 8, P50: msec(910), P95: msec(1120), P99: msec(1200)},
			Settled:  openLoopSummary{Samples: 8, P50: msec(1310), P95: msec(1620), P99: msec(1700)},
			Refusing: msec(3140.2), Overlapping: 2, Slowest: msec(3055.3), SlowestCreate: msec(301.6),
			BesideCreate: openLoopSummary{Samples: 40, P50: msec(3.9), P95: msec(5.2), P99: msec(301.6)}}}
}

// fullBench is a full run on two CPUs split between the control plane
// and the rest, with every step and configuration, and failures.
func fullBench() *bench {
	return &bench{settings: fullSettings(), variants: allVariants(), layout: &cpuLayout{split: true, cpus: 2}, results: fullResults()}
}

// smokeBench is a one-level, one-round run on shared CPUs with none of the
// optional steps and no failures.
func smokeBench() *bench {
	s := fullSettings()
	s.Smoke, s.Rounds, s.SplitCPUs, s.MemoryGCWait, s.EtcdDir = true, 1, false, 0, "/var/tmp/bench"
	base := sampleRun(4, 1, 41.3, 52)
	r := results{
		Machine: machine{CPUs: 2, MemoryGiB: 7.8, GoVersion: "go1.26.8", OS: "linux/arm64", Kubernetes: "v1.37.2", Etcd: "v3.7.0", Date: "2026-12-01 08:00 UTC"},
		Levels:  []levelResult{{Concurrency: 4, Ceiling3: scaled(base, 1.2), Ceiling4: scaled(base, 1.1), Floor: scaled(base, 1.1), Toolledger: map[string]runSummary{"base": base}}},
		Latency: []*latencyResult{{State: "only this run's actions stored", MaxThroughput: 41.3, MaxAt: 4, Load: 0.5, Rate: 20.65,
			Offered: 62, Samples: 55, P50: msec(21), P95: msec(60.4), P99: msec(270.9), Achieved: 20.1}},
		Memory: []memoryStep{{Present: 100, Created: 100, CreateTime: msec(1500), SettleTime: msec(3100), HeapLive: 3.2e6, HeapInuse: 5e6, RSS: 30e6}},
		Costly: &costlyResult{Healthy: 4, Hostile: 2, Items: 20000, PayloadBytes: 108898, ToolReady: "Ready=False UnsupportedSchema: …",
			Quiet: openLoopSummary{Samples: 4, P50: msec(20), P95: msec(30), P99: msec(30)},
			Refused: hostileRun{Beside: openLoopSummary{Samples: 4, P50: msec(21), P95: msec(31), P99: msec(31)},
				Reasons: map[string]int{refusedAtAdmission: 2}, Answered: openLoopSummary{Samples: 2, P50: msec(15), P95: msec(16), P99: msec(16)},
				Slowest: msec(31), SlowestCreate: msec(4), BesideCreate: openLoopSummary{Samples: 4, P50: msec(4), P95: msec(4), P99: msec(4)}},
			InFlight: hostileRun{Beside: openLoopSummary{Samples: 4, P50: msec(23), P95: msec(70), P99: msec(70)},
				Reasons: map[string]int{refusedAtAdmission: 2}, Answered: openLoopSummary{Samples: 2, P50: msec(55), P95: msec(60), P99: msec(60)},
				Slowest: msec(70), SlowestCreate: msec(30), BesideCreate: openLoopSummary{Samples: 4, P50: msec(4), P95: msec(30), P99: msec(30)}},
			Stored: hostileRun{Beside: openLoopSummary{Samples: 4, P50: msec(22), P95: msec(90), P99: msec(90)},
				Reasons: map[string]int{"Failed/InvalidToolContract": 2}, Answered: openLoopSummary{Samples: 2, P50: msec(20), P95: msec(30), P99: msec(30)}, Settled: openLoopSummary{Samples: 2, P50: msec(40), P95: msec(60), P99: msec(60)},
				Refusing: msec(35), Overlapping: 2, Slowest: msec(90), SlowestCreate: msec(12), BesideCreate: openLoopSummary{Samples: 4, P50: msec(4), P95: msec(12), P99: msec(12)}},
			QuietAsUsers: openLoopSummary{Samples: 4, P50: msec(21), P95: msec(31), P99: msec(31)},
			AsUsers: hostileRun{Beside: openLoopSummary{Samples: 4, P50: msec(24), P95: msec(72), P99: msec(72)},
				Reasons: map[string]int{refusedAtAdmission: 2}, Answered: openLoopSummary{Samples: 2, P50: msec(56), P95: msec(61), P99: msec(61)}},
			Fair: hostileRun{Beside: openLoopSummary{Samples: 4, P50: msec(22), P95: msec(40), P99: msec(40)},
				Reasons: map[string]int{refusedAtAdmission: 2}, Answered: openLoopSummary{Samples: 2, P50: msec(80), P95: msec(90), P99: msec(90)}},
			BareQuiet: openLoopSummary{Samples: 4, P50: msec(8), P95: msec(10), P99: msec(10)},
			BareInFlight: hostileRun{Beside: openLoopSummary{Samples: 4, P50: msec(9), P95: msec(20), P99: msec(20)},
				Reasons: map[string]int{refusedAtAdmission: 2}, Answered: openLoopSummary{Samples: 2, P50: msec(50), P95: msec(55), P99: msec(55)}}},
		Archive: &archiveResult{Records: 2000, LoadTime: msec(410), TableBytes: 4.1e6, Ceiling: 38.2, CeilingAt: 4, Load: 0.5, Rate: 19.1,
			Empty:     liveRun{Offered: 57, Samples: 50, Achieved: 18.7, P50: msec(30), P95: msec(80), P99: msec(95), Plane: planeLoad{HeapInuse: 60 << 20}},
			Full:      liveRun{Offered: 57, Samples: 51, Achieved: 18.9, P50: msec(31), P95: msec(82), P99: msec(101), Plane: planeLoad{HeapInuse: 61 << 20}},
			Check:     archiveCheck{Actions: 30, CountError: "pg_stat_statements must be loaded via shared_preload_libraries", Samples: 100, P50: msec(0.2), P95: msec(0.3), P99: msec(0.4)},
			Retire:    []retirement{{Namespace: "archive-retire-1", Records: 150, Rate: 30, Retired: 150, Archived: 150, Time: msec(4900), Achieved: 30.4}},
			Sustained: sustained(19.1, 40*time.Second, 10*time.Second, 201, 560, 0.02)},
		Wall: 3*time.Minute + 12*time.Second, SetupTime: msec(8100),
	}
	return &bench{settings: s, variants: allVariants()[:1], layout: &cpuLayout{cpus: 2}, results: r}
}

// verdictsBench takes the other verdicts of the tuning section: more
// workers faster, events beyond the noise, the watch change within it,
// writes not at the ceiling's, no manifest configurations, memory readings
// without a GC, on four CPUs.
func verdictsBench() *bench {
	s := fullSettings()
	s.Rounds = 2
	variants := []variant{allVariants()[0], allVariants()[4], {ID: "w16", Workers: 16}, allVariants()[7]}
	r := fullResults()
	r.Machine.CPUs = 4
	r.Levels = levels(2, map[string]float64{"watch-per-invoke": 0.95, "w16": 1.3, "events": 0.7})
	r.Levels[0].Ceiling3 = scaled(r.Levels[0].Ceiling3, 1.3)
	r.Levels[1].Floor = scaled(r.Levels[1].Floor, 1.1)
	r.SweepPlanes, r.OtherLoad, r.Failures, r.Limiter, r.SizesSDK = nil, nil, nil, nil, objectSizes{}
	r.Costly.Refused.Beside.P99 = msec(130.2)
	r.Writes = &writesResult{Actions: 300, Concurrency: 16, WritesPerAction: 4, EventWritesPerAct: 1, Rows: writeRows(true),
		TombstoneRequestsPerAction: 1.04, TombstoneGetsPerAction: 1.04}
	// etcd not read, the sweep slower than its rate and slower live, the
	// tail longer with tombstones and the heap at rest larger, the deletion
	// on the split layout.
	sz := *r.Tombstones.Sizes
	sz.Etcd, sz.EtcdError, sz.Encoding, sz.RecordValue, sz.TombstoneValue = false, "etcd holds no key /registry/toolledger.dev/toolactions/tl-writes/writes-000000", "", 0, 0
	sw := *r.Tombstones.Sweep
	sw.Retired, sw.With.P99 = 410, msec(402.6)
	st := *r.Tombstones.State
	tombs := *st.Tombstones
	tombs.P99 = msec(912.4)
	st.Tombstones, st.SharedCPUs, st.Settle, st.Written, st.Remaining = &tombs, false, 0, 52240, 10
	st.AtRestTombstones.HeapInuse = 3.4 * (1 << 30)
	r.Latency[2] = &tombs
	r.Tombstones = tombstoneResults{Sizes: &sz, Sweep: &sw, State: &st}
	r.Duplicate.EtcdMetric, r.Duplicate.RVChanged, r.Duplicate.NotDeduplicated = false, 1, 2
	r.Recovery.Lost, r.Recovery.TimedOut = 1, true
	r.Dispatch.Beside.P99, r.Dispatch.Slow.Throughput = msec(140.8), 52.5
	// The archive past its ratios and its goal, its check past one query,
	// the retirement off its pace.
	ar := *r.Archive
	ar.Full.P99, ar.Full.Plane.HeapInuse, ar.Check.CheckQueries, ar.Check.TombstoneRequests = msec(412.7), 140<<20, 2, 1
	ar.Retire = []retirement{{Namespace: "archive-retire-1", Records: 3000, Rate: 30, Retired: 700, Archived: 690, Time: msec(300000), Achieved: 2.3}}
	// The records in etcd still growing at the end of the sustained run.
	ar.Sustained = sustained(35.95, 10*time.Minute, 5*time.Minute, 13900, 7100, 0.31)
	r.Archive = &ar
	r.Memory[0].AfterGC, r.Memory[1].AfterGC, r.Memory[1].HeapLive, r.Memory[0].Created = false, false, 5.3e6+1e6, 0
	return &bench{settings: s, variants: variants, layout: &cpuLayout{split: true, cpus: 4}, results: r}
}

func TestWrapLabel(t *testing.T) {
	got := wrapLabel("create→Succeeded at 50% load, 50k finished actions stored", 22)
	want := "create→Succeeded at\n50% load, 50k finished\nactions stored"
	if got != want {
		t.Errorf("wrapLabel = %q, want %q", got, want)
	}
}
