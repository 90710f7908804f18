package rotate

import (
	"slices"
	"time"
)

// Horizon keeps a sample of each generation's hashes past the
// generation's expiry, so that a key seen again after the window has let
// it go can still be recognised: the duplicates a window lets through
// (leaks), counted for dedup's window advisor.
//
// The caller picks the sample (a fixed share of the hash space) and
// journals each sampled hash with its generation (Add) while the
// generation is live. A generation is kept for Keep past its expiry from
// the window (its end plus Window); Advance drops it after that. Each
// hash is kept as a 32-bit fragment (its low 32 bits) in a sorted slice:
// 4 bytes a sampled hash, and a probe of a generation holding n
// fragments matches a hash it does not hold with probability n/2^32,
// which Probe reports so that the caller can subtract it.
//
// Like a Ring, a Horizon takes the clock as an argument and never
// drops a generation early when the clock steps back. It is not safe for
// concurrent use.
type Horizon struct {
	span   int64 // ns
	window int64 // ns
	keep   int64 // ns
	gens   []horizonGen
}

type horizonGen struct {
	id     uint64
	frags  []uint32
	sorted bool
}

// NewHorizon returns an empty Horizon for a window cut into generations
// of span (Window/Generations), keeping each generation for keep past its
// expiry.
func NewHorizon(window time.Duration, generations int, keep time.Duration) *Horizon {
	return &Horizon{span: int64(window) / int64(generations), window: int64(window), keep: int64(keep)}
}

// Add journals hash h as a key of generation id.
func (hz *Horizon) Add(id uint64, h uint64) {
	g := hz.get(id)
	g.frags = append(g.frags, uint32(h))
	g.sorted = false
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
		i++
	}
	if i > 0 {
		clear(hz.gens[:i])
		hz.gens = append(hz.gens[:0], hz.gens[i:]...)
	}
}

// Probe asks every generation already expired from the window at now,
// and still kept, whether it holds h: fn gets each one's id, the number of
// fragments it holds (its chance of a false match is keys/2^32) and
// whether it matched.
func (hz *Horizon) Probe(h uint64, now time.Time, fn func(id uint64, keys int, match bool)) {
	ns := now.UnixNano()
	f := uint32(h)
	for i := range hz.gens {
		g := &hz.gens[i]
		if ns < hz.expiry(g.id) {
			break // live in the window, and so is every later one
		}
		if ns >= hz.expiry(g.id)+hz.keep {
			continue // dropped at the next Advance
		}
		if !g.sorted {
			slices.Sort(g.frags)
			g.frags = slices.Clip(g.frags)
			g.sorted = true
		}
		_, ok := slices.BinarySearch(g.frags, f)
		fn(g.id, len(g.frags), ok)
	}
}

// Bytes is the memory the fragments take.
func (hz *Horizon) Bytes() uint64 {
	var n uint64
	for i := range hz.gens {
		n += 4 * uint64(cap(hz.gens[i].frags))
	}
	return n
}

// Len returns the number of generations held, live or expired.
func (hz *Horizon) Len() int { return len(hz.gens) }
