package main

import (
	"cmp"
	"context"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

// sustainedRun is live load at half the archive's ceiling for a long run,
// with the archive's record retention: the records stored in etcd grow for
// one retention, then level off if retirement keeps up with the actions
// finishing, and grow without bound if it does not.
type sustainedRun struct {
	Namespace string
	// Rate is the actions offered a second; Duration the run's length;
	// RecordRetention the manager's --archive-record-retention; Every the
	// period of the counts.
	Rate                             float64
	Duration, RecordRetention, Every time.Duration
	Samples                          []storedSample
	Live                             openLoopResult
	P50, P99                         time.Duration
	// Growth is the finished records etcd gained over the run's last
	// quarter ÷ the actions offered in it: near 0 when retirement keeps
	// up, near 1 when nothing is retired.
	Growth float64
}

// level is the actions offered over one record retention, where the
// finished records level off when retirement keeps up.
func (r *sustainedRun) level() float64 { return r.Rate * r.RecordRetention.Seconds() }

// storedSample is what etcd and the archive held At into the run;
// InFlight the invocations not yet answered Succeeded then, whose actions
// are among Stored but not finished.
type storedSample struct {
	At                         time.Duration
	Stored, Archived, InFlight int
}

// Finished is the finished records etcd held, as near as the harness
// knows: those stored less those in flight.
func (s storedSample) Finished() int { return max(s.Stored-s.InFlight, 0) }

// sustainedNamespace is the sustained run's tenant.
const sustainedNamespace = "archive-sustained"

// archiveSustained runs the sustained load on a plane of its own, with a
// manager as shipped but for its --archive-record-retention, on an
// archive database of its own; it counts the run's ToolActions straight
// in etcd (a count-only range, no request to the API server) and its rows
// in the archive.
func (b *bench) archiveSustained(ctx context.Context, a *archiveBench, res *archiveResult) error {
	s := b.settings
	if s.ArchiveSustained <= 0 {
		return nil
	}
	run := &sustainedRun{Namespace: sustainedNamespace, Rate: res.Rate, Duration: s.ArchiveSustained,
		RecordRetention: cmp.Or(s.ArchiveSustainedRetention, app.DefaultArchiveRecordRetention), Every: max(time.Second, s.ArchiveSustained/60)}
	res.Sustained = run
	dsn, err := a.pg.Database(ctx, "archive_sustained")
	if err == nil {
		err = migrateArchive(ctx, dsn, false)
	}
	if err != nil {
		return err
	}
	if err := b.restartPlane(ctx, "archive-sustained"); err != nil {
		return err
	}
	config := b.archiveManager(dsn, 0)
	config.ArchiveRecordRetention = s.ArchiveSustainedRetention
	if err := b.useManager(ctx, config); err != nil {
		return err
	}
	defer b.stopManager()
	if err := b.c.namespace(ctx, b.fastTool(run.Namespace)); err != nil {
		return err
	}
	etcd, err := b.c.etcd()
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("cannot connect to the archive: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	b.logf("archive: sustained run, %.1f actions/s for %s, --archive-record-retention %s", run.Rate, run.Duration, run.RecordRetention)
	began := time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	var sampleErr error
	var inFlight atomic.Int64
	sampled.Go(func() {
		// Up to the run's end: the invocations still answered after it
		// (drained) are not the offered load.
		for time.Since(began) <= run.Duration {
			sample := storedSample{At: time.Since(began), InFlight: int(inFlight.Load())}
			stored, err := etcd.count(ctx, storageKey("toolactions", run.Namespace, ""))
			if err == nil {
				sample.Stored = stored
				err = conn.QueryRow(ctx, `SELECT count(*) FROM toolledger_records WHERE namespace = $1`, run.Namespace).Scan(&sample.Archived)
			}
			if err != nil {
				sampleErr = err
				return
			}
			run.Samples = append(run.Samples, sample)
			if testenv.Sleep(sampleCtx, min(run.Every, run.Duration-time.Since(began))) != nil {
				return
			}
		}
	})
	run.Live = openLoop(ctx, run.Rate, 0, run.Duration, 4096, func(ctx context.Context, _, seq int) error {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		_, err := invokeSucceeded(ctx, b.sdk, request(run.Namespace, fmt.Sprintf("sustained-%07d", seq), seq+1))
		return err
	})
	stopSampling()
	sampled.Wait()
	if sampleErr != nil {
		return fmt.Errorf("cannot count the sustained run's records: %w", sampleErr)
	}
	run.P50, run.P99 = percentile(run.Live.Latencies, 50), percentile(run.Live.Latencies, 99)
	run.Growth = growth(run)
	last := run.Samples[len(run.Samples)-1]
	b.logf("archive: sustained run: p50 %s ms, p99 %s ms; at the end %d ToolActions in etcd, %d of them in flight, %d archived; over the last quarter the finished ones gained %.2f of the actions offered",
		ms(run.P50), ms(run.P99), last.Stored, last.InFlight, last.Archived, run.Growth)
	if run.Live.FirstErr != nil {
		b.fail("archive: sustained run: %d errors, first: %v", run.Live.Errors, run.Live.FirstErr)
	}
	return nil
}

// growth is the finished records etcd gained from the sample nearest three
// quarters into the run to the last one, ÷ the actions offered meanwhile.
func growth(run *sustainedRun) float64 {
	if len(run.Samples) < 2 {
		return 0
	}
	last := run.Samples[len(run.Samples)-1]
	from := run.Samples[0]
	for _, s := range run.Samples {
		if s.At <= last.At*3/4 {
			from = s
		}
	}
	return safeDiv(float64(last.Finished()-from.Finished()), run.Rate*(last.At-from.At).Seconds())
}

// count returns how many keys etcd holds under prefix.
func (e *etcdStorage) count(ctx context.Context, prefix string) (int, error) {
	end := []byte(prefix)
	end[len(end)-1]++
	var out struct {
		Count int `json:"count,string"`
	}
	in := map[string]any{"key": []byte(prefix), "range_end": end, "count_only": true}
	if err := e.call(ctx, "/v3/kv/range", in, &out); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// plotSustained draws the sustained run's counts against time, beside
// the actions offered over one record retention: where the records stored
// level off when retirement keeps up.
func plotSustained(path string, run *sustainedRun) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Finished records in etcd at %.1f actions/s, --archive-record-retention %s", run.Rate, run.RecordRetention)
	p.X.Label.Text = "seconds into the run"
	p.Y.Label.Text = "records"
	p.Legend.Top, p.Legend.Left = true, true
	var stored, archived plotter.XYs
	for _, s := range run.Samples {
		stored = append(stored, plotter.XY{X: s.At.Seconds(), Y: float64(s.Finished())})
		archived = append(archived, plotter.XY{X: s.At.Seconds(), Y: float64(s.Archived)})
	}
	for _, l := range []struct {
		name string
		pts  plotter.XYs
		c    color.Color
	}{{"finished ToolActions in etcd (stored less in flight)", stored, variantColors[0]}, {"records in the archive", archived, variantColors[2]}} {
		line, err := plotter.NewLine(l.pts)
		if err != nil {
			return err
		}
		line.Color, line.Width = l.c, vg.Points(2)
		p.Add(line)
		p.Legend.Add(l.name, line)
	}
	level := run.level()
	offered := plotter.NewFunction(func(float64) float64 { return level })
	offered.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	offered.Color = colorFloor
	p.Add(offered)
	p.Legend.Add("actions offered in one record retention", offered)
	p.X.Min, p.Y.Min = 0, 0
	p.Y.Max = level * 1.3
	for _, s := range run.Samples {
		p.Y.Max = max(p.Y.Max, float64(max(s.Finished(), s.Archived))*1.1)
	}
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

// writeSustainedPlot draws the sustained run into dir, when it ran.
func (b *bench) writeSustainedPlot(dir string) error {
	a := b.results.Archive
	if a == nil || a.Sustained == nil || len(a.Sustained.Samples) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return plotSustained(filepath.Join(dir, sustainedPlot), a.Sustained)
}

// sustainedPlot is the sustained run's plot, beside benchmarks.md.
const sustainedPlot = "benchmarks-sustained.png"
