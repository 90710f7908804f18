package bench

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"github.com/streamdedup/dedup/internal/humanize"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The chart helpers below are shared by every dedupbench run: [BarChart]
// (horizontal bars, a log axis where values span decades, one bar marked
// as the 1x reference), [LineChart] (lines with markers at the measured
// points, log-log if asked, horizontal reference lines) and [Figure],
// which lays panels side by side with a title, the legend outside the
// data and a caption saying what was measured, where and when.

// Bar is one bar of a [BarChart].
type Bar struct {
	// Label names the bar on the category axis.
	Label string
	// Value is the bar's length. A value <= 0 draws no bar (a log axis
	// has no zero) and its Note says why.
	Value float64
	// Note is written at the end of the bar ("" writes the ratio to the
	// reference bar when the chart has one).
	Note string
}

// BarChart is a horizontal bar chart: the first bar at the top, values on
// the x axis, on a log scale when Log is set.
type BarChart struct {
	// Title is drawn above the panel; XLabel names the value axis.
	Title, XLabel string
	Bars          []Bar
	// Log puts the value axis on a log scale, whole decades from below the
	// smallest value to above the largest.
	Log bool
	// Ref is the index of the reference bar, drawn as a dashed vertical
	// "1x" line through every bar; -1 for none.
	Ref int
	// HideLabels leaves the category labels out, for a panel beside one
	// that shows them in the same order.
	HideLabels bool
	// Color fills the bars; the reference bar is drawn in grey. Default
	// plotutil's first color.
	Color color.Color
}

// refColor is the color of reference bars and lines.
var refColor = color.Gray{Y: 110}

// Plot builds the panel.
func (b BarChart) Plot() (*plot.Plot, error) {
	if len(b.Bars) == 0 {
		return nil, errors.New("bench: bar chart with no bars")
	}
	if b.Ref >= len(b.Bars) {
		return nil, fmt.Errorf("bench: bar chart reference %d of %d bars", b.Ref, len(b.Bars))
	}
	p := plot.New()
	p.Title.Text = b.Title
	p.X.Label.Text = b.XLabel
	lo, hi := math.Inf(1), 0.0
	for _, x := range b.Bars {
		if x.Value > 0 {
			lo, hi = min(lo, x.Value), max(hi, x.Value)
		}
	}
	if hi == 0 {
		lo, hi = 1, 10
	}
	if b.Log {
		p.X.Scale = plot.LogScale{}
		p.X.Min, p.X.Max = decadeBelow(lo), decadeAbove(hi)
		p.X.Tick.Marker = LogTicks{}
	} else {
		p.X.Min, p.X.Max = 0, hi*1.25
		p.X.Tick.Marker = plot.TickerFunc(func(mn, mx float64) []plot.Tick {
			ts := plot.DefaultTicks{}.Ticks(mn, mx)
			for i := range ts {
				if ts[i].Label != "" {
					ts[i].Label = compact(ts[i].Value)
				}
			}
			return ts
		})
	}
	n := len(b.Bars)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	names := make([]string, n)
	if !b.HideLabels {
		for i, x := range b.Bars {
			names[n-1-i] = x.Label
		}
	}
	p.NominalY(names...)
	p.Y.Padding = 0
	col := b.Color
	if col == nil {
		col = plotutil.Color(0)
	}
	base := p.X.Min
	bars := &hbars{chart: b, base: base, color: col}
	p.Add(bars)
	if b.Ref >= 0 && b.Bars[b.Ref].Value > 0 {
		v := b.Bars[b.Ref].Value
		l, err := plotter.NewLine(plotter.XYs{{X: v, Y: p.Y.Min}, {X: v, Y: p.Y.Max}})
		if err != nil {
			return nil, fmt.Errorf("bench: bar chart reference line: %w", err)
		}
		l.Color = refColor
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	return p, nil
}

// hbars draws a BarChart's bars and notes.
type hbars struct {
	chart BarChart
	base  float64
	color color.Color
}

func (h *hbars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := len(h.chart.Bars)
	half := (trY(1) - trY(0)) * 0.35
	sty := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 9), Handler: plot.DefaultTextHandler, YAlign: draw.YCenter}
	for i, x := range h.chart.Bars {
		y := trY(float64(n - 1 - i))
		note := x.Note
		if x.Value > 0 {
			x0, x1 := trX(h.base), trX(x.Value)
			pts := []vg.Point{{X: x0, Y: y - half}, {X: x1, Y: y - half}, {X: x1, Y: y + half}, {X: x0, Y: y + half}}
			col := h.color
			if i == h.chart.Ref {
				col = refColor
			}
			c.FillPolygon(col, c.ClipPolygonXY(pts))
			if note == "" && h.chart.Ref >= 0 && h.chart.Bars[h.chart.Ref].Value > 0 {
				note = ratio(x.Value / h.chart.Bars[h.chart.Ref].Value)
			}
			c.FillText(sty, vg.Point{X: min(x1, c.Max.X) + vg.Points(3), Y: y}, note)
			continue
		}
		c.FillText(sty, vg.Point{X: trX(h.base) + vg.Points(3), Y: y}, note)
	}
}

func (h *hbars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = h.base, h.base
	for _, x := range h.chart.Bars {
		xmax = max(xmax, x.Value)
	}
	return xmin, xmax, -0.6, float64(len(h.chart.Bars)) - 0.4
}

// ratio formats a ratio to a reference: "1x", "5.9x", "0.20x", "1/30".
func ratio(r float64) string {
	switch {
	case r <= 0 || math.IsNaN(r) || math.IsInf(r, 0):
		return ""
	case r >= 0.995 && r < 1.005:
		return "1x"
	case r >= 10:
		return fmt.Sprintf("%.0fx", r)
	case r >= 1:
		return fmt.Sprintf("%.1fx", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2fx", r)
	}
	return fmt.Sprintf("1/%.0f", 1/r)
}

// Series is one line of a [LineChart]: points joined by a line, a marker
// at each.
type Series struct {
	Name   string
	Points plotter.XYs
}

// RefLine is a horizontal reference line across a [LineChart].
type RefLine struct {
	Label string
	Y     float64
}

// LineChart draws series as lines with a marker at every measured point,
// on log axes when LogX or LogY is set.
type LineChart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Series                []Series
	Refs                  []RefLine
}

// Plot builds the panel and its legend (one entry per series and
// reference line), to be drawn outside the data by a [Figure].
func (l LineChart) Plot() (*plot.Plot, plot.Legend, error) {
	leg := plot.NewLegend()
	if len(l.Series) == 0 {
		return nil, leg, errors.New("bench: line chart with no series")
	}
	p := plot.New()
	p.Title.Text = l.Title
	p.X.Label.Text, p.Y.Label.Text = l.XLabel, l.YLabel
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, s := range l.Series {
		pts := make(plotter.XYs, 0, len(s.Points))
		for _, pt := range s.Points {
			if (l.LogX && pt.X <= 0) || (l.LogY && pt.Y <= 0) || math.IsNaN(pt.X) || math.IsNaN(pt.Y) {
				continue // a log axis has no zero
			}
			pts = append(pts, pt)
			xlo, xhi, ylo, yhi = min(xlo, pt.X), max(xhi, pt.X), min(ylo, pt.Y), max(yhi, pt.Y)
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, leg, fmt.Errorf("bench: line chart %s: %w", s.Name, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		points.Radius = vg.Points(3)
		p.Add(line, points)
		leg.Add(s.Name, line, points)
	}
	if math.IsInf(xlo, 1) {
		return nil, leg, errors.New("bench: line chart with no point to draw")
	}
	for _, r := range l.Refs {
		if l.LogY && r.Y <= 0 {
			continue
		}
		ylo, yhi = min(ylo, r.Y), max(yhi, r.Y)
	}
	if l.LogX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, LogTicks{}
		p.X.Min, p.X.Max = decadeBelow(xlo), decadeAbove(xhi)
	}
	if l.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, LogTicks{}
		p.Y.Min, p.Y.Max = decadeBelow(ylo), decadeAbove(yhi)
	}
	for _, r := range l.Refs {
		if l.LogY && r.Y <= 0 {
			continue
		}
		rl, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: r.Y}, {X: p.X.Max, Y: r.Y}})
		if err != nil {
			return nil, leg, fmt.Errorf("bench: reference line %s: %w", r.Label, err)
		}
		rl.Color = refColor
		rl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(rl)
		leg.Add(r.Label, rl)
	}
	p.Add(plotter.NewGrid())
	return p, leg, nil
}

// LogTicks labels every decade of a log axis, including the ends, with a
// compact number ("0.0001", "1", "10k", "2M"), and marks the 2..9
// multiples between them without labels.
type LogTicks struct{}

// Ticks returns the ticks between lo and hi (both > 0).
func (LogTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= 0 {
		return nil
	}
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo) + 1e-9); e <= math.Ceil(math.Log10(hi)-1e-9); e++ {
		d := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := d * float64(m)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = compact(v)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// compact formats an axis value: 0.0001, 0.5, 25, 10k, 2.5M, 1G.
func compact(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', -1, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func decadeBelow(v float64) float64 { return math.Pow(10, math.Floor(math.Log10(v)+1e-9)) }
func decadeAbove(v float64) float64 { return math.Pow(10, math.Ceil(math.Log10(v)-1e-9)) }

// plotLines draws the series (a name, then its plotter.XYs, for each) as
// lines with points under title and the axis labels, the legend top
// left, and saves the chart as name in dir (savePlot).
func plotLines(dir, name, title, xLabel, yLabel string, series ...any) ([]string, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	if err := plotutil.AddLinePoints(p, series...); err != nil {
		return nil, fmt.Errorf("bench: plot %s: %w", name, err)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return savePlot(p, dir, name)
}

// PlotLoad draws achieved throughput and batch latency against the target
// rate: load_throughput and load_latency, as SVG and PNG in dir.
func PlotLoad(r *LoadResult, dir string) ([]string, error) {
	var ideal, ach, p50, p99, p999 plotter.XYs
	ms := func(d float64) float64 { return max(d/1e6, 1e-3) }
	for _, s := range r.Steps {
		ideal = append(ideal, plotter.XY{X: s.Target, Y: s.Target})
		ach = append(ach, plotter.XY{X: s.Target, Y: s.Achieved})
		p50 = append(p50, plotter.XY{X: s.Target, Y: ms(float64(s.P50))})
		p99 = append(p99, plotter.XY{X: s.Target, Y: ms(float64(s.P99))})
		p999 = append(p999, plotter.XY{X: s.Target, Y: ms(float64(s.P999))})
	}
	c := r.Config
	caption := []string{fmt.Sprintf("dedupbench load: engine %s/%s, window %v, AutoCommit %v, %v per rate, one batch per %v.",
		c.Engine.ModeName(), c.Engine.Filter, c.Engine.Window, c.Engine.AutoCommit, c.Duration, c.Tick)}
	if r.Machine != nil {
		caption = append(caption, r.Machine.String())
	}
	tp, tl, err := LineChart{Title: "achieved vs offered rate (open loop)", XLabel: "target events/s", YLabel: "achieved events/s",
		Series: []Series{{"achieved", ach}, {"offered", ideal}}}.Plot()
	if err != nil {
		return nil, fmt.Errorf("bench: plot throughput: %w", err)
	}
	files, err := Figure{Panels: []*plot.Plot{tp}, Legend: &tl, Caption: caption, Width: 7 * vg.Inch}.Save(dir, "load_throughput")
	if err != nil {
		return files, err
	}
	lp, ll, err := LineChart{Title: "ObserveBatch latency vs offered rate", XLabel: "target events/s", YLabel: "batch latency (ms)", LogY: true,
		Series: []Series{{"p50", p50}, {"p99", p99}, {"p99.9", p999}}}.Plot()
	if err != nil {
		return files, fmt.Errorf("bench: plot latency: %w", err)
	}
	more, err := Figure{Panels: []*plot.Plot{lp}, Legend: &ll, Caption: caption, Width: 7 * vg.Inch}.Save(dir, "load_latency")
	return append(files, more...), err
}

// SingleProbeFloor is the memory a windowed filter that answers with one
// cache-line probe needs at a 1% false-positive target, in bytes per key
// held (docs/sizing.md derives it).
const SingleProbeFloor = 2.2

// PlotMemory draws filter bytes per key against the false-positive target
// for each backend of the sweep, on log-log axes with the windowed
// single-probe floor: memory_per_key, as SVG and PNG in dir.
func PlotMemory(sweep []SweepPoint, m *Machine, dir string) ([]string, error) {
	var order []string
	by := map[string]plotter.XYs{}
	var keys uint64
	for _, s := range sweep {
		if _, ok := by[s.Backend]; !ok {
			order = append(order, s.Backend)
		}
		by[s.Backend] = append(by[s.Backend], plotter.XY{X: s.TargetFP, Y: s.BytesPerKey})
		keys = max(keys, s.Keys)
	}
	lc := LineChart{Title: "filter memory per key vs false-positive target", XLabel: "false-positive target",
		YLabel: "bytes per key", LogX: true, LogY: true}
	for _, b := range order {
		lc.Series = append(lc.Series, Series{Name: b, Points: by[b]})
	}
	if len(by) > 0 {
		lc.Refs = []RefLine{{Label: "windowed single-probe floor at 1% (2.2 B/key)", Y: SingleProbeFloor}}
	}
	p, leg, err := lc.Plot()
	if err != nil {
		return nil, fmt.Errorf("bench: plot memory: %w", err)
	}
	caption := []string{fmt.Sprintf("dedupbench compare's memory sweep: a probabilistic engine filled with %s keys over one window, then as many fresh keys probed.",
		humanize.Count(float64(keys)))}
	if m != nil {
		caption = append(caption, m.String())
	}
	return Figure{Panels: []*plot.Plot{p}, Legend: &leg, Caption: caption, Width: 9 * vg.Inch}.Save(dir, "memory_per_key")
}

// compareBars turns rows into bars of val, the reference row marked.
func compareBars(rows []CompareRow, ref string, val func(CompareRow) float64) ([]Bar, int) {
	var bars []Bar
	r := -1
	for _, x := range rows {
		b := Bar{Label: x.Name, Value: val(x)}
		switch {
		case x.Skipped != "":
			b.Value, b.Note = 0, "not run"
		case b.Value <= 0:
			b.Note = "not measured"
		}
		if x.Name == ref && x.Skipped == "" {
			r = len(bars)
		}
		bars = append(bars, b)
	}
	return bars, r
}

// PlotHeadline draws the comparison's headline: events per second and
// resident set per key held of every target, the reference (redis-server
// when it ran) as the 1x line, on log axes: headline, as SVG and PNG in
// dir.
func PlotHeadline(r *CompareResult, dir string) ([]string, error) {
	if len(r.Rows) == 0 {
		return nil, errors.New("bench: headline chart: no rows")
	}
	bars, ref := compareBars(r.Rows, r.Reference, func(x CompareRow) float64 { return x.EventsPerSec })
	speed, err := BarChart{Title: "events/s (log)", XLabel: "events per second, labels: ratio to " + shortRef(r.Reference), Bars: bars, Ref: ref, Log: true}.Plot()
	if err != nil {
		return nil, fmt.Errorf("bench: headline chart: %w", err)
	}
	bars, ref = compareBars(r.Rows, r.Reference, func(x CompareRow) float64 { return x.RSSPerKey })
	mem, err := BarChart{Title: "RSS per key held (log)", XLabel: "bytes of resident set per key", Bars: bars, Ref: ref, Log: true,
		HideLabels: true, Color: plotutil.Color(1)}.Plot()
	if err != nil {
		return nil, fmt.Errorf("bench: headline chart: %w", err)
	}
	c := r.Config
	caption := []string{
		fmt.Sprintf("dedupbench compare: %s events (%.0f%% duplicates, delay %v), window %v, FP target %g, batches of %d; each target in a process of its own.",
			humanize.Count(float64(firstEvents(r))), 100*c.Stream.DuplicateFraction, c.Stream.Delay, c.Window, c.FalsePositiveRate, c.Batch),
		"RSS per key: growth of the resident set of the process holding the keys (redis-server's own for Redis), per key held. Dashed line: " + r.Reference + " = 1x.",
	}
	if r.Machine != nil {
		caption = append(caption, r.Machine.String())
	}
	return Figure{Title: "dedup against the layers people use today, same stream", Panels: []*plot.Plot{speed, mem},
		Caption: caption, Width: 10 * vg.Inch, Height: 5 * vg.Inch}.Save(dir, "headline")
}

// PlotScale draws the memory-at-scale runs: resident set per key of each
// target at each size, redis-server's as the 1x line: memory_scale, as SVG
// and PNG in dir.
func PlotScale(r *CompareResult, dir string) ([]string, error) {
	var sizes []int
	for _, x := range r.Scale {
		if !slices.Contains(sizes, x.ScaleKeys) {
			sizes = append(sizes, x.ScaleKeys)
		}
	}
	if len(sizes) == 0 {
		return nil, errors.New("bench: memory-at-scale chart: no rows")
	}
	var panels []*plot.Plot
	for i, n := range sizes {
		var rows []CompareRow
		for _, x := range r.Scale {
			if x.ScaleKeys == n {
				rows = append(rows, x)
			}
		}
		bars, ref := compareBars(rows, "redis SET NX EX", func(x CompareRow) float64 { return x.RSSPerKey })
		p, err := BarChart{Title: humanize.Count(float64(n)) + " keys", XLabel: "bytes of resident set per key (log)", Bars: bars, Ref: ref, Log: true,
			HideLabels: i > 0, Color: plotutil.Color(1)}.Plot()
		if err != nil {
			return nil, fmt.Errorf("bench: memory-at-scale chart: %w", err)
		}
		panels = append(panels, p)
	}
	caption := []string{
		fmt.Sprintf("dedupbench compare, memory at scale: N distinct keys within one window (%v), FP target %g, each target in a process of its own;", scaleWindow, r.Config.FalsePositiveRate),
		"RSS per key: growth of the resident set of the process holding the keys (redis-server's own for Redis). Dashed line: redis-server = 1x.",
	}
	if r.Machine != nil {
		caption = append(caption, r.Machine.String())
	}
	return Figure{Title: "resident memory per key held, against redis-server", Panels: panels, Caption: caption,
		Width: 10 * vg.Inch, Height: 3.5 * vg.Inch}.Save(dir, "memory_scale")
}
