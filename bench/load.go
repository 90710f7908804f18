package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
)

// LoadConfig configures an open-loop load run: events are issued at the
// times a stream of the target rate gives them, whether or not the engine
// kept up, so latency includes queueing behind a slow batch.
type LoadConfig struct {
	// Engine is the engine under test; ExpectedRate, left 0, follows each
	// target rate. Default exact mode, blocked filter, Window 1m,
	// AutoCommit 50ms.
	Engine EngineOptions `json:"engine"`
	// Stream shapes keys and duplicates; Rate is set per step. Default 5%
	// duplicates, exponential delay with mean 2s.
	Stream StreamOptions `json:"stream"`
	// Rates are the target rates (events per second); more than one is a
	// sweep. Default 50000.
	Rates []float64 `json:"rates"`
	// Duration is how long each rate is offered. Default 10s.
	Duration time.Duration `json:"duration"`
	// Tick is how often a batch is issued: every event due in a tick goes
	// in one ObserveBatch. Default 1ms.
	Tick time.Duration `json:"tick"`
	// Interval is the sampling interval of the time series. Default 1s.
	Interval time.Duration `json:"interval"`
	// Dir is where temporary state directories are made ("" = os.TempDir).
	Dir string `json:"dir,omitempty"`
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *LoadConfig) EnsureDefaults() {
	e := &c.Engine
	e.Filter = cmp.Or(e.Filter, "blocked")
	e.Window = cmp.Or(e.Window, time.Minute)
	e.AutoCommit = cmp.Or(e.AutoCommit, 50*time.Millisecond)
	c.Stream.DuplicateFraction = cmp.Or(c.Stream.DuplicateFraction, 0.05)
	c.Stream.Delay.Mean = cmp.Or(c.Stream.Delay.Mean, 2*time.Second)
	if len(c.Rates) == 0 {
		c.Rates = []float64{50000}
	}
	c.Duration = cmp.Or(c.Duration, 10*time.Second)
	c.Tick = cmp.Or(c.Tick, time.Millisecond)
	c.Interval = cmp.Or(c.Interval, time.Second)
}

// LoadSample is one interval of a load step.
type LoadSample struct {
	// At is the time since the step started.
	At time.Duration `json:"at"`
	// Rate is the events per second achieved in the interval.
	Rate float64 `json:"rate"`
	// P50, P99 and P999 are batch latencies in the interval.
	P50  time.Duration `json:"p50"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	// Keys, HeapBytes, FilterBytes and DiskBytes are read at its end.
	Keys        uint64 `json:"keys"`
	HeapBytes   uint64 `json:"heap_bytes"`
	FilterBytes uint64 `json:"filter_bytes"`
	DiskBytes   uint64 `json:"disk_bytes"`
	// StoreLookups is cumulative.
	StoreLookups uint64 `json:"store_lookups"`
}

// LoadStep is the outcome of one target rate.
type LoadStep struct {
	Target   float64 `json:"target"`
	Achieved float64 `json:"achieved"`
	Events   uint64  `json:"events"`
	Batches  uint64  `json:"batches"`
	// Latency of a batch from the time it was due to the time
	// ObserveBatch returned.
	P50  time.Duration `json:"p50"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	Max  time.Duration `json:"max"`
	// DupsMissed counts duplicates inside the window reported New;
	// FalseDrops first sightings reported as seen (probabilistic mode).
	Duplicates   uint64 `json:"duplicates"`
	DupsMissed   uint64 `json:"dups_missed"`
	FalseDrops   uint64 `json:"false_drops"`
	StoreLookups uint64 `json:"store_lookups"`
	// Keys remembered at the end; RAM is the Go heap in use (it holds the
	// filters, FilterBytes of it); Disk the state directory.
	Keys        uint64  `json:"keys"`
	HeapBytes   uint64  `json:"heap_bytes"`
	FilterBytes uint64  `json:"filter_bytes"`
	DiskBytes   uint64  `json:"disk_bytes"`
	RAMPerKey   float64 `json:"ram_per_key"`
	DiskPerKey  float64 `json:"disk_per_key"`
	// Saturated reports that the engine fell behind by more than a
	// Duration and the step was cut short.
	Saturated bool         `json:"saturated"`
	Samples   []LoadSample `json:"samples"`
}

// LoadResult is the outcome of Load.
type LoadResult struct {
	Config LoadConfig `json:"config"`
	Steps  []LoadStep `json:"steps"`
	// Machine says where and when the run was made.
	Machine *Machine `json:"machine,omitempty"`
}

// Load offers each target rate in turn to a fresh engine on a temporary
// state directory, through ObserveBatch with AutoCommit.
func Load(ctx context.Context, cfg LoadConfig, progress Progress) (*LoadResult, error) {
	cfg.EnsureDefaults()
	if cfg.Duration <= 0 || cfg.Tick <= 0 || cfg.Interval <= 0 {
		return nil, errors.New("bench: load Duration, Tick and Interval must be positive")
	}
	progress = orNop(progress)
	res := &LoadResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()
	for _, rate := range cfg.Rates {
		if !(rate > 0) {
			return nil, fmt.Errorf("bench: load rate must be positive, got %v", rate)
		}
		step, err := loadStep(ctx, cfg, rate, progress)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, step)
	}
	return res, nil
}

func loadStep(ctx context.Context, cfg LoadConfig, rate float64, progress Progress) (step LoadStep, err error) {
	step.Target = rate
	sc := cfg.Stream
	sc.Rate = rate
	sc.Duration = cfg.Duration
	sc.Events = 0
	st, err := NewStream(sc)
	if err != nil {
		return step, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-load-")
	if err != nil {
		return step, fmt.Errorf("bench: load state dir: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	ec := cfg.Engine
	ec.Dir = dir
	if ec.ExpectedRate == 0 {
		ec.ExpectedRate = sc.DistinctRate()
	}
	t, err := OpenEngine(ec, nil)
	if err != nil {
		return step, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	progress.Stage(fmt.Sprintf("load %.0f events/s", rate), int64(cfg.Duration/time.Millisecond))

	var all, win Histogram
	// dropped holds the originals a false positive dropped, so that their
	// copies count as first deliveries, not as duplicates let through.
	dropped := make(map[string]struct{})
	var keys [][]byte
	var truth []Event
	var dup []bool
	var ev Event
	have := st.Next(&ev)
	start := time.Now()
	nextSample := cfg.Interval
	var winEvents, lastProgress uint64
	sample := func(at time.Duration) {
		u, _ := t.Usage()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := LoadSample{
			At: at, Rate: float64(winEvents) / cfg.Interval.Seconds(),
			P50: win.Quantile(0.5), P99: win.Quantile(0.99), P999: win.Quantile(0.999),
			Keys: u.Keys, HeapBytes: ms.HeapAlloc, FilterBytes: u.FilterBytes, DiskBytes: u.Disk,
			StoreLookups: u.StoreLookups,
		}
		step.Samples = append(step.Samples, s)
		win.Reset()
		winEvents = 0
	}
	for tick := cfg.Tick; have; tick += cfg.Tick {
		if ctx.Err() != nil {
			return step, fmt.Errorf("bench: load: %w", ctx.Err())
		}
		keys, truth = keys[:0], truth[:0]
		for have && ev.At < tick {
			keys = append(keys, ev.Key)
			truth = append(truth, ev)
			have = st.Next(&ev)
		}
		due := start.Add(tick)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if len(keys) > 0 {
			if cap(dup) < len(keys) {
				dup = make([]bool, 2*len(keys))
			}
			d := dup[:len(keys)]
			if err := t.Check(keys, time.Time{}, d); err != nil {
				return step, err
			}
			lat := time.Since(due)
			all.Record(lat)
			win.Record(lat)
			step.Batches++
			step.Events += uint64(len(keys))
			winEvents += uint64(len(keys))
			step.tally(truth, d, dropped, ec.Window)
		}
		elapsed := time.Since(start)
		if elapsed >= nextSample {
			sample(nextSample)
			nextSample += cfg.Interval
		}
		if p := uint64(min(elapsed, cfg.Duration) / time.Millisecond); p > lastProgress {
			progress.Add(int64(p - lastProgress))
			lastProgress = p
		}
		if elapsed > 2*cfg.Duration {
			step.Saturated = true
			break
		}
	}
	elapsed := time.Since(start)
	step.Achieved = float64(step.Events) / elapsed.Seconds()
	step.P50, step.P99, step.P999, step.Max = all.Quantile(0.5), all.Quantile(0.99), all.Quantile(0.999), all.Max()
	if err := t.Commit(); err != nil {
		return step, err
	}
	return step, step.measureHeld(t)
}

// tally counts the verdicts d of the events truth: duplicates, those
// missed within window, and false drops. dropped holds the originals a
// false positive dropped, so that their copies count as first
// deliveries, not as duplicates let through.
func (step *LoadStep) tally(truth []Event, d []bool, dropped map[string]struct{}, window time.Duration) {
	for i := range truth {
		k := string(truth[i].Key)
		_, lost := dropped[k]
		switch {
		case truth[i].Dup && lost:
			// The original was dropped (a filter false
			// positive): this copy is the event's first
			// delivery, and passing it is right.
			if d[i] {
				step.FalseDrops++
			} else {
				delete(dropped, k)
			}
		case truth[i].Dup:
			step.Duplicates++
			if !d[i] && truth[i].Delay < window {
				step.DupsMissed++
			}
		case d[i]:
			step.FalseDrops++
			dropped[k] = struct{}{}
		}
	}
}

// measureHeld fills step's memory and disk figures from t, after a
// collection.
func (step *LoadStep) measureHeld(t Target) error {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u, err := t.Usage()
	if err != nil {
		return err
	}
	step.Keys, step.HeapBytes, step.FilterBytes, step.DiskBytes, step.StoreLookups = u.Keys, ms.HeapAlloc, u.FilterBytes, u.Disk, u.StoreLookups
	if u.Keys > 0 {
		step.RAMPerKey = float64(ms.HeapAlloc) / float64(u.Keys)
		step.DiskPerKey = float64(u.Disk) / float64(u.Keys)
	}
	return nil
}
