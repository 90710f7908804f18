package exact

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/streamdedup/dedup/internal/prefetch"
)

// memTable holds the commits of one commit-log segment until they are
// written to Pebble (see flush.go): per generation, the keys in an arena
// with a hash index for Has, and the log records. Keys are written once
// and never updated, so a table of appends replaces Pebble's memtable (a
// skiplist whose inserts, a cache miss per level, took most of the
// commit's CPU) and Pebble's WAL (the segment is the log).
//
// The active table takes commits under Store.logMu with Store.memMu held
// for writing; a frozen one is immutable, read by Has under Store.memMu and
// by its flush without a lock.
type memTable struct {
	seg  *segment // the segment holding these commits; nil for a replay
	gens []*memGen

	recs   []memRec
	runs   []run
	hashes []uint64

	// State as of the last commit in the table.
	firstSeq, lastSeq uint64
	cp                []byte
	hasCP             bool
	floor             uint64

	// size is the memory the table holds, in bytes.
	size int
}

// memRec is the log record of one commit: runs[run0:run1], its hashes from
// hashes[hash0].
type memRec struct {
	seq        uint64
	run0, run1 int
	hash0      int
}

// memGen holds the keys of one generation: each is uvarint(len) key in an
// arena of chunks, indexed by an open-addressing table of slots, each the
// top 24 bits of the key's hash and 1 + the key's offset in the arena (its
// chunk's index << chunkBits | its place in the chunk). Chunks are never
// moved: the arena grows without copying, and holds little slack.
type memGen struct {
	gen    uint64
	chunks []offHeapBuf
	slots  []uint64
	slotsB offHeapBuf // the memory of slots
	n      int
}

// offHeapBuf is memory from offHeap.
type offHeapBuf struct {
	b      []byte
	mapped bool
}

func newOffHeapBuf(n int) offHeapBuf {
	b, mapped := offHeap(n)
	return offHeapBuf{b: b[:0], mapped: mapped}
}

func (o offHeapBuf) free() { freeOffHeap(o.b, o.mapped) }

// free gives back the memory of the table's keys and indexes. The table
// must not be used afterwards.
func (m *memTable) free() {
	for _, g := range m.gens {
		g.free()
	}
	m.gens = nil
}

func (g *memGen) free() {
	for _, c := range g.chunks {
		c.free()
	}
	g.slotsB.free()
	g.chunks, g.slots, g.slotsB = nil, nil, offHeapBuf{}
}

// chunkBits sets the size of an arena chunk, 1 MiB: a key (at most
// MaxKeySize) always fits in a fresh one. The first chunks of a generation
// are smaller (firstChunk, then doubling), so that small tables stay
// small.
const (
	chunkBits  = 20
	chunkSize  = 1 << chunkBits
	firstChunk = 64 << 10
)

const (
	slotOffBits = 40
	slotOffMask = 1<<slotOffBits - 1
	// tagBits is the width of the hash fragment a slot holds; a table of up
	// to 1<<tagBits slots can be regrown from its slots alone.
	tagBits  = 64 - slotOffBits
	minSlots = 1 << 10
	// prefetchAhead is how many keys ahead addKeys prefetches slots.
	prefetchAhead = 8
)

// empty reports whether the table holds no commit.
func (m *memTable) empty() bool { return len(m.recs) == 0 && m.lastSeq == 0 }

// gen returns the table of generation gen, nil if none.
func (m *memTable) gen(gen uint64) *memGen {
	for _, g := range m.gens {
		if g.gen == gen {
			return g
		}
	}
	return nil
}

// begin records commit seq's log record, checkpoint and drop floor.
func (m *memTable) begin(seq uint64, runs []run, hashes []uint64, cp []byte, hasCP bool, floor uint64) {
	if m.firstSeq == 0 {
		m.firstSeq = seq
	}
	m.lastSeq = seq
	if hasCP {
		m.cp = append(m.cp[:0], cp...)
		m.hasCP = true
	}
	if floor > m.floor {
		m.floor = floor
		m.gens = slices.DeleteFunc(m.gens, func(g *memGen) bool {
			if g.gen < floor {
				m.size -= g.bytes()
				g.free()
				return true
			}
			return false
		})
	}
	if len(hashes) > 0 {
		m.recs = append(m.recs, memRec{seq: seq, run0: len(m.runs), run1: len(m.runs) + len(runs), hash0: len(m.hashes)})
		m.runs = append(m.runs, runs...)
		m.hashes = append(m.hashes, hashes...)
		m.size += 8*len(hashes) + 16*len(runs) + 40
	}
}

// addKeys adds n keys, key(i) returning the generation and bytes of the
// i-th, hashed with seed. Keys below the floor are not kept. h is scratch
// space, returned for reuse.
func (m *memTable) addKeys(seed maphash.Seed, n int, key func(int) (uint64, []byte), h []uint64) []uint64 {
	h = slices.Grow(h[:0], n)[:n]
	for i := range n {
		_, k := key(i)
		h[i] = maphash.Bytes(seed, k)
	}
	for lo := 0; lo < n; {
		gen, _ := key(lo)
		hi := lo + 1
		for hi < n {
			if g, _ := key(hi); g != gen {
				break
			}
			hi++
		}
		if gen >= m.floor {
			g := m.gen(gen)
			if g == nil {
				g = &memGen{gen: gen}
				m.gens = append(m.gens, g)
			}
			before := g.bytes()
			g.reserve(seed, hi-lo)
			for i := lo; i < hi; i++ {
				if j := i + prefetchAhead; j < hi {
					g.prefetch(h[j])
				}
				_, k := key(i)
				g.add(h[i], k)
			}
			m.size += g.bytes() - before
		}
		lo = hi
	}
	return h
}

// has reports whether the table holds key, of hash h, in generation gen.
func (m *memTable) has(gen uint64, key []byte, h uint64) bool {
	g := m.gen(gen)
	return g != nil && g.has(h, key)
}

func (g *memGen) bytes() int {
	n := 8 * cap(g.slots)
	for _, c := range g.chunks {
		n += cap(c.b)
	}
	return n
}

// pos returns the home slot of hash h: its top bits, so that a slot's tag
// gives its home in a table of up to 1<<tagBits slots.
func (g *memGen) pos(h uint64) uint64 {
	return h >> (64 - uint(bits.TrailingZeros(uint(len(g.slots)))))
}

// reserve makes room in the index for n more keys, at most half full.
func (g *memGen) reserve(seed maphash.Seed, n int) {
	size := max(minSlots, len(g.slots))
	for 2*(g.n+n) > size {
		size *= 2
	}
	if size > len(g.slots) {
		g.grow(seed, size)
	}
}

func (g *memGen) prefetch(h uint64) {
	prefetch.Addr(unsafe.Pointer(&g.slots[g.pos(h)]))
}

// add adds key of hash h; the index must have room (reserve).
func (g *memGen) add(h uint64, key []byte) {
	need := len(key) + uvarintLen(uint64(len(key)))
	ci := len(g.chunks) - 1
	if ci < 0 || len(g.chunks[ci].b)+need > cap(g.chunks[ci].b) {
		size := firstChunk
		if ci >= 0 {
			size = min(chunkSize, 2*cap(g.chunks[ci].b))
		}
		g.chunks = append(g.chunks, newOffHeapBuf(max(size, need)))
		ci++
	}
	c := g.chunks[ci].b
	off := ci<<chunkBits | len(c)
	if len(key) < 0x80 {
		c = append(c, byte(len(key)))
	} else {
		c = binary.AppendUvarint(c, uint64(len(key)))
	}
	g.chunks[ci].b = append(c, key...)
	g.insert(g.pos(h), h&^slotOffMask|uint64(off+1))
	g.n++
}

// each calls fn for every key of g, in the order added, with its offset.
func (g *memGen) each(fn func(off int, key []byte)) {
	for ci, cb := range g.chunks {
		c := cb.b
		for pos := 0; pos < len(c); {
			n, w := uint64(c[pos]), 1
			if n >= 0x80 {
				n, w = binary.Uvarint(c[pos:])
			}
			start := pos + w
			fn(ci<<chunkBits|pos, c[start:start+int(n)])
			pos = start + int(n)
		}
	}
}

func (g *memGen) insert(i uint64, v uint64) {
	mask := uint64(len(g.slots) - 1)
	for ; g.slots[i] != 0; i = (i + 1) & mask {
	}
	g.slots[i] = v
}

// grow rebuilds the index with size slots. Up to 1<<tagBits slots, the
// tags give the new homes; past that the keys are hashed again.
func (g *memGen) grow(seed maphash.Seed, size int) {
	old, oldB := g.slots, g.slotsB
	defer oldB.free()
	g.slotsB = newOffHeapBuf(8 * size)
	g.slots = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(g.slotsB.b[:1]))), size)
	if size <= regrowFromTags {
		shift := uint(tagBits - bits.TrailingZeros(uint(size)))
		for _, v := range old {
			if v != 0 {
				g.insert(v>>slotOffBits>>shift, v)
			}
		}
		return
	}
	for _, v := range old {
		if v != 0 {
			h := maphash.Bytes(seed, g.keyAt(int(v&slotOffMask)-1))
			g.insert(g.pos(h), v)
		}
	}
}

// regrowFromTags is the largest index grow rebuilds from the slots' tags
// (a variable for tests).
var regrowFromTags = 1 << tagBits

// keyAt returns the key at off.
func (g *memGen) keyAt(off int) []byte {
	c := g.chunks[off>>chunkBits].b
	pos := off & (chunkSize - 1)
	n, w := uint64(c[pos]), 1
	if n >= 0x80 {
		n, w = binary.Uvarint(c[pos:])
	}
	return c[pos+w : pos+w+int(n)]
}

func (g *memGen) has(h uint64, key []byte) bool {
	if len(g.slots) == 0 {
		return false
	}
	mask := uint64(len(g.slots) - 1)
	tag := h &^ slotOffMask
	for i := g.pos(h); g.slots[i] != 0; i = (i + 1) & mask {
		v := g.slots[i]
		if v&^slotOffMask != tag {
			continue
		}
		if bytes.Equal(g.keyAt(int(v&slotOffMask)-1), key) {
			return true
		}
	}
	return false
}
