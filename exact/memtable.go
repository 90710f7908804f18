package exact

import (
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/streamdedup/dedup/internal/prefetch"
)

// memTable holds the commits of one commit-log segment until they are
// written to Pebble (see flush.go): per generation, the fingerprints of
// its keys (16 bytes each, fixed size) in an arena with a hash index for
// Has, and the log records. Keys are written once and never updated, so a
// table of appends replaces Pebble's memtable (a skiplist whose inserts, a
// cache miss per level, took most of the commit's CPU) and Pebble's WAL
// (the segment is the log).
//
// The active table takes commits under Store.logMu with Store.memMu held
// for writing; a frozen one is immutable, read by Has under Store.memMu and
// by its flush without a lock.
type memTable struct {
	seg   *segment // the segment holding these commits; nil for a replay
	limit int      // the size at which it is flushed
	gens  []*memGen

	recs   []memRec
	runs   []run
	hashes offHeapU64s // the log records' hashes

	// records holds the result-record operations, the last per generation
	// of each fingerprint (see records.go).
	records map[Fingerprint][]memRecord

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

// memGen holds the fingerprints of one generation: 16 bytes each in an
// arena of chunks, indexed by hash partitions: a fingerprint of index hash
// h (fpIndexHash) is listed in partition h >> (64-pbits) as an entry
// holding the top 28 bits of h and 1 + its offset in the arena (its
// chunk's index << chunkBits | its place in the chunk). Adding one appends
// to its partition, whose tail stays in the cache with those of the others
// (thousands of cache lines, where an open-addressing table took a miss
// per key, and a rehash of everything at every growth); Has scans one
// partition, a hundred-odd entries. Chunks are never moved: the arena
// grows without copying.
//
// A partition is described by two words outside the Go heap (parts): the
// reference of its array in arena and its length (its capacity follows
// from the length, see partCap). Slice headers on the Go heap took 24
// bytes a partition, up to 16384 partitions a generation and memtable.
//
// A generation starts with 2^minPartBits partitions and doubles them
// (split) each time they hold 64 entries on average, up to maxBits: a
// generation of few keys takes memory for those, not for a full table.
// Entries hold the top bits of their hash, so that a split sends each to
// one of the two halves of its partition without reading its fingerprint.
type memGen struct {
	gen     uint64
	chunks  []offHeapBuf
	parts   offHeapBuf
	desc    []uint64 // parts' words: partition p's array ref at 2p, its length at 2p+1
	arena   partArena
	pbits   uint
	maxBits uint
	n       int
}

// partitionBits returns the largest number of partitions, as a power of
// two, for a memtable of limit bytes: about 128 entries each when one
// generation fills it (24 bytes a key in the table), within
// [2^minPartBits, 2^14].
func partitionBits(limit int) uint {
	b := uint(minPartBits)
	for b < 14 && 1<<b < limit/(24*128) {
		b++
	}
	return b
}

// minPartBits sets the partitions of a new generation; splitAt is the
// mean entries per partition at which they double.
const (
	minPartBits = 6
	splitAt     = 64
)

func newMemGen(gen uint64, limit int) *memGen {
	g := &memGen{gen: gen, pbits: minPartBits, maxBits: partitionBits(limit)}
	g.parts, g.desc = newPartDescs(g.pbits)
	return g
}

// newPartDescs returns zeroed descriptors for 2^pbits partitions.
func newPartDescs(pbits uint) (offHeapBuf, []uint64) {
	n := 2 << pbits
	b := newOffHeapBuf(8 * n)
	return b, u64s(b.b[:8*n], n)
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
	m.hashes.free()
}

func (g *memGen) free() {
	for _, c := range g.chunks {
		c.free()
	}
	g.arena.freeAll()
	g.parts.free()
	g.chunks, g.parts, g.desc = nil, offHeapBuf{}, nil
}

// chunkBits sets the size of an arena chunk, 1 MiB, a multiple of the 16
// bytes of a fingerprint. The first chunks of a generation are smaller
// (firstChunk, then doubling), so that small tables stay small.
const (
	chunkBits  = 20
	chunkSize  = 1 << chunkBits
	firstChunk = 64 << 10
)

// An index entry: the top 28 bits of a fingerprint's index hash, then 1 +
// its offset in the arena. Offsets stay below 2^36: a segment holds less
// than the limit (at most 1 GiB) plus one commit's record (at most 4 GiB),
// and a replay gathers at most the 2 + maxFrozen segments left by a crash.
const (
	entryOffBits = 36
	entryOffMask = 1<<entryOffBits - 1
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
		for fp, ops := range m.records {
			ops = slices.DeleteFunc(ops, func(r memRecord) bool { return r.gen < floor })
			if len(ops) == 0 {
				delete(m.records, fp)
			} else {
				m.records[fp] = ops
			}
		}
	}
	if len(hashes) > 0 {
		m.recs = append(m.recs, memRec{seq: seq, run0: len(m.runs), run1: len(m.runs) + len(runs), hash0: len(m.hashes.s)})
		m.runs = append(m.runs, runs...)
		before := m.hashes.bytes()
		m.hashes.append(hashes)
		m.size += m.hashes.bytes() - before + 16*len(runs) + 40
	}
}

// addFPs adds the fingerprints of ents; those below the floor are not
// kept.
func (m *memTable) addFPs(ents []ent) {
	for lo := 0; lo < len(ents); {
		gen := ents[lo].gen
		hi := lo + 1
		for hi < len(ents) && ents[hi].gen == gen {
			hi++
		}
		if gen >= m.floor {
			g := m.gen(gen)
			before := 0
			if g == nil {
				g = newMemGen(gen, m.limit)
				m.gens = append(m.gens, g)
			} else {
				before = g.bytes()
			}
			for i := lo; i < hi; i++ {
				g.add(&ents[i].fp)
			}
			m.size += g.bytes() - before
		}
		lo = hi
	}
}

// has reports whether the table holds fp in generation gen.
func (m *memTable) has(gen uint64, fp *Fingerprint) bool {
	g := m.gen(gen)
	return g != nil && g.has(fp)
}

// bytes is the memory of g's keys, entries and partition descriptors.
func (g *memGen) bytes() int {
	n := g.arena.size + cap(g.parts.b)
	for _, c := range g.chunks {
		n += cap(c.b)
	}
	return n
}

// entry returns the partition of hash h and the index entry of a key of
// hash h at offset off.
func (g *memGen) entry(h uint64, off int) (part int, e uint64) {
	return int(h >> (64 - g.pbits)), h&^entryOffMask | uint64(off+1)
}

// add adds fp.
func (g *memGen) add(fp *Fingerprint) {
	ci := len(g.chunks) - 1
	if ci < 0 || len(g.chunks[ci].b)+fpSize > cap(g.chunks[ci].b) {
		size := firstChunk
		if ci >= 0 {
			size = min(chunkSize, 2*cap(g.chunks[ci].b))
		}
		g.chunks = append(g.chunks, newOffHeapBuf(size))
		ci++
	}
	c := g.chunks[ci].b
	off := ci<<chunkBits | len(c)
	g.chunks[ci].b = append(c, fp[:]...)
	h := fpIndexHash(fp)
	p, e := g.entry(h, off)
	d := g.desc[2*p : 2*p+2 : 2*p+2]
	n := int(d[1])
	if n == partCap(n) {
		ref := g.arena.alloc(max(8, 2*n))
		if n > 0 {
			copy(g.arena.view(ref, n), g.arena.view(d[0], n))
			g.arena.release(d[0], n)
		}
		d[0] = ref
	}
	g.arena.view(d[0], n+1)[n] = e
	d[1] = uint64(n + 1)
	g.n++
	if g.pbits < g.maxBits && g.n > splitAt<<g.pbits {
		g.split()
	}
}

// split doubles the partitions: partition p's entries go to 2p and 2p+1
// by the next bit of their hash, into new arrays of a new arena; the old
// arena and descriptors are given back whole.
func (g *memGen) split() {
	oldParts, oldDesc, oldArena := g.parts, g.desc, g.arena
	g.pbits++
	g.parts, g.desc = newPartDescs(g.pbits)
	g.arena = partArena{}
	shift := 64 - g.pbits
	for p := range len(oldDesc) / 2 {
		n := int(oldDesc[2*p+1])
		if n == 0 {
			continue
		}
		ents := oldArena.view(oldDesc[2*p], n)
		var count [2]int
		for _, e := range ents {
			count[e>>shift&1]++
		}
		var dst [2][]uint64
		for i, c := range count {
			if c > 0 {
				ref := g.arena.alloc(partCap(c))
				g.desc[2*(2*p+i)] = ref
				g.desc[2*(2*p+i)+1] = uint64(c)
				dst[i] = g.arena.view(ref, c)
			}
		}
		var k [2]int
		for _, e := range ents {
			i := e >> shift & 1
			dst[i][k[i]] = e
			k[i]++
		}
	}
	oldArena.freeAll()
	oldParts.free()
}

// each calls fn for every fingerprint of g, in the order added, with its
// offset.
func (g *memGen) each(fn func(off int, fp []byte)) {
	for ci, cb := range g.chunks {
		c := cb.b
		for pos := 0; pos < len(c); pos += fpSize {
			fn(ci<<chunkBits|pos, c[pos:pos+fpSize])
		}
	}
}

// prefetchKey starts loading the fingerprint at off.
func (g *memGen) prefetchKey(off int) {
	c := g.chunks[off>>chunkBits].b
	prefetch.Addr(unsafe.Pointer(&c[:cap(c)][off&(chunkSize-1)]))
}

// keyAt returns the fingerprint at off.
func (g *memGen) keyAt(off int) []byte {
	c := g.chunks[off>>chunkBits].b
	pos := off & (chunkSize - 1)
	return c[pos : pos+fpSize]
}

func (g *memGen) has(fp *Fingerprint) bool {
	if g.desc == nil {
		return false
	}
	p, e := g.entry(fpIndexHash(fp), 0)
	tag := e &^ entryOffMask
	n := int(g.desc[2*p+1])
	if n == 0 {
		return false
	}
	for _, v := range g.arena.view(g.desc[2*p], n) {
		if v&^entryOffMask == tag && string(g.keyAt(int(v&entryOffMask)-1)) == string(fp[:]) {
			return true
		}
	}
	return false
}

// fpSize is the size of a fingerprint.
const fpSize = 16

// fpIndexHash is the hash of a fingerprint in the memtable's index and the
// flush filters: its second half, independent of FingerprintHash (the
// first half), which the engine's filters use.
func fpIndexHash(fp *Fingerprint) uint64 { return binary.LittleEndian.Uint64(fp[8:]) }
