package exact

// The read path: Has, the checkpoint and commit state, ScanFingerprints and
// ScanLog.

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Has reports whether key is stored under generation gen: whether its
// fingerprint is (see [Store.Fingerprint]).
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
	return s.HasFingerprint(gen, s.Fingerprint(key))
}

// HasFingerprint reports whether a key of fingerprint fp is stored under
// generation gen.
func (s *Store) HasFingerprint(gen uint64, fp Fingerprint) (found bool, err error) {
	if s.opts.LogOnly {
		return false, ErrLogOnly
	}
	if err := s.acquire(); err != nil {
		return false, err
	}
	defer s.rw.RUnlock()
	defer s.recoverRead(&err)
	if s.mem != nil {
		return s.mem.has(gen, fp), nil
	}
	if gen < s.memFloor.Load() {
		return false, nil
	}
	if s.memHas(gen, &fp) {
		return true, nil
	}
	bp := keyBufPool.Get().(*lookupBuf)
	defer keyBufPool.Put(bp)
	bp.flushes = s.filters.candidates(bp.flushes[:0], gen, fpIndexHash(&fp))
	for _, flush := range bp.flushes {
		putFPKey(bp.key[:], gen, flush, &fp)
		if ok, err := s.get1(bp.key[:]); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// lookupBuf is the scratch space of a Has.
type lookupBuf struct {
	key     [fpKeyLen]byte
	flushes []uint64
}

var keyBufPool = sync.Pool{New: func() any { return new(lookupBuf) }}

// get1 reports whether Pebble holds k.
func (s *Store) get1(k []byte) (bool, error) {
	_, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("exact: lookup: %w", corruption(err))
	}
	return true, closer.Close()
}

// memHas reports whether a memtable holds fp in generation gen.
func (s *Store) memHas(gen uint64, fp *Fingerprint) bool {
	s.memMu.RLock()
	defer s.memMu.RUnlock()
	if s.active.has(gen, fp) {
		return true
	}
	for _, m := range s.frozen {
		if m.has(gen, fp) {
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

// ScanFingerprints calls fn for every stored key's fingerprint of
// generations >= fromGen, in generation order (within a generation, they
// come in runs, each in byte order). An error from fn stops the scan and
// is returned.
func (s *Store) ScanFingerprints(fromGen uint64, fn func(gen uint64, fp Fingerprint) error) (err error) {
	if s.opts.LogOnly {
		return ErrLogOnly
	}
	if s.mem != nil {
		return fmt.Errorf("%w: ScanFingerprints", ErrInMemory)
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	defer s.recoverRead(&err)
	if err := s.flushAll(); err != nil {
		return err
	}
	fromGen = max(fromGen, s.memFloor.Load())
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tagGen(tagFP, fromGen), UpperBound: fpEnd})
	if err != nil {
		return fmt.Errorf("exact: scan fingerprints: %w", corruption(err))
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != fpKeyLen {
			err = fmt.Errorf("%w: fingerprint entry of %d bytes", ErrCorrupt, len(k))
			break
		}
		if err = fn(beUint64(k[1:9]), Fingerprint(k[17:])); err != nil {
			break
		}
	}
	return closeScan(it, err, "scan fingerprints")
}

// ScanLog calls fn for every (gen, hash) committed with a sequence number >
// afterSeq and not yet truncated, in seq order, then Add order within a
// commit. Pairs of dropped generations (below DroppedBefore) are skipped.
func (s *Store) ScanLog(afterSeq uint64, fn func(seq uint64, gen uint64, hash uint64) error) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	defer s.recoverRead(&err)
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
		return fmt.Errorf("exact: scan log: %w", corruption(err))
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			err = fmt.Errorf("%w: log key of %d bytes", ErrCorrupt, len(k))
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			err = fmt.Errorf("exact: scan log: %w", corruption(err))
			break
		}
		if err = decodeLogRecord(beUint64(k[1:]), v, floor, fn); err != nil {
			break
		}
	}
	return closeScan(it, err, "scan log")
}

// closeScan closes the iterator of a scan that ended with err (nil: at its
// end), and returns err or, if none, the iterator's error, with context op.
func closeScan(it *pebble.Iterator, err error, op string) error {
	if err == nil {
		err = it.Error()
		if err != nil {
			err = fmt.Errorf("exact: %s: %w", op, corruption(err))
		}
	}
	// Close returns the iterator's error again: reported once.
	if cerr := it.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("exact: %s: %w", op, corruption(cerr))
	}
	return err
}

// recoverRead, deferred by a read of Pebble, turns the panic of a fatal
// Pebble error on that read (see fatalLogger) into its error, breaking the
// Store; the read's other deferred calls release its locks. Any other
// panic goes on.
func (s *Store) recoverRead(err *error) {
	if r := recover(); r != nil {
		*err = s.recovered(r)
	}
}
