package rotate

import (
	"slices"
	"time"
)

// HorizonLevels bounds the sample levels a Horizon distinguishes: a hash
// of level HorizonLevels-1 or more is kept at level HorizonLevels-1.
const HorizonLevels = 24

// Horizon keeps a sample of each generation's hashes past the
// generation's expiry, so that a key seen again after the window has let
// it go can still be recognised: the duplicates a window lets through
// (leaks), counted for dedup's window advisor.
//
// The caller gives each hash a level (a pure function of the hash, at
// most [HorizonLevels]-1: level l or more is a share 2^-l of the hash
// space), samples the hashes of level k or more for a k it only ever
// raises, and journals each sampled hash with its generation and level
// (Add) while the generation is live. Raising k drops the hashes of the
// levels below it (Drop), so that every generation held keeps exactly the
// hashes of level k or more: the same sample as if k had always been the
// rate. A generation is kept for Keep past its expiry from the window (its
// end plus Window); Advance drops it after that. Each hash is kept as a
// 32-bit fragment (its low 32 bits, which the caller keeps independent of
// its level) in a sorted slice per level: 4 bytes a sampled hash, and a
// probe of a level holding n fragments matches a hash it does not hold
// with probability n/2^32, which Probe reports so that the caller can
// subtract it.
//
// Like a Ring, a Horizon takes the clock as an argument and never
// drops a generation early when the clock steps back. It is not safe for
// concurrent use.
type Horizon struct {
	span   int64 // ns
	window int64 // ns
	keep   int64 // ns
	gens   []horizonGen
	bytes  uint64 // 4 * the fragments' capacity
	keys   int
}

type horizonGen struct {
	id     uint64
	levels []horizonLevel // indexed by level, grown as needed
}

type horizonLevel struct {
	frags  []uint32
	sorted bool
}

// NewHorizon returns an empty Horizon for a window cut into generations
// of span (Window/Generations), keeping each generation for keep past its
// expiry.
func NewHorizon(window time.Duration, generations int, keep time.Duration) *Horizon {
	return &Horizon{span: int64(window) / int64(generations), window: int64(window), keep: int64(keep)}
}

// Add journals hash h, of the given level, as a key of generation id.
func (hz *Horizon) Add(id uint64, level int, h uint64) {
	g := hz.get(id)
	level = min(level, HorizonLevels-1)
	if level >= len(g.levels) {
		g.levels = append(g.levels, make([]horizonLevel, level+1-len(g.levels))...)
	}
	l := &g.levels[level]
	c := cap(l.frags)
	l.frags = append(l.frags, uint32(h))
	l.sorted = false
	hz.bytes += 4 * uint64(cap(l.frags)-c)
	hz.keys++
}

// get returns generation id, creating it in order if needed.
func (hz *Horizon) get(id uint64) *horizonGen {
	i := len(hz.gens)
	for i > 0 && hz.gens[i-1].id >= id {
		if hz.gens[i-1].id == id {
			return &hz.gens[i-1]
		}
		i--
	}
	hz.gens = slices.Insert(hz.gens, i, horizonGen{id: id})
	return &hz.gens[i]
}

// expiry is when generation id leaves the window (ns).
func (hz *Horizon) expiry(id uint64) int64 { return int64(id+1)*hz.span + hz.window }

// Advance brings the Horizon to now: it drops the generations kept past
// their expiry plus Keep.
func (hz *Horizon) Advance(now time.Time) {
	ns := now.UnixNano()
	i := 0
	for i < len(hz.gens) && ns >= hz.expiry(hz.gens[i].id)+hz.keep {
		for l := range hz.gens[i].levels {
			hz.forget(&hz.gens[i].levels[l])
		}
		i++
	}
	if i > 0 {
		clear(hz.gens[:i])
		hz.gens = append(hz.gens[:0], hz.gens[i:]...)
	}
}

// forget frees a level's fragments.
func (hz *Horizon) forget(l *horizonLevel) {
	hz.bytes -= 4 * uint64(cap(l.frags))
	hz.keys -= len(l.frags)
	*l = horizonLevel{}
}

// Drop frees the fragments of every level below level, in every
// generation held: the sample becomes the hashes of level or more.
func (hz *Horizon) Drop(level int) {
	for i := range hz.gens {
		g := &hz.gens[i]
		for l := range min(level, len(g.levels)) {
			hz.forget(&g.levels[l])
		}
	}
}

// Probe asks every generation already expired from the window at now,
// and still kept, whether it holds h, of the given level: fn gets each
// one's id, the number of fragments of that level it holds (its chance of
// a false match is keys/2^32) and whether it matched.
func (hz *Horizon) Probe(h uint64, level int, now time.Time, fn func(id uint64, keys int, match bool)) {
	ns := now.UnixNano()
	f := uint32(h)
	level = min(level, HorizonLevels-1)
	for i := range hz.gens {
		g := &hz.gens[i]
		if ns < hz.expiry(g.id) {
			break // live in the window, and so is every later one
		}
		if ns >= hz.expiry(g.id)+hz.keep {
			continue // dropped at the next Advance
		}
		if level >= len(g.levels) {
			fn(g.id, 0, false)
			continue
		}
		l := &g.levels[level]
		if !l.sorted {
			slices.Sort(l.frags)
			l.sorted = true
		}
		_, ok := slices.BinarySearch(l.frags, f)
		fn(g.id, len(l.frags), ok)
	}
}

// Bytes is the memory the fragments take.
func (hz *Horizon) Bytes() uint64 { return hz.bytes }

// Keys is the number of fragments held.
func (hz *Horizon) Keys() int { return hz.keys }

// Len returns the number of generations held, live or expired.
func (hz *Horizon) Len() int { return len(hz.gens) }
