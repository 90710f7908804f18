package exact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
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
	// MemTableSize is the size of one Pebble memtable in bytes. A batch
	// larger than half of it bypasses the memtable as a flushable batch.
	// Default 64 MiB.
	MemTableSize uint64
	// CacheSize is the size of Pebble's block cache in bytes, on top of the
	// memory of two memtables (Pebble charges memtables to its cache).
	// Default 64 MiB.
	CacheSize int64
	// IngestThreshold is the number of keys from which a commit is written as
	// one sorted sstable ingested into Pebble instead of a WAL batch; 0 or
	// negative never ingests. Ingestion costs less CPU per key at 100k-key
	// commits but stacks one L0 sublevel per commit (read amplification 20-120
	// measured under sustained load, against 2-5 for WAL batches), which
	// slows Has and can stall writes; use it for bulk loads. Default 0.
	IngestThreshold int
	// BloomBitsPerKey sizes the Bloom filters of the sstables, which keep Has
	// of absent keys off the disk. Default 10 (about 1% false positives).
	BloomBitsPerKey int
	// CompactionConcurrency is the largest number of concurrent Pebble
	// compactions. Default 2.
	CompactionConcurrency int
	// L0StopWritesThreshold is the number of L0 sublevels at which Pebble
	// stalls writes until compactions catch up. Default 1000.
	L0StopWritesThreshold int
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
	if o.IngestThreshold <= 0 {
		o.IngestThreshold = 1<<63 - 1
	}
	if o.BloomBitsPerKey == 0 {
		o.BloomBitsPerKey = 10
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
	if o.MemTableSize < 1<<20 || o.MemTableSize > 4<<30 {
		bad = append(bad, fmt.Sprintf("MemTableSize %d not in [1 MiB, 4 GiB]", o.MemTableSize))
	}
	if o.CacheSize < 0 {
		bad = append(bad, fmt.Sprintf("CacheSize %d < 0", o.CacheSize))
	}
	if o.BloomBitsPerKey < 1 || o.BloomBitsPerKey > 64 {
		bad = append(bad, fmt.Sprintf("BloomBitsPerKey %d not in [1, 64]", o.BloomBitsPerKey))
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
		FS:                          o.FS,
		Logger:                      lg,
		MemTableSize:                o.MemTableSize,
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
			// tells it by its text too.
			if info.Err != nil && info.Err.Error() != "pebble: empty table" {
				lg.failBackground(fmt.Errorf("exact: flush: %w", info.Err))
			}
		},
	}
	c := o.CompactionConcurrency
	po.CompactionConcurrencyRange = func() (int, int) { return 1, c }
	for i := range po.Levels {
		l := &po.Levels[i]
		l.BlockSize = 4 << 10
		l.FilterPolicy = bloom.FilterPolicy(o.BloomBitsPerKey)
		l.FilterType = pebble.TableFilter
	}
	po.TargetFileSizes[0] = 16 << 20
	po.EnsureDefaults()
	return po
}

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

	// mu orders commits: sequence numbers are assigned and batches handed
	// to Pebble in the same order, so the WAL order is the seq order.
	mu      sync.Mutex
	nextSeq uint64 // last seq handed out
	floor   uint64 // drop floor as of the last handed-out batch

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

	// Commit turns: batches are handed to Pebble in seq order.
	turnMu   sync.Mutex
	turnCond sync.Cond
	turn     uint64 // last seq handed to Pebble (or failed)

	walSeq    atomic.Uint64 // last seq applied through the WAL
	walSynced atomic.Uint64 // a seq whose WAL fsync completed (max)

	popts *pebble.Options
}

// Open opens the store in dir, creating dir and the store if missing. A
// non-empty directory that does not hold an exact store is refused with
// ErrNotOurs.
func Open(dir string, opts Options) (*Store, error) {
	opts.ensureDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	fs := opts.FS
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("exact: create %q: %w", dir, err)
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
	po.Cache = pebble.NewCache(opts.CacheSize + 2*int64(opts.MemTableSize))
	db, err := openPebble(dir, po, lg)
	if err != nil {
		po.Cache.Unref()
		return nil, fmt.Errorf("exact: open %q: %w", dir, err)
	}
	s := &Store{db: db, fs: fs, dir: dir, opts: opts, lg: lg, popts: po}
	s.turnCond.L = &s.turnMu
	if err := s.init(existing); err != nil {
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
		} else if !bytes.Equal(v, []byte{formatVersion}) {
			return fmt.Errorf("%w: %q has format %x, this package reads %d", ErrCorrupt, s.dir, v, formatVersion)
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
	s.nextSeq = s.lastSeq
	s.turn = s.lastSeq
	s.pubFloor.Store(s.floor)
	return s.removeIngestLeftovers()
}

// removeIngestLeftovers removes temporary sstables of ingestions that a
// crash interrupted.
func (s *Store) removeIngestLeftovers() error {
	ls, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("exact: list %q: %w", s.dir, err)
	}
	for _, name := range ls {
		if strings.HasPrefix(name, ingestPrefix) {
			if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil {
				return fmt.Errorf("exact: remove leftover %q: %w", name, err)
			}
		}
	}
	return nil
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

// Close closes the store. Batches not committed are dropped. Close of a
// closed store returns ErrClosed.
func (s *Store) Close() error {
	s.rw.Lock()
	defer s.rw.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	return s.closeDB()
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
		err = fmt.Errorf("%w: Pebble did not close after a fatal error; restart the process to release %q", ErrBroken, s.dir)
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
	return s.get(metaKey(name))
}

// SetMeta stores value under name, durably (synced) when it returns nil.
func (s *Store) SetMeta(name string, value []byte) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
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

var keyBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

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
	bp := keyBufPool.Get().(*[]byte)
	defer keyBufPool.Put(bp)
	k := *bp
	if n := 9 + len(key); cap(k) < n {
		k = make([]byte, n)
		*bp = k
	} else {
		k = k[:n]
	}
	putKey(k, gen, key)
	_, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("exact: has gen %d: %w", gen, err)
	}
	return true, closer.Close()
}

// Checkpoint returns the last committed checkpoint, nil if none.
func (s *Store) Checkpoint() ([]byte, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.rw.RUnlock()
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	return bytes.Clone(s.cp), nil
}

// CommitSeq returns the sequence number of the last committed batch, 0 if
// none.
func (s *Store) CommitSeq() uint64 {
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

// Reclaim compacts the keys of expired generations (below the drop floor,
// already hidden by a range delete) so that their disk space comes back:
// Pebble compacts a level only when it outgrows its target, so a range that
// receives no more writes keeps its dead keys. It does nothing if the floor
// has not risen since the last Reclaim; the engine calls it from the
// background about once per generation span. It is a compaction like
// Pebble's own: a write failure inside it breaks the store as one in a
// background compaction would (see ErrBroken). ctx cancels it.
func (s *Store) Reclaim(ctx context.Context) (err error) {
	floor := s.pubFloor.Load()
	if s.opts.LogOnly || floor <= s.compactedFloor.Load() {
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
	if err := s.db.Compact(ctx, genPrefix(0), genPrefix(floor), false); err != nil {
		return fmt.Errorf("exact: reclaim generations below %d: %w", floor, err)
	}
	s.compactedFloor.Store(floor)
	return nil
}

// ScanKeys calls fn for every stored key of generations >= fromGen, in
// (gen, key) order. key is valid only during the call. An error from fn
// stops the scan and is returned.
func (s *Store) ScanKeys(fromGen uint64, fn func(gen uint64, key []byte) error) error {
	if s.opts.LogOnly {
		return ErrLogOnly
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: genPrefix(fromGen), UpperBound: keysEnd})
	if err != nil {
		return fmt.Errorf("exact: scan keys: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < 10 {
			err = fmt.Errorf("%w: key entry of %d bytes", ErrCorrupt, len(k))
			break
		}
		if err = fn(beUint64(k[1:9]), k[9:]); err != nil {
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
	if afterSeq == 1<<64-1 {
		return nil
	}
	floor := s.pubFloor.Load()
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
	end := logEnd
	if throughSeq < 1<<64-1 {
		end = logKey(throughSeq + 1)
	}
	if err := s.db.DeleteRange(logKey(0), end, pebble.Sync); err != nil {
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
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	if err := s.db.Checkpoint(destDir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("exact: backup to %q: %w", destDir, err)
	}
	return nil
}

// DiskUsage returns the bytes the store uses on its file system.
func (s *Store) DiskUsage() uint64 {
	if s.acquire() != nil {
		return 0
	}
	defer s.rw.RUnlock()
	return s.db.Metrics().DiskSpaceUsage()
}

// Metrics returns Pebble's metrics, for diagnostics; nil when closed.
func (s *Store) Metrics() *pebble.Metrics {
	if s.acquire() != nil {
		return nil
	}
	defer s.rw.RUnlock()
	return s.db.Metrics()
}

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
