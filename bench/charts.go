package bench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/streamdedup/dedup/internal/humanize"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotAdvisor draws the advisor check: for each delay distribution, the
// engine's estimate of the duplicates its window lets through per million
// arrivals (dedup.Stats.WindowAdvice) beside the truth (closed form) and
// the leaks counted in the run, against the window, on a log y axis when
// the values span a decade or more: advisor, as SVG and PNG in dir.
func PlotAdvisor(results []*AdvisorResult, dir string) ([]string, error) {
	if len(results) == 0 {
		return nil, errors.New("bench: advisor chart: no results")
	}
	var panels []*plot.Plot
	var legend plot.Legend
	for i, res := range results {
		if len(res.Runs) == 0 {
			return nil, fmt.Errorf("bench: advisor chart: %s delays: no runs", res.Config.Delay)
		}
		var est, truth, counted plotter.XYs
		lo, hi := math.Inf(1), 0.0
		for _, r := range res.Runs {
			x := r.Window.Minutes()
			est = append(est, plotter.XY{X: x, Y: r.Advice.LeaksPerMillion})
			truth = append(truth, plotter.XY{X: x, Y: r.ModelLeaksPerMillion})
			counted = append(counted, plotter.XY{X: x, Y: r.MeasuredLeaksPerMillion})
			for _, v := range []float64{r.Advice.LeaksPerMillion, r.ModelLeaksPerMillion, r.MeasuredLeaksPerMillion} {
				if v > 0 {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		yl := "leaks per million arrivals"
		if i > 0 {
			yl = ""
		}
		p, leg, err := LineChart{Title: res.Config.Delay + " delays", XLabel: "window (minutes)", YLabel: yl, LogY: hi >= 10*lo,
			Series: []Series{{"estimated (Stats.WindowAdvice)", est}, {"true (closed form)", truth}, {"counted in the run", counted}}}.Plot()
		if err != nil {
			return nil, fmt.Errorf("bench: advisor chart: %s delays: %w", res.Config.Delay, err)
		}
		if i == 0 {
			legend = leg
		}
		panels = append(panels, p)
	}
	c := results[0].Config
	caption := []string{
		fmt.Sprintf("dedupbench advisor: %v of event time per distribution at %s arrivals/s (%.0f%% duplicates), %d generations, mean delay %v (lognormal sigma %g; mixture 80%% mean 10s, 20%% mean 10m).",
			c.Duration, humanize.Count(c.Rate), 100*c.DuplicateFraction, c.Generations, c.Mean, c.Sigma),
		"Estimated: the engine's own figure at the stream's end; true: the distribution's survival over the engine's retention; counted: duplicates answered New (runs low where the stream's end cuts delays off).",
	}
	if m := spanMachine(results); m != nil {
		caption = append(caption, m.String())
	}
	return Figure{Title: "window advisor: estimated against true leaks per window", Panels: panels, Legend: &legend, Caption: caption,
		Width: 11 * vg.Inch, Height: 4.5 * vg.Inch}.Save(dir, "advisor")
}

// spanMachine is the machine of a run of several checks: the first one's
// start, the last one's end.
func spanMachine(results []*AdvisorResult) *Machine {
	first, last := results[0].Machine, results[len(results)-1].Machine
	if first == nil || last == nil {
		return first
	}
	m := *first
	m.Ended, m.LoadEnd = last.Ended, last.LoadEnd
	return &m
}

// PlotIdem draws the idempotency-key comparison: requests per second with
// new keys and with replayed keys of every target, the upstream called
// directly as the 1x line, on log axes, and the p99 latency of each beside
// them: idem, as SVG and PNG in dir.
func PlotIdem(r *IdemResult, dir string) ([]string, error) {
	if len(r.Rows) == 0 || len(r.Config.UpstreamLatencies) == 0 {
		return nil, errors.New("bench: idem chart: no rows")
	}
	// The first section: the upstream with a service time.
	latency := r.Config.UpstreamLatencies[0]
	rows := r.section(latency)
	bars := func(val func(IdemRow) float64) ([]Bar, int) {
		var bs []Bar
		ref := -1
		for i, x := range rows {
			b := Bar{Label: x.Target, Value: val(x)}
			if b.Value <= 0 {
				b.Note = "not measured"
			}
			if x.Target == "upstream directly" {
				ref = i
			}
			bs = append(bs, b)
		}
		return bs, ref
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	var panels []*plot.Plot
	for i, p := range []struct {
		title, xlabel string
		val           func(IdemRow) float64
		color         int
	}{
		{"new keys: requests/s", "requests per second, labels: ratio to direct", func(x IdemRow) float64 { return x.NewPerSec }, 0},
		{"replays: requests/s", "requests per second, labels: ratio to direct", func(x IdemRow) float64 { return x.ReplayPerSec }, 0},
		{"p99 latency, new keys", "milliseconds", func(x IdemRow) float64 { return ms(x.NewP99) }, 1},
		{"p99 latency, replays", "milliseconds", func(x IdemRow) float64 { return ms(x.ReplayP99) }, 1},
	} {
		bs, ref := bars(p.val)
		if p.color == 1 {
			for j := range bs {
				if bs[j].Value > 0 {
					bs[j].Note = lat(time.Duration(bs[j].Value * 1e6))
				}
			}
		}
		chart, err := BarChart{Title: p.title, XLabel: p.xlabel, Bars: bs, Ref: ref, Log: true, HideLabels: i > 0, Color: plotutil.Color(p.color)}.Plot()
		if err != nil {
			return nil, fmt.Errorf("bench: idem chart: %w", err)
		}
		panels = append(panels, chart)
	}
	c := r.Config
	caption := []string{
		fmt.Sprintf("dedupbench idem: %s requests with new keys then %s replays of them per target and round, %d rounds with the targets in turn (median round), %d keep-alive clients, upstream %v per request, %d-byte responses.",
			humanize.Count(float64(c.Requests)), humanize.Count(float64(c.Replays)), c.Rounds, c.Clients, latency, c.BodySize),
		"Targets: the upstream called directly (dashed line = 1x), through dedup proxy, through a Go reverse proxy keeping keys in redis-server (SET NX PX lock, stored response) without persistence and with appendfsync always, through the same middleware on a Go map in a process of its own (no durability), and net/http answering every request with a replay built on the spot (replays only: the floor of net/http).",
	}
	if c.UpstreamWorkers > 0 {
		caption[0] += fmt.Sprintf(" The upstream serves %d requests at a time.", c.UpstreamWorkers)
	}
	if r.Machine != nil {
		caption = append(caption, r.Machine.String())
	}
	return Figure{Title: "idempotency keys: dedup proxy against the upstream directly and a Redis-backed middleware", Panels: panels, Caption: caption,
		Width: 12 * vg.Inch, Height: 3.6 * vg.Inch}.Save(dir, "idem")
}
