package dedup

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/advisor"
	"github.com/streamdedup/dedup/rotate"
)

// Options configure an Engine. The zero value of every field selects its
// documented default; Open validates them all and names the bad one.
type Options struct {
	// Dir is the state directory: the exact store, the hash seed, the
	// snapshots. "" keeps everything in memory (the same engine on Pebble's
	// in-memory file system), which is lost on Close. Default "".
	Dir string

	// FS is the file system Dir lives on. Tests pass vfs.NewCrashableMem()
	// or an errorfs wrapper to simulate crashes and I/O faults. Default
	// vfs.Default (the operating system's), or vfs.NewMem() when Dir is "".
	FS vfs.FS

	// Window is how long a key is remembered: a key observed New at t is
	// reported InFlight/Duplicate at every t' with t'-t < Window and is New
	// again by t'-t >= Window + Window/Generations. Choose it from the real
	// redelivery delay of your source. Default 1h.
	Window time.Duration

	// ExpectedRate is the number of distinct keys per second the filters
	// are sized for at most. They follow the traffic: the first generation
	// starts small and grows with its keys, and each later one is sized for
	// 1.5x the keys the one before held, up to what ExpectedRate gives
	// while the traffic stays within it; a faster stream grows the filters
	// (more memory, same error rate). Default 10000.
	ExpectedRate float64

	// FalsePositiveRate is the pre-filter's target false-positive rate for a
	// new key, across all live generations. In exact mode a false positive
	// costs one store lookup; in probabilistic mode it drops a real event.
	// Default 0.01.
	FalsePositiveRate float64

	// Filter is the pre-filter backend: "bloom" (bits-and-blooms), "cuckoo"
	// (seiflotfy), "blocked" (cache-line-blocked Bloom, one memory line
	// per operation), "interleaved" (one line for all generations),
	// "wide" (a blocked line per generation, a key's lines adjacent: one
	// page for all generations at blocked's memory per key) or "fuse"
	// (the newest generation blocked, every older one a static binary
	// fuse filter: 0.8x the memory of blocked, three lines per older
	// generation; it needs a Dir, where the newest generation's
	// hashes wait in files under [SpoolDir]; see docs/static.md). Default
	// "blocked".
	Filter string

	// Probabilistic keeps no exact store: a filter hit is reported
	// Duplicate, so a false positive drops that event, at FalsePositiveRate.
	// Commits still persist a log of key hashes and the checkpoint when Dir
	// is set. Default false (exact mode).
	Probabilistic bool

	// Generations is the number of generations the window is cut into. A
	// key is remembered for at least Window and at most Window +
	// Window/Generations, and a new key is tested against up to
	// Generations+1 filters (one cache miss each), so more generations
	// expire keys closer to Window but cost more per key. Default 4.
	Generations int

	// Shards is the number of independently locked shards. More shards mean
	// less lock contention and smaller filters. Persisted: a state directory
	// keeps its shard count. Default 16.
	Shards int

	// AutoCommit, when positive, commits in-flight keys in the background at
	// this interval, keeping the last checkpoint; Close then commits too.
	// 0 means only explicit Commit. Default 0.
	AutoCommit time.Duration

	// MaxInFlight bounds the keys observed New but not yet committed; past
	// it Observe returns ErrTooManyInFlight, asking for a Commit, instead of
	// growing without bound. Under ExplicitDone it counts the keys not yet
	// Done too: they hold their place across commits until Done (and the
	// next commit) or Forget frees it. Default 1<<20.
	MaxInFlight int

	// ExplicitDone is for worker pools: a key observed New stays in flight,
	// owned by its worker, until [Engine.Done] says it is processed; Commit
	// and CommitThrough make only Done keys durable, the others stay in
	// flight (InFlight to other workers, Forget still possible) across any
	// number of commits. Without it a commit takes every key observed New,
	// which is right when one loop observes, processes, then commits. See
	// the package doc, "Worker pools". Default false.
	ExplicitDone bool

	// SnapshotInterval, when positive, writes a filter snapshot at this
	// interval, and Close writes a last one, so that Open restarts from a
	// snapshot instead of rebuilding the filters (from the store, or from
	// the commit log in probabilistic mode), and the commit log that a
	// snapshot covers is truncated. Negative turns both off (Snapshot
	// still works); a probabilistic state on disk then keeps a log entry (8
	// bytes) per committed key for ever. Default, with a state directory:
	// Window/Generations, the span of a generation, within [1m, 1h]; in
	// memory (Dir ""), where nothing is restored: 0, none.
	SnapshotInterval time.Duration

	// AllowEmptyRestore lets a probabilistic-mode Open start with empty
	// filters when no valid snapshot can be brought up to date (the keys
	// committed before are then forgotten). Without it such an Open fails
	// with ErrCorrupt rather than silently forgetting. Exact mode never
	// needs it: it rebuilds the filters from the store. Default false.
	AllowEmptyRestore bool

	// IgnoreSnapshots makes Open rebuild the filters from the exact store
	// (or, in probabilistic mode, the commit log, if it was never truncated)
	// instead of restoring a snapshot: a repair tool's option. Default false.
	IgnoreSnapshots bool

	// KeepWindow keeps the window in force that an [AutoWindow] left with
	// the state when Options.AutoWindow is nil: without it Open goes back
	// to Window for the keys observed from then on. For a tool that reads
	// a state without running it ([RestoreBackup]'s check, dedup stats),
	// so that the next Open with AutoWindow starts at the window sized.
	// Default false.
	KeepWindow bool

	// AcceptLostCommits opens a state whose store ends before a commit
	// that one of its snapshots covers (its commit log was cut short or
	// damaged): the engine goes on from the store's last intact commit, the
	// commits after it are forgotten, and the snapshots that cover them are
	// set aside (renamed with snapshot.LostSuffix) and reported in
	// Stats.RestoreProblems. Without it such an Open fails with an error
	// matching ErrLostCommits and changes nothing. `dedup repair` sets it.
	// Default false.
	AcceptLostCommits bool

	// Logf receives the engine's rare log lines: restore problems and
	// rebuild progress. nil discards them. Default nil.
	Logf func(format string, args ...any)

	// MaxKeySize is the largest key accepted, in bytes, at most
	// exact.MaxKeySize (64 KiB, what the exact store holds) in every mode.
	// Observe refuses a longer key with ErrKeyTooLarge, so a key that is
	// accepted always commits. Default 4096.
	MaxKeySize int

	// Now is the clock. Default time.Now, or with EventTime the event
	// clock.
	Now func() time.Time

	// EventTime runs the window on the events' own times instead of Now:
	// the engine's clock is the latest time given to [Engine.ObserveAt]
	// or [Engine.ObserveBatchAt] so far (the start of the newest restored
	// generation before any), so replaying an old log expires keys as the
	// log's times say. The clock never moves back: a late event is judged
	// at the latest time seen and expires nothing early. Now must be nil.
	// Default false.
	EventTime bool

	// Refresh makes the window slide: a Duplicate (or an InFlight or Done
	// repeat) renews its key, so that the key is remembered at least
	// Window and at most Window + Window/Generations after its last
	// sighting, not its first, and a key that keeps coming back within
	// Window is dropped for as long as it does. A renewal is written by
	// the next commit, as a New key is (in exact mode one more store
	// write, in probabilistic mode one more filter insert, per duplicate
	// renewed), and counts against MaxInFlight until then without being
	// refused; a renewal lost in a crash leaves the key remembered from
	// its previous committed sighting. Not persisted: a state may be
	// opened with or without it. See docs/window.md. Default false (a
	// fixed window from the first sighting).
	Refresh bool

	// HorizonSample and HorizonBytes size the window advisor's horizon
	// ([WindowAdvice]): past a generation's expiry, the hashes of a sample
	// of its keys are kept 8 windows more, 4 bytes each, to count the
	// duplicates the window lets through. The sample starts at 1 key in
	// HorizonSample (a power of two from 1 to 65536) and halves, by a rule
	// of the hash alone so that a key kept stays kept until the next
	// halving, whenever the horizon would take more than HorizonBytes: it
	// holds every key of Window + Window/Generations + 8 Windows of
	// traffic (37 spans with 4 generations) while they fit, and
	// never more than HorizonBytes (plus a slice's growth per shard).
	// WindowAdvice.Sample says the sample in use. A larger sample narrows
	// the estimate of delays past the window (the fitted model's second
	// hump, say), which rests on the sampled keys. HorizonSample -1 keeps
	// no horizon: the advice then rests on the duplicates the window
	// catches and the delay model fitted to them. Defaults: HorizonSample
	// 1 (every key while it fits), HorizonBytes 4 MiB.
	HorizonSample int
	HorizonBytes  int64

	// AutoWindow, when set, sizes the window from the delays measured, to
	// a leak target within a memory budget (see [AutoWindow]); Window is
	// then its shortest window, AutoWindow.Min. Default nil: the window is
	// Window, fixed.
	AutoWindow *AutoWindow
}

// defaultHorizonBytes is the default Options.HorizonBytes.
const defaultHorizonBytes = advisor.DefaultHorizonBytes

// Limits on option values.
const (
	maxShards      = 1 << 12
	maxGenerations = rotate.MaxGenerations
	maxKeySizeCap  = exact.MaxKeySize
)

// Bounds on the default SnapshotInterval: Window/Generations, clamped.
const (
	minDefaultSnapshotInterval = time.Minute
	maxDefaultSnapshotInterval = time.Hour
)

// WithDefaults fills every zero field with its default and returns o.
func (o *Options) WithDefaults() *Options {
	o.autoDefaults()
	if o.Window == 0 {
		o.Window = time.Hour
	}
	if o.ExpectedRate == 0 {
		o.ExpectedRate = 10000
	}
	if o.FalsePositiveRate == 0 {
		o.FalsePositiveRate = 0.01
	}
	if o.Filter == "" {
		o.Filter = filter.Blocked.String()
	}
	if o.Generations == 0 {
		o.Generations = 4
	}
	if o.Shards == 0 {
		o.Shards = 16
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 1 << 20
	}
	if o.MaxKeySize == 0 {
		o.MaxKeySize = 4096
	}
	if o.SnapshotInterval == 0 && o.Dir != "" && o.Generations > 0 {
		o.SnapshotInterval = min(max(o.Window/time.Duration(o.Generations),
			minDefaultSnapshotInterval), maxDefaultSnapshotInterval)
	}
	if o.HorizonSample == 0 {
		o.HorizonSample = 1
	}
	if o.HorizonBytes == 0 {
		o.HorizonBytes = defaultHorizonBytes
	}
	if o.Now == nil && !o.EventTime {
		o.Now = time.Now
	}
	return o
}

// Validate reports every bad field by name, joined into one error wrapping
// ErrInvalidOptions. A zero field selects its default (see
// [Options.WithDefaults]) and is valid: Options{}.Validate() is nil. An
// explicit bad value is reported, never replaced by a default.
func (o *Options) Validate() error {
	filled := *o
	return filled.WithDefaults().validate()
}

// validate is Validate on options whose defaults are filled.
func (o *Options) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...)))
	}
	if o.Window <= 0 {
		bad("Window", "must be positive, got %v", o.Window)
	}
	if o.EventTime && o.Now != nil {
		bad("Now", "must be nil with EventTime: the engine's clock is the events' times")
	}
	if !(o.ExpectedRate > 0) || o.ExpectedRate > 1e12 {
		bad("ExpectedRate", "must be in (0, 1e12] keys per second, got %v", o.ExpectedRate)
	}
	if !(o.FalsePositiveRate > 0 && o.FalsePositiveRate < 1) {
		bad("FalsePositiveRate", "must be in (0, 1), got %v", o.FalsePositiveRate)
	}
	if _, err := filter.ParseKind(o.Filter); err != nil {
		bad("Filter", "must be bloom, cuckoo, blocked, interleaved, fuse or wide, got %q", o.Filter)
	} else if (o.Filter == filter.Interleaved.String() || o.Filter == filter.Wide.String()) && o.Generations > filter.MaxLanes-1 {
		bad("Generations", "must be at most %d with Filter %s (a lane each, plus one), got %d", filter.MaxLanes-1, o.Filter, o.Generations)
	} else if o.Filter == filter.Fuse.String() && o.Dir == "" {
		bad("Filter", "fuse needs a Dir: the newest generation's hashes wait there until it is sealed (in memory they would cost 8 bytes a key, more than the static filters save)")
	} else if o.Filter == filter.Fuse.String() && o.Generations >= 1 && o.Generations <= maxGenerations &&
		o.FalsePositiveRate > 0 && o.FalsePositiveRate < 1 && rotate.FuseFits(o.FalsePositiveRate, o.Generations) != nil {
		bad("Generations", "%d is too many with Filter fuse at FalsePositiveRate %g (each older generation's static filter takes at least 2^-16 of it)", o.Generations, o.FalsePositiveRate)
	}
	if o.Generations < 1 || o.Generations > maxGenerations {
		bad("Generations", "must be in [1, %d], got %d", maxGenerations, o.Generations)
	} else if o.Window > 0 && o.Window/time.Duration(o.Generations) < time.Millisecond {
		bad("Generations", "cuts Window %v into spans under 1ms", o.Window)
	}
	if o.Shards < 1 || o.Shards > maxShards {
		bad("Shards", "must be in [1, %d], got %d", maxShards, o.Shards)
	}
	if o.AutoCommit < 0 {
		bad("AutoCommit", "must not be negative, got %v", o.AutoCommit)
	}
	if o.MaxInFlight < 1 {
		bad("MaxInFlight", "must be at least 1, got %d", o.MaxInFlight)
	}
	if o.MaxKeySize < 1 || o.MaxKeySize > maxKeySizeCap {
		bad("MaxKeySize", "must be in [1, %d] (exact.MaxKeySize, the largest key the store holds), got %d", maxKeySizeCap, o.MaxKeySize)
	}
	if h := o.HorizonSample; h != -1 && (h < 1 || h > 1<<16 || h&(h-1) != 0) {
		bad("HorizonSample", "must be a power of two from 1 to 65536, or -1 for no horizon, got %d", h)
	}
	if o.HorizonBytes < 1 {
		bad("HorizonBytes", "must be positive, got %d", o.HorizonBytes)
	}
	o.validateAutoWindow(bad)
	return errors.Join(errs...)
}

// persisted holds the options that shape the state on disk: reopening a
// state directory with different values is an error naming the option.
type persisted struct {
	Window        time.Duration `json:"window"`
	Generations   int           `json:"generations"`
	Shards        int           `json:"shards"`
	Filter        string        `json:"filter"`
	Probabilistic bool          `json:"probabilistic"`
}

func (o *Options) persisted() persisted {
	return persisted{
		Window:        o.Window,
		Generations:   o.Generations,
		Shards:        o.Shards,
		Filter:        o.Filter,
		Probabilistic: o.Probabilistic,
	}
}

func (p persisted) encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // plain struct of scalars: cannot fail
	}
	return b
}

func decodePersisted(b []byte) (persisted, error) {
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%w: persisted options: %w", ErrCorrupt, err)
	}
	return p, nil
}

// compatible names the first option whose persisted value differs.
func (p persisted) compatible(q persisted) error {
	diff := func(name string, was, now any) error {
		return fmt.Errorf("%w: %s is %v but the state directory was created with %v", ErrIncompatible, name, now, was)
	}
	switch {
	case p.Window != q.Window:
		return diff("Window", p.Window, q.Window)
	case p.Generations != q.Generations:
		return diff("Generations", p.Generations, q.Generations)
	case p.Shards != q.Shards:
		return diff("Shards", p.Shards, q.Shards)
	case p.Filter != q.Filter:
		return diff("Filter", p.Filter, q.Filter)
	case p.Probabilistic != q.Probabilistic:
		return diff("Probabilistic", p.Probabilistic, q.Probabilistic)
	}
	return nil
}
