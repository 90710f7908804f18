package exact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/errclass"
)

// Sentinel errors. Errors returned by the package wrap them with context;
// test with errors.Is.
var (
	// ErrNotOurs reports a non-empty directory that does not hold an exact store.
	ErrNotOurs = errors.New("exact: directory holds files that are not an exact store")
	// ErrClosed reports a use of a closed Store.
	ErrClosed = errors.New("exact: store closed")
	// ErrBroken reports a Store on which a write failed; close and reopen it.
	ErrBroken = errors.New("exact: store broken by an earlier write error")
	// ErrCorrupt reports stored data that cannot be decoded. It matches
	// dedup.ErrCorrupt too.
	ErrCorrupt = errclass.Corrupt("exact: corrupt store")
	// ErrEmptyKey reports an empty key.
	ErrEmptyKey = errors.New("exact: empty key")
	// ErrKeyTooLarge reports a key longer than MaxKeySize.
	ErrKeyTooLarge = errors.New("exact: key too large")
	// ErrLogOnly reports a per-key operation on a store opened with LogOnly.
	ErrLogOnly = errors.New("exact: store keeps no keys (LogOnly)")
	// ErrBatchDone reports a use of a committed or closed Batch.
	ErrBatchDone = errors.New("exact: batch already committed or closed")
)

// MaxKeySize is the largest key the store accepts, in bytes.
const MaxKeySize = 64 << 10

// Options configures Open. The zero value is usable.
type Options struct {
	// FS is the file system the store lives on. Tests pass
	// vfs.NewCrashableMem() or an errorfs-wrapped FS; in-memory mode passes
	// vfs.NewMem(). Default vfs.Default.
	FS vfs.FS
	// Logger receives Pebble's informational and error messages. Pebble's
	// fatal messages never end the process: they are turned into errors
	// (see ErrBroken), whether they happen on a Store call or in one of
	// Pebble's background goroutines. Default: discard.
	Logger pebble.Logger
	// LogOnly keeps no per-key entries: Add only logs the hash, Has returns
	// ErrLogOnly. For the engine's probabilistic mode. Default false.
	LogOnly bool
	// MemTableSize is the memory, in bytes, of the table that holds the
	// latest commits (their keys, indexed for Has, and their log records)
	// until they are written to Pebble as sorted tables, in the background,
	// and their part of the commit log is removed. Commits stall while more
	// than two full tables wait for that. At most 1 GiB. Default 64 MiB.
	MemTableSize uint64
	// CacheSize is the size of Pebble's block cache in bytes. Default 64
	// MiB.
	CacheSize int64
	// CompactionConcurrency is the largest number of concurrent Pebble
	// compactions. Default 2.
	CompactionConcurrency int
	// L0StopWritesThreshold is the number of L0 sublevels at which Pebble
	// stalls writes until compactions catch up. Default 1000.
	L0StopWritesThreshold int

	// InMemory keeps the store in memory, on no file system (FS and the
	// directory are not used): per generation, the fingerprints of its
	// keys in a compact table (see Store.Fingerprint), the result records,
	// the checkpoint and the metadata. Commits apply at once; nothing
	// survives Close. ScanKeys, ScanLog and Backup report ErrInMemory.
	// Default false.
	InMemory bool

	// memLimit, for tests, replaces MemTableSize as the memtable's flush
	// threshold, below its minimum.
	memLimit int
}

func (o *Options) ensureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = quietLogger{}
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 64 << 20
	}
	if o.CacheSize == 0 {
		o.CacheSize = 64 << 20
	}
	if o.CompactionConcurrency == 0 {
		o.CompactionConcurrency = 2
	}
	if o.L0StopWritesThreshold == 0 {
		o.L0StopWritesThreshold = 1000
	}
}

func (o *Options) validate() error {
	var bad []string
	if o.MemTableSize < 1<<20 || o.MemTableSize > 1<<30 {
		bad = append(bad, fmt.Sprintf("MemTableSize %d not in [1 MiB, 1 GiB]", o.MemTableSize))
	}
	if o.CacheSize < 0 {
		bad = append(bad, fmt.Sprintf("CacheSize %d < 0", o.CacheSize))
	}
	if o.CompactionConcurrency < 1 {
		bad = append(bad, fmt.Sprintf("CompactionConcurrency %d < 1", o.CompactionConcurrency))
	}
	if o.L0StopWritesThreshold < 4 {
		bad = append(bad, fmt.Sprintf("L0StopWritesThreshold %d < 4", o.L0StopWritesThreshold))
	}
	if len(bad) > 0 {
		return fmt.Errorf("exact: bad options: %s", strings.Join(bad, "; "))
	}
	return nil
}

// pebbleOptions translates o into Pebble options.
func (o *Options) pebbleOptions(lg *fatalLogger) *pebble.Options {
	po := &pebble.Options{
		FS:     noPreallocFS{o.FS},
		Logger: lg,
		// Pebble's own memtable and WAL take only the store's metadata:
		// keys and log records arrive as ingested sstables.
		MemTableSize:                pebbleMemTable,
		MemTableStopWritesThreshold: 4,
		// Keys are written once and leave by whole generations (one range
		// delete, then a delete-only compaction), and lookups are rare
		// (filter hits only), so L0 is allowed to grow: compacting it
		// eagerly would spend the engine's CPU on data that expires
		// anyway, at the price of slower lookups (a bloom check per L0
		// file).
		L0CompactionThreshold:     64,
		L0CompactionFileThreshold: 2000,
		L0StopWritesThreshold:     o.L0StopWritesThreshold,
		LBaseMaxBytes:             256 << 20,
		FormatMajorVersion:        pebble.FormatNewest,
		BytesPerSync:              1 << 20,
		WALBytesPerSync:           1 << 20,
		// The manifest is rewritten whole when it passes this size; Pebble's
		// 128 MiB default let a small state's manifest outgrow its data.
		MaxManifestFileSize: 16 << 20,
		// Table statistics only steer Pebble's own reclamation of deleted
		// ranges (delete-only compaction hints); expired generations are
		// reclaimed by Reclaim, an explicit compaction of their range.
		// And Pebble v2.1.7 leaves the statistics goroutine running when
		// Open fails after its first flush has begun, on a closed table
		// cache, where it panics and takes the process down
		// (TestFaultBackground/open-after-flush).
		DisableTableStats: true,
	}
	po.EventListener = &pebble.EventListener{
		FlushEnd: func(info pebble.FlushInfo) {
			// Pebble also reports a flush that wrote no table (every key
			// deleted) with an unexported error; its own metamorphic test
			// tells it by its text too. A flush cancelled by an excision
			// of its span (Reclaim of expired records) is retried.
			if info.Err != nil && info.Err.Error() != "pebble: empty table" &&
				!errors.Is(info.Err, pebble.ErrCancelledCompaction) {
				lg.failBackground(fmt.Errorf("exact: flush: %w", info.Err))
			}
		},
	}
	c := o.CompactionConcurrency
	po.CompactionConcurrencyRange = func() (int, int) { return 1, c }
	for i := range po.Levels {
		l := &po.Levels[i]
		l.BlockSize = 4 << 10
		// No sstable filters: a lookup reads the one table its flush filter
		// names (see keyfilter.go), and a table's filter is one block,
		// read whole on a cache miss.
	}
	po.TargetFileSizes[0] = 16 << 20
	po.EnsureDefaults()
	return po
}

// pebbleMemTable is the size of Pebble's memtable, which holds metadata
// only.
const pebbleMemTable = 4 << 20

// Store is the exact key store. All methods are safe for concurrent use.
type Store struct {
	db   *pebble.DB
	fs   vfs.FS
	dir  string
	opts Options
	lg   *fatalLogger

	// rw guards db against Close: operations hold it shared, Close exclusive.
	rw     sync.RWMutex
	closed bool

	// logMu orders commits: sequence numbers are assigned, records
	// appended to the commit log and keys added to the active memtable in
	// the same order. It guards the fields below it.
	logMu     sync.Mutex
	nextSeq   uint64 // last seq handed out
	floor     uint64 // drop floor as of the last handed-out batch
	seg       *segment
	segNum    uint64   // number of the current segment: epoch<<32 | count
	recycled  []string // retired segments to reuse
	bgRunning bool     // a flushLoop runs

	// memMu guards active (its contents too) and frozen, for Has. Both
	// change under logMu as well, except that a flush drops frozen[0].
	memMu  sync.RWMutex
	active *memTable
	frozen []*memTable // oldest first
	// memFloor is the drop floor of the memtables: Has finds nothing below.
	memFloor atomic.Uint64
	seed     maphash.Seed
	memLimit int
	hscratch []uint64 // key hashes of the commit being added (under logMu)
	// k0, k1 are the fingerprint secret (see Fingerprint).
	k0, k1 uint64

	// flushMu serialises flushes (flushOne).
	flushMu sync.Mutex
	bgWG    sync.WaitGroup
	closing atomic.Bool

	stallMu   sync.Mutex
	stallCond sync.Cond

	// filters are the flush filters of the live generations; legacy
	// reports keys of format 1 (tagKey), which Has also looks up.
	filters flushFilters
	legacy  bool

	// truncated is the log truncation mark: log records of seq <= it are
	// gone.
	truncated atomic.Uint64
	// epoch is the commit log's epoch recorded by the last Open (see
	// newEpoch).
	epoch uint64
	// logBytes is the size of the commit log's segments.
	logBytes atomic.Int64

	// compactedFloor is the drop floor through which Reclaim compacted.
	compactedFloor atomic.Uint64

	broken atomic.Pointer[error]
	// fatal is set once Pebble reported a fatal error on a Store call (see
	// lg.background for one on a background goroutine): Pebble may then
	// hold internal locks forever, so Close does not wait for it.
	fatal atomic.Bool

	// Published state of completed commits.
	cpMu     sync.Mutex
	lastSeq  uint64
	cpSeq    uint64
	cp       []byte
	pubFloor atomic.Uint64

	popts *pebble.Options

	// mem is the state of an in-memory store (Options.InMemory), nil for
	// a store on a file system.
	mem *memStore
}

// Open opens the store in dir, creating dir and the store if missing. A
// non-empty directory that does not hold an exact store is refused with
// ErrNotOurs.
func Open(dir string, opts Options) (*Store, error) {
	opts.ensureDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.InMemory {
		return openMem(opts)
	}
	opts.FS = PrivateFS(opts.FS)
	fs := opts.FS
	if err := fs.MkdirAll(dir, PrivateDirMode); err != nil {
		return nil, fmt.Errorf("exact: create %q: %w", dir, err)
	}
	if _, ok := fs.(privateFS); ok {
		if err := MakePrivate(dir); err != nil {
			return nil, err
		}
	}
	ls, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("exact: list %q: %w", dir, err)
	}
	existing := false
	fmv := pebble.FormatNewest
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
		seed: maphash.MakeSeed(), memLimit: int(opts.MemTableSize)}
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
	if err := s.loadFilters(); err != nil {
		return nil, errors.Join(err, s.closeDB())
	}
	if err := s.replay(); err != nil {
		if s.stopFlushes() == nil {
			s.freeMemTables()
		}
		return nil, errors.Join(err, s.closeDB())
	}
	return s, nil
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
		} else if len(v) != 1 || v[0] < 1 || v[0] > formatVersion {
			return fmt.Errorf("%w: %q has format %x, this package reads 1 to %d", ErrCorrupt, s.dir, v, formatVersion)
		} else if v[0] < formatVersion {
			// Format 1 has no commit log; a program reading only format 1
			// must not open a store that may have one.
			existing = false
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
	if v, ok, err := s.get(seqKey); err != nil {
		return err
	} else if ok {
		if s.lastSeq, err = decodeBE64("seq", v); err != nil {
			return err
		}
	}
	if v, ok, err := s.get(floorKey); err != nil {
		return err
	} else if ok {
		if s.floor, err = decodeBE64("floor", v); err != nil {
			return err
		}
	}
	if v, ok, err := s.get(checkpointKey); err != nil {
		return err
	} else if ok {
		s.cp = v
		s.cpSeq = s.lastSeq
	}
	if v, ok, err := s.get(epochKey); err != nil {
		return err
	} else if ok {
		if s.epoch, err = decodeBE64("commit log epoch", v); err != nil {
			return err
		}
	}
	if v, ok, err := s.get(truncatedKey); err != nil {
		return err
	} else if ok {
		t, err := decodeBE64("log truncation", v)
		if err != nil {
			return err
		}
		s.truncated.Store(t)
	}
	return s.removeIngestLeftovers()
}

// loadFilters reads the flush filters of the live generations, and finds
// whether the store holds keys of format 1.
func (s *Store) loadFilters() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tagGen(tagFilter, s.floor), UpperBound: filtersEnd})
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
		return fmt.Errorf("exact: load filters: %w", err)
	}
	legacy, err := s.db.NewIter(&pebble.IterOptions{LowerBound: genPrefix(s.floor), UpperBound: keysEnd})
	if err != nil {
		return fmt.Errorf("exact: look for keys of format 1: %w", err)
	}
	s.legacy = legacy.First()
	if err := errors.Join(legacy.Error(), legacy.Close()); err != nil {
		return fmt.Errorf("exact: look for keys of format 1: %w", err)
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
	var nums []uint64
	var highest uint64 // the highest segment number a file is named with
	for _, name := range ls {
		if n, ok := parseSegName(name); ok {
			nums = append(nums, n)
			highest = max(highest, n)
			continue
		}
		if n, ok := parseFreeName(name); ok {
			highest = max(highest, n)
		}
		if strings.HasPrefix(name, freePrefix) && len(s.recycled) < maxRecycled {
			path := s.fs.PathJoin(s.dir, name)
			fi, err := s.fs.Stat(path)
			if err != nil {
				return fmt.Errorf("exact: stat %q: %w", path, err)
			}
			s.recycled = append(s.recycled, path)
			s.logBytes.Add(fi.Size())
		} else if strings.HasPrefix(name, freePrefix) {
			if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil {
				return fmt.Errorf("exact: remove %q: %w", name, err)
			}
		}
	}
	slices.Sort(nums)
	m := s.active
	next := s.lastSeq + 1
	torn := false
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
		err = readRecords(f, fi.Size(), num, func(r *record) error {
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
		if errors.Is(err, errTorn) {
			torn = true
		} else if err != nil {
			return fmt.Errorf("exact: replay commit log %q: %w", path, err)
		}
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
	for _, num := range nums {
		if err := s.fs.Remove(s.fs.PathJoin(s.dir, segName(num))); err != nil {
			return fmt.Errorf("exact: remove commit log: %w", err)
		}
	}
	if len(nums) > 0 {
		if err := syncDir(s.fs, s.dir); err != nil {
			return err
		}
	}
	if err := s.newEpoch(highest); err != nil {
		return err
	}
	seg, err := createSegment(s.fs, s.dir, s.segNum, nil, "")
	if err != nil {
		return err
	}
	s.seg = seg
	s.active = &memTable{seg: seg, limit: s.memLimit}
	return nil
}

// newEpoch starts a new epoch of the commit log, above the last one and
// above that of every segment file (highest is the largest number a file
// is named with), durably, and numbers the first segment of this Open
// with it: segment numbers are epoch<<32 | count. A segment number is then
// never given twice, not even after a crash lost the directory entry of a
// segment, or the records it wrote into a reused file: a record of an
// earlier use of a reused file never carries the number of the segment
// now written to it, so replay never takes it for a new one.
func (s *Store) newEpoch(highest uint64) error {
	e := max(s.epoch, highest>>32) + 1
	if e >= 1<<31 {
		return fmt.Errorf("%w: commit log epoch %d", ErrCorrupt, e)
	}
	if err := s.db.Set(epochKey, be64(e), pebble.Sync); err != nil {
		return fmt.Errorf("exact: start commit log epoch: %w", err)
	}
	s.epoch = e
	s.segNum = e<<32 | 1
	return nil
}

// apply adds a replayed record to m and to the published state.
func (s *Store) apply(m *memTable, r *record) {
	s.floor = max(s.floor, r.drop)
	hashes, runs := r.hashes, r.runs
	if r.seq <= s.truncated.Load() {
		hashes, runs = nil, nil
	}
	m.begin(r.seq, runs, hashes, r.cp, r.hasCP, s.floor)
	if r.keys != nil {
		gens := make([]uint64, 0, len(r.keys))
		for _, rn := range r.runs {
			for range rn.n {
				gens = append(gens, rn.gen)
			}
		}
		s.hscratch = m.addKeys(s.seed, len(r.keys), func(i int) (uint64, []byte) { return gens[i], r.keys[i] }, s.hscratch)
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
	return empty, errors.Join(it.Error(), it.Close())
}

// get returns a copy of the value of k.
func (s *Store) get(k []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("exact: get %x: %w", k, err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, true, closer.Close()
}

// acquire takes the shared lock and checks the store is usable. The caller
// must call s.rw.RUnlock when acquire returns nil.
func (s *Store) acquire() error {
	s.rw.RLock()
	if s.closed {
		s.rw.RUnlock()
		return ErrClosed
	}
	if err := s.brokenErr(); err != nil {
		s.rw.RUnlock()
		return fmt.Errorf("%w: %w", ErrBroken, err)
	}
	return nil
}

// brokenErr returns why the store is broken: the first failed write, or a
// failure of Pebble's background work (see fatalLogger.failBackground).
// Nil if it is not.
func (s *Store) brokenErr() error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	return s.lg.background()
}

// fail marks the store broken by err (first cause wins) and returns err.
func (s *Store) fail(err error) error {
	s.broken.CompareAndSwap(nil, &err)
	return err
}

// Close closes the store. Batches not committed are dropped; commits not
// yet flushed stay in the commit log, for the next Open. Close of a closed
// store returns ErrClosed. Close of a broken store releases it without
// repeating the failure that broke it (every call since has reported it),
// unless Pebble is wedged.
func (s *Store) Close() error {
	s.rw.Lock()
	defer s.rw.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if s.mem != nil {
		s.mem.close()
		return nil
	}
	err := s.stopFlushes()
	if err == nil {
		// The segments of frozen memtables stay for the next Open to
		// replay; their files are closed here (a flush that ran would have
		// closed them when it retired them).
		for _, m := range s.frozen {
			if m.seg != nil && m.seg != s.seg {
				if cerr := m.seg.f.Close(); cerr != nil {
					err = errors.Join(err, fmt.Errorf("exact: close commit log: %w", cerr))
				}
			}
		}
		s.freeMemTables()
	}
	if s.seg != nil {
		if cerr := s.seg.f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("exact: close commit log: %w", cerr))
		}
	}
	err = errors.Join(err, s.closeDB())
	if err != nil && s.brokenErr() != nil && !errors.Is(err, errWedged) {
		return nil
	}
	return err
}

// errWedged reports that Pebble did not close after a fatal error.
var errWedged = fmt.Errorf("%w: Pebble is wedged after a fatal error", ErrBroken)

// freeMemTables gives back the memory of the memtables; the flushes must
// have stopped.
func (s *Store) freeMemTables() {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	if s.active != nil {
		s.active.free()
	}
	for _, m := range s.frozen {
		m.free()
	}
}

// stopFlushes waits for the background flush to end. What it leaves
// unflushed stays in the commit log, for the next Open.
func (s *Store) stopFlushes() error {
	s.closing.Store(true)
	s.wakeStalled()
	done := make(chan struct{})
	go func() { s.bgWG.Wait(); close(done) }()
	var timeout <-chan time.Time
	if s.fatal.Load() || s.lg.background() != nil {
		timeout = time.After(fatalCloseTimeout)
	}
	select {
	case <-done:
		return nil
	case <-timeout:
		return fmt.Errorf("%w: a flush did not end; restart the process to release %q", errWedged, s.dir)
	}
}

func (s *Store) closeDB() error {
	errc := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- asFatal(r)
			}
		}()
		errc <- s.db.Close()
	}()
	var timeout <-chan time.Time
	if s.fatal.Load() || s.lg.background() != nil {
		timeout = time.After(fatalCloseTimeout)
	}
	var err error
	select {
	case err = <-errc:
		s.popts.Cache.Unref()
	case <-timeout:
		err = fmt.Errorf("%w: it did not close; restart the process to release %q", errWedged, s.dir)
	}
	if err != nil {
		return fmt.Errorf("exact: close %q: %w", s.dir, err)
	}
	return nil
}

// fatalCloseTimeout bounds Close after a fatal Pebble error.
const fatalCloseTimeout = 2 * time.Second

// recovered turns a recovered panic value into the store's broken error.
func (s *Store) recovered(r any) error {
	err := asFatal(r)
	s.fatal.Store(true)
	return s.fail(err)
}

// GetMeta returns the metadata value stored under name.
func (s *Store) GetMeta(name string) (value []byte, ok bool, err error) {
	if err := s.acquire(); err != nil {
		return nil, false, err
	}
	defer s.rw.RUnlock()
	if m := s.mem; m != nil {
		m.mu.RLock()
		defer m.mu.RUnlock()
		v, ok := m.meta[name]
		return bytes.Clone(v), ok, nil
	}
	return s.get(metaKey(name))
}

// SetMeta stores value under name, durably (synced) when it returns nil.
func (s *Store) SetMeta(name string, value []byte) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if m := s.mem; m != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.meta[name] = bytes.Clone(value)
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	if err := s.db.Set(metaKey(name), value, pebble.Sync); err != nil {
		return s.fail(fmt.Errorf("exact: set meta %q: %w", name, err))
	}
	return nil
}

// Has reports whether key is stored under generation gen.
func (s *Store) Has(gen uint64, key []byte) (bool, error) {
	if s.opts.LogOnly {
		return false, ErrLogOnly
	}
	if len(key) == 0 {
		return false, ErrEmptyKey
	}
	if len(key) > MaxKeySize {
		return false, fmt.Errorf("%w: %d bytes", ErrKeyTooLarge, len(key))
	}
	if err := s.acquire(); err != nil {
		return false, err
	}
	defer s.rw.RUnlock()
	if s.mem != nil {
		return s.mem.has(gen, s.Fingerprint(key)), nil
	}
	if gen < s.memFloor.Load() {
		return false, nil
	}
	if s.memHas(gen, key) {
		return true, nil
	}
	bp := keyBufPool.Get().(*lookupBuf)
	defer keyBufPool.Put(bp)
	if s.legacy {
		bp.key = slices.Grow(bp.key[:0], 9+len(key))[:9+len(key)]
		putKey(bp.key, gen, key)
		if ok, err := s.get1(bp.key); ok || err != nil {
			return ok, err
		}
	}
	bp.flushes = s.filters.candidates(bp.flushes[:0], gen, keyHash(key))
	for _, flush := range bp.flushes {
		bp.key = appendFlushKey(bp.key[:0], gen, flush, key)
		if ok, err := s.get1(bp.key); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// lookupBuf is the scratch space of a Has.
type lookupBuf struct {
	key     []byte
	flushes []uint64
}

var keyBufPool = sync.Pool{New: func() any { return &lookupBuf{key: make([]byte, 0, 64)} }}

// get1 reports whether Pebble holds k.
func (s *Store) get1(k []byte) (bool, error) {
	_, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("exact: lookup: %w", err)
	}
	return true, closer.Close()
}

// memHas reports whether a memtable holds key in generation gen.
func (s *Store) memHas(gen uint64, key []byte) bool {
	h := maphash.Bytes(s.seed, key)
	s.memMu.RLock()
	defer s.memMu.RUnlock()
	if s.active.has(gen, key, h) {
		return true
	}
	for _, m := range s.frozen {
		if m.has(gen, key, h) {
			return true
		}
	}
	return false
}

// Checkpoint returns the last committed checkpoint, nil if none.
func (s *Store) Checkpoint() ([]byte, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.rw.RUnlock()
	if m := s.mem; m != nil {
		m.mu.RLock()
		defer m.mu.RUnlock()
		return bytes.Clone(m.cp), nil
	}
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	return bytes.Clone(s.cp), nil
}

// CommitSeq returns the sequence number of the last committed batch, 0 if
// none.
func (s *Store) CommitSeq() uint64 {
	if m := s.mem; m != nil {
		m.mu.RLock()
		defer m.mu.RUnlock()
		return m.seq
	}
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	return s.lastSeq
}

// DroppedBefore returns the drop floor: every generation below it is gone.
func (s *Store) DroppedBefore() uint64 { return s.pubFloor.Load() }

// publish records a completed commit.
func (s *Store) publish(seq uint64, cp []byte, floor uint64) {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	if seq > s.lastSeq {
		s.lastSeq = seq
	}
	if cp != nil && seq > s.cpSeq {
		s.cpSeq = seq
		s.cp = bytes.Clone(cp)
	}
	for {
		f := s.pubFloor.Load()
		if floor <= f || s.pubFloor.CompareAndSwap(f, floor) {
			break
		}
	}
}

// Reclaim gives back the disk space of expired generations (below the drop
// floor, already gone for Has and ScanKeys): it excises their key range
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
	for _, tag := range []byte{tagKey, tagFlushKey, tagFilter} {
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

// ScanKeys calls fn for every stored key of generations >= fromGen, in
// generation order (within a generation, keys come in runs, each in key
// order). key is valid only during the call. An error from fn stops the
// scan and is returned.
func (s *Store) ScanKeys(fromGen uint64, fn func(gen uint64, key []byte) error) error {
	if s.opts.LogOnly {
		return ErrLogOnly
	}
	if s.mem != nil {
		return fmt.Errorf("%w: ScanKeys", ErrInMemory)
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if err := s.flushAll(); err != nil {
		return err
	}
	fromGen = max(fromGen, s.memFloor.Load())
	if s.legacy {
		if err := s.scanRange(tagGen(tagKey, fromGen), keysEnd, 9, fn); err != nil {
			return err
		}
	}
	return s.scanRange(tagGen(tagFlushKey, fromGen), flushKeysEnd, flushKeyPrefix, fn)
}

// scanRange calls fn for every key in [lo, hi), whose generation is its
// bytes [1, 9) and whose key starts at byte skip.
func (s *Store) scanRange(lo, hi []byte, skip int, fn func(gen uint64, key []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("exact: scan keys: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) <= skip {
			err = fmt.Errorf("%w: key entry of %d bytes", ErrCorrupt, len(k))
			break
		}
		if err = fn(beUint64(k[1:9]), k[skip:]); err != nil {
			break
		}
	}
	if err == nil {
		if err = it.Error(); err != nil {
			err = fmt.Errorf("exact: scan keys: %w", err)
		}
	}
	return errors.Join(err, it.Close())
}

// ScanLog calls fn for every (gen, hash) committed with a sequence number >
// afterSeq and not yet truncated, in seq order, then Add order within a
// commit. Pairs of dropped generations (below DroppedBefore) are skipped.
func (s *Store) ScanLog(afterSeq uint64, fn func(seq uint64, gen uint64, hash uint64) error) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	afterSeq = max(afterSeq, s.truncated.Load())
	if afterSeq == 1<<64-1 {
		return nil
	}
	if s.mem != nil {
		if afterSeq >= s.CommitSeq() {
			return nil
		}
		return fmt.Errorf("%w: ScanLog", ErrInMemory)
	}
	if err := s.flushAll(); err != nil {
		return err
	}
	floor := s.memFloor.Load()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(afterSeq + 1), UpperBound: logEnd})
	if err != nil {
		return fmt.Errorf("exact: scan log: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			err = fmt.Errorf("%w: log key of %d bytes", ErrCorrupt, len(k))
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			err = fmt.Errorf("exact: scan log: %w", err)
			break
		}
		if err = decodeLogRecord(beUint64(k[1:]), v, floor, fn); err != nil {
			break
		}
	}
	if err == nil {
		if err = it.Error(); err != nil {
			err = fmt.Errorf("exact: scan log: %w", err)
		}
	}
	return errors.Join(err, it.Close())
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
	// sstables from Pebble, which is only about disk space.
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

// Backup writes a consistent copy of the store into destDir (on the same
// FS), which must not exist. It may run while commits run: the copy holds
// every batch whose Commit returned before Backup was called. Open the copy
// with Open.
func (s *Store) Backup(destDir string) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if s.mem != nil {
		return fmt.Errorf("%w: Backup", ErrInMemory)
	}
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	// No flush may run while Pebble copies its state: the copy could hold
	// the commit state a flush records after ingesting its tables, with a
	// version from before that ingestion.
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.flushAllLocked(); err != nil {
		return err
	}
	if err := s.db.Checkpoint(destDir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("exact: backup to %q: %w", destDir, err)
	}
	return nil
}

// DiskUsage returns the bytes the store uses on its file system.
func (s *Store) DiskUsage() uint64 {
	if s.mem != nil || s.acquire() != nil {
		return 0
	}
	defer s.rw.RUnlock()
	return s.db.Metrics().DiskSpaceUsage() + uint64(max(0, s.logBytes.Load()))
}

// Metrics returns Pebble's metrics, for diagnostics; nil when closed.
func (s *Store) Metrics() *pebble.Metrics {
	if s.mem != nil || s.acquire() != nil {
		return nil
	}
	defer s.rw.RUnlock()
	return s.db.Metrics()
}

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
