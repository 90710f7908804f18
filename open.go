package dedup

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/sysmem"
	"github.com/streamdedup/dedup/rotate"
)

// Meta names in the exact store.
const (
	metaOptions = "options"
	metaSeed    = "seed"
)

// Open opens (or creates) the engine described by opts.
func Open(opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	kind, _ := filter.ParseKind(opts.Filter)
	e := &Engine{
		opts:       opts,
		kind:       kind,
		exactMode:  !opts.Probabilistic,
		logCommits: !opts.Probabilistic || opts.Dir != "",
		shards:     make([]shard, opts.Shards),
	}
	span := opts.Window / time.Duration(opts.Generations)
	capacity := shardCapacity(opts.ExpectedRate*span.Seconds(), opts.Shards)
	cfg := rotate.Config{
		Window:            opts.Window,
		Generations:       opts.Generations,
		Kind:              kind,
		Capacity:          capacity,
		FalsePositiveRate: opts.FalsePositiveRate,
	}
	if err := checkMemory(kind, cfg, opts); err != nil {
		return nil, err
	}
	var err error
	if e.timing, err = rotate.New(cfg); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	for i := range e.shards {
		s := &e.shards[i]
		if s.ring, err = rotate.New(cfg); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		s.inflight = newInflightSet(0)
		s.inflightGens = make(map[uint64]int)
	}

	fs, dir := opts.FS, opts.Dir
	if dir == "" {
		if fs == nil {
			fs = vfs.NewMem()
		}
		dir = "dedup-mem"
	} else if fs == nil {
		fs = vfs.Default
	}
	e.fs, e.snapDir = fs, fs.PathJoin(dir, SnapshotDir)
	e.store, err = exact.Open(dir, exact.Options{FS: fs, LogOnly: opts.Probabilistic})
	if err != nil {
		return nil, wrap(err, "open state %q", opts.Dir)
	}
	if err := e.load(); err != nil {
		return nil, errors.Join(err, e.store.Close())
	}
	e.bgCtx, e.bgCancel = context.WithCancel(context.Background())
	// Errors of background work are counted in Stats (commits, snapshots)
	// or logged (reclaim); the next tick retries.
	if opts.AutoCommit > 0 {
		e.every(opts.AutoCommit, func() { _ = e.commit(math.MaxUint64, nil) })
	}
	if opts.SnapshotInterval > 0 {
		e.every(opts.SnapshotInterval, func() { _ = e.snapshot(false) })
	}
	if e.exactMode {
		// Expired generations are range-deleted by the commit that expires
		// them but stay on disk (or in memory, Dir "") until compacted:
		// give their space back.
		e.every(max(span/2, time.Second), func() {
			if err := e.store.Reclaim(e.bgCtx); err != nil && e.bgCtx.Err() == nil {
				e.logf("dedup: reclaim expired generations: %v", err)
			}
		})
	}
	return e, nil
}

// load reads the persisted options, seed and checkpoint, or writes them on
// a fresh state, then rebuilds the filters from what was committed.
func (e *Engine) load() error {
	want := e.opts.persisted()
	raw, ok, err := e.store.GetMeta(metaOptions)
	if err != nil {
		return wrap(err, "read options")
	}
	if ok {
		have, err := decodePersisted(raw)
		if err != nil {
			return err
		}
		if err := have.compatible(want); err != nil {
			return err
		}
		rawSeed, ok, err := e.store.GetMeta(metaSeed)
		if err != nil {
			return wrap(err, "read seed")
		}
		if !ok || len(rawSeed) != 8 {
			return fmt.Errorf("%w: hash seed missing or malformed", ErrCorrupt)
		}
		e.seed = binary.BigEndian.Uint64(rawSeed)
	} else {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return wrap(err, "draw hash seed")
		}
		e.seed = binary.BigEndian.Uint64(b[:])
		if err := e.store.SetMeta(metaSeed, beUint64(e.seed)); err != nil {
			return wrap(err, "persist seed")
		}
		if err := e.store.SetMeta(metaOptions, want.encode()); err != nil {
			return wrap(err, "persist options")
		}
	}
	cp, err := e.store.Checkpoint()
	if err != nil {
		return wrap(err, "read checkpoint")
	}
	e.checkpoint = cp
	e.commitSeq = e.store.CommitSeq()
	return e.restore()
}

func beUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// checkMemory refuses options whose filters would not fit in the machine's
// memory (generations+1 generations of every shard at their sized capacity),
// rather than dying out of memory at the first Observe.
func checkMemory(kind filter.Kind, cfg rotate.Config, opts Options) error {
	per, err := filter.EstimateBytes(kind, cfg.Capacity, cfg.FalsePositiveRate/float64(cfg.Generations+1))
	if err != nil {
		return fmt.Errorf("%w: ExpectedRate %v over Window %v: %w", ErrInvalidOptions, opts.ExpectedRate, opts.Window, err)
	}
	need := float64(per) * float64(opts.Shards) * float64(cfg.Generations+1)
	if total := sysmem.Total(); total > 0 && need > float64(total) {
		return fmt.Errorf("%w: ExpectedRate %v keys/s over Window %v needs about %.1f GiB of %s filters, more than this machine's %.1f GiB of memory",
			ErrInvalidOptions, opts.ExpectedRate, opts.Window, need/(1<<30), kind, float64(total)/(1<<30))
	}
	return nil
}

// shardCapacity sizes one shard's generation for perGen keys spread over
// shards. The keys a shard receives vary binomially around the mean; a
// shard that passes its capacity by one key chains a filter twice as large,
// so the capacity includes four standard deviations of headroom.
func shardCapacity(perGen float64, shards int) uint64 {
	mean := perGen / float64(shards)
	return uint64(mean+4*math.Sqrt(mean)) + 64
}
