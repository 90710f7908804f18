package exact

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Result records: a small value stored under a key's fingerprint in a
// generation, for callers that keep a result with a key (idempotency keys:
// the status and response of the request that first used the key). A
// record is written like the keys, by a commit: one record of the commit
// log, fsynced (shared with concurrent commits), then the memtable, then
// Pebble when the memtable is flushed, under tagRecord|gen|fingerprint
// (see the package doc). It leaves with its generation: below the drop
// floor it is gone for GetRecord, and Reclaim excises it.

// MaxRecordSize is the largest value of a result record, in bytes.
const MaxRecordSize = 4 << 20

// recOp is a record put or deleted by a Batch: its value is
// Batch.recVals[off:off+n].
type recOp struct {
	gen    uint64
	fp     Fingerprint
	off, n uint32
	del    bool
}

// PutRecord stores val as fp's record in generation gen, replacing the one
// it had there, when the batch commits. val is copied. A value over
// MaxRecordSize poisons the batch with ErrRecordTooLarge; in LogOnly mode
// with ErrLogOnly.
func (b *Batch) PutRecord(gen uint64, fp Fingerprint, val []byte) {
	if !b.recordOK() {
		return
	}
	if len(val) > MaxRecordSize {
		b.err = fmt.Errorf("%w: %d bytes, max %d", ErrRecordTooLarge, len(val), MaxRecordSize)
		return
	}
	off := len(b.recVals)
	if off+len(val) > 1<<32-1 {
		b.err = fmt.Errorf("exact: batch over 4 GiB of records")
		return
	}
	b.recVals = append(b.recVals, val...)
	b.recs = append(b.recs, recOp{gen: gen, fp: fp, off: uint32(off), n: uint32(len(val))})
}

// DeleteRecord deletes fp's record in generation gen, if it has one, when
// the batch commits. In LogOnly mode it poisons the batch with ErrLogOnly.
func (b *Batch) DeleteRecord(gen uint64, fp Fingerprint) {
	if b.recordOK() {
		b.recs = append(b.recs, recOp{gen: gen, fp: fp, del: true})
	}
}

// recordOK reports whether a record may be added to b, poisoning b if not.
func (b *Batch) recordOK() bool {
	switch {
	case b.err != nil:
		return false
	case b.done:
		b.err = ErrBatchDone
		return false
	case b.s.opts.LogOnly:
		b.err = ErrLogOnly
		return false
	}
	return true
}

func (b *Batch) recVal(op *recOp) []byte { return b.recVals[op.off : op.off+op.n] }

// PutRecord stores val as fp's record in generation gen, replacing the one
// it had there, in one commit (see [Batch.Commit]): durable when it returns
// nil. Records of generations below the drop floor are gone.
func (s *Store) PutRecord(gen uint64, fp Fingerprint, val []byte) error {
	b := s.NewBatch()
	b.PutRecord(gen, fp, val)
	_, err := b.Commit()
	return err
}

// DeleteRecord deletes fp's record in generation gen in one commit (see
// [Batch.Commit]): durable when it returns nil. Deleting a record that is
// not there is not an error.
func (s *Store) DeleteRecord(gen uint64, fp Fingerprint) error {
	b := s.NewBatch()
	b.DeleteRecord(gen, fp)
	_, err := b.Commit()
	return err
}

// memRecord is a record operation held by a memtable.
type memRecord struct {
	gen uint64
	val []byte
	del bool
}

// putRecord records in m that fp's record in gen is val, or deleted.
func (m *memTable) putRecord(gen uint64, fp Fingerprint, val []byte, del bool) {
	if gen < m.floor {
		return
	}
	if m.records == nil {
		m.records = make(map[Fingerprint][]memRecord)
	}
	r := memRecord{gen: gen, del: del}
	if !del {
		r.val = bytes.Clone(val)
		if r.val == nil {
			r.val = []byte{}
		}
	}
	ops := m.records[fp]
	for i := range ops {
		if ops[i].gen == gen {
			m.size += len(r.val) - len(ops[i].val)
			ops[i] = r
			return
		}
	}
	m.records[fp] = append(ops, r)
	m.size += len(r.val) + recordOverhead
}

// recordOverhead is the memory a memtable spends on a record besides its
// value (map entry and slice), an estimate.
const recordOverhead = 96

// GetRecord returns fp's record in the newest generation at or above the
// drop floor that holds one. val is the caller's.
func (s *Store) GetRecord(fp Fingerprint) (gen uint64, val []byte, ok bool, err error) {
	if s.opts.LogOnly {
		return 0, nil, false, ErrLogOnly
	}
	if err := s.acquire(); err != nil {
		return 0, nil, false, err
	}
	defer s.rw.RUnlock()
	defer s.recoverRead(&err)
	if s.mem != nil {
		gen, val, ok = s.mem.getRecord(fp)
		return gen, val, ok, nil
	}
	floor := s.memFloor.Load()
	// The memtables hold the newest operations, the active one newest of
	// all; for a generation they name, they decide.
	var decided []memRecord
	s.memMu.RLock()
	for i := len(s.frozen); i >= 0; i-- {
		m := s.active
		if i < len(s.frozen) {
			m = s.frozen[i]
		}
	ops:
		for _, r := range m.records[fp] {
			if r.gen < floor {
				continue
			}
			for _, d := range decided {
				if d.gen == r.gen {
					continue ops
				}
			}
			decided = append(decided, r)
		}
	}
	s.memMu.RUnlock()
	var best *memRecord
	for i := range decided {
		if r := &decided[i]; !r.del && (best == nil || r.gen > best.gen) {
			best = r
		}
	}
	isDecided := func(gen uint64) bool {
		for _, d := range decided {
			if d.gen == gen {
				return true
			}
		}
		return false
	}
	lo := floor
	if best != nil {
		lo = max(lo, best.gen+1)
	}
	// Loaded after the memtables were read: a record flushed since has
	// raised it (see Store.recTop).
	if lo < s.recTop.Load() {
		gen, val, ok, err = s.pebbleRecord(fp, lo, isDecided)
		if err != nil || ok {
			return gen, val, ok, err
		}
	}
	if best != nil {
		return best.gen, bytes.Clone(best.val), true, nil
	}
	return 0, nil, false, nil
}

// pebbleRecord looks for fp's record in Pebble, in the generations at or
// above lo that decided does not name, newest first.
func (s *Store) pebbleRecord(fp Fingerprint, lo uint64, decided func(uint64) bool) (gen uint64, val []byte, ok bool, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tagGen(tagRecord, lo), UpperBound: recordsEnd})
	if err != nil {
		return 0, nil, false, fmt.Errorf("exact: get record: %w", corruption(err))
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("exact: get record: %w", corruption(cerr))
		}
	}()
	var key [recordKeyLen]byte
	// Each step moves to the newest generation below the last one that
	// holds any record: a step per generation holding records.
	for valid := it.Last(); valid; {
		k := it.Key()
		if len(k) != recordKeyLen {
			return 0, nil, false, fmt.Errorf("%w: record key of %d bytes", ErrCorrupt, len(k))
		}
		g := beUint64(k[1:9])
		if !decided(g) {
			putRecordKey(key[:], g, fp)
			if it.SeekGE(key[:]) && bytes.Equal(it.Key(), key[:]) {
				v, err := it.ValueAndErr()
				if err != nil {
					return 0, nil, false, fmt.Errorf("exact: get record: %w", corruption(err))
				}
				return g, bytes.Clone(v), true, nil
			}
		}
		if g == 0 {
			break
		}
		valid = it.SeekLT(tagGen(tagRecord, g))
	}
	if err := it.Error(); err != nil {
		return 0, nil, false, fmt.Errorf("exact: get record: %w", corruption(err))
	}
	return 0, nil, false, nil
}

// writeRecords adds the record operations of m in generations at or above
// floor to pb, and returns 1 + the newest generation of a record it sets
// (0 if none).
func writeRecords(pb *pebble.Batch, m *memTable, floor uint64) (top uint64, err error) {
	var key [recordKeyLen]byte
	for fp, ops := range m.records {
		for _, r := range ops {
			if r.gen < floor {
				continue
			}
			putRecordKey(key[:], r.gen, fp)
			if r.del {
				err = pb.Delete(key[:], nil)
			} else {
				err = pb.Set(key[:], r.val, nil)
				top = max(top, r.gen+1)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	return top, nil
}

// raiseRecTop raises recTop to top at least.
func (s *Store) raiseRecTop(top uint64) {
	for {
		old := s.recTop.Load()
		if old >= top || s.recTop.CompareAndSwap(old, top) {
			return
		}
	}
}

// initRecTop sets recTop from the newest record in Pebble, at the end of
// Open (it was at its maximum until then).
func (s *Store) initRecTop() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tagGen(tagRecord, 0), UpperBound: recordsEnd})
	if err != nil {
		return fmt.Errorf("exact: records: %w", corruption(err))
	}
	var top uint64
	if it.Last() {
		k := it.Key()
		if len(k) != recordKeyLen {
			err = fmt.Errorf("%w: record key of %d bytes", ErrCorrupt, len(k))
		} else {
			top = beUint64(k[1:9]) + 1
		}
	}
	if err = errors.Join(err, it.Error(), it.Close()); err != nil {
		return fmt.Errorf("exact: records: %w", corruption(err))
	}
	s.recTop.Store(top)
	return nil
}
