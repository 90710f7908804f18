package dedup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/rotate"
	"github.com/streamdedup/dedup/snapshot"
)

// Restore sources reported in Stats.RestoredFrom.
const (
	RestoredFresh    = "fresh"    // a new state: nothing to restore
	RestoredSnapshot = "snapshot" // the newest valid snapshot, then the commit log
	RestoredStore    = "store"    // rebuilt from every key in the exact store
	RestoredLog      = "log"      // rebuilt from the whole commit log
	RestoredEmpty    = "empty"    // nothing usable: started empty (AllowEmptyRestore)
)

// restore refills the filters after Open: from the newest valid snapshot
// plus the commit log after it, or, if there is none, from the exact store
// (exact mode) or the whole log (probabilistic mode, if never truncated).
// A snapshot the log no longer covers is unusable: in exact mode, where
// the log is truncated through the newest snapshot (snapshot.go), that is
// the previous one whenever the newest is damaged, and the filters are
// rebuilt from the store.
func (e *Engine) restore() error {
	start := time.Now()
	defer func() { e.stats.restoreNanos = int64(time.Since(start)) }()
	truncated, err := e.logTruncatedThrough()
	if err != nil {
		return err
	}
	if e.opts.AcceptLostCommits && e.opts.Dir != "" {
		if err := e.setAsideLost(); err != nil {
			return err
		}
	}
	var snap *snapshot.Snapshot
	err = snapshot.ErrNotFound
	if e.rehashed {
		e.logf("dedup: the state's filters hashed keys, its store now keeps fingerprints: rebuilding the filters from them")
	} else if !e.opts.IgnoreSnapshots {
		snap, err = snapshot.Latest(e.fs, e.snapDir)
	}
	if errors.Is(err, snapshot.ErrNotFound) && e.store.CommitSeq() == 0 && truncated == 0 {
		e.stats.restoredFrom = RestoredFresh
		return nil
	}
	if err == nil {
		// Verified whole: the next Write keeps it, not a damaged newer one.
		e.goodSnap = e.fs.PathBase(snap.Path)
		for _, sk := range snap.Skipped {
			e.problem(wrap(sk, "skipped snapshot"))
		}
		err = e.restoreFrom(snap, truncated)
		if err == nil {
			e.stats.restoredFrom = RestoredSnapshot
			e.lastSnapSeq = snap.Header.CommitSeq
			return nil
		}
		e.resetFilters()
	}
	if !errors.Is(err, snapshot.ErrNotFound) && !e.opts.IgnoreSnapshots && !e.rehashed {
		e.problem(wrap(err, "snapshot unusable"))
	}
	switch {
	case e.exactMode:
		e.logf("dedup: rebuilding filters from the exact store")
		e.stats.restoredFrom = RestoredStore
		return e.rebuild()
	case truncated == 0:
		e.stats.restoredFrom = RestoredLog
		return e.rebuild()
	case e.opts.AllowEmptyRestore:
		e.logf("dedup: no usable snapshot: starting with empty filters (AllowEmptyRestore); keys committed before are forgotten")
		e.stats.restoredFrom = RestoredEmpty
		return nil
	}
	return fmt.Errorf("%w: no usable snapshot, and probabilistic mode cannot rebuild its filters (the commit log was truncated through commit %d): committed keys would be forgotten; set AllowEmptyRestore to start empty (last problem: %w)",
		ErrCorrupt, truncated, err)
}

func (e *Engine) logTruncatedThrough() (uint64, error) {
	v, ok, err := e.store.GetMeta(metaLogTruncated)
	switch {
	case err != nil:
		return 0, wrap(err, "read log truncation mark")
	case !ok:
		return 0, nil
	case len(v) != 8:
		return 0, fmt.Errorf("%w: log truncation mark of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// restoreFrom loads snap into the (empty) rings and replays the log after it.
func (e *Engine) restoreFrom(snap *snapshot.Snapshot, truncated uint64) error {
	h := snap.Header
	// The header may hold the window schedule beside the options
	// (snapshotOptions): compare the options.
	have, perr := decodePersisted(h.Options)
	switch {
	case h.Seed != e.seed:
		return fmt.Errorf("%w: snapshot %s has another hash seed than the state directory", ErrCorrupt, snap.Path)
	case perr != nil || have != e.opts.persisted():
		return fmt.Errorf("%w: snapshot %s was written with other options (%s)", ErrIncompatible, snap.Path, h.Options)
	case h.CommitSeq > e.store.CommitSeq():
		return fmt.Errorf("%w: snapshot %s covers commit %d, past the store's last commit %d", ErrCorrupt, snap.Path, h.CommitSeq, e.store.CommitSeq())
	case h.CommitSeq < truncated:
		return fmt.Errorf("snapshot %s covers commit %d but the log after it was truncated through %d", snap.Path, h.CommitSeq, truncated)
	}
	now := e.opts.Now()
	oldest := e.timing.OldestLive(now)
	var n uint64
	for _, g := range snap.Generations {
		if int(g.Shard) >= len(e.shards) {
			return fmt.Errorf("%w: snapshot generation %d names shard %d of %d", ErrCorrupt, g.ID, g.Shard, len(e.shards))
		}
		if g.ID < oldest {
			continue
		}
		f, err := filter.Unmarshal(g.Payload)
		if err != nil {
			return fmt.Errorf("%w: snapshot generation %d shard %d: %w", ErrCorrupt, g.ID, g.Shard, err)
		}
		if !kindFits(e.kind, f.Kind()) {
			return fmt.Errorf("%w: snapshot generation %d holds a %v filter, want %v", ErrCorrupt, g.ID, f.Kind(), e.kind)
		}
		s := &e.shards[g.Shard]
		if _, err := s.ring.Insert(&rotate.Generation{ID: g.ID, Filter: f}); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		// The shadow lacks this generation's keys (see shadow.go).
		s.shadowFrom = max(s.shadowFrom, g.ID+1)
		e.raiseNewestGen(g.ID)
		n += f.Count()
	}
	if err := e.reserveReplay(h.CommitSeq, now); err != nil {
		return err
	}
	m, err := e.replayLog(h.CommitSeq, now)
	if err != nil {
		return err
	}
	e.stats.restoredKeys = n + m
	return nil
}

// replayLog adds every key committed after seq to the filters.
func (e *Engine) replayLog(seq uint64, now time.Time) (uint64, error) {
	oldest := e.timing.OldestLive(now)
	var n uint64
	err := e.store.ScanLog(seq, func(_, gen, h uint64) error {
		if gen < oldest {
			return nil
		}
		e.raiseNewestGen(gen)
		if err := e.shardOf(h).replay(gen, h, now); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, wrap(err, "replay commit log")
	}
	return n, nil
}

// reserveReplay makes room, in each restored generation, for the keys the
// log after seq is about to add to it: a generation restored small (the
// first one of a ring, snapshotted early while it grew, or a fuse ring's
// newest one, which restores without the spool it grew from) would
// otherwise chain a run of doubling growth links for them, each at a
// tighter target than the one before (a fuse ring snapshotted 5% into its
// first generation held 2.3x its bytes per key after the replay). A
// filter that can reserve (the chained kinds) chains one link sized for
// the keys past its capacity instead; its rate keeps its bound (see
// filter's chain). Keys the log adds to a generation created by the replay
// itself need nothing: rotate sizes it from the one before.
func (e *Engine) reserveReplay(seq uint64, now time.Time) error {
	type reserver interface{ Reserve(n uint64) }
	type key struct {
		shard int
		gen   uint64
	}
	restored := make(map[key]filter.Filter)
	for i := range e.shards {
		for _, g := range e.shards[i].ring.Generations() {
			if _, ok := g.Filter.(reserver); ok {
				restored[key{i, g.ID}] = g.Filter
			}
		}
	}
	if len(restored) == 0 {
		return nil
	}
	oldest := e.timing.OldestLive(now)
	adds := make(map[key]uint64, len(restored))
	err := e.store.ScanLog(seq, func(_, gen, h uint64) error {
		if gen < oldest {
			return nil
		}
		k := key{e.shardIndex(h), gen}
		if _, ok := restored[k]; ok {
			adds[k]++
		}
		return nil
	})
	if err != nil {
		return wrap(err, "count the commit log's keys to replay")
	}
	for k, n := range adds {
		f := restored[k]
		if free := f.Capacity() - min(f.Count(), f.Capacity()); n > free {
			f.(reserver).Reserve(n - free)
		}
	}
	return nil
}

// rebuild refills the filters from the store: every key of a live
// generation in exact mode, the whole commit log in probabilistic mode.
func (e *Engine) rebuild() error {
	now := e.opts.Now()
	if !e.exactMode {
		n, err := e.replayLog(0, now)
		e.stats.restoredKeys = n
		return err
	}
	oldest := e.timing.OldestLive(now)
	var n uint64
	last := time.Now()
	err := e.store.ScanFingerprints(oldest, func(gen uint64, fp exact.Fingerprint) error {
		h := exact.FingerprintHash(&fp)
		e.raiseNewestGen(gen)
		if err := e.shardOf(h).replay(gen, h, now); err != nil {
			return err
		}
		n++
		if n%(1<<20) == 0 && time.Since(last) > 5*time.Second {
			last = time.Now()
			e.logf("dedup: rebuilding filters: %d keys so far", n)
		}
		return nil
	})
	e.stats.restoredKeys = n
	if err != nil {
		return wrap(err, "rebuild filters from the store")
	}
	return nil
}

// replay adds h, committed into generation gen, to the shard's filters and
// shadow while restoring (Open runs single-threaded: no lock is taken).
func (s *shard) replay(gen, h uint64, now time.Time) error {
	added, err := s.ring.Add(gen, h, now)
	if added && sampled(h) {
		s.shadowAdd(h, gen)
	}
	return err
}

func (e *Engine) raiseNewestGen(gen uint64) {
	if gen > e.newestGen.Load() {
		e.newestGen.Store(gen)
	}
}

// resetFilters empties every ring (after a failed restore).
func (e *Engine) resetFilters() {
	for i := range e.shards {
		e.shards[i].ring.CloseSpools()
		r, err := rotate.New(e.timing.Options())
		if err != nil {
			panic(err) // the same config built e.timing
		}
		s := &e.shards[i]
		s.ring = r
		s.shadow, s.shadowFrom, s.shadowPruned = nil, 0, 0
	}
	e.newestGen.Store(0)
	e.stats.restoredKeys = 0
}

// problem records a restore problem for Stats and the log.
func (e *Engine) problem(err error) {
	e.stats.restoreProblems = append(e.stats.restoreProblems, err.Error())
	e.logf("%v", err)
}

// setAsideLost sets aside, as evidence, the snapshots covering commits past
// the store's last one, whose loss Options.AcceptLostCommits accepted.
func (e *Engine) setAsideLost() error {
	last := e.store.CommitSeq()
	seq, path, err := snapshot.NewestCommit(e.fs, e.snapDir)
	if err != nil || seq <= last {
		return wrapIf(err, "read snapshots")
	}
	moved, err := snapshot.SetAside(e.fs, e.snapDir, last)
	if err != nil {
		return wrap(err, "set aside the snapshots past the store's last commit")
	}
	e.problem(fmt.Errorf("%w: accepted: snapshot %s covers commit %d, the store ends at commit %d: the keys of %s are forgotten; kept as %s",
		ErrLostCommits, path, seq, last, exact.CommitSpan(last+1, seq), strings.Join(moved, ", ")))
	return nil
}
