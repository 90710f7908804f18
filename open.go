package dedup

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/advisor"
	"github.com/streamdedup/dedup/internal/fsperm"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/internal/sysmem"
	"github.com/streamdedup/dedup/rotate"
	"github.com/streamdedup/dedup/snapshot"
)

// Meta names in the exact store.
const (
	metaOptions = "options"
	metaSizing  = "sizing"
	metaSeed    = "seed"
	// metaHash names the kind of the filters' hash: hashFingerprint in
	// exact mode over a directory, absent otherwise.
	metaHash = "hash"
)

// hashFingerprint is the value of metaHash: the filters hash a key's
// fingerprint (see Engine.hash).
const hashFingerprint = "fingerprint"

// Open opens (or creates) the engine described by opts. On an existing
// state directory, the fields opts leaves zero among Window, Generations,
// Shards, Filter, Probabilistic, ExpectedRate and FalsePositiveRate take
// the values the directory records (see [StateOptions]); a Window,
// Generations, Shards, Filter or Probabilistic given that differs from the
// directory's is an error wrapping ErrIncompatible, naming the option.
// ExpectedRate and FalsePositiveRate size the generations made from now on:
// new values are allowed, and recorded.
func Open(opts Options) (*Engine, error) {
	// Refuse bad values before touching the state directory.
	given := opts
	if err := given.WithDefaults().Validate(); err != nil {
		return nil, err
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
	fs = fsperm.FS(fs)
	store, err := openStore(fs, dir, given)
	if err != nil {
		return nil, stateOpenError(err, fs, dir, opts.Dir)
	}
	if opts.Dir != "" {
		rec, ok, err := recorded(store)
		if err != nil {
			return nil, errors.Join(err, store.Close())
		}
		if ok {
			opts.adopt(rec)
			adopted := opts
			adopted.WithDefaults()
			if adopted.Probabilistic != given.Probabilistic || memTableSize(adopted) != memTableSize(given) {
				// The store was opened for other options: open it again.
				if err := store.Close(); err != nil {
					return nil, wrap(err, "open state %q", opts.Dir)
				}
				if store, err = openStore(fs, dir, adopted); err != nil {
					return nil, wrap(err, "open state %q", opts.Dir)
				}
			}
		}
	}
	opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, errors.Join(err, store.Close())
	}
	e, err := open(opts, fs, dir, store)
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	return e, nil
}

// openStore opens the exact store in dir for opts (defaults filled).
// Without a Dir, the store is in memory: fingerprint tables, no files.
func openStore(fs vfs.FS, dir string, opts Options) (*exact.Store, error) {
	eo := exact.Options{FS: fs, LogOnly: opts.Probabilistic, InMemory: opts.Dir == "",
		MemTableSize: memTableSize(opts), CacheSize: blockCacheSize(opts), AcceptLoss: opts.AcceptLostCommits}
	if opts.Dir != "" {
		if err := knownCommit(fs, dir, &eo); err != nil {
			return nil, err
		}
	}
	return exact.Open(dir, eo)
}

// knownCommit sets the evidence of commits in dir that the store must
// hold: the newest commit a snapshot there covers (see
// exact.Options.KnownCommit).
func knownCommit(fs vfs.FS, dir string, eo *exact.Options) error {
	seq, path, err := snapshot.NewestCommit(fs, fs.PathJoin(dir, SnapshotDir))
	if err != nil {
		return wrap(err, "read the snapshots of %q", dir)
	}
	eo.KnownCommit, eo.KnownBy = seq, "snapshot "+path
	return nil
}

// adopt fills the fields of o that a state directory records and o leaves
// zero with rec's values.
func (o *Options) adopt(rec Options) {
	if o.Window == 0 {
		o.Window = rec.Window
	}
	if o.Generations == 0 {
		o.Generations = rec.Generations
	}
	if o.Shards == 0 {
		o.Shards = rec.Shards
	}
	if o.Filter == "" {
		o.Filter = rec.Filter
	}
	if !o.Probabilistic {
		o.Probabilistic = rec.Probabilistic
	}
	if o.ExpectedRate == 0 {
		o.ExpectedRate = rec.ExpectedRate
	}
	if o.FalsePositiveRate == 0 {
		o.FalsePositiveRate = rec.FalsePositiveRate
	}
}

// sizing holds the recorded options that size new generations: they may
// change between runs.
type sizing struct {
	ExpectedRate      float64 `json:"expected_rate"`
	FalsePositiveRate float64 `json:"false_positive_rate"`
}

// recorded returns the options the state in st records: its shape and, if
// recorded (states made before sizing was recorded lack it), its sizing.
// ok is false for a new state.
func recorded(st *exact.Store) (o Options, ok bool, err error) {
	raw, ok, err := st.GetMeta(metaOptions)
	if err != nil || !ok {
		return Options{}, false, wrapIf(err, "read options")
	}
	p, err := decodePersisted(raw)
	if err != nil {
		return Options{}, false, err
	}
	o = p.options("")
	raw, ok, err = st.GetMeta(metaSizing)
	if err != nil {
		return Options{}, false, wrap(err, "read sizing")
	}
	if ok {
		var sz sizing
		if err := json.Unmarshal(raw, &sz); err != nil {
			return Options{}, false, fmt.Errorf("%w: recorded sizing: %w", ErrCorrupt, err)
		}
		o.ExpectedRate, o.FalsePositiveRate = sz.ExpectedRate, sz.FalsePositiveRate
	}
	return o, true, nil
}

// StateOptions returns the options a state directory records: the ones
// that shape it (Window, Generations, Shards, Filter, Probabilistic) and the
// ones that size its generations as last opened (ExpectedRate,
// FalsePositiveRate; zero for a state written before they were recorded).
// Open adopts them for the fields it is given zero. The state must not be
// open in another process.
func StateOptions(dir string) (Options, error) {
	return stateOptions(vfs.Default, dir, false)
}

// stateOptions is StateOptions on fs; acceptLoss opens a store that lost
// commits (Options.AcceptLostCommits).
func stateOptions(fs vfs.FS, dir string, acceptLoss bool) (Options, error) {
	if _, err := fs.Stat(dir); err != nil {
		return Options{}, wrap(err, "state %q", dir)
	}
	eo := exact.Options{FS: fs, LogOnly: true, AcceptLoss: acceptLoss}
	if err := knownCommit(fs, dir, &eo); err != nil {
		return Options{}, err
	}
	st, err := exact.Open(dir, eo)
	if err != nil {
		return Options{}, wrap(err, "state %q", dir)
	}
	defer st.Close()
	o, ok, err := recorded(st)
	if err != nil {
		return Options{}, wrap(err, "state %q", dir)
	}
	if !ok {
		return Options{}, fmt.Errorf("%w: %q holds no dedup options (not a state directory, or never opened)", ErrNotOurs, dir)
	}
	o.Dir = dir
	return o, nil
}

func (p persisted) options(dir string) Options {
	return Options{Dir: dir, Window: p.Window, Generations: p.Generations, Shards: p.Shards,
		Filter: p.Filter, Probabilistic: p.Probabilistic}
}

// wrapIf is wrap for an err that may be nil.
func wrapIf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return wrap(err, format, args...)
}

// open builds the engine for opts (defaults filled, valid) on store.
func open(opts Options, fs vfs.FS, dir string, store *exact.Store) (*Engine, error) {
	kind, _ := filter.ParseKind(opts.Filter)
	e := &Engine{
		opts:       opts,
		kind:       kind,
		exactMode:  !opts.Probabilistic,
		logCommits: !opts.Probabilistic || opts.Dir != "",
		shards:     make([]shard, opts.Shards),
	}
	e.initClock()
	e.adv = advisor.New(advisor.Config{Window: opts.Window, Generations: opts.Generations, Shards: opts.Shards,
		HorizonSample: opts.HorizonSample, HorizonBytes: opts.HorizonBytes, Probabilistic: opts.Probabilistic})
	for i := range e.shards {
		e.shards[i].adv = e.adv.NewShard()
	}
	span := opts.Window / time.Duration(opts.Generations)
	cfg := ringConfig(kind, opts)
	if err := fuseSpools(&cfg, fs, dir, opts.Dir != "", e.logf); err != nil {
		return nil, err
	}
	need, err := checkMemory(kind, cfg, opts)
	if err != nil {
		return nil, err
	}
	if e.timing, err = rotate.New(cfg); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	// Every shard follows e.timing's window schedule.
	cfg = e.timing.Options()
	for i := range e.shards {
		s := &e.shards[i]
		if s.ring, err = rotate.New(cfg); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		s.inflight = newInflightSet(0)
		if opts.ExplicitDone {
			s.undone = newInflightSet(0)
		}
		s.inflightGens = make(map[uint64]int)
	}
	e.fs, e.dir, e.snapDir = fs, dir, fs.PathJoin(dir, SnapshotDir)
	e.store = store
	if err := e.load(); err != nil {
		return nil, err
	}
	e.startEventClock()
	if err := e.settleWindow(); err != nil {
		return nil, err
	}
	// The filters start small and follow the traffic (Stats.FilterBytes,
	// Options.FilterCeiling): the ceiling is worth a line only when the
	// machine could not hold it beside the rest of the process.
	if total := sysmem.Total(); total > 0 && need > float64(total)/2 {
		e.logf("dedup: warning: filters sized for ExpectedRate %v keys/s over Window %v grow to about %s if the traffic keeps that rate for a whole window, over half of this machine's %s of memory (they start small and follow the keys held)",
			opts.ExpectedRate, opts.Window, humanize.Bytes(uint64(need)), humanize.Bytes(total))
	}
	if e.stats.restoredKeys > 0 {
		var bytes, sized uint64
		for i := range e.shards {
			bytes += e.shards[i].ring.FilterBytes()
			sized += e.shards[i].ring.SizedCapacity()
		}
		e.logf("dedup: restored filters hold %d keys in %.1f MiB; generations are sized for %d keys (%.3g keys/s over a %v span), from the rate measured",
			e.stats.restoredKeys, float64(bytes)/(1<<20), sized, float64(sized)/span.Seconds(), span)
	}
	e.bgCtx, e.bgCancel = context.WithCancel(context.Background())
	// Errors of background work are counted in Stats (commits, snapshots)
	// or logged (reclaim); the next tick retries.
	if opts.AutoCommit > 0 {
		e.every(opts.AutoCommit, func() { _ = e.commit(context.Background(), math.MaxUint64, 2*e.epoch.Load(), nil) })
	}
	if opts.SnapshotInterval > 0 {
		e.every(opts.SnapshotInterval, func() {
			if e.snapshotStale() {
				_ = e.snapshot(false)
			}
		})
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
		if err := e.loadHashKind(); err != nil {
			return err
		}
	} else {
		if err := e.newSeed(); err != nil {
			return err
		}
		if e.exactMode && e.opts.Dir != "" {
			if err := e.store.SetMeta(metaHash, []byte(hashFingerprint)); err != nil {
				return wrap(err, "persist hash kind")
			}
			e.fpHash = true
		}
		if err := e.store.SetMeta(metaOptions, want.encode()); err != nil {
			return wrap(err, "persist options")
		}
	}
	if err := e.recordSizing(); err != nil {
		return err
	}
	cp, err := e.store.Checkpoint()
	if err != nil {
		return wrap(err, "read checkpoint")
	}
	e.checkpoint = cp
	e.commitSeq = e.store.CommitSeq()
	if err := e.loadWindowSchedule(); err != nil {
		return err
	}
	e.initAutoWindow()
	return e.restore()
}

// newSeed draws and persists a new hash seed.
func (e *Engine) newSeed() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return wrap(err, "draw hash seed")
	}
	e.seed = binary.BigEndian.Uint64(b[:])
	return wrapIf(e.store.SetMeta(metaSeed, beUint64(e.seed)), "persist seed")
}

// loadHashKind reads the kind of the filters' hash of an existing state.
// An exact-mode state written before the store kept fingerprints (its
// filters hash keys with XXH64) moves to the fingerprint's hash: a new
// seed first, so that its snapshots, whose filters hash the old way, no
// longer match the state (a crash in between leaves it to the next Open),
// then the kind; restore then rebuilds the filters from the store.
func (e *Engine) loadHashKind() error {
	v, ok, err := e.store.GetMeta(metaHash)
	switch {
	case err != nil:
		return wrap(err, "read hash kind")
	case ok && string(v) == hashFingerprint && e.exactMode:
		e.fpHash = true
		return nil
	case ok:
		return fmt.Errorf("%w: hash kind %q in a %s state", ErrCorrupt, v, map[bool]string{true: "exact", false: "probabilistic"}[e.exactMode])
	case !e.exactMode || e.opts.Dir == "":
		return nil
	}
	if err := e.newSeed(); err != nil {
		return err
	}
	if err := e.store.SetMeta(metaHash, []byte(hashFingerprint)); err != nil {
		return wrap(err, "persist hash kind")
	}
	e.fpHash, e.rehashed = true, true
	return nil
}

// recordSizing records ExpectedRate and FalsePositiveRate, unless the
// state records these values already.
func (e *Engine) recordSizing() error {
	want, err := json.Marshal(sizing{ExpectedRate: e.opts.ExpectedRate, FalsePositiveRate: e.opts.FalsePositiveRate})
	if err != nil {
		return wrap(err, "encode sizing")
	}
	have, ok, err := e.store.GetMeta(metaSizing)
	if err != nil {
		return wrap(err, "read sizing")
	}
	if ok && string(have) == string(want) {
		return nil
	}
	return wrapIf(e.store.SetMeta(metaSizing, want), "persist sizing")
}

func beUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
