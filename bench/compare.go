package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/internal/procmem"
)

// Baseline names accepted in CompareConfig.Baselines.
const (
	BaselineRedis  = "redis"
	BaselinePebble = "pebble"
	BaselineMap    = "map"
	BaselineBloom  = "bloom"
	BaselineSBBF   = "sbbf"
)

// CompareConfig configures a side-by-side run: one stream, replayed as
// fast as each target takes it, on a virtual clock that follows the
// stream's timestamps.
type CompareConfig struct {
	// Stream is the workload. Default 400,000 events at a nominal 50,000/s
	// (8s of virtual time), 5% duplicates, exponential delay, mean 1s.
	Stream StreamOptions `json:"stream"`
	// Window is every target's retention. Default 5s (virtual; Redis
	// expires on its real clock).
	Window time.Duration `json:"window"`
	// FalsePositiveRate is the filters' target. Default 0.01.
	FalsePositiveRate float64 `json:"false_positive_rate"`
	// Modes are the engine modes run: "exact", "probabilistic". Default
	// both.
	Modes []string `json:"modes"`
	// Filters are the engine's backends run. Default bloom, cuckoo,
	// blocked.
	Filters []string `json:"filters"`
	// Baselines are run after the engine: redis, pebble, map, bloom, sbbf
	// (parquet-go's split-block filter).
	// Default all.
	Baselines []string `json:"baselines"`
	// Batch is the number of events per call. Default 512.
	Batch int `json:"batch"`
	// CommitEvery is the engine's commit interval on the stream's virtual
	// clock. Default 100ms.
	CommitEvery time.Duration `json:"commit_every"`
	// Dir is where temporary state directories are made ("" = os.TempDir).
	Dir string `json:"dir,omitempty"`
	// MemorySweep are the false-positive rates of the memory sweep; none
	// skips it. Default 0.1, 0.01, 0.001, 0.0001.
	MemorySweep []float64 `json:"memory_sweep"`
	// SweepKeys is the number of keys each sweep point holds. Default
	// 200,000.
	SweepKeys int `json:"sweep_keys"`
	// SkipSweep leaves the memory sweep out.
	SkipSweep bool `json:"skip_sweep,omitempty"`
	// ScaleKeys are the sizes of the memory-at-scale runs: each target of
	// ScaleTargets takes that many distinct keys within one window, in a
	// process of its own, and reports the process's resident set. Default
	// 1,000,000 and 10,000,000.
	ScaleKeys []int `json:"scale_keys"`
	// ScaleTargets are the targets of the memory-at-scale runs: "MODE/FILTER"
	// for the engine (exact/blocked) or a baseline name. Default
	// exact/blocked, probabilistic/blocked and redis.
	ScaleTargets []string `json:"scale_targets"`
	// SkipScale leaves the memory-at-scale runs out.
	SkipScale bool `json:"skip_scale,omitempty"`
	// Child is the command line that runs [RunChild] in a fresh process;
	// with it every target runs in a process of its own, so that its
	// resident set (RSS) is the target's, not the harness's.
	// cmd/dedupbench passes its own executable. Nil runs the targets in
	// this process: then only redis-server, a process of its own, has an
	// RSS.
	Child []string `json:"-"`
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *CompareConfig) EnsureDefaults() {
	s := &c.Stream
	if s.Events == 0 && s.Duration == 0 {
		s.Events = 400_000
	}
	s.ensureCompareDefaults()
	s.EnsureDefaults()
	c.Window = cmp.Or(c.Window, 5*time.Second)
	c.FalsePositiveRate = cmp.Or(c.FalsePositiveRate, 0.01)
	if c.Modes == nil {
		c.Modes = []string{"exact", "probabilistic"}
	}
	if c.Filters == nil {
		c.Filters = []string{"bloom", "cuckoo", "blocked"}
	}
	if c.Baselines == nil {
		c.Baselines = []string{BaselineRedis, BaselinePebble, BaselineMap, BaselineBloom, BaselineSBBF}
	}
	c.Batch = cmp.Or(c.Batch, 512)
	c.CommitEvery = cmp.Or(c.CommitEvery, 100*time.Millisecond)
	if c.MemorySweep == nil {
		c.MemorySweep = []float64{0.1, 0.01, 0.001, 0.0001}
	}
	c.SweepKeys = cmp.Or(c.SweepKeys, 200_000)
	if c.ScaleKeys == nil {
		c.ScaleKeys = []int{1_000_000, 10_000_000}
	}
	if c.ScaleTargets == nil {
		c.ScaleTargets = []string{"exact/blocked", "probabilistic/blocked", BaselineRedis}
	}
}

// CompareRow is one target's outcome.
type CompareRow struct {
	Name string `json:"name"`
	// Skipped explains why the row did not run ("" if it ran).
	Skipped string `json:"skipped,omitempty"`
	Events  uint64 `json:"events"`
	// EventsPerSec is the throughput, Elapsed the time to take the stream.
	EventsPerSec float64       `json:"events_per_sec"`
	Elapsed      time.Duration `json:"elapsed"`
	// Duplicates counts duplicates arriving within the window of a copy
	// that went through; DupsMissed those let through. FalseDrops counts
	// first sightings dropped (filter false positives).
	Duplicates uint64 `json:"duplicates"`
	DupsMissed uint64 `json:"dups_missed"`
	FalseDrops uint64 `json:"false_drops"`
	// Keys remembered at the end, the bytes of the target's pre-filters,
	// its disk.
	Keys        uint64 `json:"keys"`
	FilterBytes uint64 `json:"filter_bytes"`
	DiskBytes   uint64 `json:"disk_bytes"`
	// Process names the process whose resident set the RSS fields are:
	// "own process" (the target ran alone in a child), "redis-server", or
	// "" when the target shared the harness's process and has no RSS.
	Process string `json:"process,omitempty"`
	// RSSGrowth is the process's resident set at the end less before the
	// target opened; PeakRSS its largest resident set during the run
	// (VmHWM) and PeakGrowth that less the same starting point. Bytes.
	RSSGrowth  uint64 `json:"rss_growth"`
	PeakRSS    uint64 `json:"peak_rss"`
	PeakGrowth uint64 `json:"peak_growth"`
	// RSSPerKey and PeakPerKey are RSSGrowth and PeakGrowth per key held.
	RSSPerKey  float64 `json:"rss_per_key"`
	PeakPerKey float64 `json:"peak_per_key"`
	DiskPerKey float64 `json:"disk_per_key"`
	// StoreLookups counts exact-store lookups (engine, exact mode).
	StoreLookups uint64 `json:"store_lookups"`
	// InFlightBytes, CacheBytes and AdvisorBytes are the memory the engine
	// reports for its in-flight sets, its cache of recently committed keys
	// and its window advisor (see dedup.Stats); EngineBytesPerKey is its own
	// count of what it holds, filters, in-flight sets, cache and advisor,
	// per key (engine rows only): what
	// the process's RSS holds besides the Go runtime, GC headroom and, in
	// exact mode, Pebble's memtable and block cache.
	InFlightBytes     uint64  `json:"inflight_bytes,omitempty"`
	CacheBytes        uint64  `json:"cache_bytes,omitempty"`
	AdvisorBytes      uint64  `json:"advisor_bytes,omitempty"`
	EngineBytesPerKey float64 `json:"engine_bytes_per_key,omitempty"`
	// SpeedRatio is EventsPerSec over the reference row's; RSSRatio is
	// RSSPerKey over the reference's.
	SpeedRatio float64 `json:"speed_ratio,omitempty"`
	RSSRatio   float64 `json:"rss_ratio,omitempty"`
	// ScaleKeys is the number of distinct keys of a memory-at-scale row
	// (0 in the comparison's rows).
	ScaleKeys int `json:"scale_keys,omitempty"`
}

// CompareResult is the outcome of Compare.
type CompareResult struct {
	Config CompareConfig `json:"config"`
	Rows   []CompareRow  `json:"rows"`
	// Reference names the row the ratios are relative to.
	Reference string       `json:"reference"`
	Sweep     []SweepPoint `json:"sweep,omitempty"`
	// Scale are the memory-at-scale rows, by size then target.
	Scale []CompareRow `json:"scale,omitempty"`
	// Machine says where and when the run was made.
	Machine *Machine `json:"machine,omitempty"`
}

// Compare runs the same stream through the engine in each mode and backend
// and through each baseline, then the memory sweep and the memory-at-scale
// runs. With cfg.Child every target runs in a process of its own.
func Compare(ctx context.Context, cfg CompareConfig, progress Progress) (*CompareResult, error) {
	cfg.EnsureDefaults()
	if cfg.Batch < 1 || cfg.Window <= 0 {
		return nil, errors.New("bench: compare Batch and Window must be positive")
	}
	for _, mode := range cfg.Modes {
		if mode != "exact" && mode != "probabilistic" {
			return nil, fmt.Errorf("bench: compare mode must be exact or probabilistic, got %q", mode)
		}
	}
	for _, b := range cfg.Baselines {
		if !slices.Contains([]string{BaselineRedis, BaselinePebble, BaselineMap, BaselineBloom, BaselineSBBF}, b) {
			return nil, fmt.Errorf("bench: unknown baseline %q (want redis, pebble, map, bloom or sbbf)", b)
		}
	}
	if !cfg.SkipScale {
		for _, t := range cfg.ScaleTargets {
			if _, _, _, err := parseScaleTarget(t); err != nil {
				return nil, err
			}
		}
		for _, n := range cfg.ScaleKeys {
			if n < 1 {
				return nil, fmt.Errorf("bench: memory-at-scale size %d: want a positive number of keys", n)
			}
		}
	}
	progress = orNop(progress)
	res := &CompareResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()
	var jobs []ChildJob
	for _, mode := range cfg.Modes {
		for _, f := range cfg.Filters {
			jobs = append(jobs, ChildJob{Mode: mode, Filter: f})
		}
	}
	for _, b := range cfg.Baselines {
		jobs = append(jobs, ChildJob{Baseline: b})
	}
	var rec *recorded
	defer func() {
		if rec != nil {
			rec.free()
		}
	}()
	for _, j := range jobs {
		j.Config = cfg
		var row CompareRow
		var err error
		if cfg.Child != nil {
			progress.Stage("compare: "+j.name()+" (own process)", 1)
			row, err = runChild(ctx, cfg.Child, j)
			progress.Add(1)
		} else {
			if rec == nil {
				if rec, err = record(cfg.Stream, cfg.Window); err != nil {
					return nil, err
				}
			}
			row, err = j.run(ctx, rec, false, progress)
		}
		if err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, row)
	}
	res.setRatios()
	if !cfg.SkipSweep && len(cfg.MemorySweep) > 0 {
		var err error
		if res.Sweep, err = MemorySweep(ctx, cfg.Filters, cfg.MemorySweep, cfg.SweepKeys, progress); err != nil {
			return res, err
		}
	}
	if !cfg.SkipScale {
		for _, n := range cfg.ScaleKeys {
			for _, t := range cfg.ScaleTargets {
				j := ChildJob{Config: cfg, ScaleTarget: t, ScaleKeys: n}
				var row CompareRow
				var err error
				if cfg.Child != nil {
					progress.Stage(fmt.Sprintf("memory at %s keys: %s (own process)", humanize.Count(float64(n)), t), 1)
					row, err = runChild(ctx, cfg.Child, j)
					progress.Add(1)
				} else {
					row, err = j.run(ctx, nil, false, progress)
				}
				if err != nil {
					return res, err
				}
				res.Scale = append(res.Scale, row)
			}
		}
		setScaleRatios(res.Scale)
	}
	return res, nil
}

func (r *CompareResult) setRatios() {
	ref := -1
	for _, name := range []string{"redis SET NX EX", "pebble alone", "go map + expiry"} {
		if i := slices.IndexFunc(r.Rows, func(x CompareRow) bool { return x.Name == name && x.Skipped == "" }); i >= 0 {
			ref = i
			break
		}
	}
	if ref < 0 {
		return
	}
	r.Reference = r.Rows[ref].Name
	base := r.Rows[ref]
	for i := range r.Rows {
		x := &r.Rows[i]
		if x.Skipped != "" {
			continue
		}
		if base.EventsPerSec > 0 {
			x.SpeedRatio = x.EventsPerSec / base.EventsPerSec
		}
		if base.RSSPerKey > 0 && x.RSSPerKey > 0 {
			x.RSSRatio = x.RSSPerKey / base.RSSPerKey
		}
	}
}

// setScaleRatios sets each memory-at-scale row's RSSRatio to Redis's row
// of the same size.
func setScaleRatios(rows []CompareRow) {
	for i := range rows {
		for _, ref := range rows {
			if ref.Name == "redis SET NX EX" && ref.ScaleKeys == rows[i].ScaleKeys && ref.RSSPerKey > 0 && rows[i].RSSPerKey > 0 {
				rows[i].RSSRatio = rows[i].RSSPerKey / ref.RSSPerKey
				if ref.EventsPerSec > 0 {
					rows[i].SpeedRatio = rows[i].EventsPerSec / ref.EventsPerSec
				}
			}
		}
	}
}

// memProbe measures the resident set of the process that holds a target's
// keys, from a starting point taken before the target opened.
type memProbe struct {
	pid  int // 0: this process
	name string
	base procmem.Memory
	ok   bool
}

// selfProbe starts measuring this process: what the harness holds so far
// (the recorded stream) is returned to the system where it is garbage
// and left out, and the peak is reset to now.
func selfProbe() (memProbe, error) {
	debug.FreeOSMemory()
	if _, err := procmem.Read(0); err != nil {
		return memProbe{}, err
	}
	if err := procmem.ResetPeak(); err != nil {
		return memProbe{}, err
	}
	m, err := procmem.Read(0)
	if err != nil {
		return memProbe{}, err
	}
	return memProbe{name: "own process", base: m, ok: true}, nil
}

// pidProbe starts measuring a server process from its resident set now.
func pidProbe(pid int, name string) (memProbe, error) {
	m, err := procmem.Read(pid)
	if err != nil {
		return memProbe{}, err
	}
	return memProbe{pid: pid, name: name, base: m, ok: true}, nil
}

// fill sets row's RSS fields.
func (p memProbe) fill(row *CompareRow) error {
	if !p.ok {
		return nil
	}
	m, err := procmem.Read(p.pid)
	if err != nil {
		return err
	}
	row.Process = p.name
	row.RSSGrowth = max(m.RSS, p.base.RSS) - p.base.RSS
	row.PeakRSS = m.Peak
	row.PeakGrowth = max(m.Peak, p.base.RSS) - p.base.RSS
	if row.Keys > 0 {
		row.RSSPerKey = float64(row.RSSGrowth) / float64(row.Keys)
		row.PeakPerKey = float64(row.PeakGrowth) / float64(row.Keys)
	}
	return nil
}

// openTarget opens the target a job names. The probe measures this
// process when own is set, redis-server's always.
func (j ChildJob) openTarget(ctx context.Context, own bool, window time.Duration, rate float64) (Target, *VirtualClock, memProbe, func() error, error) {
	cfg := j.Config
	nop := func() error { return nil }
	var probe memProbe
	var err error
	if own && j.baseline() != BaselineRedis {
		// Without /proc (not Linux) the rows have no RSS, as in-process.
		if probe, err = selfProbe(); err != nil && !errors.Is(err, procmem.ErrUnsupported) {
			return nil, nil, probe, nop, err
		}
	}
	mode, filter := j.Mode, j.Filter
	if j.ScaleTarget != "" {
		mode, filter, _, _ = parseScaleTarget(j.ScaleTarget)
	}
	switch j.baseline() {
	case "":
		dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-compare-")
		if err != nil {
			return nil, nil, probe, nop, fmt.Errorf("bench: compare state dir: %w", err)
		}
		clk := NewVirtualClock(simEpoch)
		t, err := OpenEngine(EngineOptions{
			Probabilistic:     mode == "probabilistic",
			Filter:            filter,
			Window:            window,
			ExpectedRate:      rate,
			FalsePositiveRate: cfg.FalsePositiveRate,
			Dir:               dir,
			ManualCommit:      true,
		}, clk)
		if err != nil {
			return nil, nil, probe, nop, errors.Join(err, os.RemoveAll(dir))
		}
		return t, clk, probe, func() error { return os.RemoveAll(dir) }, nil
	case BaselineMap:
		return NewMapTarget(window), nil, probe, nop, nil
	case BaselineBloom:
		return NewBloomTarget(window, rate, cfg.FalsePositiveRate), nil, probe, nop, nil
	case BaselineSBBF:
		return NewSBBFTarget(window, rate, cfg.FalsePositiveRate), nil, probe, nop, nil
	case BaselinePebble:
		t, err := OpenPebbleTarget(cfg.Dir, window)
		return t, nil, probe, nop, err
	case BaselineRedis:
		srv, err := StartRedis(ctx)
		if err != nil {
			return nil, nil, probe, nop, err
		}
		rt, err := OpenRedisTarget(ctx, srv.Addr, window)
		if err != nil {
			return nil, nil, probe, nop, errors.Join(err, srv.Stop())
		}
		if probe, err = pidProbe(srv.Pid(), "redis-server"); err != nil && !errors.Is(err, procmem.ErrUnsupported) {
			return nil, nil, probe, nop, errors.Join(err, rt.Close(), srv.Stop())
		}
		return rt, nil, probe, srv.Stop, nil
	}
	return nil, nil, probe, nop, fmt.Errorf("bench: unknown baseline %q (want redis, pebble, map, bloom or sbbf)", j.baseline())
}

// run runs the job in this process; own says the process is the job's
// alone, so its resident set is the target's.
func (j ChildJob) run(ctx context.Context, rec *recorded, own bool, progress Progress) (row CompareRow, err error) {
	cfg := j.Config
	progress = orNop(progress)
	window, rate := cfg.Window, cfg.Stream.DistinctRate()
	if j.ScaleKeys > 0 {
		window = scaleWindow
		rate = float64(j.ScaleKeys) / (scaleSpan * window.Seconds())
	} else if rec == nil {
		if rec, err = record(cfg.Stream, cfg.Window); err != nil {
			return row, err
		}
		defer rec.free()
	}
	t, clk, probe, closeFn, err := j.openTarget(ctx, own, window, rate)
	if errors.Is(err, ErrNoRedis) {
		return CompareRow{Name: "redis SET NX EX", Skipped: "skipped: redis-server not installed", ScaleKeys: j.ScaleKeys}, nil
	}
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, t.Close(), closeFn()) }()
	if j.ScaleKeys > 0 {
		return runScale(ctx, cfg, j.ScaleKeys, window, rate, t, clk, probe, progress)
	}
	return runTarget(ctx, cfg, rec, t, clk, probe, progress)
}

// runTarget feeds the recorded stream to t and measures it.
func runTarget(ctx context.Context, cfg CompareConfig, rec *recorded, t Target, clk *VirtualClock, probe memProbe, progress Progress) (row CompareRow, err error) {
	row.Name = t.Name()
	n := rec.len()
	progress.Stage("compare: "+row.Name, int64(n))
	verdicts := make([]bool, n)
	batch := make([][]byte, cfg.Batch)
	nextCommit := cfg.CommitEvery
	start := time.Now()
	for lo := 0; lo < n; lo += cfg.Batch {
		if ctx.Err() != nil {
			return row, fmt.Errorf("bench: compare: %w", ctx.Err())
		}
		hi := min(lo+cfg.Batch, n)
		now := simEpoch.Add(rec.at[lo])
		if clk != nil {
			clk.Set(rec.at[lo])
		}
		keys := batch[:hi-lo]
		for i := range keys {
			keys[i] = rec.key(lo + i)
		}
		if err := t.Check(keys, now, verdicts[lo:hi]); err != nil {
			return row, fmt.Errorf("bench: compare %s: %w", row.Name, err)
		}
		// The engine commits on the stream's clock, every CommitEvery of
		// virtual time, so runs do not depend on how fast the host is.
		if et, ok := t.(*EngineTarget); ok && rec.at[hi-1] >= nextCommit {
			if err := et.Commit(); err != nil {
				return row, err
			}
			nextCommit = rec.at[hi-1] + cfg.CommitEvery
		}
		progress.Add(int64(hi - lo))
	}
	row.Elapsed = time.Since(start)
	row.Events = uint64(n)
	row.EventsPerSec = float64(row.Events) / row.Elapsed.Seconds()
	if err := usage(t, &row, probe); err != nil {
		return row, err
	}
	// Ground truth, after the clock stops and the memory is measured. A
	// duplicate counts (and can be missed) only if an earlier copy went
	// through within the window: when a filter false positive dropped the
	// original, the duplicate is the event's first delivery and passing it
	// is right.
	passed := make(map[string]time.Duration)
	for j, isDup := range verdicts {
		k := string(rec.key(j))
		first, seen := passed[k]
		switch {
		case seen && rec.at[j]-first < cfg.Window:
			row.Duplicates++
			if !isDup {
				row.DupsMissed++
			}
		case !rec.dup[j] && isDup:
			row.FalseDrops++
		}
		if !isDup && !seen {
			passed[k] = rec.at[j]
		}
	}
	return row, nil
}

// usage commits what the engine holds in flight, then fills the row's
// keys, memory and disk.
func usage(t Target, row *CompareRow, probe memProbe) error {
	if et, ok := t.(*EngineTarget); ok {
		if err := et.Commit(); err != nil {
			return err
		}
	}
	u, err := t.Usage()
	if err != nil {
		return err
	}
	row.Keys, row.FilterBytes, row.DiskBytes, row.StoreLookups = u.Keys, u.FilterBytes, u.Disk, u.StoreLookups
	row.InFlightBytes, row.CacheBytes, row.AdvisorBytes = u.InFlightBytes, u.CacheBytes, u.AdvisorBytes
	if row.Keys > 0 {
		row.DiskPerKey = float64(row.DiskBytes) / float64(row.Keys)
		if _, ok := t.(*EngineTarget); ok {
			row.EngineBytesPerKey = float64(row.FilterBytes+row.InFlightBytes+row.CacheBytes+row.AdvisorBytes) / float64(row.Keys)
		}
	}
	return probe.fill(row)
}
