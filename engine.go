package dedup

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/rotate"

	"github.com/streamdedup/dedup/internal/advisor"
	"github.com/streamdedup/dedup/internal/hashmix"
)

// Engine answers, for a stream of keys, whether each was seen within the
// window. All methods are safe for concurrent use.
//
// # Locks
//
// The locks are taken in this order, never the reverse:
//
//	lifecycle > snapMu > commitGate > shard.mu (one shard at a time)
//
// cmu and cpMu are leaves: nothing else is taken while either is held.
// Observe, ObserveBatch and Forget take only shard.mu. Every method of
// shard, and every Engine method that takes a *shard, runs with that
// shard's mu held; no name suffix marks it.
type Engine struct {
	// Set by Open, then read-only.
	opts Options
	// saved is the last window advice measured (savedadvice.go).
	saved     savedAdvice
	kind      filter.Kind
	exactMode bool // filter hits are resolved by the exact store
	// logCommits: commits write keys (exact mode) or their hashes (the
	// probabilistic log) to the store. An in-memory probabilistic engine
	// never reopens, so its commits write only the checkpoint.
	logCommits bool
	seed       uint64
	// fpHash makes hash the fingerprint's (exact mode over a directory);
	// rehashed is set when this Open moved a state written before to it,
	// whose snapshots and log hold hashes of the old kind.
	fpHash, rehashed bool
	shards           []shard
	store            *exact.Store
	// timing is a ring with no filters, used for generation arithmetic.
	timing  *rotate.Ring
	fs      vfs.FS
	dir     string // the state directory on fs ("dedup-mem" in memory)
	snapDir string

	// Atomics, read and written under no lock.
	inflightCount atomic.Int64 // keys in flight (not committed), all shards
	// epoch numbers the spans between Barriers; keys observed New carry it.
	epoch atomic.Uint64
	// newestGen is the highest generation any key has gone into: after the
	// clock steps back, new keys still go there, in every shard alike.
	newestGen atomic.Uint64
	closed    atomic.Bool
	// clock is the event clock (Unix ns) under Options.EventTime
	// (clock.go).
	clock atomic.Int64
	// adv is the window advisor (internal/advisor), fed by the shards.
	adv *advisor.Advisor
	// auto is the self-sizing window's controller (autowindow.go), nil
	// without Options.AutoWindow.
	auto *autoWindow

	// lifecycle is held shared by Commit, Snapshot, Backup and Stats, and
	// exclusively by Close: nothing runs on a closing store.
	lifecycle sync.RWMutex

	// snapMu serialises snapshots and backups. It guards lastSnapSeq, the
	// commit sequence of the last snapshot written or restored.
	snapMu      sync.Mutex
	lastSnapSeq uint64
	// goodSnap is the manifest name of the newest snapshot known good (the
	// one restored, or the last written), kept by the next Write; "" if
	// none. Guarded by snapMu.
	goodSnap string

	// commitGate is held by each commit while it runs, and by a snapshot
	// while it captures the filters: a snapshot holds whole commits. It
	// also guards every shard's committing sets, which only the commit
	// leader writes.
	commitGate sync.Mutex

	// cmu guards the group commit: callers queue in cqueue; the one that
	// finds no leader (cleader false) becomes it and commits for all.
	// leading counts the leaders running: Close waits for one that leads
	// for a caller gone (see commit).
	cmu     sync.Mutex
	cqueue  []*commitReq
	cleader bool
	leading sync.WaitGroup

	// cpMu guards the last committed checkpoint, the rank it was committed
	// with (see commitReq) and the commit sequence.
	cpMu       sync.Mutex
	checkpoint []byte
	cpRank     uint64
	commitSeq  uint64

	stats engineStats

	// idem serialises idempotency-record calls per key (idem.go).
	idem idemTable

	// bgCtx is cancelled by Close; background loops (AutoCommit, periodic
	// snapshots, reclaiming expired generations) run in bg.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// hash is the 64-bit hash of key, keyed per state so that crafted keys
// cannot aim at collisions: in exact mode over a directory, the first half
// of the key's fingerprint (exact.FingerprintHash), which the store keeps
// in place of the key, so that the filters can be rebuilt from the store;
// otherwise XXH64 seeded with the state's seed.
func (e *Engine) hash(key []byte) uint64 {
	if e.fpHash {
		fp := e.store.Fingerprint(key)
		return exact.FingerprintHash(&fp)
	}
	return xxh64(key, e.seed)
}

// shardIndex picks the shard from a remix of h, so that the shard and the
// filter positions (taken from h itself) are independent.
func (e *Engine) shardIndex(h uint64) int {
	hi, _ := bits.Mul64(hashmix.Splitmix64(h), uint64(len(e.shards)))
	return int(hi)
}

func (e *Engine) shardOf(h uint64) *shard { return &e.shards[e.shardIndex(h)] }

// every runs fn at each tick of interval until Close.
func (e *Engine) every(interval time.Duration, fn func()) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-e.bgCtx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// Close stops background work and closes the state. Under AutoCommit it
// commits the keys in flight first (under ExplicitDone, the Done ones).
// Keys still in flight are dropped, as a crash would drop them: their
// redelivery is New. That is what a caller that closes without committing
// asks for, so Close does not fail for it; it reports the count in
// [Stats].DroppedAtClose and in the log (Options.Logf). With SnapshotInterval
// positive (the default with a state directory) Close writes a snapshot
// of the filters, unless the last one is current, so that the next Open
// loads it instead of rebuilding them; its failure is returned wrapped in
// [ErrSnapshot] (joined with any other), the committed state intact.
// Afterwards every method that returns an error returns [ErrClosed];
// [Engine.Stats], [Engine.Checkpoint] and [Engine.Barrier], which return
// none, still answer (the figures and the checkpoint as Close left them).
func (e *Engine) Close() error {
	if err := e.usable(); err != nil {
		return err
	}
	if !e.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	e.bgCancel()
	e.bg.Wait()
	e.lifecycle.Lock()
	defer e.lifecycle.Unlock()
	// A commit whose caller's context ended may still be writing.
	e.leading.Wait()
	var errs []error
	if e.opts.AutoCommit > 0 {
		if err := e.commit(context.Background(), math.MaxUint64, 2*e.epoch.Load(), nil); err != nil {
			errs = append(errs, err)
		}
	}
	if e.opts.SnapshotInterval > 0 && e.snapshotStale() {
		// A fresh snapshot makes the next Open fast.
		if err := e.snapshot(true); err != nil {
			errs = append(errs, err)
		}
	}
	if e.opts.Dir != "" {
		// Keep the last advice measured with the state
		// (Stats.SavedWindowAdvice), for a job that never asked for it.
		e.Stats()
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.closed = true
		s.ring.CloseSpools() // Filter fuse: the newest generation's spool file
		s.mu.Unlock()
	}
	if n := e.inflightCount.Load(); n > 0 {
		e.stats.droppedAtClose.Store(n)
		e.logf("dedup: Close dropped %d keys in flight (observed New, not committed): their redeliveries will be New", n)
	}
	if err := e.store.Close(); err != nil {
		errs = append(errs, wrap(err, "close store"))
	}
	return errors.Join(errs...)
}

// snapshotStale reports whether commits were made since the last snapshot
// written or restored.
func (e *Engine) snapshotStale() bool {
	e.snapMu.Lock()
	last := e.lastSnapSeq
	e.snapMu.Unlock()
	return e.coveredSeq() != last
}

// coveredSeq is the store's commit sequence that a snapshot taken now
// covers: the last commit of keys, or a later commit of records
// (idempotency claims and results, which no filter holds). Under the
// commit gate no commit of keys runs, so every one through it is in the
// filters.
func (e *Engine) coveredSeq() uint64 {
	e.cpMu.Lock()
	seq := e.commitSeq
	e.cpMu.Unlock()
	return max(seq, e.store.CommitSeq())
}

// usable returns ErrNotOpen for an Engine that Open did not make (a zero
// Engine, or a nil one).
func (e *Engine) usable() error {
	if e == nil || e.shards == nil {
		return ErrNotOpen
	}
	return nil
}

func (e *Engine) logf(format string, args ...any) {
	if e.opts.Logf != nil {
		e.opts.Logf(format, args...)
	}
}
