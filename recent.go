package dedup

import (
	"math/bits"
	"unsafe"
)

// recentSet is a compact, read-only copy of (the newest keys of) a
// committed in-flight set, for shard.recentlyCommitted: exact mode's cache
// of keys known durable, whose duplicates it answers without a store
// lookup. It holds per key a 32-bit fingerprint, the key's offset in the
// arena and its bytes, plus a bucket directory and, when the keys are of
// more than one generation, a byte each for the generation: about 11
// bytes and the key, against ~60 and the key in an inflightSet at its
// load.
//
// The keys are ordered by bucket, the top bits of their hash: bucket b
// holds entries dir[b] to dir[b+1]-1, about two. A lookup reads the
// directory, the bucket's fingerprints, and the key bytes only when a
// fingerprint matches; the key bytes decide, so the fingerprint's
// collisions cost a comparison, never a wrong answer.
type recentSet struct {
	dir   []uint32 // len buckets+1
	shift uint     // bucket of h: h >> shift (64 when one bucket)
	fps   []uint32 // per entry: the hash's low 32 bits
	offs  []uint32 // len n+1: entry i's key is arena[offs[i]:offs[i+1]]
	arena []byte
	// base is the lowest generation of the keys; gens[i] is entry i's
	// generation less base, nil when they are all of generation base.
	base uint64
	gens []uint8
	n    int
}

// recentEntryBytes is the memory a key takes in a recentSet besides its
// bytes (fingerprint, offset, directory, generation), for the budget.
const recentEntryBytes = 4 + 4 + 2 + 1

const recentSetSize = int(unsafe.Sizeof(recentSet{}))

// bytes is the memory r holds.
func (r *recentSet) bytes() uint64 {
	return uint64(recentSetSize + 4*(cap(r.dir)+cap(r.fps)+cap(r.offs)) + cap(r.arena) + cap(r.gens))
}

// compactRecent copies into r (reusing its arrays when they fit, r may be
// nil) the newest keys of p, a committed set in exact mode, that fit in
// budget bytes, and returns it; nil if none fits. Keys whose generation
// is more than 255 before the newest one's are left out: the cache may
// always miss, the store answers.
func compactRecent(r *recentSet, p *inflightSet, budget int) *recentSet {
	budget = min(budget, 1<<31) // offsets are 32-bit
	ents := p.ents
	// The newest keys come last: their duplicates are the likeliest to
	// come yet. Take the longest suffix that fits.
	start, size := len(ents), recentSetSize+4*3
	for start > 0 {
		need := recentEntryBytes + keyLen(ents[start-1])
		if size+need > budget {
			break
		}
		size += need
		start--
	}
	ents = ents[start:]
	// The keys of hash 0 (rare) come in too if all the others and they
	// fit.
	var zero []inflightEntry
	if start == 0 {
		for _, en := range p.zero {
			size += recentEntryBytes + keyLen(en)
		}
		if size <= budget {
			zero = p.zero
		}
	}
	n := len(ents) + len(zero)
	if n == 0 {
		return nil
	}
	base, top := uint64(1<<64-1), uint64(0)
	for _, en := range ents {
		base, top = min(base, en.gen), max(top, en.gen)
	}
	for _, en := range zero {
		base, top = min(base, en.gen), max(top, en.gen)
	}
	// Leave out the keys too old for a byte of generation (rare: only keys
	// held in flight for 256 generations share a commit with new ones).
	if top-base > 255 {
		base = top - 255
	}
	keep := func(en inflightEntry) bool { return en.gen >= base }

	if r == nil {
		r = &recentSet{}
	}
	// About two keys per bucket.
	logB := max(0, bits.Len(uint(n))-2)
	buckets := 1 << logB
	r.shift = uint(64 - logB)
	r.dir = reuse(r.dir, buckets+1, 0)[:buckets+1]
	clear(r.dir)
	r.base = base
	r.n = 0
	bucket := func(h uint64) int { return int(h >> r.shift) }
	// Counting sort by bucket. dir[b] counts, then ends, then starts.
	for _, en := range ents {
		if keep(en) {
			r.dir[bucket(en.h)]++
			r.n++
		}
	}
	for _, en := range zero {
		if keep(en) {
			r.dir[0]++
			r.n++
		}
	}
	for b := 1; b <= buckets; b++ {
		r.dir[b] += r.dir[b-1]
	}
	n = r.n
	// offs holds, until the arena is laid out, which entry goes where:
	// entry index into ents, or len(ents)+i for zero[i].
	r.offs = reuse(r.offs, n+1, 0)[:n+1]
	for i, en := range ents {
		if keep(en) {
			b := bucket(en.h)
			r.dir[b]--
			r.offs[r.dir[b]] = uint32(i)
		}
	}
	for i, en := range zero {
		if keep(en) {
			r.dir[0]--
			r.offs[r.dir[0]] = uint32(len(ents) + i)
		}
	}
	r.dir[buckets] = uint32(n)
	r.fps = reuse(r.fps, n, 0)[:n]
	r.gens = r.gens[:0]
	if top != base {
		r.gens = reuse(r.gens, n, 0)[:n]
	}
	arenaLen := 0
	for i := range n {
		arenaLen += keyLen(entryAt(ents, zero, r.offs[i]))
	}
	r.arena = reuse(r.arena, arenaLen, 0)
	for i := range n {
		en := entryAt(ents, zero, r.offs[i])
		r.fps[i] = uint32(en.h)
		if len(r.gens) > 0 {
			r.gens[i] = uint8(en.gen - base)
		}
		r.offs[i] = uint32(len(r.arena))
		r.arena = append(r.arena, p.key(en)...)
	}
	r.offs[n] = uint32(len(r.arena))
	return r
}

func entryAt(ents, zero []inflightEntry, i uint32) inflightEntry {
	if int(i) < len(ents) {
		return ents[i]
	}
	return zero[int(i)-len(ents)]
}

// lookup returns the generation of key (hash h). A nil set holds nothing.
func (r *recentSet) lookup(h uint64, key []byte) (gen uint64, ok bool) {
	if r == nil || r.n == 0 {
		return 0, false
	}
	b := h >> r.shift
	fp := uint32(h)
	for i := r.dir[b]; i < r.dir[b+1]; i++ {
		if r.fps[i] != fp || string(r.arena[r.offs[i]:r.offs[i+1]]) != string(key) {
			continue
		}
		gen = r.base
		if len(r.gens) > 0 {
			gen += uint64(r.gens[i])
		}
		return gen, true
	}
	return 0, false
}
