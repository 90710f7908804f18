package main

import (
	"fmt"
	"io"
	"time"

	"github.com/streamdedup/dedup"
)

// windowAdviceJSON is dedup.WindowAdvice for JSON (window_advice).
type windowAdviceJSON struct {
	LeaksPerMillion               float64 `json:"leaks_per_million"`
	LeaksRelErr                   float64 `json:"leaks_rel_err"`
	TailLeaksPerMillion           float64 `json:"tail_leaks_per_million"`
	DuplicatesPerMillion          float64 `json:"duplicates_per_million"`
	WindowFor100PerMillionSeconds float64 `json:"window_for_100_per_million_seconds"`
	WindowFor10PerMillionSeconds  float64 `json:"window_for_10_per_million_seconds"`
	WindowFor1PerMillionSeconds   float64 `json:"window_for_1_per_million_seconds"`
	HorizonSeconds                float64 `json:"horizon_seconds"`
	Duplicates                    uint64  `json:"duplicates"`
	Caught                        uint64  `json:"caught"`
	HorizonMatches                uint64  `json:"horizon_matches"`
	Censored                      uint64  `json:"censored"`
	DelayP50Seconds               float64 `json:"delay_p50_seconds"`
	DelayP90Seconds               float64 `json:"delay_p90_seconds"`
	DelayP99Seconds               float64 `json:"delay_p99_seconds"`
	Model                         string  `json:"model"`
	Bytes                         uint64  `json:"bytes"`
	HorizonSample                 uint64  `json:"horizon_sample"`
	HorizonBudgetBytes            uint64  `json:"horizon_budget_bytes"`
}

// adviceJSON converts a; the windows and delays are 0 when not known.
func adviceJSON(a dedup.WindowAdvice) *windowAdviceJSON {
	return &windowAdviceJSON{
		LeaksPerMillion: a.LeaksPerMillion, LeaksRelErr: a.LeaksRelErr, TailLeaksPerMillion: a.TailLeaksPerMillion,
		DuplicatesPerMillion:          a.DuplicatesPerMillion,
		WindowFor100PerMillionSeconds: a.WindowFor100.Seconds(), WindowFor10PerMillionSeconds: a.WindowFor10.Seconds(),
		WindowFor1PerMillionSeconds: a.WindowFor1.Seconds(), HorizonSeconds: a.Horizon.Seconds(),
		Duplicates: a.Duplicates, Caught: a.Caught, HorizonMatches: a.HorizonMatches, Censored: a.Censored,
		DelayP50Seconds: a.DelayP50.Seconds(), DelayP90Seconds: a.DelayP90.Seconds(), DelayP99Seconds: a.DelayP99.Seconds(),
		Model: a.Model, Bytes: a.Bytes, HorizonSample: a.Sample, HorizonBudgetBytes: a.BudgetBytes,
	}
}

// printAdvice writes the window advice as text lines, each label padded
// to pad columns.
func printAdvice(w io.Writer, a dedup.WindowAdvice, pad int) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-*s %s\n", pad, label, fmt.Sprintf(format, args...))
	}
	if a.Caught == 0 && a.HorizonMatches == 0 {
		line("window advice", "no duplicate measured yet (the advisor counts from Open, on the traffic it observes)")
		return
	}
	if a.Model == "" {
		line("window advice", "%d duplicates caught, %d past the window; no estimate yet (it needs the stream to run "+
			"two generations' spans: half the window with 4 generations)", a.Caught, a.HorizonMatches)
		return
	}
	d := func(x time.Duration) string {
		switch {
		case x == 0:
			return "not known"
		case x < 10*time.Second:
			return x.Round(10 * time.Millisecond).String()
		}
		return x.Round(time.Second).String()
	}
	line("window leaks", "%.0f per million events (±%.0f%%; %.0f of them past the %v measured, from the model)",
		a.LeaksPerMillion, 100*a.LeaksRelErr, a.TailLeaksPerMillion, a.Horizon.Round(time.Second))
	line("window for", "100/M %s, 10/M %s, 1/M %s", d(a.WindowFor100), d(a.WindowFor10), d(a.WindowFor1))
	sample := "no horizon"
	if a.Sample > 0 {
		sample = fmt.Sprintf("1 key in %d", a.Sample)
	}
	line("dup delays", "p50 %s, p90 %s, p99 %s; %d caught, %d past the window in the horizon's sample (%s), %d keys still in the window without one",
		d(a.DelayP50), d(a.DelayP90), d(a.DelayP99), a.Caught, a.HorizonMatches, sample, a.Censored)
	line("dup model", "%s", a.Model)
}

// adviceMetrics are the window advisor's gauges.
var adviceMetrics = []struct{ name, help string }{
	{"dedup_engine_window_leaks_per_million", "Duplicates the window lets through per million events, estimated by the window advisor (see docs/window.md)."},
	{"dedup_engine_window_for_100_per_million_seconds", "The smallest window that would let at most 100 duplicates per million events through (0: not known yet)."},
	{"dedup_engine_window_for_10_per_million_seconds", "The smallest window that would let at most 10 duplicates per million events through (0: not known yet)."},
	{"dedup_engine_window_for_1_per_million_seconds", "The smallest window that would let at most 1 duplicate per million events through (0: not known yet)."},
	{"dedup_engine_window_advice_horizon_seconds", "The oldest duplicate delay the window advisor has measured."},
	{"dedup_engine_window_advice_duplicates", "Duplicates the window advice rests on: caught, plus HorizonSample (--horizon-sample) per match of the horizon's sample."},
}

func adviceMetricValues(a dedup.WindowAdvice) []float64 {
	return []float64{a.LeaksPerMillion, a.WindowFor100.Seconds(), a.WindowFor10.Seconds(), a.WindowFor1.Seconds(),
		a.Horizon.Seconds(), float64(a.Duplicates)}
}

func init() {
	for _, m := range adviceMetrics {
		metricDefs = append(metricDefs, struct {
			name, help string
			counter    bool
		}{m.name, m.help, false})
	}
}
