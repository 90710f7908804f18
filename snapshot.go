package dedup

import (
	"encoding/binary"
	"time"

	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/snapshot"
)

// SnapshotDir is the folder of the state directory that holds snapshots.
const SnapshotDir = "snapshots"

// metaLogTruncated records the commit sequence through which the commit log
// has been truncated: a snapshot older than it cannot be brought up to date
// from the log. It is written before the log is truncated.
const metaLogTruncated = "log-truncated"

// Snapshot writes a snapshot of the filters now, so that Open restores from
// it instead of rebuilding. Observe is stalled only while each shard's
// changing generation is copied, and commits while all are; final
// generations already on disk are not written again.
func (e *Engine) Snapshot() error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	return e.snapshot(false)
}

// snapshot writes a snapshot. closing says the caller is Close, which
// holds the lifecycle lock exclusively: no commit can change a filter any
// more.
func (e *Engine) snapshot(closing bool) error {
	e.snapMu.Lock()
	defer e.snapMu.Unlock()
	start := time.Now()
	info, err := e.writeSnapshot(closing)
	if err != nil {
		err = snapshotFailed{err}
		e.stats.snapshotErrors.Add(1)
		msg := err.Error()
		e.stats.lastSnapshotErr.Store(&msg)
		return err
	}
	e.stats.snapshots.Add(1)
	e.stats.lastSnapshotNs.Store(int64(time.Since(start)))
	e.stats.lastSnapshotWritten.Store(info.Written)
	e.stats.snapshotBytes.Store(info.TotalSize)
	return nil
}

func (e *Engine) writeSnapshot(closing bool) (snapshot.Info, error) {
	now := e.opts.Now()
	current := max(e.timing.GenerationAt(now), e.newestGen.Load())
	var gens []snapshot.Generation
	// The commit gate holds commits off while the filters are captured, so
	// the snapshot holds exactly the commits through seq.
	e.commitGate.Lock()
	seq := e.coveredSeq()
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.ring.Advance(now)
		for _, g := range s.ring.Generations() {
			f := g.Filter
			sg := snapshot.Generation{
				ID: g.ID, Shard: uint32(i), Count: f.Count(), Kind: f.Kind(),
				Start: e.timing.Start(g.ID).UnixNano(), End: e.timing.End(g.ID).UnixNano(),
				// A past generation with no key in flight can never
				// change again: no new key goes into it.
				Final: g.ID < current && s.inflightGens[g.ID] == 0,
			}
			// A filter that cannot change is encoded by the snapshot's
			// writers, in parallel, when they reach it; the others are
			// copied now, under the lock. At Close that is every filter,
			// so none is copied serially here.
			if sg.Final || closing {
				sg.Payload = f.MarshalBinary
				if filter.SharesMemory(f) {
					// A lane shares its table's words with the lanes
					// other generations still write: encode it under
					// the shard's lock.
					sg.Payload = func() ([]byte, error) {
						s.mu.Lock()
						defer s.mu.Unlock()
						return f.MarshalBinary()
					}
				}
			} else {
				b, err := f.MarshalBinary()
				if err != nil {
					s.mu.Unlock()
					e.commitGate.Unlock()
					return snapshot.Info{}, wrap(err, "snapshot: generation %d shard %d", g.ID, i)
				}
				sg.Payload = func() ([]byte, error) { return b, nil }
			}
			gens = append(gens, sg)
		}
		s.mu.Unlock()
	}
	e.commitGate.Unlock()
	h := snapshot.Header{Seed: e.seed, Options: e.snapshotOptions(), CommitSeq: seq, Created: now.UnixNano()}
	info, err := snapshot.WriteAfter(e.fs, e.snapDir, e.goodSnap, h, gens)
	if err != nil {
		return info, wrap(err, "snapshot")
	}
	e.goodSnap = e.fs.PathBase(info.Path)
	if through := e.logTruncationPoint(seq); through > 0 {
		if err := e.store.SetMeta(metaLogTruncated, binary.BigEndian.AppendUint64(nil, through)); err != nil {
			return info, wrap(err, "snapshot")
		}
		if err := e.store.TruncateLog(through); err != nil {
			return info, wrap(err, "snapshot: truncate log")
		}
	}
	e.lastSnapSeq = seq
	return info, nil
}

// logTruncationPoint returns the commit sequence through which the log may
// be truncated once the snapshot covering commits through seq is durable
// (0: not at all).
//
// The snapshot package keeps the previous snapshot as a fallback for a
// damaged newest one. In probabilistic mode the log is the only exact
// record of the keys, so it is truncated only through the previous
// snapshot: either can still be brought up to date. In exact mode the
// store holds every key, and Open rebuilds the filters from it when the
// newest snapshot is unusable (restore.go), so the log is truncated
// through the newest snapshot: it then holds only the commits since, the
// 8 bytes per key that the previous rule kept for a second generation.
func (e *Engine) logTruncationPoint(seq uint64) uint64 {
	if e.exactMode {
		return seq
	}
	return e.lastSnapSeq
}

// snapshotFailed marks an error of writing a snapshot as [ErrSnapshot],
// its message unchanged.
type snapshotFailed struct{ error }

func (s snapshotFailed) Unwrap() error { return s.error }

// Is makes errors.Is(err, ErrSnapshot) true.
func (s snapshotFailed) Is(target error) bool { return target == ErrSnapshot }
