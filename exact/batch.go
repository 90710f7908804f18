package exact

import (
	"bytes"
	"fmt"
	"sync"
)

// ent is one added key: its generation and its fingerprint.
type ent struct {
	gen uint64
	fp  Fingerprint
}

// Batch collects the keys, log entries, checkpoint and generation drop of
// one commit. A Batch is not safe for concurrent use; different batches
// may be committed concurrently.
type Batch struct {
	s      *Store
	ents   []ent
	hashes []uint64
	runs   []run
	cp     []byte
	hasCP  bool
	drop   uint64
	err    error
	done   bool
	rec    []byte // the encoded commit-log record

	recs    []recOp // result records put or deleted, in call order
	recVals []byte  // their values
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

// Add remembers key under generation gen, as its fingerprint (see
// [Store.Fingerprint]: the key itself is not kept), and logs (gen, hash);
// hash is the engine's 64-bit hash of key. In LogOnly mode only the log
// entry is kept. A bad key (empty, over MaxKeySize) poisons the batch:
// Commit reports it and writes nothing.
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
	b.ents = append(b.ents, ent{gen: gen, fp: b.s.Fingerprint(key)})
}

// AddFingerprint is [Batch.Add] for a key whose fingerprint fp the caller
// has computed with [Store.Fingerprint].
func (b *Batch) AddFingerprint(gen uint64, fp Fingerprint, hash uint64) {
	if b.err != nil {
		return
	}
	if b.done {
		b.err = ErrBatchDone
		return
	}
	b.logHash(gen, hash)
	if !b.s.opts.LogOnly {
		b.ents = append(b.ents, ent{gen: gen, fp: fp})
	}
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
	b.ents = b.ents[:0]
	b.hashes = b.hashes[:0]
	b.runs = b.runs[:0]
	b.cp = b.cp[:0]
	b.hasCP = false
	b.drop = 0
	b.err = nil
	b.done = true
	b.s = nil
	b.recs = b.recs[:0]
	b.recVals = b.recVals[:0]
	if 24*cap(b.ents)+8*cap(b.hashes)+cap(b.rec)+cap(b.recVals) > keep {
		return
	}
	batchPool.Put(b)
}

// Commit writes the batch in one atomic, fsynced step and returns its
// sequence number: one record appended to the commit log and fsynced
// (commits running at the same time share fsyncs), its keys added to the
// memtable. An empty batch without checkpoint or drop still takes a
// sequence number. The batch is released whatever the outcome. A write
// error breaks the store (see ErrBroken); nothing of this batch is then
// reported as committed, though it may or may not survive a crash.
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
	if s.mem != nil {
		return s.commitMem(b), nil
	}
	b.rec = encodeRecord(b.rec[:0], b)
	if len(b.rec)-recHeader > maxRecord {
		return 0, fmt.Errorf("exact: batch of %d bytes, over the %d of a commit record", len(b.rec), maxRecord)
	}

	s.logMu.Lock()
	if err := s.brokenErr(); err != nil {
		s.logMu.Unlock()
		return 0, fmt.Errorf("%w: %w", ErrBroken, err)
	}
	seq = s.nextSeq + 1
	seg := s.seg
	stampRecord(b.rec, seq, seg.num)
	off, grown, err := seg.append(b.rec)
	if err != nil {
		s.logMu.Unlock()
		return 0, s.fail(err)
	}
	s.logBytes.Add(grown)
	s.nextSeq = seq
	floor := max(s.floor, b.drop)
	s.floor = floor
	s.memMu.Lock()
	m := s.active
	m.begin(seq, b.runs, b.hashes, b.cp, b.hasCP, floor)
	m.addFPs(b.ents)
	for i := range b.recs {
		op := &b.recs[i]
		m.putRecord(op.gen, op.fp, b.recVal(op), op.del)
	}
	s.memFloor.Store(floor)
	s.memMu.Unlock()
	if m.size >= s.memLimit {
		err = s.freezeLocked()
	}
	s.logMu.Unlock()
	if err != nil {
		return 0, err
	}

	if err := seg.syncThrough(off); err != nil {
		return 0, s.fail(err)
	}
	var cp []byte
	if b.hasCP {
		cp = b.cp
	}
	s.publish(seq, cp, floor)
	s.waitStalled()
	return seq, nil
}

// waitStalled blocks while more than maxFrozen memtables wait for their
// flush, so that memory stays bounded when commits outrun flushes.
func (s *Store) waitStalled() {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	for s.frozenCount() > maxFrozen && s.brokenErr() == nil && !s.closing.Load() {
		s.stallCond.Wait()
	}
}

// wakeStalled wakes the commits waiting in waitStalled.
func (s *Store) wakeStalled() {
	s.stallMu.Lock()
	s.stallCond.Broadcast()
	s.stallMu.Unlock()
}

func (s *Store) frozenCount() int {
	s.memMu.RLock()
	defer s.memMu.RUnlock()
	return len(s.frozen)
}

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
