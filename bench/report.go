package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/streamdedup/dedup/internal/humanize"
)

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("bench: write json: %w", err)
	}
	return nil
}

func table(w io.Writer, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header+"\t")
	seps := make([]string, strings.Count(header, "\t")+1)
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintln(tw, strings.Join(seps, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	return tw.Flush()
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func minutes(d time.Duration) string { return fmt.Sprintf("%.1f min", d.Minutes()) }

func bytesPerKey(b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f B", b)
}

func lat(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fus", float64(d)/1e3)
}

// WriteText writes the simulation's tables.
func (r *SimResult) WriteText(w io.Writer) error {
	c := r.Config
	a := r.Reference
	m := r.Main
	fmt.Fprintf(w, "Duplicate-suppression window model (closed form against the engine), run through the engine on a virtual clock\n")
	fmt.Fprintf(w, "inputs: %.0f requests/s, %.0f%% duplicates, delay %v, window %v; run at scale %g (%.0f req/s, %v measured after %v warm-up), figures rescaled to full rate\n",
		c.Stream.Rate, 100*c.Stream.DuplicateFraction, c.Stream.Delay, c.Window, c.Scale, c.Stream.Rate*c.Scale, c.Measure, c.Warmup)
	fmt.Fprintf(w, "engine: %s/%s, FP %g, %d generations, Window set to %v so the mean retention is %v\n\n",
		m.Mode, m.Filter, c.Engine.FalsePositiveRate, c.Engine.Generations, m.EngineWindow.Round(time.Millisecond), m.Window)
	d := r.Delays
	rows := [][]string{
		{"requests/s", fmt.Sprintf("%.0f", a.Rate), fmt.Sprintf("%.0f", m.RequestsPerSec), ""},
		{"distinct keys/s (insert rate)", fmt.Sprintf("%.0f (shown as 2k/s)", a.DistinctPerSec), fmt.Sprintf("%.0f", m.RequestsPerSec-m.DuplicatesPerSec), ""},
		{"duplicates/s", fmt.Sprintf("%.0f", a.DuplicatesPerSec), fmt.Sprintf("%.1f", m.DuplicatesPerSec), ""},
		{"delay mean / p50 / p99", "2m / - / -", fmt.Sprintf("%.1fs / %.1fs / %.1fs", d.Mean.Seconds(), d.P50.Seconds(), d.P99.Seconds()), fmt.Sprintf("%d duplicates", d.Count)},
		{"keys held in steady state", fmt.Sprintf("%.0f", a.KeysHeld), fmt.Sprintf("%.0f", m.KeysHeld), fmt.Sprintf("engine FilterKeys; model %s", humanize.Count(m.KeysModel))},
		{"store memory at 64 B/key", fmt.Sprintf("%.1f MiB", a.MemoryMiB), mib(m.MemoryModel), "engine filters: " + mib(m.FilterBytes)},
		{"duplicates suppressed/s", fmt.Sprintf("%.2f", a.SuppressedPerSec), fmt.Sprintf("%.2f", m.SuppressedPerSec), ""},
		{"duplicates after expiry/s", fmt.Sprintf("%.2f", a.LeakedPerSec), fmt.Sprintf("%.2f", m.LeakedPerSec), ""},
		{"share suppressed", fmt.Sprintf("%.3f", a.ShareSuppressed), fmt.Sprintf("%.3f", m.ShareSuppressed), fmt.Sprintf("±%.3f (1 SE)", m.ShareSE)},
		{"leaks per million requests", fmt.Sprintf("%.0f", a.LeaksPerMillion), fmt.Sprintf("%.0f", m.LeaksPerMillion), fmt.Sprintf("±%.0f (1 SE)", m.LeaksSE)},
		{fmt.Sprintf("window suppressing %g%%", 100*c.SuppressTarget), minutes(a.Window99), minutes(r.Window99), fmt.Sprintf("engine there: %.4f suppressed", r.Run99.ShareSuppressed)},
		{fmt.Sprintf("window for < %g leaks/M", c.LeakTarget), "~" + minutes(a.WindowTarget), minutes(r.WindowTarget), fmt.Sprintf("engine there: %.1f/M", r.RunTarget.LeaksPerMillion)},
		{"keys held at that window", "~" + humanize.Count(a.KeysAtWindowTarget), humanize.Count(r.RunTarget.KeysHeld), mib(r.RunTarget.MemoryModel) + " at 64 B/key"},
		{"false drops per million (FP)", "-", fmt.Sprintf("%.0f", m.FalseDropsPerMillion), "probabilistic mode only"},
	}
	if err := table(w, "figure\tmodel\tsimulated\tnote", rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = rows[:0]
	for _, x := range r.Runs {
		rows = append(rows, []string{x.Label, minutes(x.Window), humanize.Count(x.KeysHeld), mib(x.MemoryModel), mib(x.FilterBytes),
			fmt.Sprintf("%.4f", x.ShareSuppressed), fmt.Sprintf("%.0f ±%.0f", x.LeaksPerMillion, x.LeaksSE), fmt.Sprintf("%.0f", x.FalseDropsPerMillion)})
	}
	fmt.Fprintln(w, "Engine runs (window -> keys held, memory, leaks):")
	if err := table(w, "run\twindow\tkeys held\tmemory @64B\tfilter mem\tsuppressed\tleaks/M\tfalse drops/M", rows); err != nil {
		return err
	}
	if len(r.Bimodal) > 0 {
		b := c.Bimodal
		fmt.Fprintf(w, "\nBimodal redelivery (%s), %.0f requests/s, %.0f%% duplicates, exact mode; run at scale %g, %v measured\n",
			b.Stream.Delay, b.Stream.Rate, 100*b.Stream.DuplicateFraction, b.Scale, b.Measure)
		rows = rows[:0]
		for _, x := range r.Bimodal {
			rows = append(rows, []string{minutes(x.Window), x.Mode, fmt.Sprintf("%.3f", x.RetryShareSuppressed), fmt.Sprintf("%.3f", x.ReplayShareSuppressed),
				fmt.Sprintf("%.0f", x.LeaksPerMillion), humanize.Count(x.KeysHeld), mib(x.MemoryModel)})
		}
		if err := table(w, "retention\tmode\tretries suppressed\treplays suppressed\tleaks/M\tkeys held\tmemory @64B", rows); err != nil {
			return err
		}
		fmt.Fprintf(w, "(%d duplicates measured, %d of them replays)\n", r.Bimodal[0].Duplicates, r.Bimodal[0].Replays)
	}
	return nil
}

// WriteText writes the comparison table, the memory sweep and the
// memory-at-scale table.
func (r *CompareResult) WriteText(w io.Writer) error {
	c := r.Config
	if r.Machine != nil {
		fmt.Fprintf(w, "%s\n", r.Machine)
	}
	fmt.Fprintf(w, "Same stream through every target: %d events (%.0f%% duplicates, delay %v, %s keys), window %v, FP target %g, batches of %d\n",
		firstEvents(r), 100*c.Stream.DuplicateFraction, c.Stream.Delay, c.Stream.Keys, c.Window, c.FalsePositiveRate, c.Batch)
	ref := shortRef(r.Reference)
	var rows [][]string
	for _, x := range r.Rows {
		if x.Skipped != "" {
			rows = append(rows, []string{x.Name, x.Skipped, "", "", "", "", "", "", "", "", ""})
			continue
		}
		rows = append(rows, []string{x.Name, humanize.Count(x.EventsPerSec), times(x.SpeedRatio),
			fmt.Sprintf("%d / %d", x.DupsMissed, x.Duplicates), fmt.Sprintf("%d", x.FalseDrops),
			humanize.Count(float64(x.Keys)), bytesPerKey(x.RSSPerKey), times(x.RSSRatio), bytesPerKey(x.PeakPerKey),
			bytesPerKey(x.EngineBytesPerKey), bytesPerKey(x.DiskPerKey)})
	}
	if err := table(w, "target\tevents/s\tvs "+ref+"\tdups missed\tfalse drops\tkeys held\tRSS/key\tvs "+ref+"\tpeak/key\tengine/key\tdisk/key", rows); err != nil {
		return err
	}
	fmt.Fprintln(w, "RSS/key = growth of the resident set of the process holding the keys (the target alone in a child process; redis-server's own) from before the target opened to the end, per key held; peak/key = the largest resident set during the run, less the same start, per key.")
	fmt.Fprintln(w, "engine/key = the engine's own count (Stats): filters + in-flight sets + cache of recent commits + the window advisor's sample, per key held; the RSS adds the Go runtime, GC headroom and, in exact mode, Pebble's memtable and cache.")
	if len(r.Sweep) > 0 {
		fmt.Fprintln(w, "\nFilter memory per key against the false-positive target (probabilistic engine, one window filled, fresh keys probed):")
		rows = rows[:0]
		for _, p := range r.Sweep {
			rows = append(rows, []string{p.Backend, fmt.Sprintf("%g", p.TargetFP), fmt.Sprintf("%.5f", p.MeasuredFP), fmt.Sprintf("%.2f B", p.BytesPerKey)})
		}
		if err := table(w, "backend\ttarget FP\tmeasured FP\tbytes/key", rows); err != nil {
			return err
		}
	}
	if len(r.Scale) > 0 {
		fmt.Fprintf(w, "\nMemory at scale: N distinct keys within one window (%v), batches of %d, each target in a process of its own:\n", scaleWindow, c.Batch)
		rows = rows[:0]
		for _, x := range r.Scale {
			if x.Skipped != "" {
				rows = append(rows, []string{humanize.Count(float64(x.ScaleKeys)), x.Name, x.Skipped, "", "", "", "", "", "", ""})
				continue
			}
			rows = append(rows, []string{humanize.Count(float64(x.ScaleKeys)), x.Name, humanize.Count(x.EventsPerSec), humanize.Count(float64(x.Keys)),
				humanize.Bytes(x.PeakRSS), bytesPerKey(x.RSSPerKey), times(x.RSSRatio), bytesPerKey(x.PeakPerKey), bytesPerKey(x.EngineBytesPerKey), bytesPerKey(x.DiskPerKey)})
		}
		if err := table(w, "keys\ttarget\tkeys/s\tkeys held\tpeak RSS\tRSS/key\tvs redis\tpeak/key\tengine/key\tdisk/key", rows); err != nil {
			return err
		}
	}
	return nil
}

// times formats a ratio to the reference row, "-" without one.
func times(r float64) string {
	if r <= 0 {
		return "-"
	}
	if r < 0.1 {
		return fmt.Sprintf("1/%.0f", 1/r)
	}
	return fmt.Sprintf("%.2fx", r)
}

func firstEvents(r *CompareResult) uint64 {
	for _, x := range r.Rows {
		if x.Events > 0 {
			return x.Events
		}
	}
	return 0
}

func shortRef(s string) string {
	if s == "" {
		return "ref"
	}
	return strings.Fields(s)[0]
}

// WriteText writes one row per target rate and, with series, the time
// series of each.
func (r *LoadResult) WriteText(w io.Writer, series bool) error {
	c := r.Config
	fmt.Fprintf(w, "Open-loop load through ObserveBatch, engine %s/%s, window %v, AutoCommit %v, %v per rate, one batch per %v\n",
		c.Engine.ModeName(), c.Engine.Filter, c.Engine.Window, c.Engine.AutoCommit, c.Duration, c.Tick)
	var rows [][]string
	for _, s := range r.Steps {
		ach := humanize.Count(s.Achieved)
		if s.Saturated {
			ach += " (saturated)"
		}
		rows = append(rows, []string{humanize.Count(s.Target), ach, lat(s.P50), lat(s.P99), lat(s.P999),
			fmt.Sprintf("%d / %d", s.DupsMissed, s.Duplicates), fmt.Sprintf("%d", s.FalseDrops), humanize.Count(float64(s.StoreLookups)),
			humanize.Count(float64(s.Keys)), bytesPerKey(s.RAMPerKey), bytesPerKey(s.DiskPerKey)})
	}
	if err := table(w, "target/s\tachieved/s\tp50\tp99\tp999\tdups missed\tfalse drops\tstore lookups\tkeys\tRAM/key\tdisk/key", rows); err != nil {
		return err
	}
	fmt.Fprintln(w, "latency: from the time a batch was due to the return of ObserveBatch; RAM = Go heap in use (holds the filters)")
	if !series {
		return nil
	}
	for _, s := range r.Steps {
		fmt.Fprintf(w, "\nover time at %s events/s:\n", humanize.Count(s.Target))
		rows = rows[:0]
		for _, x := range s.Samples {
			perKey := func(b uint64) string {
				if x.Keys == 0 {
					return "-"
				}
				return bytesPerKey(float64(b) / float64(x.Keys))
			}
			rows = append(rows, []string{x.At.String(), humanize.Count(x.Rate), lat(x.P50), lat(x.P99), lat(x.P999),
				humanize.Count(float64(x.Keys)), mib(float64(x.HeapBytes)), mib(float64(x.FilterBytes)), perKey(x.DiskBytes), humanize.Count(float64(x.StoreLookups))})
		}
		if err := table(w, "t\trate\tp50\tp99\tp999\tkeys\theap\tfilters\tdisk/key\tlookups", rows); err != nil {
			return err
		}
	}
	return nil
}
