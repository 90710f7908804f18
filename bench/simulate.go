package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/streamdedup/dedup"
)

// Reference holds the inputs and figures of the duplicate-suppression window
// model this package checks the engine against: 2,000 requests/s, 2%
// duplicates, exponential redelivery delay with a two-minute mean, a
// five-minute window and 64 bytes per key.
//
// The model: a key is remembered for the window W, so a duplicate is
// suppressed when its delay is below W. With exponential delays of mean m,
// the share suppressed is 1 - exp(-W/m) (0.918 for W = 5m, m = 2m), and the
// keys held are the distinct rate times W (1,960/s x 300 s = 588,000).
var Reference = ModelFigures{
	Rate:              2000,
	DuplicateFraction: 0.02,
	MeanDelay:         2 * time.Minute,
	Window:            5 * time.Minute,
	BytesPerKey:       64,
	LeakTarget:        100,

	DistinctPerSec:      1960,
	KeysHeld:            588_000,
	MemoryMiB:           35.9,
	DuplicatesPerSec:    40,
	SuppressedPerSec:    36.72,
	LeakedPerSec:        3.28,
	ShareSuppressed:     0.918,
	LeaksPerMillion:     1642,
	Window99:            9.2 * 60 * time.Second,
	WindowTarget:        10.6 * 60 * time.Second,
	KeysAtWindowTarget:  1_250_000,
	WindowTargetComment: "a little over ten and a half minutes",
}

// ModelFigures are the window model's inputs and the figures it gives.
type ModelFigures struct {
	Rate              float64       `json:"rate"`
	DuplicateFraction float64       `json:"duplicate_fraction"`
	MeanDelay         time.Duration `json:"mean_delay"`
	Window            time.Duration `json:"window"`
	BytesPerKey       float64       `json:"bytes_per_key"`
	LeakTarget        float64       `json:"leak_target_per_million"`

	DistinctPerSec      float64       `json:"distinct_per_sec"`
	KeysHeld            float64       `json:"keys_held"`
	MemoryMiB           float64       `json:"memory_mib"`
	DuplicatesPerSec    float64       `json:"duplicates_per_sec"`
	SuppressedPerSec    float64       `json:"suppressed_per_sec"`
	LeakedPerSec        float64       `json:"leaked_per_sec"`
	ShareSuppressed     float64       `json:"share_suppressed"`
	LeaksPerMillion     float64       `json:"leaks_per_million"`
	Window99            time.Duration `json:"window_99"`
	WindowTarget        time.Duration `json:"window_target"`
	KeysAtWindowTarget  float64       `json:"keys_at_window_target"`
	WindowTargetComment string        `json:"-"`
}

// SimConfig configures the window-model simulation.
type SimConfig struct {
	// Stream is the workload at full scale. Default: the reference inputs
	// (2,000 requests/s, 2% duplicates, exponential delay, mean 2m).
	Stream StreamOptions `json:"stream"`
	// Scale multiplies the request rate for the run; counts and rates are
	// divided by it when reported, so they read at full scale. Default 0.1.
	Scale float64 `json:"scale"`
	// Window is the retention window under study. Default 5m.
	Window time.Duration `json:"window"`
	// Windows are further windows to tabulate.
	Windows []time.Duration `json:"windows,omitempty"`
	// Measure is the virtual time measured after the warm-up. Default 1h
	// (720,000 requests at the default scale).
	Measure time.Duration `json:"measure"`
	// Warmup is the virtual time run before measuring, so the store and
	// the duplicate flow are in a steady state. Default: twice the longest
	// window run, and at least 12 mean delays.
	Warmup time.Duration `json:"warmup"`
	// SuppressTarget is the share of duplicates the sought window must
	// suppress. Default 0.99.
	SuppressTarget float64 `json:"suppress_target"`
	// LeakTarget is the leaks per million requests the second sought window
	// must stay under. Default 100.
	LeakTarget float64 `json:"leak_target"`
	// Step is the resolution of the window search. Default 6s (0.1 min).
	Step time.Duration `json:"step"`
	// BytesPerKey prices the model's store memory. Default 64 (the
	// model's figure; it ignores index and allocator overhead).
	BytesPerKey float64 `json:"bytes_per_key"`
	// Engine is the engine under test; Window and ExpectedRate are set per
	// run. Default probabilistic mode, blocked filter, FP 1e-4, the
	// engine's default generations, in memory.
	Engine EngineOptions `json:"engine"`
	// AlignRetention sets the engine's Window so that its mean retention
	// (Window plus half a generation span) equals the model's window, which
	// keeps every key exactly that long. Default true; see SimConfig docs.
	AlignRetention *bool `json:"align_retention,omitempty"`
	// Bimodal configures the bimodal case; Bimodal.Skip leaves it out.
	Bimodal BimodalConfig `json:"bimodal"`
	// Parallel is the number of engines run at once. Default 2.
	Parallel int `json:"parallel"`
}

// BimodalConfig configures the bimodal case of the simulation: immediate
// retries plus replays hours later, run through exact mode.
type BimodalConfig struct {
	// Skip leaves the bimodal case out.
	Skip bool `json:"skip,omitempty"`
	// Stream is the workload at full scale. Default: the reference rate and
	// duplicate share with a bimodal delay (70% retries, mean 5s; 30%
	// replays uniform in [1h, 6h]).
	Stream StreamOptions `json:"stream"`
	// Scale multiplies the rate for the run. Default 0.00125 (2.5/s).
	Scale float64 `json:"scale"`
	// Windows are the short windows shown failing on replays. Default 5m,
	// 30m.
	Windows []time.Duration `json:"windows"`
	// Retention is the long exact-mode retention that catches every replay.
	// Default ReplayMax + 1h.
	Retention time.Duration `json:"retention"`
	// Measure is the measured virtual time after a warm-up of ReplayMax.
	// Default 6h.
	Measure time.Duration `json:"measure"`
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *SimConfig) EnsureDefaults() {
	s := &c.Stream
	s.Rate = cmp.Or(s.Rate, Reference.Rate)
	s.DuplicateFraction = cmp.Or(s.DuplicateFraction, Reference.DuplicateFraction)
	s.Delay.Kind = cmp.Or(s.Delay.Kind, DelayExponential)
	s.Delay.Mean = cmp.Or(s.Delay.Mean, Reference.MeanDelay)
	s.EnsureDefaults()
	c.Scale = cmp.Or(c.Scale, 0.1)
	c.Window = cmp.Or(c.Window, Reference.Window)
	c.Measure = cmp.Or(c.Measure, time.Hour)
	c.SuppressTarget = cmp.Or(c.SuppressTarget, 0.99)
	c.LeakTarget = cmp.Or(c.LeakTarget, Reference.LeakTarget)
	c.Step = cmp.Or(c.Step, 6*time.Second)
	c.BytesPerKey = cmp.Or(c.BytesPerKey, Reference.BytesPerKey)
	e := &c.Engine
	if e.Filter == "" {
		e.Filter = "blocked"
		e.Probabilistic = true
	}
	e.FalsePositiveRate = cmp.Or(e.FalsePositiveRate, 1e-4)
	if e.Generations == 0 {
		e.Generations = (&dedup.Options{}).WithDefaults().Generations
	}
	if c.AlignRetention == nil {
		t := true
		c.AlignRetention = &t
	}
	c.Parallel = cmp.Or(c.Parallel, 2)
	b := &c.Bimodal
	bs := &b.Stream
	bs.Rate = cmp.Or(bs.Rate, Reference.Rate)
	bs.DuplicateFraction = cmp.Or(bs.DuplicateFraction, Reference.DuplicateFraction)
	bs.Seed = cmp.Or(bs.Seed, c.Stream.Seed)
	bs.Delay.Kind = DelayBimodal
	bs.EnsureDefaults()
	b.Scale = cmp.Or(b.Scale, 0.00125)
	if len(b.Windows) == 0 {
		b.Windows = []time.Duration{5 * time.Minute, 30 * time.Minute}
	}
	b.Retention = cmp.Or(b.Retention, bs.Delay.ReplayMax+time.Hour)
	b.Measure = cmp.Or(b.Measure, 6*time.Hour)
}

func (c *SimConfig) validate() error {
	var errs []error
	if !(c.Scale > 0 && c.Scale <= 1) || !(c.Bimodal.Scale > 0 && c.Bimodal.Scale <= 1) {
		errs = append(errs, fmt.Errorf("bench: simulate Scale must be in (0, 1], got %v and %v", c.Scale, c.Bimodal.Scale))
	}
	if c.Window <= 0 || c.Measure <= 0 || c.Step <= 0 || c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("bench: simulate Window, Measure and Step must be positive, Warmup not negative"))
	}
	if !(c.SuppressTarget > 0 && c.SuppressTarget < 1) {
		errs = append(errs, fmt.Errorf("bench: simulate SuppressTarget must be in (0, 1), got %v", c.SuppressTarget))
	}
	if !(c.LeakTarget > 0) {
		errs = append(errs, fmt.Errorf("bench: simulate LeakTarget must be positive, got %v", c.LeakTarget))
	}
	if c.Parallel < 1 {
		errs = append(errs, fmt.Errorf("bench: simulate Parallel must be at least 1, got %d", c.Parallel))
	}
	return errors.Join(errs...)
}

// SimRun is one window run through the engine, with counts measured after
// the warm-up and figures rescaled to full scale.
type SimRun struct {
	// Label says why the window was run ("reference", "99% search"...).
	Label string `json:"label"`
	// Window is the model's retention; EngineWindow the engine's Window
	// option that gives it (see SimConfig.AlignRetention).
	Window       time.Duration `json:"window"`
	EngineWindow time.Duration `json:"engine_window"`
	Mode         string        `json:"mode"`
	Filter       string        `json:"filter"`

	// Raw counts in the measured interval, at the run's scale.
	Requests   uint64 `json:"requests"`
	Duplicates uint64 `json:"duplicates"`
	Suppressed uint64 `json:"suppressed"`
	Leaked     uint64 `json:"leaked"`
	FalseDrops uint64 `json:"false_drops"`
	// Replays and ReplaysLeaked count the replay duplicates (bimodal).
	Replays       uint64 `json:"replays,omitempty"`
	ReplaysLeaked uint64 `json:"replays_leaked,omitempty"`

	// Full-scale figures.
	RequestsPerSec   float64 `json:"requests_per_sec"`
	DuplicatesPerSec float64 `json:"duplicates_per_sec"`
	SuppressedPerSec float64 `json:"suppressed_per_sec"`
	LeakedPerSec     float64 `json:"leaked_per_sec"`
	ShareSuppressed  float64 `json:"share_suppressed"`
	ShareSE          float64 `json:"share_suppressed_se"`
	LeaksPerMillion  float64 `json:"leaks_per_million"`
	LeaksSE          float64 `json:"leaks_per_million_se"`
	// ReplayShareSuppressed and RetryShareSuppressed split the share
	// suppressed by delay mode (bimodal only).
	ReplayShareSuppressed float64 `json:"replay_share_suppressed,omitempty"`
	RetryShareSuppressed  float64 `json:"retry_share_suppressed,omitempty"`
	// KeysHeld is the engine's mean count of remembered keys over the
	// measured interval, rescaled; KeysModel is distinct rate × window.
	KeysHeld  float64 `json:"keys_held"`
	KeysModel float64 `json:"keys_model"`
	// MemoryModel is KeysHeld × BytesPerKey: the model's store memory.
	MemoryModel float64 `json:"memory_model_bytes"`
	// FilterBytes is the engine's filter memory, rescaled; DiskBytes its
	// store size at the end of the run, rescaled (exact mode).
	FilterBytes float64 `json:"filter_bytes"`
	DiskBytes   float64 `json:"disk_bytes"`
	// FalseDropsPerMillion is real events dropped by filter false
	// positives (probabilistic mode), per million requests.
	FalseDropsPerMillion float64 `json:"false_drops_per_million"`
	// Elapsed is the wall time of the run.
	Elapsed time.Duration `json:"elapsed"`
}

// DelayStats summarise the measured duplicates' delays.
type DelayStats struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"mean"`
	P50   time.Duration `json:"p50"`
	P90   time.Duration `json:"p90"`
	P99   time.Duration `json:"p99"`
	Max   time.Duration `json:"max"`
}

// SimResult is the outcome of Simulate.
type SimResult struct {
	Config    SimConfig    `json:"config"`
	Reference ModelFigures `json:"reference"`
	Delays    DelayStats   `json:"delays"`
	// Runs holds every engine run, in order.
	Runs []SimRun `json:"runs"`
	// Main is the run at Config.Window.
	Main SimRun `json:"main"`
	// Window99 is the smallest window (at Step resolution) whose engine
	// run suppressed SuppressTarget of duplicates; Run99 that run.
	Window99 time.Duration `json:"window_99"`
	Run99    SimRun        `json:"run_99"`
	// WindowTarget is the smallest window whose engine run leaked fewer
	// than LeakTarget per million; RunTarget that run.
	WindowTarget time.Duration `json:"window_target"`
	RunTarget    SimRun        `json:"run_target"`
	// Bimodal holds the bimodal case's runs (nil if skipped).
	Bimodal []SimRun `json:"bimodal,omitempty"`
	// BimodalDelays summarise the bimodal case's delays.
	BimodalDelays DelayStats `json:"bimodal_delays"`
}

// simSpec is one engine in a simulation pass.
type simSpec struct {
	label  string
	window time.Duration
	engine EngineOptions
}

// Simulate runs the window model through the engine on a
// virtual clock: for the configured window, then searching the windows that
// meet SuppressTarget and LeakTarget, then the bimodal case.
func Simulate(ctx context.Context, cfg SimConfig, progress Progress) (*SimResult, error) {
	cfg.EnsureDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	progress = orNop(progress)
	mean := cfg.Stream.Delay.Mean
	if cfg.Stream.Delay.Kind == DelayBimodal {
		mean = cfg.Stream.Delay.ReplayMax
	}
	// Windows the search may reach: the exponential quantiles, with room.
	reach := max(cfg.Window, expQuantile(mean, cfg.SuppressTarget),
		expQuantile(mean, 1-cfg.LeakTarget/1e6/cfg.Stream.DuplicateFraction))
	for _, w := range cfg.Windows {
		reach = max(reach, w)
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = max(2*reach, 12*mean)
	}
	res := &SimResult{Config: cfg, Reference: Reference}
	run := func(specs []simSpec, collect bool) ([]SimRun, []time.Duration, error) {
		return simPass(ctx, cfg, cfg.Stream, cfg.Scale, cfg.Warmup, cfg.Measure, specs, collect, progress)
	}

	// Pass 1: the configured window(s), collecting the delays.
	specs := []simSpec{{label: "window", window: cfg.Window, engine: cfg.Engine}}
	for _, w := range cfg.Windows {
		specs = append(specs, simSpec{label: "extra", window: w, engine: cfg.Engine})
	}
	runs, delays, err := run(specs, true)
	if err != nil {
		return nil, err
	}
	res.Runs = append(res.Runs, runs...)
	res.Main = runs[0]
	res.Delays = delayStats(delays)

	// Candidates from the measured delays, then engine runs, stepping up
	// until the engine meets the target.
	slices.Sort(delays)
	requests := res.Main.Requests
	c99 := roundUp(quantileSorted(delays, cfg.SuppressTarget), cfg.Step)
	allowed := int(cfg.LeakTarget * float64(requests) / 1e6) // leaks allowed
	cT := cfg.Step
	if n := len(delays); n > allowed {
		cT = roundUp(delays[n-allowed-1]+1, cfg.Step)
	}
	ok99 := func(r SimRun) bool { return r.ShareSuppressed >= cfg.SuppressTarget }
	okT := func(r SimRun) bool { return r.LeaksPerMillion < cfg.LeakTarget }
	found99, foundT := false, false
	for tries := 0; tries < 6 && !(found99 && foundT); tries++ {
		var specs []simSpec
		if !found99 {
			specs = append(specs, simSpec{label: fmt.Sprintf("%g%% search", 100*cfg.SuppressTarget), window: c99, engine: cfg.Engine})
		}
		if !foundT {
			specs = append(specs, simSpec{label: fmt.Sprintf("<%g/M search", cfg.LeakTarget), window: cT, engine: cfg.Engine})
		}
		runs, _, err := run(specs, false)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, runs...)
		i := 0
		if !found99 {
			if ok99(runs[i]) {
				found99, res.Window99, res.Run99 = true, c99, runs[i]
			} else {
				c99 += cfg.Step
			}
			i++
		}
		if !foundT {
			if okT(runs[i]) {
				foundT, res.WindowTarget, res.RunTarget = true, cT, runs[i]
			} else {
				cT += cfg.Step
			}
		}
	}
	if !found99 || !foundT {
		return res, fmt.Errorf("bench: simulate: window search did not converge (99%%: %v, target: %v)", found99, foundT)
	}

	if !cfg.Bimodal.Skip {
		b := cfg.Bimodal
		exact := cfg.Engine
		exact.Probabilistic = false
		exact.FalsePositiveRate = 0.01
		var specs []simSpec
		for _, w := range b.Windows {
			specs = append(specs, simSpec{label: "bimodal", window: w, engine: exact})
		}
		specs = append(specs, simSpec{label: "bimodal, long retention", window: b.Retention, engine: exact})
		warm := b.Stream.Delay.ReplayMax + b.Stream.Delay.RetryMean*20
		runs, delays, err := simPass(ctx, cfg, b.Stream, b.Scale, warm, b.Measure, specs, true, progress)
		if err != nil {
			return nil, err
		}
		res.Bimodal = runs
		res.BimodalDelays = delayStats(delays)
	}
	return res, nil
}

func roundUp(d, step time.Duration) time.Duration {
	return (d + step - 1) / step * step
}

func quantileSorted(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func delayStats(d []time.Duration) DelayStats {
	if len(d) == 0 {
		return DelayStats{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += float64(x)
	}
	return DelayStats{
		Count: len(s),
		Mean:  time.Duration(sum / float64(len(s))),
		P50:   quantileSorted(s, 0.5),
		P90:   quantileSorted(s, 0.9),
		P99:   quantileSorted(s, 0.99),
		Max:   s[len(s)-1],
	}
}
