// Command dedupbench measures the dedup engine against the layers users
// would otherwise pick, on the same stream: events per second, duplicates
// missed, real events dropped, and memory and disk per remembered key.
//
// Usage:
//
//	dedupbench [flags]            the headline (compare on defaults, a few minutes)
//	dedupbench simulate [flags]   the window model through the engine
//	dedupbench load [flags]       open-loop load at a rate, or a sweep of rates
//	dedupbench compare [flags]    engine modes and backends against the baselines
//	dedupbench serve [flags]      redis-benchmark against redis-server and dedup's RESP server
//	dedupbench kafka [flags]      dedup on Kafka (in-process broker) against a passthrough
//	dedupbench filter [flags]     dedup filter against awk's !seen[key]++, peak RSS of each
//	dedupbench advisor [flags]    the window advisor's estimates beside the truth
//	dedupbench idem [flags]       dedup proxy against the upstream and a Redis-backed middleware
//
// Every subcommand takes --json (machine-readable output); those with charts
// take --plot DIR (SVG and PNG). compare runs each target in a process of
// its own (this executable's hidden "child" subcommand), so that the
// resident set it reports is the target's. The logic lives in package bench; this command
// binds flags to its config structs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "dedupbench:", err)
		}
		os.Exit(2)
	}
}

// common are the flags every subcommand takes.
type common struct {
	json  bool
	plot  string
	quiet bool
}

func (c *common) bind(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "write JSON instead of tables")
	fs.StringVar(&c.plot, "plot", "", "write charts (SVG and PNG) to this directory")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress bar")
}

// subcommands are dedupbench's commands, in the order help lists them.
var subcommands = []struct {
	name string
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}{
	{"simulate", runSimulate},
	{"load", runLoad},
	{"compare", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runCompare(ctx, "dedupbench compare", args, stdout, stderr)
	}},
	{"serve", runServe},
	{"kafka", runKafka},
	{"filter", runFilter},
	{"advisor", runAdvisor},
	{"idem", runIdem},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	names := make([]string, len(subcommands))
	for i, c := range subcommands {
		if c.name == cmd {
			return c.run(ctx, args, stdout, stderr)
		}
		names[i] = c.name
	}
	switch cmd {
	case "":
		return runCompare(ctx, "dedupbench", args, stdout, stderr)
	case childCommand:
		// Hidden: one target of compare, in a process of its own.
		return bench.RunChild(ctx, os.Stdin, stdout)
	case idemTargetCommand:
		// Hidden: one of idem's targets, in a process of its own.
		return runIdemTarget(ctx, args, stderr)
	case "help":
		fmt.Fprintf(stdout, "usage: dedupbench [%s] [flags]; dedupbench <cmd> -h for flags\n", strings.Join(names, "|"))
		return nil
	}
	return fmt.Errorf("unknown command %q (want %s or %s)", cmd, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// childCommand is the hidden subcommand compare starts each target in, so
// that the target's resident set is measured alone.
const childCommand = "child"

// childCmd is the command line that runs one compare target in a fresh
// process: this executable's child subcommand.
var childCmd = func() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable to run targets in child processes (or pass --in-process): %w", err)
	}
	return []string{exe, childCommand}, nil
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args into fs; every subcommand takes flags only, so a
// positional argument is an error rather than ignored.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// charts writes the charts of plot into the --plot directory, if one was
// given, and names the files on stderr.
func (c common) charts(stderr io.Writer, plot func(dir string) ([]string, error)) error {
	if c.plot == "" {
		return nil
	}
	files, err := plot(c.plot)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "wrote", strings.Join(files, " "))
	return nil
}

// durations is a comma-separated list of durations.
type durations []time.Duration

func (d *durations) String() string { return fmt.Sprint([]time.Duration(*d)) }
func (d *durations) Set(s string) error {
	*d = nil
	for _, f := range strings.Split(s, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*d = append(*d, v)
	}
	return nil
}

// floats is a comma-separated list of numbers; "a:b:n" is n points from a
// to b.
type floats []float64

func (f *floats) String() string { return fmt.Sprint([]float64(*f)) }
func (f *floats) Set(s string) error {
	*f = nil
	if parts := strings.Split(s, ":"); len(parts) == 3 {
		a, err1 := strconv.ParseFloat(parts[0], 64)
		b, err2 := strconv.ParseFloat(parts[1], 64)
		n, err3 := strconv.Atoi(parts[2])
		if err := errors.Join(err1, err2, err3); err != nil || n < 2 {
			return fmt.Errorf("want from:to:points, got %q", s)
		}
		for i := range n {
			*f = append(*f, a+(b-a)*float64(i)/float64(n-1))
		}
		return nil
	}
	for _, x := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return err
		}
		*f = append(*f, v)
	}
	return nil
}

// words is a comma-separated list of names.
type words []string

func (w *words) String() string { return strings.Join(*w, ",") }
func (w *words) Set(s string) error {
	*w = []string{} // "" selects none, not the default
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*w = append(*w, x)
		}
	}
	return nil
}

func bindStream(fs *flag.FlagSet, s *bench.StreamOptions) {
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "stream seed")
	fs.Float64Var(&s.DuplicateFraction, "dup", s.DuplicateFraction, "share of arrivals that are duplicates")
	fs.StringVar(&s.Delay.Kind, "delay", s.Delay.Kind, "redelivery delay: exp or bimodal")
	fs.DurationVar(&s.Delay.Mean, "mean", s.Delay.Mean, "mean redelivery delay (exp)")
	fs.DurationVar(&s.Delay.RetryMean, "retry-mean", s.Delay.RetryMean, "mean delay of immediate retries (bimodal)")
	fs.Float64Var(&s.Delay.ReplayShare, "replay-share", s.Delay.ReplayShare, "share of duplicates that are replays (bimodal)")
	fs.DurationVar(&s.Delay.ReplayMin, "replay-min", s.Delay.ReplayMin, "earliest replay (bimodal)")
	fs.DurationVar(&s.Delay.ReplayMax, "replay-max", s.Delay.ReplayMax, "latest replay (bimodal)")
	fs.StringVar(&s.Keys, "keys", s.Keys, "key format: uuid, composite or mixed")
}

func output(c common, stdout io.Writer, v any, text func() error) error {
	if c.json {
		return bench.WriteJSON(stdout, v)
	}
	return text()
}

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.SimConfig
	cfg.Stream.EnsureDefaults() // the flags' defaults
	var mode string
	fs := newFlagSet("dedupbench simulate", stderr)
	c.bind(fs)
	bindStream(fs, &cfg.Stream)
	fs.Float64Var(&cfg.Stream.Rate, "rate", cfg.Stream.Rate, "requests per second, duplicates included")
	fs.Float64Var(&cfg.Scale, "scale", 0.1, "rate multiplier for the run (figures are rescaled)")
	fs.DurationVar(&cfg.Window, "window", 5*time.Minute, "retention window under study")
	fs.Var((*durations)(&cfg.Windows), "windows", "further windows to tabulate, comma-separated")
	fs.DurationVar(&cfg.Measure, "measure", time.Hour, "virtual time measured after the warm-up")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "virtual warm-up (0: automatic)")
	fs.Float64Var(&cfg.SuppressTarget, "suppress-target", 0.99, "share of duplicates the sought window suppresses")
	fs.Float64Var(&cfg.LeakTarget, "leak-target", 100, "leaks per million requests the second sought window stays under")
	fs.Float64Var(&cfg.BytesPerKey, "bytes-per-key", 64, "store bytes per key for the model's memory")
	fs.StringVar(&mode, "mode", "probabilistic", "engine mode: probabilistic or exact")
	fs.StringVar(&cfg.Engine.Filter, "filter", "blocked", "filter backend: bloom, cuckoo or blocked")
	fs.Float64Var(&cfg.Engine.FalsePositiveRate, "fp", 1e-4, "engine false-positive target")
	fs.IntVar(&cfg.Engine.Generations, "generations", (&dedup.Options{}).WithDefaults().Generations, "engine generations")
	fs.BoolVar(&cfg.Bimodal.Skip, "no-bimodal", false, "leave out the bimodal case")
	fs.Float64Var(&cfg.Bimodal.Scale, "bimodal-scale", 0.00125, "rate multiplier of the bimodal case")
	fs.IntVar(&cfg.Parallel, "parallel", 2, "engines run at once")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Engine.Probabilistic = mode == "probabilistic"
	if mode != "probabilistic" && mode != "exact" {
		return fmt.Errorf("--mode must be probabilistic or exact, got %q", mode)
	}
	// The retry and replay flags shape the bimodal case.
	cfg.Bimodal.Stream.Seed = cfg.Stream.Seed
	cfg.Bimodal.Stream.Delay = cfg.Stream.Delay
	cfg.Bimodal.Stream.Delay.Kind = bench.DelayBimodal
	res, err := bench.Simulate(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.LoadConfig
	var mode string
	var series bool
	cfg.EnsureDefaults() // the flags' defaults
	cfg.Stream.EnsureDefaults()
	fs := newFlagSet("dedupbench load", stderr)
	c.bind(fs)
	bindStream(fs, &cfg.Stream)
	fs.Var((*floats)(&cfg.Rates), "rate", "target events/s: one rate, a list, or from:to:points for a sweep")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "time offered at each rate")
	fs.DurationVar(&cfg.Tick, "tick", cfg.Tick, "one batch per tick")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "sampling interval of the time series")
	fs.StringVar(&mode, "mode", "exact", "engine mode: exact or probabilistic")
	fs.StringVar(&cfg.Engine.Filter, "filter", "blocked", "filter backend: bloom, cuckoo or blocked")
	fs.DurationVar(&cfg.Engine.Window, "window", cfg.Engine.Window, "engine window")
	fs.DurationVar(&cfg.Engine.AutoCommit, "autocommit", cfg.Engine.AutoCommit, "engine AutoCommit interval")
	fs.Float64Var(&cfg.Engine.FalsePositiveRate, "fp", 0.01, "engine false-positive target")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary state directories")
	fs.BoolVar(&series, "series", false, "print the time series of every rate")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Engine.Probabilistic = mode == "probabilistic"
	if mode != "probabilistic" && mode != "exact" {
		return fmt.Errorf("--mode must be probabilistic or exact, got %q", mode)
	}
	res, err := bench.Load(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return bench.PlotLoad(res, dir) }); err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout, series) })
}

func runCompare(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.CompareConfig
	cfg.EnsureDefaults() // the flags' defaults
	fs := newFlagSet(name, stderr)
	c.bind(fs)
	bindStream(fs, &cfg.Stream)
	fs.Int64Var(&cfg.Stream.Events, "events", cfg.Stream.Events, "events in the stream")
	fs.Float64Var(&cfg.Stream.Rate, "rate", cfg.Stream.Rate, "nominal events per second of the stream's virtual clock")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "retention window of every target")
	fs.Float64Var(&cfg.FalsePositiveRate, "fp", cfg.FalsePositiveRate, "false-positive target of the filters")
	fs.Var((*words)(&cfg.Modes), "modes", "engine modes: exact,probabilistic")
	fs.Var((*words)(&cfg.Filters), "filters", "engine backends: bloom,cuckoo,blocked")
	fs.Var((*words)(&cfg.Baselines), "baselines", "baselines: redis,pebble,map,bloom,sbbf (empty: none)")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "events per call")
	fs.DurationVar(&cfg.CommitEvery, "commit-every", cfg.CommitEvery, "engine commit interval, on the stream's virtual clock")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary state directories")
	fs.Var((*floats)(&cfg.MemorySweep), "sweep", "false-positive rates of the memory sweep")
	fs.IntVar(&cfg.SweepKeys, "sweep-keys", cfg.SweepKeys, "keys per memory-sweep point")
	fs.BoolVar(&cfg.SkipSweep, "no-sweep", false, "leave out the memory sweep")
	scaleKeys := counts{100_000, 200_000, 1_000_000, 10_000_000}
	fs.Var(&scaleKeys, "scale-keys", "sizes of the memory-at-scale runs, distinct keys (empty: none)")
	fs.Var((*words)(&cfg.ScaleTargets), "scale-targets", "targets of the memory-at-scale runs: MODE/FILTER or a baseline")
	inProcess := fs.Bool("in-process", false, "run every target in this process (no RSS but redis-server's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.ScaleKeys = scaleKeys
	cfg.SkipScale = len(scaleKeys) == 0 || len(cfg.ScaleTargets) == 0
	if !*inProcess {
		child, err := childCmd()
		if err != nil {
			return err
		}
		cfg.Child = child
	}
	res, err := bench.Compare(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return compareCharts(res, dir) }); err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}

// compareCharts draws the headline, the memory sweep and the memory at
// scale, those the run has data for.
func compareCharts(res *bench.CompareResult, dir string) ([]string, error) {
	files, err := bench.PlotHeadline(res, dir)
	if err != nil {
		return files, err
	}
	if len(res.Sweep) > 0 {
		more, err := bench.PlotMemory(res.Sweep, res.Machine, dir)
		if files = append(files, more...); err != nil {
			return files, err
		}
	}
	if len(res.Scale) > 0 {
		more, err := bench.PlotScale(res, dir)
		if files = append(files, more...); err != nil {
			return files, err
		}
	}
	return files, nil
}

// counts is a comma-separated list of positive whole numbers; "" is none.
type counts []int

func (n *counts) String() string { return fmt.Sprint([]int(*n)) }
func (n *counts) Set(s string) error {
	*n = []int{}
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x == "" {
			continue
		}
		v, err := strconv.Atoi(x)
		if err != nil || v < 1 {
			return fmt.Errorf("want positive whole numbers, got %q", x)
		}
		*n = append(*n, v)
	}
	return nil
}

// barProgress shows bench progress as a bar on a terminal.
type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func newProgress(c common, stderr io.Writer) bench.Progress {
	f, ok := stderr.(*os.File)
	if c.quiet || !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &barProgress{w: stderr}
}

func (p *barProgress) Stage(name string, total int64) {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(name),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
	)
}

func (p *barProgress) Add(n int64) {
	if p.bar != nil {
		_ = p.bar.Add64(n)
	}
}
