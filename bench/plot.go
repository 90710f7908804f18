package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// savePlot writes p as name.svg and name.png in dir.
func savePlot(p *plot.Plot, dir, name string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: plot dir: %w", err)
	}
	var files []string
	for _, ext := range []string{".svg", ".png"} {
		f := filepath.Join(dir, name+ext)
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return files, fmt.Errorf("bench: save %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// PlotLoad draws achieved throughput and batch latency against the target
// rate: load_throughput and load_latency, as SVG and PNG in dir.
func PlotLoad(r *LoadResult, dir string) ([]string, error) {
	tp := plot.New()
	tp.Title.Text = "dedup engine: achieved vs offered rate (open loop)"
	tp.X.Label.Text = "target events/s"
	tp.Y.Label.Text = "achieved events/s"
	ideal := make(plotter.XYs, 0, len(r.Steps))
	ach := make(plotter.XYs, 0, len(r.Steps))
	for _, s := range r.Steps {
		ideal = append(ideal, plotter.XY{X: s.Target, Y: s.Target})
		ach = append(ach, plotter.XY{X: s.Target, Y: s.Achieved})
	}
	if err := plotutil.AddLinePoints(tp, "achieved", ach, "target", ideal); err != nil {
		return nil, fmt.Errorf("bench: plot throughput: %w", err)
	}
	tp.Legend.Top, tp.Legend.Left = true, true
	files, err := savePlot(tp, dir, "load_throughput")
	if err != nil {
		return files, err
	}

	lp := plot.New()
	lp.Title.Text = "dedup engine: ObserveBatch latency vs offered rate"
	lp.X.Label.Text = "target events/s"
	lp.Y.Label.Text = "batch latency (ms, log)"
	lp.Y.Scale = plot.LogScale{}
	lp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var p50, p99, p999 plotter.XYs
	ms := func(d float64) float64 { return max(d/1e6, 1e-3) }
	for _, s := range r.Steps {
		p50 = append(p50, plotter.XY{X: s.Target, Y: ms(float64(s.P50))})
		p99 = append(p99, plotter.XY{X: s.Target, Y: ms(float64(s.P99))})
		p999 = append(p999, plotter.XY{X: s.Target, Y: ms(float64(s.P999))})
	}
	if err := plotutil.AddLinePoints(lp, "p50", p50, "p99", p99, "p99.9", p999); err != nil {
		return files, fmt.Errorf("bench: plot latency: %w", err)
	}
	lp.Legend.Top, lp.Legend.Left = true, true
	more, err := savePlot(lp, dir, "load_latency")
	return append(files, more...), err
}

// PlotMemory draws filter bytes per key against the false-positive target
// for each backend of the sweep: memory_per_key, as SVG and PNG in dir.
func PlotMemory(sweep []SweepPoint, dir string) ([]string, error) {
	p := plot.New()
	p.Title.Text = "filter memory per key vs false-positive rate"
	p.X.Label.Text = "false-positive rate (target, log)"
	p.Y.Label.Text = "bytes per key"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var order []string
	by := map[string]plotter.XYs{}
	for _, s := range sweep {
		if _, ok := by[s.Backend]; !ok {
			order = append(order, s.Backend)
		}
		by[s.Backend] = append(by[s.Backend], plotter.XY{X: s.TargetFP, Y: s.BytesPerKey})
	}
	var args []any
	for _, b := range order {
		args = append(args, b, by[b])
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, fmt.Errorf("bench: plot memory: %w", err)
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return savePlot(p, dir, "memory_per_key")
}
