package main

import (
	"fmt"
	"image/color"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colorCeiling3 = color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 0xff}
	colorCeiling4 = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
	colorFloor    = color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}
	variantColors = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	percentileColors = []color.Color{
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	}
)

// plot draws three panels into one PNG: throughput against concurrency
// (ceilings and every toolledger configuration), the baseline's latency
// percentiles against concurrency, and the percentiles of the latency run
// and of the duplicate path.
func (b *bench) plot(path string) error {
	levels := b.results.Levels
	ticks := plot.ConstantTicks{}
	for _, l := range levels {
		ticks = append(ticks, plot.Tick{Value: float64(l.Concurrency), Label: strconv.Itoa(l.Concurrency)})
	}
	logX := len(levels) > 1 && levels[0].Concurrency > 0

	tp := plot.New()
	tp.Title.Text = "Throughput against concurrency"
	tp.X.Label.Text = "concurrency (callers, one object or action each in flight)"
	tp.Y.Label.Text = "objects or actions per second"
	tp.Legend.Top, tp.Legend.Left = true, true
	top, bottom := map[*plot.Plot]float64{}, map[*plot.Plot]float64{}
	maxY := func(p *plot.Plot) float64 { return max(1, top[p]) }
	minY := func(p *plot.Plot) float64 { return max(0.1, bottom[p]) }
	addLine := func(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dashed bool) error {
		if len(pts) == 0 {
			return nil
		}
		for _, pt := range pts {
			top[p] = max(top[p], pt.Y)
			if b, ok := bottom[p]; !ok || pt.Y < b {
				bottom[p] = pt.Y
			}
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		if dashed {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(name, line, points)
		return nil
	}
	var c3, c4, floor plotter.XYs
	for _, l := range levels {
		c3 = append(c3, plotter.XY{X: float64(l.Concurrency), Y: l.Ceiling3.Throughput})
		c4 = append(c4, plotter.XY{X: float64(l.Concurrency), Y: l.Ceiling4.Throughput})
		floor = append(floor, plotter.XY{X: float64(l.Concurrency), Y: l.Floor.Throughput})
	}
	if err := addLine(tp, "ceiling: create + 2 status writes", c3, colorCeiling3, false); err != nil {
		return err
	}
	if err := addLine(tp, "a controller's floor: the same, with its watch and its callers'", floor, colorFloor, false); err != nil {
		return err
	}
	if err := addLine(tp, "ceiling: 4 writes (with a finalizer update)", c4, colorCeiling4, true); err != nil {
		return err
	}
	for i, v := range b.variants {
		var pts plotter.XYs
		for _, l := range levels {
			if r, ok := l.Toolledger[v.ID]; ok {
				pts = append(pts, plotter.XY{X: float64(l.Concurrency), Y: r.Throughput})
			}
		}
		if err := addLine(tp, "toolledger: "+v.label(), pts, variantColors[i%len(variantColors)], !v.Baseline); err != nil {
			return err
		}
	}
	tp.Y.Min = 0
	tp.Y.Max = maxY(tp) * 1.45 // room for the legend

	lp := plot.New()
	lp.Title.Text = "toolledger create→Succeeded latency (closed loop, as shipped)"
	lp.X.Label.Text = "concurrency"
	lp.Y.Label.Text = "milliseconds (log scale)"
	lp.Legend.Top, lp.Legend.Left = true, true
	base := b.baseline()
	for i, p := range []float64{50, 95, 99} {
		var pts plotter.XYs
		for _, l := range levels {
			r := l.Toolledger[base.ID]
			d := map[float64]time.Duration{50: r.P50, 95: r.P95, 99: r.P99}[p]
			if d > 0 { // no samples: nothing to put on a log scale
				pts = append(pts, plotter.XY{X: float64(l.Concurrency), Y: float64(d) / float64(time.Millisecond)})
			}
		}
		if err := addLine(lp, fmt.Sprintf("p%.0f", p), pts, percentileColors[i], false); err != nil {
			return err
		}
	}
	var cp plotter.XYs
	for _, l := range levels {
		if l.Ceiling3.P99 > 0 {
			cp = append(cp, plotter.XY{X: float64(l.Concurrency), Y: float64(l.Ceiling3.P99) / float64(time.Millisecond)})
		}
	}
	if err := addLine(lp, "ceiling p99 (3 writes, no controller)", cp, colorCeiling3, true); err != nil {
		return err
	}
	// Latencies span orders of magnitude across the levels: a log scale.
	lp.Y.Scale = plot.LogScale{}
	lp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lp.Y.Min = minY(lp) / 1.5
	lp.Y.Max = maxY(lp) * 4
	if logX {
		for _, p := range []*plot.Plot{tp, lp} {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = ticks
		}
	}

	bp := plot.New()
	bp.Title.Text = "Latency percentiles"
	bp.Y.Label.Text = "milliseconds"
	bp.Legend.Top, bp.Legend.Left = true, true
	var groups []string
	values := [3]plotter.Values{}
	for _, lat := range b.results.Latency {
		groups = append(groups, wrapLabel(fmt.Sprintf("create→Succeeded at %.0f%% load, %s", lat.Load*100, lat.State), 22))
		for i, d := range []time.Duration{lat.P50, lat.P95, lat.P99} {
			values[i] = append(values[i], float64(d)/float64(time.Millisecond))
		}
	}
	if dup := b.results.Duplicate; dup != nil {
		groups = append(groups, wrapLabel("duplicate Invoke (Succeeded key)", 22))
		for i, d := range []time.Duration{dup.P50, dup.P95, dup.P99} {
			values[i] = append(values[i], float64(d)/float64(time.Millisecond))
		}
	}
	width := vg.Points(22)
	for i, name := range []string{"p50", "p95", "p99"} {
		if len(values[i]) == 0 {
			continue
		}
		bars, err := plotter.NewBarChart(values[i], width)
		if err != nil {
			return err
		}
		bars.Color = percentileColors[i]
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(i-1) * width
		bp.Add(bars)
		bp.Legend.Add(name, bars)
	}
	target := plotter.NewFunction(func(float64) float64 { return 250 })
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	target.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	bp.Add(target)
	bp.Legend.Add("p99 target 250 ms", target)
	bp.NominalX(groups...)
	bp.Y.Min = 0
	bp.Y.Max = 300
	for _, v := range values {
		for _, x := range v {
			bp.Y.Max = max(bp.Y.Max, x*1.15)
		}
	}

	const w, h = 18 * vg.Inch, 6 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{tp, lp, bp}}, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[0][1])
	bp.Draw(canvases[0][2])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// wrapLabel breaks s at spaces into lines of at most width characters
// (longer words stay whole), so that the bar chart's group labels do not
// run into each other.
func wrapLabel(s string, width int) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
