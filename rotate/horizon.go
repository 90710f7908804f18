package rotate

import (
	"slices"
	"time"
	"unsafe"

	"github.com/streamdedup/dedup/internal/prefetch"
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
	// bitmap is a Bloom filter (bmHashes) of the fragments of the
	// generations [bmFrom, bmTo] (expired, and kept or dropped since it was
	// built): most probes of a hash no generation holds end there, with
	// three bit tests instead of a search per generation. A generation
	// that expires is added to it; it is built again, over the generations
	// kept, when the fragments added since it was built (bmSet) pass 1.5
	// times those it was sized for (bmCap, 8 bits each), or after a Drop
	// (bmOK false).
	bitmap       []uint64
	bmShift      uint
	bmFrom, bmTo uint64
	bmSet, bmCap int
	bmOK         bool
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
	if hz.bmOK && id >= hz.bmFrom && id <= hz.bmTo {
		hz.setBit(uint32(h)) // a late key of an expired generation
	}
}

// AddAll journals the hashes of hs whose level (level(h)) is from or more
// as keys of generation id, as Add does one by one.
func (hz *Horizon) AddAll(id uint64, hs []uint64, level func(h uint64) int, from int) {
	g := hz.get(id)
	bm := hz.bmOK && id >= hz.bmFrom && id <= hz.bmTo
	for _, h := range hs {
		l := min(level(h), HorizonLevels-1)
		if l < from {
			continue
		}
		if l >= len(g.levels) {
			g.levels = append(g.levels, make([]horizonLevel, l+1-len(g.levels))...)
		}
		lv := &g.levels[l]
		c := cap(lv.frags)
		lv.frags = append(lv.frags, uint32(h))
		lv.sorted = false
		hz.bytes += 4 * uint64(cap(lv.frags)-c)
		hz.keys++
		if bm {
			hz.setBit(uint32(h)) // a late key of an expired generation
		}
	}
}

// bmHashes are the bitmap's three multiplicative hashes of a fragment
// (the top bits of f times each): about 8 bits a fragment and three bits
// each leave 3% of the hashes no generation holds to a search.
var bmHashes = [3]uint32{0x9e3779b1, 0x85ebca6b, 0xc2b2ae35}

func (hz *Horizon) setBit(f uint32) {
	for _, c := range bmHashes {
		i := (f * c) >> hz.bmShift
		hz.bitmap[i/64] |= 1 << (i % 64)
	}
}

func (hz *Horizon) hasBit(f uint32) bool {
	for _, c := range bmHashes {
		i := (f * c) >> hz.bmShift
		if hz.bitmap[i/64]&(1<<(i%64)) == 0 {
			return false
		}
	}
	return true
}

// buildBitmap builds the bitmap over the generations gens[from:to], about
// 8 bits per fragment (a power of two, at least 64).
func (hz *Horizon) buildBitmap(from, to int) {
	n := 0
	for i := from; i < to; i++ {
		for _, l := range hz.gens[i].levels {
			n += len(l.frags)
		}
	}
	logBits := uint(6)
	for logBits < 32 && 1<<logBits < 8*n {
		logBits++
	}
	words := 1 << (logBits - 6)
	hz.bytes -= 8 * uint64(len(hz.bitmap))
	if cap(hz.bitmap) >= words && cap(hz.bitmap) <= 4*words {
		hz.bitmap = hz.bitmap[:words]
		clear(hz.bitmap)
	} else {
		hz.bitmap = make([]uint64, words)
	}
	hz.bytes += 8 * uint64(len(hz.bitmap))
	hz.bmShift = 32 - logBits
	hz.bmCap, hz.bmSet = 1<<logBits/8, 0
	hz.bmFrom, hz.bmTo, hz.bmOK = hz.gens[from].id, hz.gens[from].id, true
	hz.addToBitmap(from, to)
}

// addToBitmap sets the bits of the generations gens[from:to] and makes
// the last of them the bitmap's newest.
func (hz *Horizon) addToBitmap(from, to int) {
	for i := from; i < to; i++ {
		for _, l := range hz.gens[i].levels {
			for _, f := range l.frags {
				hz.setBit(f)
			}
			hz.bmSet += len(l.frags)
		}
	}
	hz.bmTo = hz.gens[to-1].id
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
		if len(hz.gens) == 0 {
			hz.bytes -= 8 * uint64(len(hz.bitmap))
			hz.bitmap, hz.bmOK = nil, false
		}
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
	hz.bmOK = false
	for i := range hz.gens {
		g := &hz.gens[i]
		for l := range min(level, len(g.levels)) {
			hz.forget(&g.levels[l])
		}
	}
}

// Probe asks every generation already expired from the window at now,
// and still kept, whether it holds h, of the given level, and calls fn
// with the id of each one that does. A generation holding n fragments of
// that level matches a hash it does not hold with probability n/2^32
// (Expired reports n).
func (hz *Horizon) Probe(h uint64, level int, now time.Time, fn func(id uint64)) {
	hz.ProbeAll([]uint64{h}, func(uint64) int { return level }, now, func(_ int, id uint64) { fn(id) })
}

// ProbeAll is Probe for every hash of hs, of level level(h), at one now:
// the generations expired and the bitmap over them are brought up to date
// once, and the bitmap's words are prefetched a few hashes ahead. fn gets
// the index in hs of the hash matched.
func (hz *Horizon) ProbeAll(hs []uint64, level func(h uint64) int, now time.Time, fn func(i int, id uint64)) {
	from, to := hz.expired(now.UnixNano())
	if from == to || len(hs) == 0 {
		return
	}
	switch {
	case !hz.bmOK || hz.gens[from].id < hz.bmFrom:
		hz.buildBitmap(from, to)
	case hz.gens[to-1].id > hz.bmTo:
		i := to
		for i > from && hz.gens[i-1].id > hz.bmTo {
			i--
		}
		hz.addToBitmap(i, to)
		if 2*hz.bmSet > 3*hz.bmCap {
			hz.buildBitmap(from, to)
		}
	}
	const ahead = 8
	for _, h := range hs[:min(ahead, len(hs))] {
		hz.prefetchBits(uint32(h))
	}
	for i, h := range hs {
		if k := i + ahead; k < len(hs) {
			hz.prefetchBits(uint32(hs[k]))
		}
		f := uint32(h)
		if !hz.hasBit(f) {
			continue
		}
		l := min(level(h), HorizonLevels-1)
		for gi := from; gi < to; gi++ {
			g := &hz.gens[gi]
			if l >= len(g.levels) {
				continue
			}
			lv := &g.levels[l]
			if !lv.sorted {
				hz.sort(lv.frags)
				lv.sorted = true
			}
			if contains(lv.frags, f) {
				fn(i, g.id)
			}
		}
	}
}

// prefetchBits prefetches the bitmap's words of fragment f.
func (hz *Horizon) prefetchBits(f uint32) {
	for _, c := range bmHashes {
		i := (f * c) >> hz.bmShift
		prefetch.Addr(unsafe.Pointer(&hz.bitmap[i/64]))
	}
}

// sort sorts fragments a in place: a least-significant-digit radix sort
// by bytes for large slices (a generation's fragments are sorted once,
// at its first probe past the window, and every key of the stream goes
// through it), insertion sort and pdqsort for small ones.
func (hz *Horizon) sort(a []uint32) { radixSort(a) }

func radixSort(a []uint32) {
	if len(a) < 256 {
		slices.Sort(a)
		return
	}
	src, dst := a, make([]uint32, len(a))
	for shift := uint(0); shift < 32; shift += 8 {
		var count [256]int
		for _, x := range src {
			count[(x>>shift)&0xff]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, x := range src {
			d := (x >> shift) & 0xff
			dst[count[d]] = x
			count[d]++
		}
		src, dst = dst, src
	}
	// Four passes: the sorted fragments are back in a.
}

// expired returns the range gens[from:to] of the generations expired
// from the window at now (ns) and still kept.
func (hz *Horizon) expired(ns int64) (from, to int) {
	for to < len(hz.gens) && ns >= hz.expiry(hz.gens[to].id) {
		if ns >= hz.expiry(hz.gens[to].id)+hz.keep {
			from = to + 1 // dropped at the next Advance
		}
		to++
	}
	return from, to
}

// Expired calls fn with the id of every generation expired from the window
// at now and still kept, and the number of fragments it holds at each level
// (keys[l]; levels past the slice's end hold none): a Probe at level l
// matches one it does not hold with probability keys[l]/2^32.
func (hz *Horizon) Expired(now time.Time, fn func(id uint64, keys func(level int) int)) {
	from, to := hz.expired(now.UnixNano())
	for i := from; i < to; i++ {
		g := &hz.gens[i]
		fn(g.id, func(l int) int {
			l = min(l, HorizonLevels-1)
			if l >= len(g.levels) {
				return 0
			}
			return len(g.levels[l].frags)
		})
	}
}

// contains reports whether the sorted fragments a hold f. Fragments are
// uniform over 32 bits, so interpolation finds f's place in a few steps
// (log log n on average) where a binary search takes log n.
func contains(a []uint32, f uint32) bool {
	lo, hi := 0, len(a)-1
	for steps := 0; lo <= hi && steps < 4; steps++ {
		x, y := a[lo], a[hi]
		if f < x || f > y {
			return false
		}
		if x == y {
			return true // f == x == y
		}
		i := lo + int(uint64(f-x)*uint64(hi-lo)/uint64(y-x))
		switch {
		case a[i] < f:
			lo = i + 1
		case a[i] > f:
			hi = i - 1
		default:
			return true
		}
	}
	if lo > hi {
		return false
	}
	_, ok := slices.BinarySearch(a[lo:hi+1], f)
	return ok
}

// Bytes is the memory the fragments and the bitmap over the expired
// generations take: about 5 bytes a fragment.
func (hz *Horizon) Bytes() uint64 { return hz.bytes }

// Keys is the number of fragments held.
func (hz *Horizon) Keys() int { return hz.keys }

// Len returns the number of generations held, live or expired.
func (hz *Horizon) Len() int { return len(hz.gens) }
