package exact

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// The in-memory store (Options.InMemory): what the engine keeps when it
// has no state directory. Per generation, the fingerprints of its keys in
// an open-addressed table outside the Go heap (fpTable): 16 bytes a slot,
// at most 3/4 full, so 21 to 43 bytes a key whatever the key's length,
// where Pebble on an in-memory file system held every key twice or more
// (its memtable, its tables) with their indexes. No file, no log: commits
// apply at once, and nothing survives Close.

// ErrInMemory reports an operation an in-memory store cannot do: it keeps
// no log, no keys (only their fingerprints) and no files.
var ErrInMemory = errors.New("exact: in-memory store (no directory) keeps no log, keys or files")

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

// bytes is the memory of the fingerprint tables.
func (m *memStore) bytes() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var n uint64
	for _, t := range m.gens {
		n += uint64(16 * len(t.slots) / 2)
	}
	return n
}

func (m *memStore) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, t := range m.gens {
		t.free()
		delete(m.gens, g)
	}
}

// fpTable is a set of fingerprints: open addressing with linear probing
// over slots of two words (the fingerprint's halves), outside the Go heap;
// an all-zero slot is empty, and the all-zero fingerprint is stored as
// {0, 1} (one more collision of 2^-128). It doubles at 3/4 full.
type fpTable struct {
	gen   uint64
	buf   offHeapBuf
	slots []uint64 // 2 words a slot
	mask  uint64   // slots/2 - 1
	n     int
}

// minFPSlots is the number of slots of a new table.
const minFPSlots = 1024

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
	if 4*(t.n+1) > 3*int(t.mask+1) || t.slots == nil {
		t.grow()
	}
	a, b := fpWords(fp)
	if !t.put(a, b) {
		return false
	}
	t.n++
	return true
}

// put stores the slot (a, b) unless present; it reports whether it did.
func (t *fpTable) put(a, b uint64) bool {
	for i := a & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[2*i : 2*i+2 : 2*i+2]
		if s[0] == a && s[1] == b {
			return false
		}
		if s[0] == 0 && s[1] == 0 {
			s[0], s[1] = a, b
			return true
		}
	}
}

func (t *fpTable) has(fp Fingerprint) bool {
	if t.slots == nil {
		return false
	}
	a, b := fpWords(fp)
	for i := a & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[2*i : 2*i+2 : 2*i+2]
		if s[0] == a && s[1] == b {
			return true
		}
		if s[0] == 0 && s[1] == 0 {
			return false
		}
	}
}

// grow doubles the table (or makes its first slots) and moves every
// fingerprint over.
func (t *fpTable) grow() {
	n := minFPSlots
	if t.slots != nil {
		n = 2 * int(t.mask+1)
	}
	oldBuf, old := t.buf, t.slots
	t.buf = newOffHeapBuf(16 * n)
	t.slots = u64s(t.buf.b[:16*n], 2*n)
	t.mask = uint64(n - 1)
	for i := 0; i < len(old); i += 2 {
		if old[i] != 0 || old[i+1] != 0 {
			t.put(old[i], old[i+1])
		}
	}
	oldBuf.free()
}

func (t *fpTable) free() {
	t.buf.free()
	t.buf, t.slots = offHeapBuf{}, nil
}
