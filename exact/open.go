package exact

// Opening a store: Pebble, the commit state, the flush filters, and the
// replay of the commit log.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// Open opens the store in dir, creating dir and the store if missing. A
// non-empty directory that does not hold an exact store is refused with
// ErrNotOurs.
func Open(dir string, opts Options) (*Store, error) {
	opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.InMemory {
		return openMem(opts)
	}
	opts.FS = fsperm.FS(opts.FS)
	fs := opts.FS
	if err := fs.MkdirAll(dir, fsperm.DirMode); err != nil {
		return nil, fmt.Errorf("exact: create %q: %w", dir, err)
	}
	ls, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("exact: list %q: %w", dir, err)
	}
	existing := false
	fmv := pebble.FormatNewest
	if len(ls) > 0 && createInterrupted(ls) {
		if err := clearInterruptedCreate(fs, dir, ls); err != nil {
			return nil, err
		}
		ls = nil
	}
	if len(ls) > 0 {
		desc, err := pebble.Peek(dir, fs)
		if err != nil {
			return nil, fmt.Errorf("exact: inspect %q: %w", dir, err)
		}
		if !desc.Exists {
			return nil, fmt.Errorf("%w: %q", ErrNotOurs, dir)
		}
		existing = true
		// Do not ratchet a foreign store before the marker is checked.
		fmv = desc.FormatMajorVersion
	}
	lg := newFatalLogger(opts.Logger)
	po := opts.pebbleOptions(lg)
	po.FormatMajorVersion = fmv
	// Pebble charges its memtables to the block cache: a cache no larger
	// than the memtables caches no block at all (measured: every Has then
	// decompressed its index block, ~200 us). Size it on top of two
	// memtables.
	po.Cache = pebble.NewCache(opts.CacheSize + 2*pebbleMemTable)
	db, err := openPebble(dir, po, lg)
	if err != nil {
		po.Cache.Unref()
		return nil, fmt.Errorf("exact: open %q: %w", dir, err)
	}
	s := &Store{db: db, fs: fs, dir: dir, opts: opts, lg: lg, popts: po,
		memLimit: int(opts.MemTableSize)}
	s.recTop.Store(math.MaxUint64) // until initRecTop
	if opts.memLimit > 0 {
		s.memLimit = opts.memLimit
	}
	s.stallCond.L = &s.stallMu
	// A commit waiting for a flush must not wait for ever once Pebble's
	// background work failed (and the flush may be stuck in Pebble).
	wake := s.wakeStalled
	lg.onFail.Store(&wake)
	s.active = &memTable{limit: s.memLimit}
	if err := s.init(existing); err != nil {
		return nil, errors.Join(err, s.closeDB())
	}
	// The directory holds this program's store: make what is in it
	// private (a state written before, or copied in).
	if fs == fsperm.FS(vfs.Default) {
		if err := fsperm.MakePrivate(dir); err != nil {
			return nil, errors.Join(err, s.closeDB())
		}
	}
	if err := s.upgrade(); err != nil {
		return nil, errors.Join(err, s.closeDB())
	}
	if err := s.loadFilters(); err != nil {
		return nil, errors.Join(err, s.closeDB())
	}
	if err := s.replay(); err != nil {
		if s.stopFlushes() == nil {
			s.freeMemTables()
		}
		return nil, errors.Join(err, s.closeDB())
	}
	if err := s.initRecTop(); err != nil {
		if s.stopFlushes() == nil {
			s.freeMemTables()
		}
		return nil, errors.Join(err, s.closeDB())
	}
	return s, nil
}

// createInterrupted reports whether a directory's files are only those
// pebble.Open writes before a new store holds anything (its lock, a
// manifest, the marker naming it, a temporary file): no commit log, no
// WAL, no table. A crash while Open created a store leaves such a
// directory, which Pebble may not open (a marker naming a manifest the
// crash lost).
func createInterrupted(names []string) bool {
	for _, n := range names {
		if n != "LOCK" && !strings.HasPrefix(n, "MANIFEST-") && !strings.HasPrefix(n, "marker.") &&
			!strings.HasSuffix(n, ".dbtmp") {
			return false
		}
	}
	return true
}

// clearInterruptedCreate removes the files of an interrupted creation
// (see createInterrupted), holding the directory's lock, so that Open
// creates the store afresh.
func clearInterruptedCreate(fs vfs.FS, dir string, names []string) error {
	lock, err := fs.Lock(fs.PathJoin(dir, "LOCK"))
	if err != nil {
		return fmt.Errorf("exact: open %q: %w", dir, err)
	}
	for _, n := range names {
		if n == "LOCK" {
			continue
		}
		if err := fs.Remove(fs.PathJoin(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("exact: clear the interrupted creation of %q: %w", dir, err)
			return errors.Join(err, lock.Close())
		}
	}
	return lock.Close()
}

// openPebble is pebble.Open with fatal log messages turned into errors.
// pebble.Open waits for the flush of the WAL it replayed; when that flush
// fails fatally (lg ends its goroutine, see fatalLogger), the wait never
// ends, so openPebble returns the error and leaves the Open behind: the
// directory stays locked until the process exits.
func openPebble(dir string, po *pebble.Options, lg *fatalLogger) (*pebble.DB, error) {
	type result struct {
		db  *pebble.DB
		err error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.err = asFatal(p)
			}
			res <- r
		}()
		r.db, r.err = pebble.Open(dir, po)
	}()
	select {
	case r := <-res:
		return r.db, r.err
	case <-lg.fatal:
		go func() {
			if r := <-res; r.err == nil {
				_ = r.db.Close()
			}
		}()
		return nil, fmt.Errorf("%w (restart the process to release the directory)", lg.background())
	}
}

func (s *Store) init(existing bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	if existing {
		v, ok, err := s.get(markerKey)
		if err != nil {
			return err
		}
		if !ok {
			empty, err := s.isEmpty()
			if err != nil {
				return err
			}
			if !empty {
				return fmt.Errorf("%w: %q is a Pebble store without the exact marker", ErrNotOurs, s.dir)
			}
			existing = false // a store that crashed before its marker was written
		} else if len(v) != 1 || v[0] < 1 {
			return fmt.Errorf("%w: %q has format marker %x", ErrCorrupt, s.dir, v)
		} else if v[0] > formatVersion {
			return fmt.Errorf("%w: %q has format %d, this package reads 1 to %d", ErrNewerFormat, s.dir, v[0], formatVersion)
		} else if v[0] < formatVersion {
			// upgrade rewrites the marker once the store is converted.
			s.from = int(v[0])
		} else if u, ok, err := s.get(upgradingKey); err != nil {
			return err
		} else if ok {
			if len(u) != 1 || u[0] < 1 || u[0] >= formatVersion {
				return fmt.Errorf("%w: %q has upgrade marker %x", ErrCorrupt, s.dir, u)
			}
			// An upgrade whose cleanup a crash interrupted: upgrade redoes it.
			s.cleanupFrom = int(u[0])
		}
	}
	if s.db.FormatMajorVersion() < pebble.FormatNewest {
		if err := s.db.RatchetFormatMajorVersion(pebble.FormatNewest); err != nil {
			return fmt.Errorf("exact: upgrade format of %q: %w", s.dir, err)
		}
	}
	if !existing {
		if err := s.db.Set(markerKey, []byte{formatVersion}, pebble.Sync); err != nil {
			return fmt.Errorf("exact: write marker: %w", err)
		}
	}
	if err := s.loadSecret(); err != nil {
		return err
	}
	var truncated uint64
	for _, u := range []struct {
		key  []byte
		what string
		dst  *uint64
	}{
		{seqKey, "seq", &s.lastSeq},
		{floorKey, "floor", &s.floor},
		{eraKey, "commit log era", &s.era},
		{truncatedKey, "log truncation", &truncated},
	} {
		if err := s.getUint64(u.key, u.what, u.dst); err != nil {
			return err
		}
	}
	s.truncated.Store(truncated)
	if v, ok, err := s.get(checkpointKey); err != nil {
		return err
	} else if ok {
		s.cp = v
		s.cpSeq = s.lastSeq
	}
	return s.removeIngestLeftovers()
}

// loadFilters reads the flush filters of the live generations.
func (s *Store) loadFilters() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tagGen(tagFPFilter, s.floor), UpperBound: fpFiltersEnd})
	if err != nil {
		return fmt.Errorf("exact: load filters: %w", err)
	}
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		k := it.Key()
		if len(k) != 17 {
			err = fmt.Errorf("%w: filter key of %d bytes", ErrCorrupt, len(k))
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		var f keyFilter
		if f, err = unmarshalKeyFilter(v); err == nil {
			s.filters.add(beUint64(k[1:9]), flushFilter{flush: beUint64(k[9:17]), filter: f})
		}
	}
	if err == nil {
		err = it.Error()
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return fmt.Errorf("exact: load filters: %w", corruption(err))
	}
	return nil
}

// replay reads the commit log into a memtable, writes it to Pebble, removes
// the log's segments and starts a new one. A torn record ends the log:
// no Commit returned for it, nor for anything after it.
func (s *Store) replay() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	ls, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("exact: list %q: %w", s.dir, err)
	}
	nums, highest, removedFree, err := s.listSegments(ls)
	if err != nil {
		return err
	}
	m := s.active
	next := s.lastSeq + 1
	torn := false
	var tornWhere string // where the intact records end
	for _, num := range nums {
		if torn {
			continue
		}
		path := s.fs.PathJoin(s.dir, segName(num))
		f, err := s.fs.Open(path)
		if err != nil {
			return fmt.Errorf("exact: open commit log %q: %w", path, err)
		}
		fi, err := f.Stat()
		if err != nil {
			return errors.Join(fmt.Errorf("exact: stat commit log %q: %w", path, err), f.Close())
		}
		err = readLogEntries(f, fi.Size(), num, func(r *logEntry) error {
			if r.seq < next {
				return nil // written to Pebble before the segment was removed
			}
			if r.seq > next {
				return fmt.Errorf("%w: commit log %q skips from seq %d to %d", ErrCorrupt, path, next-1, r.seq)
			}
			s.apply(m, r)
			next++
			return nil
		})
		err = errors.Join(err, f.Close())
		var ta *tornAt
		if errors.As(err, &ta) {
			torn = true
			tornWhere = fmt.Sprintf("; its commit log %s ends at byte %d of %d", path, ta.off, fi.Size())
		} else if errors.Is(err, errTorn) {
			torn = true
		} else if err != nil {
			return fmt.Errorf("exact: replay commit log %q: %w", path, err)
		}
	}
	if k := s.opts.KnownCommit; k > s.lastSeq && !s.opts.AcceptLoss {
		return fmt.Errorf("%w: %s covers commit %d, but the store %q ends at commit %d%s: it lost %s, acknowledged as committed. Nothing was changed; to go on without them, accept the loss (dedup repair, Options.AcceptLostCommits)",
			ErrLostCommits, s.opts.KnownBy, k, s.dir, s.lastSeq, tornWhere, CommitSpan(s.lastSeq+1, k))
	}
	s.nextSeq = s.lastSeq
	s.pubFloor.Store(s.floor)
	s.memFloor.Store(s.floor)
	if !m.empty() {
		s.frozen = []*memTable{m}
		s.active = &memTable{limit: s.memLimit}
		if err := s.flushOne(m); err != nil {
			return err
		}
	}
	if err := s.retireSegments(nums); err != nil {
		return err
	}
	if len(nums) > 0 || removedFree {
		if err := syncDir(s.fs, s.dir); err != nil {
			return err
		}
	}
	// The segments of an upgraded store, which held keys, are gone for
	// good: so is the last of its keys at rest.
	if s.upgraded {
		if err := s.db.Delete(upgradingKey, pebble.Sync); err != nil {
			return fmt.Errorf("exact: finish upgrade: %w", err)
		}
	}
	if err := s.newEra(highest); err != nil {
		return err
	}
	// The first segment reuses a retired one, as later ones do.
	var reuse string
	if n := len(s.recycled); n > 0 {
		reuse, s.recycled = s.recycled[n-1], s.recycled[:n-1]
	}
	seg, err := createSegment(s.fs, s.dir, s.segNum, nil, reuse, segChunk(s.memLimit))
	if err != nil {
		return err
	}
	s.seg = seg
	s.active = &memTable{seg: seg, limit: s.memLimit}
	return nil
}

// listSegments sorts the commit log's files in ls: the segments to replay
// (nums, in order), and the highest segment number a file is named with.
// A retired segment is kept for reuse, as many as maxRecycled, unless the
// store is being upgraded (its segments held keys); the others are
// removed (removedFree).
func (s *Store) listSegments(ls []string) (nums []uint64, highest uint64, removedFree bool, err error) {
	for _, name := range ls {
		if n, ok := parseSegName(name); ok {
			nums = append(nums, n)
			highest = max(highest, n)
			continue
		}
		if n, ok := parseFreeName(name); ok {
			highest = max(highest, n)
		}
		// A retired segment of a store being upgraded holds keys: removed.
		if strings.HasPrefix(name, freePrefix) && len(s.recycled) < maxRecycled && !s.upgraded {
			path := s.fs.PathJoin(s.dir, name)
			fi, err := s.fs.Stat(path)
			if err != nil {
				return nil, 0, false, fmt.Errorf("exact: stat %q: %w", path, err)
			}
			s.recycled = append(s.recycled, path)
			s.logBytes.Add(fi.Size())
		} else if strings.HasPrefix(name, freePrefix) {
			if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil {
				return nil, 0, false, fmt.Errorf("exact: remove %q: %w", name, err)
			}
			removedFree = true
		}
	}
	slices.Sort(nums)
	return nums, highest, removedFree, nil
}

// retireSegments removes the replayed segments nums, in Pebble now; the
// last is kept for reuse (the first segment of this Open overwrites it).
func (s *Store) retireSegments(nums []uint64) error {
	for i, num := range nums {
		path := s.fs.PathJoin(s.dir, segName(num))
		if i == len(nums)-1 && len(s.recycled) < maxRecycled && !s.upgraded {
			fi, err := s.fs.Stat(path)
			if err == nil {
				free := s.fs.PathJoin(s.dir, freeName(num))
				if err = s.fs.Rename(path, free); err == nil {
					s.recycled = append(s.recycled, free)
					s.logBytes.Add(fi.Size())
					continue
				}
			}
			return fmt.Errorf("exact: retire commit log: %w", err)
		}
		if err := s.fs.Remove(path); err != nil {
			return fmt.Errorf("exact: remove commit log: %w", err)
		}
	}
	return nil
}

// newEra starts a new era of the commit log, above the last one and
// above that of every segment file (highest is the largest number a file
// is named with), durably, and numbers the first segment of this Open
// with it: segment numbers are era<<32 | count. A segment number is then
// never given twice, not even after a crash lost the directory entry of a
// segment, or the records it wrote into a reused file: a record of an
// earlier use of a reused file never carries the number of the segment
// now written to it, so replay never takes it for a new one.
func (s *Store) newEra(highest uint64) error {
	e := max(s.era, highest>>32) + 1
	if e >= 1<<31 {
		return fmt.Errorf("%w: commit log era %d", ErrCorrupt, e)
	}
	if err := s.db.Set(eraKey, be64(e), pebble.Sync); err != nil {
		return fmt.Errorf("exact: start commit log era: %w", err)
	}
	s.era = e
	s.segNum = e<<32 | 1
	return nil
}

// apply adds a replayed record to m and to the published state.
func (s *Store) apply(m *memTable, r *logEntry) {
	s.floor = max(s.floor, r.drop)
	hashes, runs := r.hashes, r.runs
	if r.seq <= s.truncated.Load() {
		hashes, runs = nil, nil
	}
	m.begin(r.seq, runs, hashes, r.cp, r.hasCP, s.floor)
	if r.fps != nil || r.keys != nil {
		s.ents = s.ents[:0]
		i := 0
		for _, rn := range r.runs {
			for range rn.n {
				e := ent{gen: rn.gen}
				if r.fps != nil {
					e.fp = r.fps[i]
				} else {
					e.fp = s.Fingerprint(r.keys[i]) // a record of format 2
				}
				s.ents = append(s.ents, e)
				i++
			}
		}
		m.addFPs(s.ents)
	}
	for i := range r.recs {
		op := &r.recs[i]
		m.putRecord(op.gen, op.fp, op.val, op.del)
	}
	s.lastSeq = r.seq
	if r.hasCP {
		s.cp = bytes.Clone(r.cp)
		s.cpSeq = r.seq
	}
}

// isEmpty reports whether the Pebble store holds no key at all.
func (s *Store) isEmpty() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, fmt.Errorf("exact: iterate: %w", err)
	}
	empty := !it.First()
	return empty, corruption(errors.Join(it.Error(), it.Close()))
}

// getUint64 sets *dst to the 8-byte big-endian value of key, what it
// holds, if the store has one.
func (s *Store) getUint64(key []byte, what string, dst *uint64) error {
	v, ok, err := s.get(key)
	if err != nil || !ok {
		return err
	}
	*dst, err = decodeBE64(what, v)
	return err
}
