package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
	pbloom "github.com/parquet-go/parquet-go/bloom"
)

// MapTarget is the baseline a Go programmer writes first: a map from key to
// first-seen time, swept of expired keys every quarter window. A key is a
// duplicate while now - first seen < window (never refreshed by a hit).
type MapTarget struct {
	window    time.Duration
	m         map[string]int64
	nextSweep int64
}

// NewMapTarget returns an empty map baseline.
func NewMapTarget(window time.Duration) *MapTarget {
	return &MapTarget{window: window, m: make(map[string]int64)}
}

// Name returns "go map + expiry".
func (t *MapTarget) Name() string { return "go map + expiry" }

// Check looks each key up and inserts the new ones.
func (t *MapTarget) Check(keys [][]byte, now time.Time, dup []bool) error {
	ns := now.UnixNano()
	if ns >= t.nextSweep {
		for k, at := range t.m {
			if ns-at >= int64(t.window) {
				delete(t.m, k)
			}
		}
		t.nextSweep = ns + int64(t.window/4)
	}
	for i, k := range keys {
		if at, ok := t.m[string(k)]; ok && ns-at < int64(t.window) {
			dup[i] = true
			continue
		}
		t.m[string(k)] = ns
		dup[i] = false
	}
	return nil
}

// Usage reports the map's size.
func (t *MapTarget) Usage() (Usage, error) { return Usage{Keys: uint64(len(t.m))}, nil }

// Close drops the map.
func (t *MapTarget) Close() error { t.m = nil; return nil }

// BloomTarget uses github.com/bits-and-blooms/bloom/v3 directly, the way
// its users expire keys: two filters, each sized for one window of keys,
// the older dropped every window. A key is a duplicate if either filter may
// hold it, so keys live one to two windows and false positives drop real
// events.
type BloomTarget struct {
	window      time.Duration
	n           uint
	fp          float64
	cur, prev   *bloom.BloomFilter
	curN, prevN uint64
	rotateAt    int64
}

// NewBloomTarget sizes each filter for rate × window keys at fp.
func NewBloomTarget(window time.Duration, rate, fp float64) *BloomTarget {
	n := uint(max(rate*window.Seconds(), 1024))
	return &BloomTarget{window: window, n: n, fp: fp, cur: bloom.NewWithEstimates(n, fp)}
}

// Name returns "bits-and-blooms direct".
func (t *BloomTarget) Name() string { return "bits-and-blooms direct" }

// Check tests both filters and adds to the current one.
func (t *BloomTarget) Check(keys [][]byte, now time.Time, dup []bool) error {
	ns := now.UnixNano()
	if t.rotateAt == 0 {
		t.rotateAt = ns + int64(t.window)
	}
	for ns >= t.rotateAt {
		if t.prev != nil {
			t.prev.ClearAll()
		} else {
			t.prev = bloom.NewWithEstimates(t.n, t.fp)
		}
		t.prev, t.cur = t.cur, t.prev
		t.prevN, t.curN = t.curN, 0
		t.rotateAt += int64(t.window)
	}
	for i, k := range keys {
		d := t.cur.TestOrAdd(k)
		if !d {
			t.curN++
			if t.prev != nil && t.prev.Test(k) {
				d = true
			}
		}
		dup[i] = d
	}
	return nil
}

// Usage reports the keys added to the live filters and their size.
func (t *BloomTarget) Usage() (Usage, error) {
	b := uint64(t.cur.Cap() / 8)
	if t.prev != nil {
		b += uint64(t.prev.Cap() / 8)
	}
	return Usage{Keys: t.curN + t.prevN, FilterBytes: b}, nil
}

// Close drops the filters.
func (t *BloomTarget) Close() error { t.cur, t.prev = nil, nil; return nil }

// SBBFTarget uses parquet-go's split-block Bloom filter
// (github.com/parquet-go/parquet-go/bloom.SplitBlockFilter: one 32-byte
// block per key, 8 bits set with AVX2) directly, the fastest Go filter a
// user could pick, expired the way [BloomTarget] expires: two filters, each
// sized for one window of keys, the older dropped every window. Keys are
// hashed with xxhash64, as the engine hashes them.
type SBBFTarget struct {
	window      time.Duration
	blocks      int
	cur, prev   pbloom.SplitBlockFilter
	curN, prevN uint64
	rotateAt    int64
}

// sbbfBitsPerKey returns the bits of split-block filter per key for a
// false-positive rate near fp: a split-block filter needs about 1.15 times
// a classic Bloom's bits per key (11 at 1%, 16 at 0.1%).
func sbbfBitsPerKey(fp float64) uint {
	return uint(math.Ceil(-math.Log2(fp) * math.Log2E * 1.15))
}

// NewSBBFTarget sizes each filter for rate × window keys at about fp.
func NewSBBFTarget(window time.Duration, rate, fp float64) *SBBFTarget {
	n := int64(max(rate*window.Seconds(), 1024))
	blocks := pbloom.NumSplitBlocksOf(n, sbbfBitsPerKey(fp))
	return &SBBFTarget{window: window, blocks: blocks, cur: make(pbloom.SplitBlockFilter, blocks)}
}

// Name returns "parquet-go split-block direct".
func (t *SBBFTarget) Name() string { return "parquet-go split-block direct" }

// Check tests both filters and adds to the current one.
func (t *SBBFTarget) Check(keys [][]byte, now time.Time, dup []bool) error {
	ns := now.UnixNano()
	if t.rotateAt == 0 {
		t.rotateAt = ns + int64(t.window)
	}
	for ns >= t.rotateAt {
		if t.prev != nil {
			t.prev.Reset()
		} else {
			t.prev = make(pbloom.SplitBlockFilter, t.blocks)
		}
		t.prev, t.cur = t.cur, t.prev
		t.prevN, t.curN = t.curN, 0
		t.rotateAt += int64(t.window)
	}
	for i, k := range keys {
		h := xxhash.Sum64(k)
		d := t.cur.Check(h)
		if !d {
			t.cur.Insert(h)
			t.curN++
			d = t.prev != nil && t.prev.Check(h)
		}
		dup[i] = d
	}
	return nil
}

// Usage reports the keys added to the live filters and their size.
func (t *SBBFTarget) Usage() (Usage, error) {
	b := uint64(len(t.cur.Bytes()))
	if t.prev != nil {
		b += uint64(len(t.prev.Bytes()))
	}
	return Usage{Keys: t.curN + t.prevN, FilterBytes: b}, nil
}

// Close drops the filters.
func (t *SBBFTarget) Close() error { t.cur, t.prev = nil, nil; return nil }

// PebbleTarget is Pebble alone, no pre-filter: a Get then a Set of the key
// with its first-seen time, per event, through an indexed batch committed
// every Check, synced every SyncEvery. Nothing expires: Pebble has no TTL,
// so the store keeps every key ever seen.
type PebbleTarget struct {
	window   time.Duration
	dir      string
	rmDir    bool
	db       *pebble.DB
	keys     uint64
	lastSync time.Time
	// SyncEvery is how often a commit is fsynced (real time), like the
	// engine's AutoCommit. Default 100ms.
	SyncEvery time.Duration
}

// OpenPebbleTarget opens a Pebble store in dir ("" makes a temporary
// directory, removed by Close).
func OpenPebbleTarget(dir string, window time.Duration) (*PebbleTarget, error) {
	t := &PebbleTarget{window: window, dir: dir, SyncEvery: 100 * time.Millisecond}
	if dir == "" {
		d, err := os.MkdirTemp("", "dedupbench-pebble-")
		if err != nil {
			return nil, fmt.Errorf("bench: pebble baseline: %w", err)
		}
		t.dir, t.rmDir = d, true
	}
	db, err := pebble.Open(t.dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("bench: open pebble baseline in %s: %w", t.dir, err)
	}
	t.db = db
	return t, nil
}

// Name returns "pebble alone".
func (t *PebbleTarget) Name() string { return "pebble alone" }

// Check looks every key up (through the batch, so repeats inside it are
// seen) and sets the new ones.
func (t *PebbleTarget) Check(keys [][]byte, now time.Time, dup []bool) error {
	b := t.db.NewIndexedBatch()
	defer b.Close()
	ns := now.UnixNano()
	var val [8]byte
	binary.LittleEndian.PutUint64(val[:], uint64(ns))
	for i, k := range keys {
		v, closer, err := b.Get(k)
		switch {
		case err == nil:
			at := int64(binary.LittleEndian.Uint64(v))
			closer.Close()
			if ns-at < int64(t.window) {
				dup[i] = true
				continue
			}
		case !errors.Is(err, pebble.ErrNotFound):
			return fmt.Errorf("bench: pebble get: %w", err)
		default:
			t.keys++
		}
		dup[i] = false
		if err := b.Set(k, val[:], nil); err != nil {
			return fmt.Errorf("bench: pebble set: %w", err)
		}
	}
	opt := pebble.NoSync
	if time.Since(t.lastSync) >= t.SyncEvery {
		opt, t.lastSync = pebble.Sync, time.Now()
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("bench: pebble commit: %w", err)
	}
	return nil
}

// Usage reports the keys stored, Pebble's memtable and block cache, and
// its disk usage.
func (t *PebbleTarget) Usage() (Usage, error) {
	m := t.db.Metrics()
	return Usage{
		Keys:    t.keys,
		Disk:    m.DiskSpaceUsage(),
		OffHeap: m.MemTable.Size + uint64(m.BlockCache.Size),
	}, nil
}

// Close closes the store and removes a temporary directory.
func (t *PebbleTarget) Close() error {
	err := t.db.Close()
	if err != nil {
		err = fmt.Errorf("bench: close pebble baseline: %w", err)
	}
	if t.rmDir {
		err = errors.Join(err, os.RemoveAll(t.dir))
	}
	return err
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
