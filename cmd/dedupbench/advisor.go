package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/streamdedup/dedup/bench"
)

// runAdvisor is `dedupbench advisor`: streams of known delay distributions
// through the engine on event time, the window advisor's estimates beside
// the truth (bench.Advisor).
func runAdvisor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.AdvisorConfig
	var delays, csvPath string
	var seeds int
	samples := []int{0}
	cfg.Windows = []time.Duration{2 * time.Minute, 3 * time.Minute, 5 * time.Minute, 8 * time.Minute}
	cfg.EnsureDefaults() // the flags' defaults
	fs := newFlagSet("dedupbench advisor", stderr)
	c.bind(fs)
	fs.StringVar(&delays, "delay", "exponential,lognormal,mixture", "delay distributions, comma-separated: exponential, lognormal (of --mean and --sigma), mixture (80% of mean --mean/12, 20% of mean 5*--mean: 10s and 10m at 2m)")
	fs.Var((*durations)(&cfg.Windows), "windows", "engine windows, comma-separated, one engine each on the same stream")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "arrivals per second of virtual time, duplicates included")
	fs.Float64Var(&cfg.DuplicateFraction, "dup", cfg.DuplicateFraction, "share of arrivals that are duplicates")
	fs.DurationVar(&cfg.Mean, "mean", cfg.Mean, "mean delay of the exponential and the lognormal; the mixture's humps are mean/12 and 5*mean")
	fs.Float64Var(&cfg.Sigma, "sigma", cfg.Sigma, "shape of the lognormal")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "virtual length of each stream")
	fs.IntVar(&cfg.Generations, "generations", cfg.Generations, "engine generations")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "stream seed")
	fs.IntVar(&seeds, "seeds", 1, "run `N` streams per distribution, seeds --seed to --seed+N-1, and print the spread of the advice's errors over them")
	fs.BoolVar(&cfg.Probabilistic, "probabilistic", false, "engines without the exact store")
	fs.Var((*intList)(&samples), "horizon-sample", "the engines' HorizonSample: keep at most 1 key in `N` past the window, halving the sample to stay within --horizon-bytes; -1 none; 0 the engine's default (1); comma-separated: each runs on the same streams")
	fs.Int64Var(&cfg.HorizonBytes, "horizon-bytes", 0, "the engines' HorizonBytes: the horizon's memory budget in bytes; 0 the engine's default (4 MiB)")
	fs.StringVar(&csvPath, "csv", "", "write estimated against true leaks per window, one row per distribution and window, to `FILE`")
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(cfg.Windows) == 0 {
		return fmt.Errorf("--windows: at least one window")
	}
	if seeds < 1 {
		return fmt.Errorf("--seeds must be at least 1, got %d", seeds)
	}
	var results, first []*bench.AdvisorResult
	for _, d := range strings.Split(delays, ",") {
		c1 := cfg
		c1.Delay = strings.TrimSpace(d)
		for k := range seeds {
			c1.Seed = cfg.Seed + uint64(k)
			for v, hs := range samples {
				c1.HorizonSample = hs
				if !c.quiet {
					fmt.Fprintf(stderr, "dedupbench advisor: %s delays, seed %d, horizon sample %d, %d windows, %v of virtual time\n", c1.Delay, c1.Seed, hs, len(cfg.Windows), cfg.Duration)
				}
				res, err := bench.Advisor(ctx, c1)
				if err != nil {
					return err
				}
				results = append(results, res)
				if k == 0 && v == 0 {
					first = append(first, res)
				}
			}
		}
	}
	if csvPath != "" {
		if err := writeAdvisorCSV(csvPath, results); err != nil {
			return err
		}
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return bench.PlotAdvisor(first, dir) }); err != nil {
		return err
	}
	if seeds == 1 && len(samples) == 1 {
		return output(c, stdout, results, func() error { return writeAdvisorText(stdout, results) })
	}
	spread := bench.SpreadAdvisor(results)
	return output(c, stdout, struct {
		Results []*bench.AdvisorResult `json:"results"`
		Spread  []bench.AdvisorSpread  `json:"spread"`
	}{results, spread}, func() error { return writeAdvisorSpread(stdout, spread) })
}

// writeAdvisorSpread prints, per distribution, the range of each figure's
// relative error over the runs and the share within 20%.
func writeAdvisorSpread(w io.Writer, spread []bench.AdvisorSpread) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "delay\tsample\tseeds\truns\tdups\tfigure\terror min\tmax\trms\twithin 20%\t")
	for _, s := range spread {
		sample := fmt.Sprintf("1/%d", s.SampleMin)
		if s.SampleMax != s.SampleMin {
			sample += fmt.Sprintf("-1/%d", s.SampleMax)
		}
		if s.SampleMax == 0 {
			sample = "none"
		}
		for _, f := range s.Figures {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d-%d\t%s\t%+.0f%%\t%+.0f%%\t%.0f%%\t%.0f%%\t\n", s.Delay, sample, s.Seeds, s.Runs,
				s.DuplicatesMin, s.DuplicatesMax, f.Name, 100*f.Min, 100*f.Max, 100*f.RMS, 100*f.Within20)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d-%d\tevery figure\t\t\t\t%.0f%%\t\n", s.Delay, sample, s.Seeds, s.Runs, s.DuplicatesMin, s.DuplicatesMax, 100*s.AllWithin20)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d-%d\tleaks within 2 stated SE (median ±%.0f%%)\t\t\t\t%.0f%%\t\n", s.Delay, sample, s.Seeds, s.Runs,
			s.DuplicatesMin, s.DuplicatesMax, 100*s.StatedRelErrMedian, 100*s.Within2SE)
	}
	return tw.Flush()
}

func writeAdvisorText(w io.Writer, results []*bench.AdvisorResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "delay\twindow\ttrue leaks/M\testimate\t±\tcounted in run\tfor 100/M: est\ttrue\tfor 10/M: est\ttrue\tfor 1/M: est\ttrue\tdups\twithin 20% from dups\tadvisor/filter bytes\t")
	m := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fm", d.Minutes())
	}
	for _, res := range results {
		for _, r := range res.Runs {
			a := r.Advice
			within := "-"
			if r.Within20At > 0 {
				within = strconv.FormatUint(r.Within20At, 10)
			}
			fmt.Fprintf(tw, "%s\t%v\t%.0f\t%.0f\t%.0f%%\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%.2f\t\n",
				res.Config.Delay, r.Window, r.ModelLeaksPerMillion, a.LeaksPerMillion, 100*a.LeaksRelErr, r.MeasuredLeaksPerMillion,
				m(a.WindowFor100), m(r.ModelWindowFor100), m(a.WindowFor10), m(r.ModelWindowFor10), m(a.WindowFor1), m(r.ModelWindowFor1),
				a.Duplicates, within, float64(a.Bytes)/float64(max(r.FilterBytes, 1)))
		}
	}
	return tw.Flush()
}

func writeAdvisorCSV(path string, results []*bench.AdvisorResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"delay", "window_seconds", "true_leaks_per_million", "estimated_leaks_per_million", "estimate_rel_err",
		"counted_leaks_per_million", "estimated_window_for_100_seconds", "true_window_for_100_seconds"})
	for _, res := range results {
		for _, r := range res.Runs {
			g := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
			_ = cw.Write([]string{res.Config.Delay, g(r.Window.Seconds()), g(r.ModelLeaksPerMillion), g(r.Advice.LeaksPerMillion),
				g(r.Advice.LeaksRelErr), g(r.MeasuredLeaksPerMillion), g(r.Advice.WindowFor100.Seconds()), g(r.ModelWindowFor100.Seconds())})
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// intList is a comma-separated list of integers.
type intList []int

func (l *intList) String() string { return fmt.Sprint([]int(*l)) }
func (l *intList) Set(s string) error {
	*l = nil
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		*l = append(*l, v)
	}
	return nil
}
