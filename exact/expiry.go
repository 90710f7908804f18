package exact

// Expiry: dropped generations leave Pebble (Reclaim), and the log records
// covered by a snapshot are truncated (TruncateLog).

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Reclaim gives back the disk space of expired generations (below the drop
// floor, already gone for Has and ScanFingerprints): it excises their key range
// from Pebble, which drops the sstables inside it whole, without rewriting
// anything (a generation's keys are tables of their own). It does nothing
// if the floor has not risen since the last Reclaim; the engine calls it
// from the background about once per generation span. A write failure
// inside it breaks the store (see ErrBroken). ctx cancels it.
func (s *Store) Reclaim(ctx context.Context) (err error) {
	floor := s.pubFloor.Load()
	if s.opts.LogOnly || s.mem != nil || floor <= s.compactedFloor.Load() {
		return nil
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatalPanic); !ok {
				r = fatalPanic{err: fmt.Errorf("exact: reclaim expired generations: %v", r)}
			}
			err = s.recovered(r)
		}
	}()
	// No flush may be under way: one that started below the new floor
	// would ingest tables of the generations excised here after the
	// excision, and their disk would come back only at the next rise of
	// the floor. Flushes from here on leave those generations out.
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.filters.dropBefore(floor)
	for _, tag := range []byte{tagFP, tagFPFilter} {
		if err := s.db.Excise(ctx, pebble.KeyRange{Start: tagGen(tag, 0), End: tagGen(tag, floor)}); err != nil {
			return fmt.Errorf("exact: reclaim generations below %d: %w", floor, err)
		}
	}
	// Result records live in Pebble's memtable and tables, not in
	// ingested tables of their own: a range deletion (which compactions
	// carry out) instead of an excision, which would flush the memtable.
	// They are hidden below the floor already, so it need not be synced.
	if err := s.db.DeleteRange(tagGen(tagRecord, 0), tagGen(tagRecord, floor), pebble.NoSync); err != nil {
		return fmt.Errorf("exact: reclaim records below %d: %w", floor, err)
	}
	s.compactedFloor.Store(floor)
	return nil
}

// TruncateLog deletes the log records of sequence numbers <= throughSeq,
// durably. Call it once a snapshot covering them is durable.
func (s *Store) TruncateLog(throughSeq uint64) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	if throughSeq <= s.truncated.Load() {
		return nil
	}
	if s.mem != nil {
		s.truncated.Store(throughSeq)
		return nil
	}
	// The mark hides the records at once, in Pebble and in the memtables
	// (whose flushes leave them out); the excision then drops their
	// sstables from Pebble, which is only about disk space. No flush may
	// be under way: one that wrote its log table before the mark would
	// ingest it after the excision, and those records (8 bytes a key)
	// would stay on disk until the next truncation, for ever after the
	// last one of a run (TestTruncateLogDuringFlush).
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.db.Set(truncatedKey, be64(throughSeq), pebble.Sync); err != nil {
		return s.fail(fmt.Errorf("exact: truncate log through %d: %w", throughSeq, err))
	}
	s.truncated.Store(throughSeq)
	end := logEnd
	if throughSeq < 1<<64-1 {
		end = logKey(throughSeq + 1)
	}
	if err := s.db.Excise(context.Background(), pebble.KeyRange{Start: logKey(0), End: end}); err != nil {
		return s.fail(fmt.Errorf("exact: truncate log through %d: %w", throughSeq, err))
	}
	return nil
}
