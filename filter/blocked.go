package filter

import (
	"math"
	"sync"
	"unsafe"

	"github.com/streamdedup/dedup/internal/prefetch"
)

// The blocked backend is a split-block Bloom filter (Putze, Sanders and
// Singler's blocked Bloom filter in the layout Parquet and Impala call
// "split block"): the table is an array of 512-bit blocks, one 64-byte cache
// line each, held as eight 64-bit words.
//
// A key hash h picks its block from its high 32 bits by multiply-shift
// (hi32 * nblocks >> 32, no modulo), then sets k bits inside that block from
// its low 32 bits: bit i goes into word i%8 at position (lo32 * salt[i]) >> 26
// (a multiply-shift hash with an odd 32-bit salt per bit). With k = 8 every
// word gets one bit, exactly Parquet's SBBF scaled to 64-bit words; larger k
// put two or more bits in some words.
//
// Every operation touches one cache line. TestOrAdd builds the eight word
// masks once, compares, and ORs them in: one pass over the block.
//
// Sizing does not use the classic Bloom formula, which underestimates a
// blocked filter: block loads vary (Poisson around the mean), and overfull
// blocks dominate the false positives. blockedFP computes the false-positive
// rate as the Poisson mixture over block loads of the exact per-load rate,
// and both sizing (pick k and keys per block for a target) and FPRate use it.

const (
	blockWords = 8   // 64-bit words per block
	blockBits  = 512 // bits per block
	blockBytes = 64  // bytes per block: one cache line
	maxBlockK  = 32  // largest k the salts allow
	// maxBlocks bounds the table: the block index is a 32-bit multiply-shift.
	maxBlocks = 1 << 32
)

// blockSalts are the odd multipliers of the per-bit multiply-shift hashes.
// The first eight are Parquet's SBBF salts; the rest are fixed odd constants
// from a splitmix64 sequence. They are part of the encoding: never change
// them without bumping the format version.
var blockSalts = [maxBlockK]uint32{
	0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
	0x115d59d3, 0x72bee7fb, 0x571afb43, 0xd8c3c821, 0x6e5dc76b, 0xeb99c0d9, 0x5ad92a81, 0x6ee3bfe9,
	0x353376f1, 0xfe5b820f, 0xd3b47b27, 0xb833a929, 0xd416305b, 0xeac1a66f, 0x9f802f39, 0xe3b97e55,
	0x697b20ff, 0x599e5d9f, 0x44fc9085, 0x34f3756b, 0xe9109f49, 0xed77c381, 0x6ff2df71, 0x0e662fc7,
}

// blocked is one fixed-size split-block Bloom filter.
type blocked struct {
	words   []uint64 // nblocks*8 words, 64-byte aligned
	nblocks uint64
	k       int
	n       uint64 // keys inserted
	cap     uint64 // keys it holds before the chain grows
}

// newBlocked returns a blocked filter holding at least capacity keys at a
// false-positive rate of at most fp.
func newBlocked(capacity uint64, fp float64) *blocked {
	k, lambda := blockedParams(fp)
	nb := uint64(math.Ceil(float64(capacity) / lambda))
	if nb < 1 {
		nb = 1
	}
	if nb > maxBlocks {
		nb = maxBlocks
	}
	return &blocked{
		words:   alignedWords(nb * blockWords),
		nblocks: nb,
		k:       k,
		cap:     max(1, uint64(lambda*float64(nb))),
	}
}

// blockedBytes returns the table size newBlocked would allocate.
func blockedBytes(capacity uint64, fp float64) float64 {
	_, lambda := blockedParams(fp)
	return math.Max(1, math.Ceil(float64(capacity)/lambda)) * blockBytes
}

// alignedWords returns n zeroed words starting on a 64-byte boundary, so that
// every block is exactly one cache line.
func alignedWords(n uint64) []uint64 {
	w := make([]uint64, n+blockWords-1)
	off := uint64(0)
	if r := uintptr(unsafe.Pointer(unsafe.SliceData(w))) % blockBytes; r != 0 {
		off = uint64(blockBytes-r) / 8
	}
	w = w[off : off+n : off+n]
	adviseHuge(w)
	return w
}

// block returns the 64-byte block of h: multiply-shift of its high 32 bits.
func (f *blocked) block(h uint64) *[blockWords]uint64 {
	i := ((h >> 32) * f.nblocks) >> 32
	return (*[blockWords]uint64)(f.words[i*blockWords : i*blockWords+blockWords])
}

// prefetch starts loading the block of h.
func (f *blocked) prefetch(h uint64) {
	i := ((h >> 32) * f.nblocks) >> 32
	prefetch.Addr(unsafe.Pointer(&f.words[i*blockWords]))
}

// The k = 8 paths (what 1% and 0.1% targets choose) are unrolled into
// shifts on locals: building a mask array costs twice as much per miss
// lookup (measured) and shortens how far the CPU runs ahead into the next
// operation's cache miss.

func (f *blocked) test(h uint64) bool {
	b := f.block(h)
	lo := uint32(h)
	if f.k == 8 {
		// (>> and & bind equally tight in Go: parenthesise each shift.)
		return (b[0]>>((lo*blockSalts[0])>>26))&
			(b[1]>>((lo*blockSalts[1])>>26))&
			(b[2]>>((lo*blockSalts[2])>>26))&
			(b[3]>>((lo*blockSalts[3])>>26))&
			(b[4]>>((lo*blockSalts[4])>>26))&
			(b[5]>>((lo*blockSalts[5])>>26))&
			(b[6]>>((lo*blockSalts[6])>>26))&
			(b[7]>>((lo*blockSalts[7])>>26))&1 != 0
	}
	for j := 0; j < f.k; j++ {
		if (b[j&7]>>((lo*blockSalts[j&(maxBlockK-1)])>>26))&1 == 0 {
			return false
		}
	}
	return true
}

func (f *blocked) testOrAdd(h uint64) bool {
	b := f.block(h)
	lo := uint32(h)
	if f.k == 8 {
		p0, p1 := (lo*blockSalts[0])>>26, (lo*blockSalts[1])>>26
		p2, p3 := (lo*blockSalts[2])>>26, (lo*blockSalts[3])>>26
		p4, p5 := (lo*blockSalts[4])>>26, (lo*blockSalts[5])>>26
		p6, p7 := (lo*blockSalts[6])>>26, (lo*blockSalts[7])>>26
		if (b[0]>>p0)&(b[1]>>p1)&(b[2]>>p2)&(b[3]>>p3)&(b[4]>>p4)&(b[5]>>p5)&(b[6]>>p6)&(b[7]>>p7)&1 != 0 {
			return true
		}
		b[0] |= 1 << p0
		b[1] |= 1 << p1
		b[2] |= 1 << p2
		b[3] |= 1 << p3
		b[4] |= 1 << p4
		b[5] |= 1 << p5
		b[6] |= 1 << p6
		b[7] |= 1 << p7
		f.n++
		return false
	}
	var m [blockWords]uint64
	for j := 0; j < f.k; j++ {
		m[j&7] |= 1 << ((lo * blockSalts[j&(maxBlockK-1)]) >> 26)
	}
	if (b[0]&m[0]^m[0])|(b[1]&m[1]^m[1])|(b[2]&m[2]^m[2])|(b[3]&m[3]^m[3])|
		(b[4]&m[4]^m[4])|(b[5]&m[5]^m[5])|(b[6]&m[6]^m[6])|(b[7]&m[7]^m[7]) == 0 {
		return true
	}
	for j := range b {
		b[j] |= m[j]
	}
	f.n++
	return false
}

func (f *blocked) count() uint64     { return f.n }
func (f *blocked) capacity() uint64  { return f.cap }
func (f *blocked) full() bool        { return f.n >= f.cap }
func (f *blocked) sizeBytes() uint64 { return f.nblocks * blockBytes }
func (f *blocked) fpRate() float64 {
	return blockedFP(float64(f.n)/float64(f.nblocks), f.k)
}

// blockedFP returns the false-positive rate of a split-block filter with k
// bits per key and an average of lambda keys per block.
//
// Given j keys in the query's block, word w holds c_w of the query's bits and
// has received j*c_w uniform bit throws; the query's c_w (independent,
// uniform) positions are all set with probability
//
//	g(c, t) = sum_d S(c,d) (64)_d / 64^c * sum_i (-1)^i C(d,i) (1-i/64)^t
//
// (d distinct query positions, each hit by at least one of t throws), with
// S the Stirling numbers of the second kind. Words use different salts, so
// they are treated as independent: FP_j = prod_w g(c_w, j*c_w). The block
// load j is Poisson(lambda), and FP = sum_j P(j) FP_j.
func blockedFP(lambda float64, k int) float64 {
	if lambda <= 0 || k <= 0 {
		return 0
	}
	cLo, nHi := k/blockWords, k%blockWords // nHi words hold cLo+1 bits, the rest cLo
	sd := math.Sqrt(lambda)
	// Loads past 10 sigmas (and a margin for small lambda) weigh under
	// 1e-20: nothing at the rates a filter is sized for.
	jlo := int(math.Max(0, math.Floor(lambda-10*sd-12)))
	jhi := int(math.Ceil(lambda + 10*sd + 20))

	lo := newWordTerm(cLo, jlo)
	hi := newWordTerm(cLo+1, jlo)
	// The Poisson weights by recurrence, P(j+1) = P(j) lambda/(j+1), from
	// the first one taken in logs: the loop runs once per Tick of the
	// window advisor for every shard's newest generation.
	p := math.Exp(-lambda + float64(jlo)*math.Log(lambda) - lgammaInt(jlo+1))
	var sum float64
	for j := jlo; j <= jhi; j++ {
		fj := 1.0
		if nHi > 0 {
			fj = powInt(hi.value(), nHi)
			hi.next()
		}
		if nHi < blockWords {
			fj *= powInt(lo.value(), blockWords-nHi)
			lo.next()
		}
		sum += p * fj
		p *= lambda / float64(j+1)
	}
	return math.Min(1, sum)
}

// powInt is x^n for a small n >= 0.
func powInt(x float64, n int) float64 {
	r := 1.0
	for ; n > 0; n-- {
		r *= x
	}
	return r
}

func lgammaInt(n int) float64 {
	v, _ := math.Lgamma(float64(n))
	return v
}

// stirling2[c][d] for c <= 5 (k <= 32 puts at most 4 bits in a word; the
// unused "cLo+1" term at k = 32 asks for 5).
var stirling2 = [6][6]float64{
	{1},
	{0, 1},
	{0, 1, 1},
	{0, 1, 3, 1},
	{0, 1, 7, 6, 1},
	{0, 1, 15, 25, 10, 1},
}

// wordTerm evaluates g(c, j*c) for successive j: the powers (1-i/64)^(j*c)
// are kept and multiplied by (1-i/64)^c at each step.
type wordTerm struct {
	c    int
	coef [6]float64 // coef[d] = S(c,d) (64)_d / 64^c
	pow  [6]float64 // pow[i] = (1-i/64)^(j*c)
	step [6]float64 // (1-i/64)^c
}

func newWordTerm(c, j int) *wordTerm {
	t := &wordTerm{c: c}
	if c == 0 {
		return t
	}
	for d := 1; d <= c; d++ {
		falling := 1.0
		for i := 0; i < d; i++ {
			falling *= float64(64 - i)
		}
		t.coef[d] = stirling2[c][d] * falling / math.Pow(64, float64(c))
	}
	for i := 0; i <= c; i++ {
		base := 1 - float64(i)/64
		t.step[i] = math.Pow(base, float64(c))
		t.pow[i] = math.Pow(base, float64(j*c))
	}
	return t
}

func (t *wordTerm) value() float64 {
	if t.c == 0 {
		return 1
	}
	var g float64
	for d := 1; d <= t.c; d++ {
		// probability that d given positions are all hit
		var a float64
		binom := 1.0
		for i := 0; i <= d; i++ {
			if i%2 == 0 {
				a += binom * t.pow[i]
			} else {
				a -= binom * t.pow[i]
			}
			binom = binom * float64(d-i) / float64(i+1)
		}
		g += t.coef[d] * math.Max(0, a)
	}
	return g
}

func (t *wordTerm) next() {
	for i := 0; i <= t.c; i++ {
		t.pow[i] *= t.step[i]
	}
}

type blockedSize struct {
	k      int
	lambda float64 // keys per block at which the target is met
}

var blockedParamsCache sync.Map // float64 target -> blockedSize

// blockedParams returns the k and the keys-per-block load that meet the
// false-positive target fp with the fewest blocks. Results are cached: chain
// growth asks for the same few targets again and again.
func blockedParams(fp float64) (k int, lambda float64) {
	if v, ok := blockedParamsCache.Load(fp); ok {
		s := v.(blockedSize)
		return s.k, s.lambda
	}
	best := blockedSize{k: 1, lambda: 0}
	// Not unimodal in k: multiples of 8 (the same number of bits in every
	// word) do better than their neighbours. Try them all.
	for k := 1; k <= maxBlockK; k++ {
		if l := maxLambda(fp, k); l > best.lambda {
			best = blockedSize{k: k, lambda: l}
		}
	}
	if best.lambda <= 0 {
		best.lambda = 1e-9
	}
	blockedParamsCache.Store(fp, best)
	return best.k, best.lambda
}

// maxLambda returns the largest mean block load at which a k-bit split-block
// filter meets fp (bisection: the rate grows with the load).
func maxLambda(fp float64, k int) float64 {
	lo, hi := 0.0, float64(blockBits)
	if blockedFP(hi, k) <= fp {
		return hi
	}
	for range 36 {
		mid := (lo + hi) / 2
		if blockedFP(mid, k) <= fp {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
