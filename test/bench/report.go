package main

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/toolledger/toolledger/cmd/manager/app"
)

// reportTemplate is the prose of docs/benchmarks.md; report.go computes
// the figures it shows.
//
//go:embed report.md.tmpl
var reportTemplate string

var reportPage = template.Must(template.New("benchmarks.md").Funcs(template.FuncMap{
	"ms": ms, "dur": dur, "mib": mib, "count": count, "float": func(n int) float64 { return float64(n) }, "mul": func(a, b float64) float64 { return a * b }, "tput": tput, "pct": pct, "gain": gain, "div": safeDiv, "seconds": seconds,
}).Parse(reportTemplate))

// report renders docs/benchmarks.md from the run's results.
func (b *bench) report() (string, error) {
	var w strings.Builder
	if err := reportPage.Execute(&w, b.view()); err != nil {
		return "", fmt.Errorf("cannot render the report: %w", err)
	}
	return w.String(), nil
}

// reportView is what the report template reads: the run's results and
// settings as measured, and every figure derived from them.
type reportView struct {
	Results  results
	Settings settings
	// WallToSecond and WallToMinute are the run's wall time rounded.
	WallToSecond, WallToMinute time.Duration
	// PlaneCPUs and OtherCPUs name the CPUs of the control plane and of
	// every other process when the layout splits them.
	PlaneCPUs, OtherCPUs string
	CeilingCRD           string
	MaxAttempts          int
	// CPU is nil when /proc did not tell.
	CPU        *cpuUse
	Throughput throughputView
	Latency    []latencyRow
	// LatencyWarmup is how long the latency run's first arrivals are not kept.
	LatencyWarmup time.Duration
	Duplicate     *duplicateView
	Writes        *writesView
	Recovery      *recoveryView
	Dispatch      *dispatchView
	Costly        *costlyView
	// Archive is section 10; nil when it did not run.
	Archive *archiveView
	Memory  memoryView
	// Tombstones is section 7; nil when none of it ran.
	Tombstones *tombstonesView
	Tuning     tuningView
	Knobs      []knobRow
}

func (b *bench) view() reportView {
	r, s := b.results, b.settings
	v := reportView{
		Results:       r,
		Settings:      s,
		WallToSecond:  r.Wall.Round(time.Second),
		WallToMinute:  r.Wall.Round(time.Minute),
		CeilingCRD:    benchResource + "." + benchGroup,
		MaxAttempts:   maxAttempts,
		CPU:           machineCPU(r),
		Throughput:    b.throughputFigures(),
		Latency:       latencyRows(r.Latency),
		LatencyWarmup: min(2*time.Second, s.LatencyDuration/5),
		Duplicate:     duplicateFigures(r.Duplicate),
		Writes:        writesFigures(r.Writes),
		Recovery:      recoveryFigures(r.Recovery),
		Dispatch:      dispatchFigures(r.Dispatch, r.SplitCPUs),
		Costly:        costlyFigures(r.Costly, s.Smoke),
		Archive:       archiveFigures(r.Archive, r.Tombstones.State, s.Smoke),
		Memory:        memoryFigures(r.Memory),
		Tombstones:    tombstonesFigures(r.Writes, r.Tombstones),
		Tuning:        b.tuningFigures(),
		Knobs:         knobRows(),
	}
	if r.SplitCPUs {
		v.PlaneCPUs, v.OtherCPUs = b.layout.describe()
	}
	return v
}

// levelValue is one figure at one concurrency level.
type levelValue struct {
	Concurrency int
	Value       float64
}

// throughputView is section 1: the configuration as shipped against the
// ceilings, level by level, and the other configurations.
type throughputView struct {
	Levels []levelRow
	// Ratios are toolledger ÷ the 3-write ceiling, FloorRatios toolledger ÷
	// the floor; the marks say whether they meet their targets.
	Ratios, FloorRatios        []levelValue
	RatioMark, FloorMark       string
	CeilingTarget, FloorTarget float64
	// Shared are the levels measured with every process on every CPU too.
	Shared       []sharedRow
	SharedRatios []levelValue
	SharedMark   string
	// Planes is what the sweep's control planes held at their end; nil
	// when none was recorded.
	Planes *sweepPlanes
	// Noise and WorstNoise are the mean and largest spread between rounds.
	Noise, WorstNoise float64
	// KeptLoad is the mean share other processes took over the kept runs.
	KeptLoad float64
	// Compared is whether the run measured other configurations than the
	// shipped one; Variants lists every configuration at every level it ran.
	Compared bool
	Variants []variantRow
}

// levelRow is the shipped configuration against the ceilings at one level.
type levelRow struct {
	Concurrency                        int
	Ceiling3, Ceiling4, Floor, Shipped runSummary
	Ratio3, Ratio4, RatioFloor         float64
	// CPU milliseconds per operation of every process, and toolledger's
	// against the ceiling's, all processes and the control plane's.
	CeilingCPU, ShippedCPU, CPURatio, PlaneCPURatio float64
}

// sharedRow is a level measured with every process on every CPU.
type sharedRow struct {
	Concurrency            int
	Ceiling, Shipped       runSummary
	Ratio                  float64
	CeilingCPU, ShippedCPU float64
	SplitRatio             float64 // the ratio with the control plane on CPUs of its own
}

// variantRow is one configuration at one level.
type variantRow struct {
	Label          string
	Concurrency    int
	Run            runSummary
	Ratio3, Ratio4 float64
}

func (b *bench) throughputFigures() throughputView {
	r := b.results
	base := b.baseline()
	t := throughputView{Planes: sweepPlaneFigures(r.SweepPlanes), KeptLoad: keptLoad(r), CeilingTarget: ceilingTarget, FloorTarget: floorTarget}
	t.Noise, t.WorstNoise = b.noise()
	for _, l := range r.Levels {
		row := levelFigures(l, l.Toolledger[base.ID])
		t.Levels = append(t.Levels, row)
		t.Ratios = append(t.Ratios, levelValue{l.Concurrency, row.Ratio3})
		t.FloorRatios = append(t.FloorRatios, levelValue{l.Concurrency, row.RatioFloor})
	}
	for _, l := range sharedRatios(r.Levels) {
		row := sharedFigures(l, l.Toolledger[base.ID])
		t.Shared = append(t.Shared, row)
		t.SharedRatios = append(t.SharedRatios, levelValue{l.Concurrency, row.Ratio})
	}
	t.RatioMark, t.FloorMark, t.SharedMark = atLeast(t.Ratios, ceilingTarget), atLeast(t.FloorRatios, floorTarget), atLeast(t.SharedRatios, 0.8)
	t.Compared, t.Variants = len(b.variants) > 1, b.variantRows()
	return t
}

// The throughput targets as shipped: toolledger ÷ the floor, what any
// controller with waiting callers pays, and ÷ the bare 3-write ceiling,
// the physical limit.
const (
	floorTarget   = 0.95
	ceilingTarget = 0.85
)

func levelFigures(l levelResult, shipped runSummary) levelRow {
	c, t := l.Ceiling3.CPUPerOp, shipped.CPUPerOp
	return levelRow{
		Concurrency: l.Concurrency, Ceiling3: l.Ceiling3, Ceiling4: l.Ceiling4, Floor: l.Floor, Shipped: shipped,
		Ratio3: safeDiv(shipped.Throughput, l.Ceiling3.Throughput), Ratio4: safeDiv(shipped.Throughput, l.Ceiling4.Throughput),
		RatioFloor: safeDiv(shipped.Throughput, l.Floor.Throughput),
		CeilingCPU: c.total(), ShippedCPU: t.total(),
		CPURatio: safeDiv(t.total(), c.total()), PlaneCPURatio: safeDiv(t.APIServer+t.Etcd, c.APIServer+c.Etcd),
	}
}

func sharedFigures(l levelResult, split runSummary) sharedRow {
	c, t := *l.SharedCeiling3, *l.SharedToolledger
	return sharedRow{
		Concurrency: l.Concurrency, Ceiling: c, Shipped: t, Ratio: safeDiv(t.Throughput, c.Throughput),
		CeilingCPU: c.CPUPerOp.total(), ShippedCPU: t.CPUPerOp.total(), SplitRatio: safeDiv(split.Throughput, l.Ceiling3.Throughput),
	}
}

func (b *bench) variantRows() []variantRow {
	var rows []variantRow
	for _, v := range b.variants {
		for _, l := range b.results.Levels {
			if t, ok := l.Toolledger[v.ID]; ok {
				rows = append(rows, variantRow{Label: v.label(), Concurrency: l.Concurrency, Run: t,
					Ratio3: safeDiv(t.Throughput, l.Ceiling3.Throughput), Ratio4: safeDiv(t.Throughput, l.Ceiling4.Throughput)})
			}
		}
	}
	return rows
}

// atLeast marks whether every value, some or none reach target.
func atLeast(values []levelValue, target float64) string {
	lowest, highest := math.Inf(1), 0.0
	for _, v := range values {
		lowest, highest = math.Min(lowest, v.Value), math.Max(highest, v.Value)
	}
	return mark(lowest >= target, highest >= target)
}

// sweepPlanes is how much the fullest of the sweep's control planes held.
type sweepPlanes struct {
	Count                       int
	ToolActions, CeilingObjects int
	// HeapInuse is the largest kube-apiserver heap in use among them.
	HeapInuse float64
}

func sweepPlaneFigures(planes []planeLoad) *sweepPlanes {
	if len(planes) == 0 {
		return nil
	}
	most := slices.MaxFunc(planes, func(a, b planeLoad) int {
		return cmp.Compare(a.ToolActions+a.CeilingObjects, b.ToolActions+b.CeilingObjects)
	})
	heap := slices.MaxFunc(planes, func(a, b planeLoad) int { return cmp.Compare(a.HeapInuse, b.HeapInuse) })
	return &sweepPlanes{Count: len(planes), ToolActions: most.ToolActions, CeilingObjects: most.CeilingObjects, HeapInuse: heap.HeapInuse}
}

// cpuUse is the machine's CPU over the whole run, in core-seconds.
type cpuUse struct {
	Busy, Capacity, Ours, Others float64
	// Share is the part of the machine other processes took.
	Share float64
}

func machineCPU(r results) *cpuUse {
	if !r.CPUKnown {
		return nil
	}
	capacity := float64(r.Machine.CPUs) * r.Wall.Seconds()
	others := math.Max(0, r.CPUBusy-r.CPUOurs)
	return &cpuUse{Busy: r.CPUBusy, Capacity: capacity, Ours: r.CPUOurs, Others: others, Share: safeDiv(others, capacity)}
}

// latencyRow is one latency run with its verdict and the kube-apiserver's
// garbage collection during it and during the ceiling's run after it.
type latencyRow struct {
	Run             *latencyResult
	Mark            string
	GCs, CeilingGCs gcFrequency
}

// gcFrequency is how many GCs ran during a run and their interval in seconds.
type gcFrequency struct{ Count, Every float64 }

func latencyRows(runs []*latencyResult) []latencyRow {
	var rows []latencyRow
	for _, lat := range runs {
		rows = append(rows, latencyRow{Run: lat, Mark: mark(lat.P99 <= 250*time.Millisecond, false),
			GCs: gcFrequencyOf(lat.Plane), CeilingGCs: gcFrequencyOf(lat.CeilingPlane)})
	}
	return rows
}

func gcFrequencyOf(l planeLoad) gcFrequency {
	if l.GCs <= 0 {
		return gcFrequency{}
	}
	return gcFrequency{Count: l.GCs, Every: l.Seconds / l.GCs}
}

// duplicateView is section 3 and its two verdicts.
type duplicateView struct {
	Result                   *duplicateResult
	Unchanged, Deduplicated  int
	RequestsMark, WritesMark string
}

func duplicateFigures(d *duplicateResult) *duplicateView {
	if d == nil {
		return nil
	}
	return &duplicateView{Result: d, Unchanged: d.Calls - d.RVChanged, Deduplicated: d.Calls - d.NotDeduplicated,
		RequestsMark: mark(d.MaxRequests == 1, false),
		WritesMark:   mark(d.RVChanged == 0 && (!d.EtcdMetric || d.EtcdWrites == 0), false)}
}

// writesView is section 4.
type writesView struct {
	Result *writesResult
	// AtCeiling is whether an SDK invocation wrote what the ceiling does: 3.
	AtCeiling bool
	Mark      string
	// Manifests are the batches applied as a plain manifest, with the
	// admission policy and then without, where measured.
	Manifests []manifestBatch
}

// manifestBatch is the writes batch applied as a plain manifest, with the
// admission policy installed or not.
type manifestBatch struct {
	Policy bool
	Result *writesVariant
}

func writesFigures(wr *writesResult) *writesView {
	if wr == nil {
		return nil
	}
	atCeiling := math.Abs(wr.WritesPerAction-3) < 0.005
	v := &writesView{Result: wr, AtCeiling: atCeiling, Mark: mark(atCeiling, false)}
	for _, m := range []manifestBatch{{Policy: true, Result: wr.Manifest}, {Result: wr.ManifestNoPolicy}} {
		if m.Result != nil {
			v.Manifests = append(v.Manifests, m)
		}
	}
	return v
}

// recoveryView is section 5.
type recoveryView struct {
	Result *recoveryResult
	// InFlight counts the actions not terminal at the kill.
	InFlight int
	Mark     string
	// Lease is how long a claim of the killed process held its action.
	Lease         time.Duration
	Phases, Paths []keyCount
}

type keyCount struct {
	Key   string
	Count int
}

func recoveryFigures(rec *recoveryResult) *recoveryView {
	if rec == nil {
		return nil
	}
	return &recoveryView{Result: rec, InFlight: rec.Actions - rec.TerminalAtKill,
		Mark:  mark(rec.Duplicates == 0 && rec.Lost == 0 && !rec.TimedOut, false),
		Lease: rec.ToolTimeout + rec.LeaseGrace, Phases: sortedCounts(rec.Phases), Paths: sortedCounts(rec.Paths)}
}

func sortedCounts(m map[string]int) []keyCount {
	var out []keyCount
	for _, k := range sortedKeys(m) {
		out = append(out, keyCount{k, m[k]})
	}
	return out
}

// memoryView is section 6: each reading, and the growth from the first to
// the last (nil with fewer than two).
type memoryView struct {
	Rows   []memoryRow
	Growth *memoryGrowth
}

// memoryRow is one reading, with its best figures after a GC.
type memoryRow struct {
	Step             memoryStep
	CreateRate       float64 // actions created per second for the step
	Live, Inuse, RSS float64
}

// memoryGrowth is the last reading against the first.
type memoryGrowth struct {
	First, Last memoryRow
	// AfterGC is whether both readings followed a GC on the settled process.
	AfterGC bool
	// Live, Inuse and RSS are the last reading's ÷ the first's.
	Live, Inuse, RSS float64
	// PerAction is the live heap each finished action added, in bytes;
	// Flat when that is within the heap's variation between readings.
	PerAction float64
	Flat      bool
	Mark      string
}

func memoryFigures(steps []memoryStep) memoryView {
	var v memoryView
	for _, st := range steps {
		v.Rows = append(v.Rows, memoryRow{Step: st, CreateRate: float64(st.Created) / st.CreateTime.Seconds(),
			Live: st.live(), Inuse: st.inuse(), RSS: st.rss()})
	}
	if len(v.Rows) < 2 {
		return v
	}
	first, last := v.Rows[0], v.Rows[len(v.Rows)-1]
	perAction := safeDiv(last.Live-first.Live, float64(last.Step.Present-first.Step.Present))
	live := safeDiv(last.Live, first.Live)
	v.Growth = &memoryGrowth{First: first, Last: last, AfterGC: first.Step.AfterGC && last.Step.AfterGC,
		Live: live, Inuse: safeDiv(last.Inuse, first.Inuse), RSS: safeDiv(last.RSS, first.RSS),
		PerAction: perAction, Flat: math.Abs(perAction) < 50, Mark: mark(live <= 1.25, false)}
	return v
}

// tombstonesView is section 7: the tombstone check of the writes batch,
// the size of a tombstone, live latency during a retention sweep, and the
// latency run with the finished actions kept as tombstones. A part is nil
// when it did not run.
type tombstonesView struct {
	Check *tombstoneCheck
	Sizes *tombstoneSizesView
	Sweep *sweepView
	State *tombstoneStateView
}

// tombstoneCheck is what the writes batch sent to tombstones: the check a
// new action makes before its first attempt.
type tombstoneCheck struct {
	Actions int
	Rows    []writeRow
	// Per new action: every request to tombstones, the GETs among them and
	// the writes; and the writes to toolactions for comparison.
	Requests, Gets, Writes, ToolActionWrites float64
	// Mark is whether the check was one request, a read.
	Mark string
}

// tombstoneSizesView is a tombstone's size against its record's.
type tombstoneSizesView struct {
	Sizes *tombstoneSizes
	// Bytes and RecordBytes are the tombstone's and the record's size in
	// etcd, or their JSON when etcd was not read; Ratio the first ÷ the
	// second.
	Bytes, RecordBytes, Ratio float64
	// ValueRatio and JSONRatio are the tombstone's ÷ the record's, in etcd
	// and as the API server returns them.
	ValueRatio, JSONRatio float64
	// Key is the etcd key of the sample's first tombstone, for example.
	Key string
}

// sweepView compares live latency during the retention sweep with the
// same run without it.
type sweepView struct {
	Result        *sweepResult
	Without, With liveRow
	Rows          []liveRow
	// Ratios are during ÷ without.
	P50Ratio, P95Ratio, P99Ratio float64
	// Window is the run during the sweep; RetireRate what the sweep
	// retired a second during it, and RateMark whether that is within
	// 20% of --retention-rate.
	Window     time.Duration
	RetireRate float64
	RateMark   string
	// Slower is whether the sweep went more than 20% below the limit.
	Slower bool
	// P99Mark is whether live p99 during the sweep stayed within 1.3× of
	// that without it.
	P99Mark string
	// QuarterRetireRate is what the sweep retired a second beside live
	// load at a quarter of the maximum, and QuarterMark whether that is at
	// least the maximum, the rate actions finish at it; empty when the
	// maximum was given, not measured.
	QuarterRetireRate float64
	QuarterMark       string
	// Compared is the sweep at another --retention-rate; nil when not run.
	Compared *sweepComparedView
}

// sweepComparedView is the live run beside a sweep at another pace.
type sweepComparedView struct {
	*sweepCompared
	Row                  liveRow
	RetireRate, P99Ratio float64
	RateMark, P99Mark    string
	Window               time.Duration
}

// liveRow is a live run offered Rate actions a second, with the
// kube-apiserver's GCs during it.
type liveRow struct {
	Label string
	Rate  float64
	Run   *liveRun
	GCs   gcFrequency
}

// tombstoneStateView is the latency run with the finished actions stored
// against the same run once they are tombstones.
type tombstoneStateView struct {
	Result              *tombstoneState
	Records, Tombstones latencyRow
	// Ratios are with tombstones ÷ with the records.
	P50Ratio, P95Ratio, P99Ratio float64
	HeapRatio, AtRestHeapRatio   float64
	// Mark is whether the p99 with tombstones is at most the p99 with the
	// records.
	Mark string
	// ConvertRate is the actions turned into tombstones a second;
	// AtRetentionRate how long --retention-rate's default would take.
	ConvertRate     float64
	AtRetentionRate time.Duration
}

func tombstonesFigures(wr *writesResult, t tombstoneResults) *tombstonesView {
	v := &tombstonesView{}
	if wr != nil {
		c := &tombstoneCheck{Actions: wr.Actions, Requests: wr.TombstoneRequestsPerAction, Gets: wr.TombstoneGetsPerAction,
			Writes: wr.TombstoneWritesPerAction, ToolActionWrites: wr.WritesPerAction}
		for _, r := range wr.Rows {
			if r.Resource == "tombstones" {
				c.Rows = append(c.Rows, r)
			}
		}
		c.Mark = mark(math.Abs(c.Requests-1) < 0.005 && math.Abs(c.Gets-1) < 0.005 && c.Writes == 0, false)
		v.Check = c
	}
	if sz := t.Sizes; sz != nil {
		v.Sizes = &tombstoneSizesView{Sizes: sz, ValueRatio: safeDiv(sz.TombstoneValue, sz.RecordValue),
			JSONRatio: safeDiv(sz.TombstoneJSON, sz.RecordJSON), Key: storageKey("tombstones", sz.Namespace, "writes-000000")}
		v.Sizes.Bytes, v.Sizes.RecordBytes, v.Sizes.Ratio = sz.TombstoneJSON, sz.RecordJSON, v.Sizes.JSONRatio
		if sz.Etcd {
			v.Sizes.Bytes, v.Sizes.RecordBytes, v.Sizes.Ratio = sz.TombstoneValue, sz.RecordValue, v.Sizes.ValueRatio
		}
	}
	if sw := t.Sweep; sw != nil {
		window := seconds(sw.With.Plane.Seconds)
		rate := safeDiv(float64(sw.Retired), window.Seconds())
		quarter := safeDiv(float64(sw.RetiredQuarter), sw.Quarter.Plane.Seconds)
		v.Sweep = &sweepView{Result: sw, Window: window, RetireRate: rate, QuarterRetireRate: quarter,
			Without:  liveRow{Label: "without the sweep (nothing due)", Rate: sw.Rate, Run: &sw.Without, GCs: gcFrequencyOf(sw.Without.Plane)},
			With:     liveRow{Label: "during the sweep", Rate: sw.Rate, Run: &sw.With, GCs: gcFrequencyOf(sw.With.Plane)},
			P50Ratio: durRatio(sw.With.P50, sw.Without.P50), P95Ratio: durRatio(sw.With.P95, sw.Without.P95),
			P99Ratio: durRatio(sw.With.P99, sw.Without.P99),
			RateMark: mark(sw.RetentionRate > 0 && math.Abs(rate/sw.RetentionRate-1) <= 0.2, false),
			Slower:   rate < 0.8*sw.RetentionRate,
			P99Mark:  mark(durRatio(sw.With.P99, sw.Without.P99) <= 1.3 && sw.Without.P99 > 0, false)}
		if sw.MaxRate > 0 {
			v.Sweep.QuarterMark = mark(quarter >= sw.MaxRate, false)
		}
		v.Sweep.Rows = []liveRow{v.Sweep.Without, v.Sweep.With,
			{Label: "during the sweep, at a quarter of the maximum", Rate: sw.Rate / 2, Run: &sw.Quarter, GCs: gcFrequencyOf(sw.Quarter.Plane)}}
		if c := sw.Compared; c != nil {
			cw := seconds(c.Run.Plane.Seconds)
			cr := safeDiv(float64(c.Retired), cw.Seconds())
			p99 := durRatio(c.Run.P99, sw.Without.P99)
			v.Sweep.Compared = &sweepComparedView{sweepCompared: c, Window: cw, RetireRate: cr, P99Ratio: p99,
				Row:      liveRow{Label: fmt.Sprintf("during a sweep at --retention-rate %g", c.RetentionRate), Rate: sw.Rate, Run: &c.Run, GCs: gcFrequencyOf(c.Run.Plane)},
				RateMark: mark(math.Abs(cr/c.RetentionRate-1) <= 0.2, false),
				P99Mark:  mark(p99 <= 1.3 && sw.Without.P99 > 0, false)}
			v.Sweep.Rows = append(v.Sweep.Rows, v.Sweep.Compared.Row)
		}
	}
	if st := t.State; st != nil && st.Records != nil && st.Tombstones != nil {
		r, tb := st.Records, st.Tombstones
		rows := latencyRows([]*latencyResult{r, tb})
		v.State = &tombstoneStateView{Result: st, Records: rows[0], Tombstones: rows[1],
			P50Ratio: durRatio(tb.P50, r.P50), P95Ratio: durRatio(tb.P95, r.P95), P99Ratio: durRatio(tb.P99, r.P99),
			HeapRatio:       safeDiv(tb.Plane.HeapInuse, r.Plane.HeapInuse),
			AtRestHeapRatio: safeDiv(st.AtRestTombstones.HeapInuse, st.AtRestRecords.HeapInuse),
			Mark:            mark(tb.P99 <= r.P99, false),
			ConvertRate:     safeDiv(float64(st.Deleted), st.ConvertTime.Seconds()),
			AtRetentionRate: seconds(float64(st.Deleted) / app.DefaultRetentionRate)}
	}
	if v.Check == nil && v.Sizes == nil && v.Sweep == nil && v.State == nil {
		return nil
	}
	return v
}

func durRatio(a, b time.Duration) float64 { return safeDiv(float64(a), float64(b)) }

// knobRow is a knob as the report's table shows it.
type knobRow struct{ Flag, Env, Full, Smoke, Help string }

func knobRows() []knobRow {
	var rows []knobRow
	for _, k := range knobs {
		rows = append(rows, knobRow{Flag: k.flag, Env: k.env, Full: k.full, Smoke: k.smoke, Help: k.help})
	}
	return rows
}

// cacheReading is the manager's live heap in MiB with First and then Last
// finished actions, in the harness's run at Commit.
type cacheReading struct {
	Commit              string
	First, Last         int
	LiveFirst, LiveLast float64
}

// cacheBeforeChange is the run at 5bd4160 (2026-11-30 14:21 UTC), when the
// manager cached every action and slimmed the finished ones: the "before"
// of the cache change, which no option of the operator can restore.
var cacheBeforeChange = cacheReading{Commit: "5bd4160", First: 1000, Last: 50000, LiveFirst: 7.1, LiveLast: 55.8}

// Ratio is the live heap with Last finished actions ÷ with First.
func (c cacheReading) Ratio() float64 { return c.LiveLast / c.LiveFirst }

// PerAction is the live heap each finished action added, in bytes.
func (c cacheReading) PerAction() float64 {
	return (c.LiveLast - c.LiveFirst) * (1 << 20) / float64(c.Last-c.First)
}

// tuningView is what the numbers justified changing and what they did not;
// a section is nil when its configurations did not run.
type tuningView struct {
	// Threshold is the smallest relative difference taken as one.
	Threshold float64
	Events    *eventsView
	Workers   *workersView
	Finalizer *finalizerView
	Watch     *watchView
	// FirstWrite sets the SDK's apply beside a create.
	FirstWrite *firstWriteView
	// Reconciles are the shipped manager's reconciles per action.
	Reconciles  []levelValue
	CacheBefore cacheReading
}

func (b *bench) tuningFigures() tuningView {
	threshold := b.threshold()
	return tuningView{
		Threshold:   threshold,
		Events:      b.eventsFigures(threshold),
		Workers:     b.workersFigures(threshold),
		Finalizer:   b.finalizerFigures(),
		Watch:       b.watchFigures(threshold),
		FirstWrite:  b.firstWriteFigures(threshold),
		Reconciles:  b.reconciles(),
		CacheBefore: cacheBeforeChange,
	}
}

// gainRange is the least and the most a change moved throughput by over
// the levels measured, against the noise threshold.
type gainRange struct{ Worst, Best, Threshold float64 }

func newGainRange(pairs []pairedRun, threshold float64) gainRange {
	g := gainRange{Worst: math.Inf(1), Best: math.Inf(-1), Threshold: threshold}
	for _, p := range pairs {
		g.Best, g.Worst = math.Max(g.Best, p.Gain), math.Min(g.Worst, p.Gain)
	}
	return g
}

// WithinNoise is whether no level changed beyond the threshold either way.
func (g gainRange) WithinNoise() bool { return g.Best < g.Threshold && g.Worst > -g.Threshold }

// AllGained is whether every level gained beyond the threshold.
func (g gainRange) AllGained() bool { return g.Worst >= g.Threshold }

// NoneGained is whether no level gained beyond the threshold.
func (g gainRange) NoneGained() bool { return g.Best < g.Threshold }

// AllLost is whether every level lost beyond the threshold.
func (g gainRange) AllLost() bool { return g.Best <= -g.Threshold }

// eventsView compares an event for every change of phase (before) with
// the shipped manager's budget of told happy paths (after), and with
// warnings only, level by level.
type eventsView struct {
	Rows []eventsRow
	// MeanGain is the shipped manager's mean change against every event
	// across the levels; Rose when it is beyond the noise.
	MeanGain float64
	Rose     bool
}

// eventsRow is one level of eventsView.
type eventsRow struct {
	pairedRun
	// Quiet is the manager with warnings only at the same level.
	Quiet runSummary
}

func (b *bench) eventsFigures(threshold float64) *eventsView {
	every := b.findVariant(func(v variant) bool { return v.Events == eventsEvery })
	quiet := b.findVariant(func(v variant) bool { return v.Events == eventsWarnings })
	if every.ID == "" || quiet.ID == "" {
		return nil
	}
	e := &eventsView{}
	for _, p := range b.pairs(every.ID, b.baseline().ID) {
		for _, l := range b.results.Levels {
			if q, ok := l.Toolledger[quiet.ID]; ok && l.Concurrency == p.Concurrency {
				e.Rows = append(e.Rows, eventsRow{pairedRun: p, Quiet: q})
			}
		}
	}
	if len(e.Rows) == 0 {
		return e
	}
	for _, r := range e.Rows {
		e.MeanGain += r.Gain
	}
	e.MeanGain /= float64(len(e.Rows))
	e.Rose = e.MeanGain >= threshold
	return e
}

// workersView compares the shipped worker count (before) with another
// (after).
type workersView struct {
	Shipped, Tuned int
	Pairs          []pairedRun
	Gains          gainRange
}

func (b *bench) workersFigures(threshold float64) *workersView {
	base := b.baseline()
	tuned := b.findVariant(func(v variant) bool { return v.Workers != base.Workers })
	if tuned.ID == "" {
		return nil
	}
	pairs := b.pairs(base.ID, tuned.ID)
	return &workersView{Shipped: base.Workers, Tuned: tuned.Workers, Pairs: pairs, Gains: newGainRange(pairs, threshold)}
}

// finalizerView compares manifests without the admission policy (before)
// and with it (after), and the SDK without it and with it.
type finalizerView struct {
	Writes    *writesResult
	Manifests []finalizerRow
	SDK       []pairedRun
}

// finalizerRow is one level of finalizerView.
type finalizerRow struct {
	Pair pairedRun
	// SDK is the shipped configuration at the same level.
	SDK runSummary
}

func (b *bench) finalizerFigures() *finalizerView {
	wr := b.results.Writes
	if wr == nil || wr.Manifest == nil || wr.ManifestNoPolicy == nil {
		return nil
	}
	base := b.baseline()
	before := b.findVariant(func(v variant) bool { return v.Manifest && v.NoPolicy })
	after := b.findVariant(func(v variant) bool { return v.Manifest && !v.NoPolicy })
	sdkWithout := b.findVariant(func(v variant) bool { return !v.Manifest && v.NoPolicy })
	f := &finalizerView{Writes: wr, SDK: b.pairs(sdkWithout.ID, base.ID)}
	for _, p := range b.pairs(before.ID, after.ID) {
		f.Manifests = append(f.Manifests, finalizerRow{Pair: p, SDK: b.results.level(p.Concurrency).Toolledger[base.ID]})
	}
	return f
}

// watchView compares a watch per invocation (before) with the SDK's one
// watch per namespace (after).
type watchView struct {
	Rows  []watchRow
	Gains gainRange
}

// watchRow is one level of a pair of configurations with a CPU figure per
// action of each: every process's (watchView), the kube-apiserver's
// (firstWriteView).
type watchRow struct {
	Pair                pairedRun
	BeforeCPU, AfterCPU float64
}

func (b *bench) watchFigures(threshold float64) *watchView {
	before := b.findVariant(func(v variant) bool { return v.WatchPerInvoke })
	if before.ID == "" {
		return nil
	}
	pairs := b.pairs(before.ID, b.baseline().ID)
	w := &watchView{Gains: newGainRange(pairs, threshold)}
	for _, p := range pairs {
		w.Rows = append(w.Rows, watchRow{Pair: p, BeforeCPU: p.Before.CPUPerOp.total(), AfterCPU: p.After.CPUPerOp.total()})
	}
	return w
}

// firstWriteView compares the SDK's server-side apply (before) with a
// create of the same body (after), each waited for with a watch per
// invocation, by the kube-apiserver's CPU per action; Sizes weighs the
// status against the ceiling's.
type firstWriteView struct {
	Rows  []watchRow
	Gains gainRange
	Sizes *tombstoneSizes
}

func (b *bench) firstWriteFigures(threshold float64) *firstWriteView {
	apply := b.findVariant(func(v variant) bool { return v.WatchPerInvoke })
	create := b.findVariant(func(v variant) bool { return v.Create })
	if apply.ID == "" || create.ID == "" {
		return nil
	}
	pairs := b.pairs(apply.ID, create.ID)
	f := &firstWriteView{Gains: newGainRange(pairs, threshold), Sizes: b.results.Tombstones.Sizes}
	for _, p := range pairs {
		f.Rows = append(f.Rows, watchRow{Pair: p, BeforeCPU: p.Before.CPUPerOp.APIServer, AfterCPU: p.After.CPUPerOp.APIServer})
	}
	return f
}

// reconciles are the shipped manager's reconciles per action, where counted.
func (b *bench) reconciles() []levelValue {
	var out []levelValue
	for _, l := range b.results.Levels {
		if t, ok := l.Toolledger[b.baseline().ID]; ok && t.ReconcilesPerOp > 0 {
			out = append(out, levelValue{l.Concurrency, t.ReconcilesPerOp})
		}
	}
	return out
}

// mark is ✓ when all meet the target, ~ when only some do, ✗ otherwise.
func mark(all, some bool) string {
	switch {
	case all:
		return "✓"
	case some:
		return "~"
	default:
		return "✗"
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
}

// pct is a share as a whole percentage, without the sign.
func pct(share float64) string { return fmt.Sprintf("%.0f", share*100) }

// gain is a relative change as a signed whole percentage, without the sign.
func gain(change float64) string { return fmt.Sprintf("%+.0f", change*100) }

func count(n int) string {
	switch {
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprintf("%d", n)
	}
}

// tput is a mean throughput with the range of its rounds.
func tput(r runSummary) string {
	if r.Rounds > 1 {
		return fmt.Sprintf("%.1f (%.0f–%.0f)", r.Throughput, r.ThroughputMin, r.ThroughputMax)
	}
	return fmt.Sprintf("%.1f", r.Throughput)
}

// noise is the mean and the largest spread between the rounds of one
// configuration at one level, relative to its mean throughput.
func (b *bench) noise() (avg, worst float64) {
	var n int
	add := func(r runSummary) {
		if r.Rounds < 2 || r.Throughput == 0 {
			return
		}
		spread := (r.ThroughputMax - r.ThroughputMin) / r.Throughput
		avg += spread
		worst = math.Max(worst, spread)
		n++
	}
	for _, l := range b.results.Levels {
		add(l.Ceiling3)
		add(l.Ceiling4)
		for _, t := range l.Toolledger {
			add(t)
		}
	}
	if n == 0 {
		return 0, 0
	}
	return avg / float64(n), worst
}

// threshold is the smallest relative difference taken as a difference:
// 10%, or half the mean spread between rounds when that is larger.
func (b *bench) threshold() float64 {
	avg, _ := b.noise()
	return math.Max(0.10, avg/2)
}

// keptLoad is the mean other-process share over the timed runs kept.
func keptLoad(r results) float64 {
	if len(r.OtherLoad) == 0 {
		return 0
	}
	total := 0.0
	for _, v := range r.OtherLoad {
		total += v
	}
	return total / float64(len(r.OtherLoad))
}

// pairedRun is one level at which two configurations were both measured.
type pairedRun struct {
	Concurrency   int
	Before, After runSummary
	// Gain is After's throughput relative to Before's, less one.
	Gain float64
}

// pairs lines up two configurations level by level, where both ran.
func (b *bench) pairs(beforeID, afterID string) []pairedRun {
	var out []pairedRun
	for _, l := range b.results.Levels {
		before, okBefore := l.Toolledger[beforeID]
		after, okAfter := l.Toolledger[afterID]
		if okBefore && okAfter {
			out = append(out, pairedRun{Concurrency: l.Concurrency, Before: before, After: after,
				Gain: safeDiv(after.Throughput, before.Throughput) - 1})
		}
	}
	return out
}

// findVariant is the configuration of this run that matches, if any.
func (b *bench) findVariant(match func(variant) bool) variant {
	for _, v := range b.variants {
		if match(v) {
			return v
		}
	}
	return variant{}
}

// level is the result at a concurrency level.
func (r results) level(concurrency int) levelResult {
	for _, l := range r.Levels {
		if l.Concurrency == concurrency {
			return l
		}
	}
	return levelResult{}
}

// sharedRatios are the levels measured with every process on every CPU too.
func sharedRatios(levels []levelResult) []levelResult {
	var out []levelResult
	for _, l := range levels {
		if l.SharedCeiling3 != nil && l.SharedToolledger != nil {
			out = append(out, l)
		}
	}
	return out
}

// dispatchView is section 8: the slow downstream against the ceiling, the
// fast tool beside a hung one, and the replica runs against one replica.
type dispatchView struct {
	Result *dispatchResult
	// SplitCPUs is whether the control plane had CPUs of its own;
	// MaxReplicas the most replicas of a run.
	SplitCPUs            bool
	MaxReplicas          int
	SlowRatio, HungRatio float64
	SlowMark, HungMark   string
	Scaling              []scalingRow
	ShardedConflicts     float64 // lost claims per action, sharded runs of more than one replica
	UnshardedConflicts   float64 // and unsharded
	UnshardedFast        []scalingRow
}

// scalingRow is a replica run against the one-replica run of its kind.
type scalingRow struct {
	replicaRun
	Ratio, Target float64
	Mark          string
}

func dispatchFigures(d *dispatchResult, splitCPUs bool) *dispatchView {
	if d == nil {
		return nil
	}
	v := &dispatchView{Result: d, SplitCPUs: splitCPUs,
		SlowRatio: safeDiv(d.Slow.Throughput, d.Ceiling.Throughput),
		HungRatio: safeDiv(float64(d.Beside.P99), float64(d.FastAlone.P99)),
	}
	v.SlowMark = mark(v.SlowRatio >= 0.8, false)
	v.HungMark = mark(v.HungRatio <= 1.5 && d.FastAlone.P99 > 0, false)
	single := map[string]float64{}
	for _, r := range d.Replicas {
		if r.Replicas == 1 && r.Sharded {
			single[fmt.Sprintf("%s/%d", r.Downstream, r.Dispatches)] = r.Run.Throughput
		}
	}
	var sharded, unsharded, shardedN, unshardedN float64
	for _, r := range d.Replicas {
		row := scalingRow{replicaRun: r, Ratio: safeDiv(r.Run.Throughput, single[fmt.Sprintf("%s/%d", r.Downstream, r.Dispatches)])}
		switch {
		case r.Replicas == 1:
		case r.Bounded:
			// Where the replicas' slots are the bound: 1.6 with two
			// replicas, 2.2 with three.
			row.Target = 1.0 + 0.6*float64(r.Replicas-1)
		default:
			// Where the API server is the bound, a replica must cost none.
			row.Target = 1.0
		}
		if row.Target > 0 {
			row.Mark = mark(row.Ratio >= row.Target, false)
		}
		v.MaxReplicas = max(v.MaxReplicas, r.Replicas)
		if r.Replicas > 1 && r.Sharded {
			sharded += r.ClaimConflicts
			shardedN++
		}
		if !r.Sharded {
			unsharded += r.ClaimConflicts
			unshardedN++
			v.UnshardedFast = append(v.UnshardedFast, row)
			continue
		}
		v.Scaling = append(v.Scaling, row)
	}
	v.ShardedConflicts, v.UnshardedConflicts = safeDiv(sharded, shardedN), safeDiv(unsharded, unshardedN)
	return v
}
