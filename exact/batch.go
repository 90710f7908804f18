package exact

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ent is one added key: its generation, its first 8 bytes (big-endian, zero
// padded) for fast sorting, and its place in the batch's arena.
type ent struct {
	gen    uint64
	prefix uint64
	off    uint32
	n      uint32
}

// Batch collects the keys, log entries, checkpoint and generation drop of
// one commit. A Batch is not safe for concurrent use; different batches
// may be committed concurrently.
type Batch struct {
	s      *Store
	arena  []byte // raw key bytes
	ents   []ent
	tmp    []ent // sort scratch
	hashes []uint64
	runs   []run
	cp     []byte
	hasCP  bool
	drop   uint64
	err    error
	done   bool
}

var batchPool = sync.Pool{New: func() any { return new(Batch) }}

// NewBatch returns an empty batch. Release it with Commit or Close, once:
// batches are pooled, so a batch must not be touched (not even Closed)
// after Commit or Close returns.
func (s *Store) NewBatch() *Batch {
	b := batchPool.Get().(*Batch)
	b.s = s
	b.done = false
	return b
}

// Add remembers key under generation gen, and logs (gen, hash); hash is the
// engine's seeded 64-bit hash of key. In LogOnly mode only the log entry is
// kept. The key is copied. A bad key (empty, over MaxKeySize) poisons the
// batch: Commit reports it and writes nothing.
func (b *Batch) Add(gen uint64, key []byte, hash uint64) {
	if b.err != nil {
		return
	}
	if b.done {
		b.err = ErrBatchDone
		return
	}
	if b.s.opts.LogOnly {
		b.logHash(gen, hash)
		return
	}
	if len(key) == 0 {
		b.err = fmt.Errorf("%w: Add in generation %d", ErrEmptyKey, gen)
		return
	}
	if len(key) > MaxKeySize {
		b.err = fmt.Errorf("%w: %d bytes, max %d", ErrKeyTooLarge, len(key), MaxKeySize)
		return
	}
	b.logHash(gen, hash)
	off := len(b.arena)
	if off+len(key) > math.MaxUint32 {
		b.err = fmt.Errorf("exact: batch over 4 GiB of keys")
		return
	}
	var p [8]byte
	copy(p[:], key)
	b.arena = append(b.arena, key...)
	b.ents = append(b.ents, ent{gen: gen, prefix: binary.BigEndian.Uint64(p[:]), off: uint32(off), n: uint32(len(key))})
}

// logHash records (gen, hash) for the commit log.
func (b *Batch) logHash(gen, hash uint64) {
	b.hashes = append(b.hashes, hash)
	if n := len(b.runs); n > 0 && b.runs[n-1].gen == gen {
		b.runs[n-1].n++
	} else {
		b.runs = append(b.runs, run{gen: gen, n: 1})
	}
}

// DropGenerationsBefore deletes, in this batch, every key of generations <
// gen (including keys added to this batch) and hides their log entries from
// ScanLog. Several calls keep the largest gen.
func (b *Batch) DropGenerationsBefore(gen uint64) {
	b.drop = max(b.drop, gen)
}

// SetCheckpoint sets the checkpoint committed atomically with the batch;
// nil keeps the previous checkpoint. cp is copied.
func (b *Batch) SetCheckpoint(cp []byte) {
	if cp == nil {
		b.cp, b.hasCP = b.cp[:0], false
		return
	}
	b.cp = append(b.cp[:0], cp...)
	b.hasCP = true
}

// Len returns the number of Add calls in the batch.
func (b *Batch) Len() int { return len(b.hashes) }

// Close releases the batch without committing it. The batch must not be
// used afterwards.
func (b *Batch) Close() {
	if b.done {
		return
	}
	const keep = 64 << 20 // don't pin huge buffers in the pool
	b.arena = b.arena[:0]
	b.ents = b.ents[:0]
	b.hashes = b.hashes[:0]
	b.runs = b.runs[:0]
	b.cp = b.cp[:0]
	b.hasCP = false
	b.drop = 0
	b.err = nil
	b.done = true
	b.s = nil
	if cap(b.arena)+24*(cap(b.ents)+cap(b.tmp))+8*cap(b.hashes) > keep {
		return
	}
	batchPool.Put(b)
}

func (b *Batch) key(e *ent) []byte { return b.arena[e.off : e.off+e.n] }

// Commit writes the batch in one atomic, fsynced step and returns its
// sequence number. An empty batch without checkpoint or drop still takes a
// sequence number. The batch is released whatever the outcome. A write error
// breaks the store (see ErrBroken); nothing of this batch is then reported
// as committed, though it may or may not survive a crash.
func (b *Batch) Commit() (seq uint64, err error) {
	if b.done {
		return 0, ErrBatchDone
	}
	defer b.Close()
	if b.err != nil {
		return 0, b.err
	}
	s := b.s
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.rw.RUnlock()

	ingest := !s.opts.LogOnly && len(b.ents) >= s.opts.IngestThreshold
	if ingest || (sortBatches && len(b.ents) > 1) {
		b.sortKeys()
	}
	s.mu.Lock()
	seq = s.nextSeq + 1
	s.nextSeq = seq
	floor := max(s.floor, b.drop)
	s.floor = floor
	s.mu.Unlock()

	if ingest {
		err = b.commitIngest(seq, floor)
	} else {
		err = b.commitBatch(seq, floor)
	}
	if err != nil {
		return 0, s.fail(err)
	}
	var cp []byte
	if b.hasCP {
		cp = b.cp
	}
	s.publish(seq, cp, floor)
	return seq, nil
}

// waitTurn blocks until every batch with a smaller seq has been handed to
// Pebble (or failed).
func (s *Store) waitTurn(seq uint64) {
	s.turnMu.Lock()
	for s.turn != seq-1 {
		s.turnCond.Wait()
	}
	s.turnMu.Unlock()
}

// endTurn lets the batch after seq go.
func (s *Store) endTurn(seq uint64) {
	s.turnMu.Lock()
	s.turn = seq
	s.turnMu.Unlock()
	s.turnCond.Broadcast()
}

// commitRecords returns the checkpoint, floor, seq and log records of the
// batch, in key order.
func (b *Batch) commitRecords(seq, floor uint64) [][2][]byte {
	recs := make([][2][]byte, 0, 4)
	if b.hasCP {
		recs = append(recs, [2][]byte{checkpointKey, b.cp})
	}
	if b.drop > 0 {
		recs = append(recs, [2][]byte{floorKey, be64(floor)})
	}
	recs = append(recs, [2][]byte{seqKey, be64(seq)})
	if len(b.hashes) > 0 {
		rec := make([]byte, logRecordSize(b.runs))
		encodeLogRecord(rec, b.runs, b.hashes)
		recs = append(recs, [2][]byte{logKey(seq), rec})
	}
	return recs
}

// commitBatch writes the batch through the WAL and the memtable.
func (b *Batch) commitBatch(seq, floor uint64) (err error) {
	s := b.s
	size := 64 + len(b.arena) + 12*len(b.ents) + logRecordSize(b.runs) + len(b.cp)
	pb := s.db.NewBatchWithSize(size)
	defer func() { err = errors.Join(err, pb.Close()) }()
	var ferr error
	for i := range b.ents {
		e := &b.ents[i]
		op := pb.SetDeferred(9+int(e.n), 0)
		putKey(op.Key, e.gen, b.key(e))
		ferr = errors.Join(ferr, op.Finish())
	}
	for _, kv := range b.commitRecords(seq, floor) {
		ferr = errors.Join(ferr, pb.Set(kv[0], kv[1], nil))
	}
	if b.drop > 0 && !s.opts.LogOnly {
		ferr = errors.Join(ferr, pb.DeleteRange(genPrefix(0), genPrefix(b.drop), nil))
	}
	if err := ferr; err != nil {
		s.waitTurn(seq)
		s.endTurn(seq)
		return fmt.Errorf("exact: build batch %d: %w", seq, err)
	}

	s.waitTurn(seq)
	applied := false
	func() {
		defer s.endTurn(seq)
		defer func() {
			if r := recover(); r != nil {
				err = s.recovered(r)
			}
		}()
		if s.brokenErr() != nil {
			err = ErrBroken
			return
		}
		err = s.db.ApplyNoSyncWait(pb, pebble.Sync)
		applied = err == nil
		if applied {
			s.walSeq.Store(seq)
		}
	}()
	if !applied {
		return fmt.Errorf("exact: apply batch %d: %w", seq, err)
	}
	if err := pb.SyncWait(); err != nil {
		return fmt.Errorf("exact: sync batch %d: %w", seq, err)
	}
	for {
		v := s.walSynced.Load()
		if seq <= v || s.walSynced.CompareAndSwap(v, seq) {
			break
		}
	}
	return nil
}

// sortKeys sorts the batch's keys by (gen, key) and removes duplicates.
func (b *Batch) sortKeys() {
	b.tmp = radixSort(b.ents, b.tmp)
	b.refine(b.ents, 8)
	b.ents = slices.CompactFunc(b.ents, func(x, y ent) bool {
		return x.gen == y.gen && bytes.Equal(b.key(&x), b.key(&y))
	})
}

// refineCmp is the run length under which refine compares keys instead of
// radix-sorting them on their next bytes.
const refineCmp = 32

// refine orders the runs of ents that radixSort left equal in (gen,
// prefix), prefix holding key bytes [depth-8, depth): a long run is
// radix-sorted again on the next eight bytes, and so on (keys sharing a
// long prefix, such as UUID-like keys of consecutive events, would
// otherwise fall to a comparison sort of whole runs); a short one, or one
// whose keys end before depth, is sorted by comparing keys. It overwrites
// prefix.
func (b *Batch) refine(ents []ent, depth int) {
	for i := 0; i < len(ents); {
		j := i + 1
		for j < len(ents) && ents[j].gen == ents[i].gen && ents[j].prefix == ents[i].prefix {
			j++
		}
		if j-i > 1 {
			run := ents[i:j]
			longest := 0
			for k := range run {
				longest = max(longest, int(run[k].n))
			}
			if len(run) < refineCmp || longest <= depth {
				slices.SortFunc(run, func(x, y ent) int { return bytes.Compare(b.key(&x), b.key(&y)) })
			} else {
				for k := range run {
					var p [8]byte
					if key := b.key(&run[k]); len(key) > depth {
						copy(p[:], key[depth:])
					}
					run[k].prefix = binary.BigEndian.Uint64(p[:])
				}
				b.tmp = radixSort(run, b.tmp)
				b.refine(run, depth+8)
			}
		}
		i = j
	}
}

// radixSort sorts ents by (gen, prefix) with an LSD radix sort on bytes,
// skipping the bytes that are equal in every entry (the generation, mostly).
// tmp is scratch space, returned for reuse.
func radixSort(ents, tmp []ent) []ent {
	if len(ents) < 256 {
		slices.SortFunc(ents, func(x, y ent) int {
			if c := cmp.Compare(x.gen, y.gen); c != 0 {
				return c
			}
			return cmp.Compare(x.prefix, y.prefix)
		})
		return tmp
	}
	tmp = slices.Grow(tmp[:0], len(ents))[:len(ents)]
	// Which bits vary at all?
	var genOr, genAnd, preOr, preAnd uint64 = 0, ^uint64(0), 0, ^uint64(0)
	for i := range ents {
		genOr |= ents[i].gen
		genAnd &= ents[i].gen
		preOr |= ents[i].prefix
		preAnd &= ents[i].prefix
	}
	src, dst := ents, tmp
	pass := func(key func(*ent) uint64, shift uint) {
		var count [256]int
		for i := range src {
			count[byte(key(&src[i])>>shift)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for i := range src {
			d := byte(key(&src[i]) >> shift)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	prefix := func(e *ent) uint64 { return e.prefix }
	gen := func(e *ent) uint64 { return e.gen }
	for shift := uint(0); shift < 64; shift += 8 {
		if byte((preOr^preAnd)>>shift) != 0 {
			pass(prefix, shift)
		}
	}
	for shift := uint(0); shift < 64; shift += 8 {
		if byte((genOr^genAnd)>>shift) != 0 {
			pass(gen, shift)
		}
	}
	if &src[0] != &ents[0] {
		copy(ents, src)
	}
	return tmp
}

// commitIngest writes the batch as one sstable and ingests it.
func (b *Batch) commitIngest(seq, floor uint64) (err error) {
	s := b.s
	path := s.fs.PathJoin(s.dir, fmt.Sprintf("%s%d.sst", ingestPrefix, seq))
	werr := b.writeSST(path, seq, floor)
	s.waitTurn(seq)
	defer s.endTurn(seq)
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
		// Ingest moves the file into the store; remove it if it did not.
		if rerr := s.fs.Remove(path); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("exact: remove %q: %w", path, rerr))
		}
	}()
	if werr != nil {
		return werr
	}
	if s.brokenErr() != nil {
		return ErrBroken
	}
	// A WAL batch handed to Pebble before this one may still wait for its
	// fsync: make it durable first, so that durability follows seq order.
	if s.walSeq.Load() > s.walSynced.Load() {
		if err := s.db.LogData(nil, pebble.Sync); err != nil {
			return fmt.Errorf("exact: sync WAL before ingest %d: %w", seq, err)
		}
	}
	if err := s.db.Ingest(context.Background(), []string{path}); err != nil {
		return fmt.Errorf("exact: ingest batch %d: %w", seq, err)
	}
	return nil
}

// sortBatches sorts the keys of a WAL batch before the memtable insert: the
// skiplist searches of consecutive sorted keys follow the same path, which
// stays in the CPU cache.
var sortBatches = true

// ingestPrefix names the temporary sstables of ingested commits.
const ingestPrefix = "exact-ingest-"

// writeSST writes the sorted batch, with its commit records, to path.
func (b *Batch) writeSST(path string, seq, floor uint64) (err error) {
	s := b.s
	f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("exact: create %q: %w", path, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), s.popts.MakeWriterOptions(0, s.db.TableFormat()))
	defer func() {
		if err != nil && w != nil {
			err = errors.Join(err, w.Close())
		}
	}()
	for _, kv := range b.commitRecords(seq, floor) {
		if err := w.Set(kv[0], kv[1]); err != nil {
			return fmt.Errorf("exact: write %q: %w", path, err)
		}
	}
	if b.drop > 0 {
		if err := w.DeleteRange(genPrefix(0), genPrefix(b.drop)); err != nil {
			return fmt.Errorf("exact: write %q: %w", path, err)
		}
	}
	var k []byte
	for i := range b.ents {
		e := &b.ents[i]
		if e.gen < b.drop {
			continue // dropped in this same batch
		}
		k = slices.Grow(k[:0], 9+int(e.n))[:9+int(e.n)]
		putKey(k, e.gen, b.key(e))
		if err := w.Set(k, nil); err != nil {
			return fmt.Errorf("exact: write %q: %w", path, err)
		}
	}
	if err := w.Close(); err != nil {
		w = nil
		return fmt.Errorf("exact: finish %q: %w", path, err)
	}
	return nil
}
