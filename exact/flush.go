package exact

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Flushing: a full memtable is frozen (a new segment and a new memtable
// take the next commits) and written to Pebble by a background goroutine:
// one sorted sstable per generation and one of log records, ingested
// together (one atomic version edit, no WAL, no memtable, and no
// compaction: a table of a new generation overlaps nothing), then the
// sequence number, checkpoint and drop floor of its last commit, synced;
// then its segment is removed. A crash in between replays the segment
// again, which rewrites the same keys and records: the flush is
// idempotent.

// maxFrozen is the number of frozen memtables waiting for their flush
// above which commits stall.
const maxFrozen = 2

// ingestPrefix names the sstables written for an ingestion; Open removes
// leftovers of one a crash interrupted.
const ingestPrefix = "exact-ingest-"

// freezeLocked freezes the active memtable, starts a new segment for the
// next commits and makes sure a flush runs. The caller holds logMu.
func (s *Store) freezeLocked() error {
	_, grown, err := s.seg.append(endRecord(s.seg.num))
	if err != nil {
		return s.fail(err)
	}
	s.logBytes.Add(grown)
	var reuse string
	if n := len(s.recycled); n > 0 {
		reuse, s.recycled = s.recycled[n-1], s.recycled[:n-1]
	}
	seg, err := createSegment(s.fs, s.dir, s.segNum+1, s.seg, reuse, segChunk(s.memLimit))
	if err != nil {
		return s.fail(err)
	}
	s.segNum++
	s.memMu.Lock()
	s.frozen = append(s.frozen, s.active)
	s.active = &memTable{seg: seg, limit: s.memLimit}
	s.memMu.Unlock()
	s.seg = seg
	if !s.bgRunning {
		s.bgRunning = true
		s.bgWG.Add(1)
		go s.flushLoop()
	}
	return nil
}

// flushLoop flushes frozen memtables, oldest first, until none is left.
func (s *Store) flushLoop() {
	defer s.bgWG.Done()
	for {
		s.logMu.Lock()
		if s.oldestFrozen() == nil || s.closing.Load() || s.brokenErr() != nil {
			s.bgRunning = false
			s.logMu.Unlock()
			s.wakeStalled()
			return
		}
		s.logMu.Unlock()
		s.flushMu.Lock()
		if m := s.oldestFrozen(); m != nil {
			_ = s.flushOne(m) // a failure breaks the store
		}
		s.flushMu.Unlock()
	}
}

func (s *Store) oldestFrozen() *memTable {
	s.memMu.RLock()
	defer s.memMu.RUnlock()
	if len(s.frozen) == 0 {
		return nil
	}
	return s.frozen[0]
}

// flushAll writes every commit made so far to Pebble.
func (s *Store) flushAll() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.flushAllLocked()
}

// flushAllLocked is flushAll with flushMu held.
// It flushes the memtables frozen up to the call, not those that commits
// made meanwhile freeze, so that it ends while commits go on.
func (s *Store) flushAllLocked() error {
	s.logMu.Lock()
	if !s.active.empty() {
		if err := s.freezeLocked(); err != nil {
			s.logMu.Unlock()
			return err
		}
	}
	s.memMu.RLock()
	n := len(s.frozen)
	s.memMu.RUnlock()
	s.logMu.Unlock()
	for ; n > 0; n-- {
		if err := s.flushOne(s.oldestFrozen()); err != nil {
			return err
		}
	}
	return nil
}

// flushOne writes frozen memtable m, the oldest, to Pebble and drops it.
// The caller holds flushMu. A failure breaks the store.
func (s *Store) flushOne(m *memTable) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
		s.wakeStalled()
	}()
	if err := s.brokenErr(); err != nil {
		return fmt.Errorf("%w: %w", ErrBroken, err)
	}
	// Its commits must be durable in the log before their keys are in
	// Pebble: a commit still waiting for its fsync could otherwise leave
	// its keys, ingested, without its checkpoint after a crash.
	if m.seg != nil {
		if err := m.seg.syncAll(); err != nil {
			return s.fail(err)
		}
	}
	if err := s.writeToPebble(m); err != nil {
		return s.fail(fmt.Errorf("exact: flush commits %d-%d: %w", m.firstSeq, m.lastSeq, err))
	}
	s.memMu.Lock()
	if len(s.frozen) > 0 && s.frozen[0] == m {
		s.frozen = s.frozen[1:]
	}
	s.memMu.Unlock()
	m.free() // no Has reads it any more
	if m.seg != nil {
		if err := s.retire(m.seg); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// retire puts away a segment whose commits are all in Pebble: renamed for
// reuse (the rename made durable before the file can be overwritten, so
// that a replay never reads a half-overwritten file under its old name),
// or removed.
func (s *Store) retire(g *segment) error {
	// A commit of this segment may still wait for its fsync: give it one,
	// so that it does not fsync a closed file.
	err := g.syncAll()
	err = errors.Join(err, g.f.Close())
	s.logMu.Lock()
	keep := len(s.recycled) < maxRecycled
	s.logMu.Unlock()
	if keep && err == nil {
		free := s.fs.PathJoin(s.dir, freeName(g.num))
		if err = s.fs.Rename(g.path, free); err == nil {
			if err = syncDir(s.fs, s.dir); err == nil {
				s.logMu.Lock()
				s.recycled = append(s.recycled, free)
				s.logMu.Unlock()
				return nil
			}
		}
	} else if rerr := s.fs.Remove(g.path); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
		err = errors.Join(err, rerr)
	} else {
		s.logBytes.Add(-g.size())
	}
	if err != nil {
		return fmt.Errorf("exact: retire commit log %q: %w", g.path, err)
	}
	return nil
}

// writeToPebble ingests the keys, their filters and the log records of m,
// then records its last commit's sequence number, checkpoint and floor,
// and takes the filters in. The flush's number is m.firstSeq: the flush of
// a replay after a crash between the ingestion and the commit state
// rewrites the same keys under the same number, so a key is never stored
// twice.
func (s *Store) writeToPebble(m *memTable) error {
	var paths []string
	defer func() {
		for _, p := range paths {
			_ = s.fs.Remove(p) // Ingest linked it into the store, or failed
		}
	}()
	name := func(what string) string {
		p := s.fs.PathJoin(s.dir, fmt.Sprintf("%s%d-%s.sst", ingestPrefix, m.lastSeq, what))
		paths = append(paths, p)
		return p
	}
	if rec := s.truncated.Load(); len(m.recs) > 0 && m.recs[len(m.recs)-1].seq > rec {
		if err := s.writeLogTable(name("log"), m, rec); err != nil {
			return err
		}
	}
	gens := slices.Clone(m.gens)
	slices.SortFunc(gens, func(a, b *memGen) int { return cmp.Compare(a.gen, b.gen) })
	var sc sortScratch
	type genFilter struct {
		gen uint64
		f   keyFilter
	}
	var filters []genFilter
	// Generations below the floor are gone, the floor of later commits
	// too: the commit that raised it is durable in the log (published),
	// and replayed after a crash if this flush's commit state is the last
	// one recorded.
	floor := max(m.floor, s.pubFloor.Load())
	for _, g := range gens {
		if g.gen < floor || g.n == 0 {
			continue
		}
		f, err := s.writeGenTable(name(fmt.Sprint(g.gen)), g, m.firstSeq, &sc)
		if err != nil {
			return err
		}
		filters = append(filters, genFilter{g.gen, f})
	}
	if len(filters) > 0 {
		path := name("filters")
		w, err := s.newTableWriter(path)
		if err != nil {
			return err
		}
		for _, gf := range filters {
			if err = w.Set(filterKey(gf.gen, m.firstSeq), gf.f.marshal()); err != nil {
				err = fmt.Errorf("write %q: %w", path, err)
				break
			}
		}
		if err := finishTable(w, path, err); err != nil {
			return err
		}
	}
	if len(paths) > 0 {
		if s.beforeIngest != nil {
			s.beforeIngest()
		}
		if err := s.db.Ingest(context.Background(), paths); err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
	}
	pb := s.db.NewBatch()
	defer pb.Close()
	var err error
	if m.hasCP {
		err = pb.Set(checkpointKey, m.cp, nil)
	}
	if m.floor > 0 {
		err = errors.Join(err, pb.Set(floorKey, be64(m.floor), nil))
	}
	top, rerr := writeRecords(pb, m, floor)
	err = errors.Join(err, rerr)
	err = errors.Join(err, pb.Set(seqKey, be64(m.lastSeq), nil))
	if err == nil {
		err = s.db.Apply(pb, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("record commit state: %w", err)
	}
	s.raiseRecTop(top)
	for _, gf := range filters {
		s.filters.add(gf.gen, flushFilter{flush: m.firstSeq, filter: gf.f})
	}
	return nil
}

// newTableWriter creates path and returns a writer of an sstable for
// ingestion into the store.
func (s *Store) newTableWriter(path string) (*sstable.Writer, error) {
	f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("create %q: %w", path, err)
	}
	return sstable.NewWriter(objstorageprovider.NewFileWritable(f), s.popts.MakeWriterOptions(0, s.db.TableFormat())), nil
}

// finishTable closes w, after err if any.
func finishTable(w *sstable.Writer, path string, err error) error {
	if cerr := w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("finish %q: %w", path, cerr)
	}
	return err
}

// writeLogTable writes the log records of m above seq after to path.
func (s *Store) writeLogTable(path string, m *memTable, after uint64) (err error) {
	w, err := s.newTableWriter(path)
	if err != nil {
		return err
	}
	defer func() { err = finishTable(w, path, err) }()
	var val []byte
	for _, r := range m.recs {
		if r.seq <= after {
			continue
		}
		runs := m.runs[r.run0:r.run1]
		val = slices.Grow(val[:0], logRecordSize(runs))[:logRecordSize(runs)]
		encodeLogRecord(val, runs, m.hashes.s[r.hash0:])
		if err := w.Set(logKey(r.seq), val); err != nil {
			return fmt.Errorf("write %q: %w", path, err)
		}
	}
	return nil
}

// sortScratch is reused across the generations of a flush.
type sortScratch struct {
	ents, tmp []sortEnt
	fps       []Fingerprint
	hashes    []uint64
}

// gatherAhead is how many fingerprints ahead the gathering prefetches.
const gatherAhead = 16

// gatherChunk is the number of fingerprints copied into sorted order at a
// time before they go to the sstable writer: reading each from its random
// place in the arena in a tight loop overlaps the cache misses that the
// writer, one key after the other, would take in turn.
const gatherChunk = 4096

// writeGenTable writes the fingerprints of g, sorted and without
// duplicates, to path, as flush number flush, and returns their filter.
func (s *Store) writeGenTable(path string, g *memGen, flush uint64, sc *sortScratch) (f keyFilter, err error) {
	sc.ents, sc.tmp = g.sortedKeys(sc.ents, sc.tmp)
	f = newKeyFilter(g.n)
	w, err := s.newTableWriter(path)
	if err != nil {
		return f, err
	}
	defer func() { err = finishTable(w, path, err) }()
	var key [fpKeyLen]byte
	var prev Fingerprint
	first := true
	for lo := 0; lo < len(sc.ents); lo += gatherChunk {
		chunk := sc.ents[lo:min(lo+gatherChunk, len(sc.ents))]
		sc.fps, sc.hashes = sc.fps[:0], sc.hashes[:0]
		for i, e := range chunk {
			if j := i + gatherAhead; j < len(chunk) {
				g.prefetchKey(int(chunk[j].off))
			}
			var fp Fingerprint
			copy(fp[:], g.keyAt(int(e.off)))
			sc.fps = append(sc.fps, fp)
			sc.hashes = append(sc.hashes, fpIndexHash(&fp))
		}
		// A key added twice sets the same bits twice.
		f.addAll(sc.hashes)
		for i := range sc.fps {
			fp := &sc.fps[i]
			if !first && *fp == prev {
				continue // added twice
			}
			first, prev = false, *fp
			putFPKey(key[:], g.gen, flush, fp)
			if err := w.Set(key[:], nil); err != nil {
				return f, fmt.Errorf("write %q: %w", path, err)
			}
		}
	}
	return f, nil
}

// removeIngestLeftovers removes sstables of ingestions that a crash
// interrupted.
func (s *Store) removeIngestLeftovers() error {
	ls, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("exact: list %q: %w", s.dir, err)
	}
	for _, name := range ls {
		if len(name) > len(ingestPrefix) && name[:len(ingestPrefix)] == ingestPrefix {
			if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil {
				return fmt.Errorf("exact: remove leftover %q: %w", name, err)
			}
		}
	}
	return nil
}
