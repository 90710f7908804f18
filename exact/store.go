package exact

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
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
	// survives Close. ScanFingerprints, ScanLog and Backup report ErrInMemory.
	// Default false.
	InMemory bool

	// KnownCommit is a commit sequence number the caller holds durable
	// evidence of, such as a filter snapshot that covers it; KnownBy names
	// that evidence (a file). Open refuses a store whose commits end
	// before KnownCommit (its commit log lost acknowledged records: cut
	// short, or damaged) with an error matching ErrLostCommits, before it
	// changes any file, unless AcceptLoss. Default 0: no evidence.
	KnownCommit uint64
	KnownBy     string
	// AcceptLoss opens a store whose commits end before KnownCommit: it
	// goes on from its last intact commit, and the commits after it are
	// gone. Default false.
	AcceptLoss bool

	// memLimit, for tests, replaces MemTableSize as the memtable's flush
	// threshold, below its minimum.
	memLimit int
}

func (o *Options) withDefaults() {
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
		DataCorruption: corruptionListener(lg),
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
	segNum    uint64   // number of the current segment: era<<32 | count
	recycled  []string // retired segments to reuse
	bgRunning bool     // a flushLoop runs

	// memMu guards active (its contents too) and frozen, for Has. Both
	// change under logMu as well, except that a flush drops frozen[0].
	memMu  sync.RWMutex
	active *memTable
	frozen []*memTable // oldest first
	// memFloor is the drop floor of the memtables: Has finds nothing below.
	memFloor atomic.Uint64
	memLimit int
	ents     []ent // scratch of a replay
	// from is the format of a store being upgraded by this Open (see
	// upgrade.go), 0 if none; cleanupFrom is the format an upgrade whose
	// cleanup is not done yet (upgradingKey) came from, 0 if none;
	// upgraded is set once the store is of format 3 and that cleanup runs.
	from        int
	cleanupFrom int
	upgraded    bool
	// k0, k1 are the fingerprint secret (see Fingerprint).
	k0, k1 uint64

	// flushMu serialises flushes (flushOne).
	flushMu sync.Mutex
	// beforeIngest, for tests, runs in a flush between writing its tables
	// and ingesting them (nil: nothing).
	beforeIngest func()
	// recTop is 1 + the newest generation of a record in Pebble (0: none),
	// or more: GetRecord asks Pebble only for generations below it. Open
	// sets it from Pebble's last record, flushes raise it (both under
	// flushMu), before the memtable they flushed leaves the reads; an
	// expiry leaves it as it is.
	recTop  atomic.Uint64
	bgWG    sync.WaitGroup
	closing atomic.Bool

	stallMu   sync.Mutex
	stallCond sync.Cond

	// filters are the flush filters of the live generations.
	filters flushFilters

	// truncated is the log truncation mark: log records of seq <= it are
	// gone.
	truncated atomic.Uint64
	// era is the commit log's era recorded by the last Open (see
	// newEra).
	era uint64
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

// get returns a copy of the value of k.
func (s *Store) get(k []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("exact: get %x: %w", k, corruption(err))
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
	// A clean close puts every commit into Pebble's tables, so that the
	// commit log holds nothing at rest: its segments are a memtable's
	// worth of fingerprints and hashes (24 bytes a key, the tables take
	// 18), and blocks of zeros ahead of them; the next Open replays
	// nothing. A store broken by a failed write keeps its log for the
	// next Open, as a crash would.
	var err error
	if s.brokenErr() == nil {
		err = s.flushAll()
	}
	err = errors.Join(err, s.stopFlushes())
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
		// Retired segments wait for reuse by this process only: at rest
		// they would hold a memtable's worth of disk for nothing.
		for _, path := range s.recycled {
			if rerr := s.fs.Remove(path); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("exact: remove retired commit log: %w", rerr))
			}
		}
		s.recycled = nil
	}
	if s.seg != nil {
		osFile := s.seg.f.Fd() != vfs.InvalidFd
		if cerr := s.seg.f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("exact: close commit log: %w", cerr))
		} else if err == nil && osFile {
			// The segment's file ends at its records: no zeros grown
			// ahead of them, nothing of a reused file's earlier records
			// (which replay stops before anyway).
			if terr := os.Truncate(s.seg.path, s.seg.written.Load()); terr != nil {
				err = fmt.Errorf("exact: close commit log: %w", terr)
			}
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
	if s.db == nil { // an upgrade failed to reopen it
		s.popts.Cache.Unref()
		return nil
	}
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

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
