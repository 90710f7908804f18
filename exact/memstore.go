package exact

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
)

// The in-memory store (Options.InMemory): what the engine keeps when it
// has no state directory. Per generation, the fingerprints of its keys in
// an open-addressed table in segments that grow by half (fpTable): 16
// bytes a slot, 8/15 to 4/5 full, so 20 to 30 bytes a key whatever the
// key's length,
// where Pebble on an in-memory file system held every key twice or more
// (its memtable, its tables) with their indexes. No file, no log: commits
// apply at once, and nothing survives Close.

// memStore is the state of an in-memory Store.
type memStore struct {
	// mu guards every field: Commit holds it for writing, reads share it.
	mu        sync.RWMutex
	gens      map[uint64]*fpTable
	records   map[Fingerprint][]memRecord
	meta      map[string][]byte
	seq       uint64
	floor     uint64
	cp        []byte
	truncated uint64
}

func openMem(opts Options) (*Store, error) {
	var secret [secretSize]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, fmt.Errorf("exact: draw the fingerprint secret: %w", err)
	}
	s := &Store{opts: opts, dir: "(memory)", lg: newFatalLogger(opts.Logger),
		mem: &memStore{gens: map[uint64]*fpTable{}, records: map[Fingerprint][]memRecord{}, meta: map[string][]byte{}}}
	s.k0 = binary.LittleEndian.Uint64(secret[:])
	s.k1 = binary.LittleEndian.Uint64(secret[8:])
	return s, nil
}

// commitMem applies batch b to the in-memory store. The caller holds
// s.rw shared.
func (s *Store) commitMem(b *Batch) uint64 {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if b.drop > m.floor {
		m.floor = b.drop
		for g, t := range m.gens {
			if g < m.floor {
				t.free()
				delete(m.gens, g)
			}
		}
		for fp, ops := range m.records {
			kept := ops[:0]
			for _, r := range ops {
				if r.gen >= m.floor {
					kept = append(kept, r)
				}
			}
			if len(kept) == 0 {
				delete(m.records, fp)
			} else {
				m.records[fp] = kept
			}
		}
	}
	var t *fpTable
	for i := range b.ents {
		gen := b.ents[i].gen
		if gen < m.floor {
			continue
		}
		if t == nil || t.gen != gen {
			if t = m.gens[gen]; t == nil {
				t = &fpTable{gen: gen}
				m.gens[gen] = t
			}
		}
		t.insert(b.ents[i].fp)
	}
	for i := range b.recs {
		op := &b.recs[i]
		if op.gen >= m.floor {
			m.putRecord(op.gen, op.fp, b.recVal(op), op.del)
		}
	}
	if b.hasCP {
		m.cp = bytes.Clone(b.cp)
	}
	seq := m.seq
	s.pubFloor.Store(m.floor)
	s.memFloor.Store(m.floor)
	return seq
}

// putRecord sets fp's record in gen to val, or deletes it. The caller
// holds m.mu.
func (m *memStore) putRecord(gen uint64, fp Fingerprint, val []byte, del bool) {
	ops := m.records[fp]
	for i := range ops {
		if ops[i].gen == gen {
			if del {
				ops = append(ops[:i], ops[i+1:]...)
				if len(ops) == 0 {
					delete(m.records, fp)
				} else {
					m.records[fp] = ops
				}
			} else {
				ops[i].val = bytes.Clone(val)
			}
			return
		}
	}
	if !del {
		v := bytes.Clone(val)
		if v == nil {
			v = []byte{}
		}
		m.records[fp] = append(ops, memRecord{gen: gen, val: v})
	}
}

// getRecord is GetRecord on an in-memory store.
func (m *memStore) getRecord(fp Fingerprint) (gen uint64, val []byte, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, r := range m.records[fp] {
		if r.gen >= m.floor && (!ok || r.gen > gen) {
			gen, val, ok = r.gen, r.val, true
		}
	}
	return gen, bytes.Clone(val), ok
}

// has reports whether generation gen holds fp.
func (m *memStore) has(gen uint64, fp Fingerprint) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t := m.gens[gen]
	return gen >= m.floor && t != nil && t.has(fp)
}

func (m *memStore) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, t := range m.gens {
		t.free()
		delete(m.gens, g)
	}
}

// fpTable is a set of fingerprints, in fpSegs segments chosen by the
// top bits of the fingerprint's second half, each a table of its own that
// grows alone: growing one moves a 1/fpSegs share of the keys, and the
// memory held while it does (the old and the new array of one segment) is
// a 1/fpSegs share too, where one table doubling held 1.5x its final size
// at the peak. A segment grows by half at 4/5 full, so it is 8/15 to 4/5
// full: 20 to 30 bytes a key, 24 on average.
type fpTable struct {
	gen  uint64
	segs [fpSegs]fpSeg
	n    int
}

// fpSegBits sets the number of segments.
const (
	fpSegBits = 6
	fpSegs    = 1 << fpSegBits
)

// fpSeg is one segment: open addressing with linear probing over slots of
// two words (the fingerprint's halves); the home slot of (a, b) is
// multiply-shift of a over the slots. An all-zero slot is empty, and the
// all-zero fingerprint is stored as {0, 1} (one more collision of
// 2^-128). Small segments live on the Go heap, larger ones outside it
// (offHeap).
type fpSeg struct {
	buf   offHeapBuf
	slots []uint64 // 2 words a slot
	size  uint64   // slots
	n     int
}

// Segment sizes, in slots: the first, and the size from which a
// segment's array is mapped outside the Go heap (64 KiB).
const (
	minFPSlots     = 16
	offHeapFPSlots = 4096
)

func fpWords(fp Fingerprint) (a, b uint64) {
	a = binary.LittleEndian.Uint64(fp[:8])
	b = binary.LittleEndian.Uint64(fp[8:])
	if a == 0 && b == 0 {
		b = 1
	}
	return a, b
}

// insert adds fp, and reports whether it was absent.
func (t *fpTable) insert(fp Fingerprint) bool {
	a, b := fpWords(fp)
	s := &t.segs[b>>(64-fpSegBits)]
	if 5*uint64(s.n+1) > 4*s.size {
		s.grow()
	}
	if !s.put(a, b) {
		return false
	}
	s.n++
	t.n++
	return true
}

// home is the first slot to probe for a.
func (s *fpSeg) home(a uint64) uint64 {
	hi, _ := bits.Mul64(a, s.size)
	return hi
}

// put stores the slot (a, b) unless present; it reports whether it did.
func (s *fpSeg) put(a, b uint64) bool {
	for i := s.home(a); ; {
		w := s.slots[2*i : 2*i+2 : 2*i+2]
		if w[0] == a && w[1] == b {
			return false
		}
		if w[0] == 0 && w[1] == 0 {
			w[0], w[1] = a, b
			return true
		}
		if i++; i == s.size {
			i = 0
		}
	}
}

func (t *fpTable) has(fp Fingerprint) bool {
	a, b := fpWords(fp)
	s := &t.segs[b>>(64-fpSegBits)]
	if s.size == 0 {
		return false
	}
	for i := s.home(a); ; {
		w := s.slots[2*i : 2*i+2 : 2*i+2]
		if w[0] == a && w[1] == b {
			return true
		}
		if w[0] == 0 && w[1] == 0 {
			return false
		}
		if i++; i == s.size {
			i = 0
		}
	}
}

// grow makes the segment half as large again (or gives it its first
// slots) and moves its fingerprints over.
func (s *fpSeg) grow() {
	n := uint64(minFPSlots)
	if s.size > 0 {
		n = s.size + s.size/2
	}
	oldBuf, old := s.buf, s.slots
	if n >= offHeapFPSlots {
		s.buf = newOffHeapBuf(16 * int(n))
		s.slots = u64s(s.buf.b[:16*n], 2*int(n))
	} else {
		s.buf = offHeapBuf{}
		s.slots = make([]uint64, 2*n)
	}
	s.size = n
	for i := 0; i < len(old); i += 2 {
		if old[i] != 0 || old[i+1] != 0 {
			s.put(old[i], old[i+1])
		}
	}
	oldBuf.free()
}

// bytes is the memory of the table's slots.
func (t *fpTable) bytes() uint64 {
	var n uint64
	for i := range t.segs {
		n += 16 * t.segs[i].size
	}
	return n
}

func (t *fpTable) free() {
	for i := range t.segs {
		t.segs[i].buf.free()
		t.segs[i] = fpSeg{}
	}
	t.n = 0
}
