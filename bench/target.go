package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/observeretry"
)

// Target is a dedup layer under test: this engine or a baseline. The
// harness feeds every Target the same stream, in batches, with the virtual
// time of the batch.
type Target interface {
	// Name identifies the target in reports.
	Name() string
	// Check decides, for each key, whether it is a duplicate to drop
	// (dup[i] = true) or an event to process, and remembers it.
	Check(keys [][]byte, now time.Time, dup []bool) error
	// Usage reports what the target holds now.
	Usage() (Usage, error)
	// Close releases the target and removes what it created.
	Close() error
}

// Usage is a point-in-time view of what a Target holds.
type Usage struct {
	// Keys is the number of keys remembered now.
	Keys uint64
	// RAM is memory measured by the target itself (a server's), or 0 when
	// the harness measures the Go heap instead.
	RAM uint64
	// OffHeap is memory held outside the Go heap that the target can
	// measure (Pebble's C-allocated memtables and block cache).
	OffHeap uint64
	// FilterBytes is the memory held by pre-filters.
	FilterBytes uint64
	// Disk is the bytes on disk.
	Disk uint64
	// StoreLookups counts exact-store lookups (engine only).
	StoreLookups uint64
	// InFlightBytes and CacheBytes are the engine's in-flight sets and
	// cache of recently committed keys (see dedup.Stats), in RAM;
	// AdvisorBytes the window advisor's sample (dedup.WindowAdvice.Bytes).
	InFlightBytes, CacheBytes, AdvisorBytes uint64
}

// VirtualClock is a settable clock for Options.Now. Its zero value reads
// the Unix epoch plus the offset set.
type VirtualClock struct {
	base time.Time
	off  atomic.Int64
}

// NewVirtualClock returns a clock that reads base until Set.
func NewVirtualClock(base time.Time) *VirtualClock { return &VirtualClock{base: base} }

// Set moves the clock to base + d.
func (c *VirtualClock) Set(d time.Duration) { c.off.Store(int64(d)) }

// Now returns the clock's time.
func (c *VirtualClock) Now() time.Time { return c.base.Add(time.Duration(c.off.Load())) }

// simEpoch is where virtual clocks start: a round time, so generation
// boundaries fall on round offsets.
var simEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// EngineOptions configures the engine as a Target.
type EngineOptions struct {
	// Probabilistic selects probabilistic mode (no exact store).
	Probabilistic bool `json:"probabilistic"`
	// Filter is the pre-filter backend: bloom, cuckoo or blocked.
	Filter string `json:"filter"`
	// Window, ExpectedRate, FalsePositiveRate, Generations and Shards are
	// passed to dedup.Options (zero: the engine's default).
	Window            time.Duration `json:"window"`
	ExpectedRate      float64       `json:"expected_rate"`
	FalsePositiveRate float64       `json:"false_positive_rate"`
	Generations       int           `json:"generations"`
	Shards            int           `json:"shards,omitempty"`
	// Dir is the state directory; "" keeps the engine in memory.
	Dir string `json:"dir,omitempty"`
	// AutoCommit is the background commit interval; 0 makes the harness
	// commit after every batch.
	AutoCommit time.Duration `json:"auto_commit"`
	// MaxInFlight is passed to dedup.Options.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// ManualCommit leaves commits to the caller (EngineTarget.Commit) even
	// without AutoCommit: the simulation commits on its virtual clock.
	ManualCommit bool `json:"-"`
}

// ModeName returns "exact" or "probabilistic".
func (c EngineOptions) ModeName() string {
	if c.Probabilistic {
		return "probabilistic"
	}
	return "exact"
}

// EngineTarget runs the stream through dedup.Engine.
type EngineTarget struct {
	cfg   EngineOptions
	eng   *dedup.Engine
	clock *VirtualClock
	out   []dedup.Verdict
}

// OpenEngine opens an engine Target on clock (nil: the real clock).
func OpenEngine(cfg EngineOptions, clock *VirtualClock) (*EngineTarget, error) {
	opts := dedup.Options{
		Dir:               cfg.Dir,
		Window:            cfg.Window,
		ExpectedRate:      cfg.ExpectedRate,
		FalsePositiveRate: cfg.FalsePositiveRate,
		Filter:            cfg.Filter,
		Probabilistic:     cfg.Probabilistic,
		Generations:       cfg.Generations,
		Shards:            cfg.Shards,
		AutoCommit:        cfg.AutoCommit,
		MaxInFlight:       cfg.MaxInFlight,
	}
	if clock != nil {
		opts.Now = clock.Now
	}
	eng, err := dedup.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("bench: open engine (%s, %s): %w", cfg.ModeName(), cfg.Filter, err)
	}
	return &EngineTarget{cfg: cfg, eng: eng, clock: clock}, nil
}

// Name returns "engine/<mode>/<filter>".
func (t *EngineTarget) Name() string {
	return "engine " + t.cfg.ModeName() + "/" + t.cfg.Filter
}

// Engine returns the engine under test.
func (t *EngineTarget) Engine() *dedup.Engine { return t.eng }

// Check observes keys; every verdict but New is a drop. When the engine
// asks for a commit (ErrTooManyInFlight) it commits and observes the rest.
// Without AutoCommit it commits after every batch.
func (t *EngineTarget) Check(keys [][]byte, now time.Time, dup []bool) error {
	if cap(t.out) < len(keys) {
		t.out = make([]dedup.Verdict, len(keys))
	}
	out := t.out[:len(keys)]
	if err := t.observe(keys, out); err != nil {
		return err
	}
	for i, v := range out {
		dup[i] = v != dedup.New
	}
	if t.cfg.AutoCommit == 0 && !t.cfg.ManualCommit {
		return t.Commit()
	}
	return nil
}

// Commit commits the keys in flight.
func (t *EngineTarget) Commit() error {
	if err := t.eng.Commit(nil); err != nil {
		return fmt.Errorf("bench: engine commit: %w", err)
	}
	return nil
}

func (t *EngineTarget) observe(keys [][]byte, out []dedup.Verdict) error {
	err := t.eng.ObserveBatch(keys, out)
	if errors.Is(err, dedup.ErrTooManyInFlight) {
		// Commit and observe what is left, the RESP server's rule.
		err = observeretry.Finish(t.eng, keys, out, err, nil)
	}
	if err != nil {
		return fmt.Errorf("bench: observe batch: %w", err)
	}
	return nil
}

// Usage reports the engine's remembered keys, filter memory and disk.
func (t *EngineTarget) Usage() (Usage, error) {
	st := t.eng.Stats()
	u := Usage{
		Keys:          st.FilterKeys + uint64(max(st.InFlightKeys, 0)),
		FilterBytes:   st.FilterBytes,
		Disk:          st.DiskBytes,
		StoreLookups:  st.StoreLookups,
		InFlightBytes: st.InFlightBytes,
		CacheBytes:    st.CacheBytes,
		AdvisorBytes:  st.WindowAdvice.Bytes,
	}
	if t.cfg.Dir != "" {
		// Stats.DiskBytes comes from Pebble's metrics; the directory's
		// size also counts what they leave out.
		n, err := dirSize(t.cfg.Dir)
		if err != nil {
			return u, err
		}
		u.Disk = max(u.Disk, n)
	}
	return u, nil
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) (uint64, error) {
	var n uint64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (compaction)
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += uint64(fi.Size())
			}
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("bench: size of %s: %w", dir, err)
	}
	return n, nil
}

// Close closes the engine.
func (t *EngineTarget) Close() error {
	if err := t.eng.Close(); err != nil {
		return fmt.Errorf("bench: close engine: %w", err)
	}
	return nil
}
