package filter

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/streamdedup/dedup/internal/hashmix"
)

// The bloom backend keeps its bits in a bits-and-blooms/bloom/v3
// BloomFilter. That library hashes []byte keys with murmur3 (Add, Test,
// Locations); its TestLocations accepts our own positions but reduces each
// with a 64-bit modulo, and it has no AddLocations. So we derive the k
// positions from the caller's 64-bit hash ourselves and read and set them in
// the library's bitset directly (BitSet().Words()), with no second hash.
//
// Positions: enhanced double hashing in the "fraction" domain. With
// a = h and b = fmix(h)|1 (a murmur3-style finalizer, independent of the
// splitmix64 remix the engine shards by), probe i is the high word of
// (a + i*b) * m (Lemire's multiply-shift range reduction, no modulo). All
// k probes use all 64 bits of h; the filter is k random DRAM reads on a large
// table.
//
// Sizing: for each k the smallest m meeting (1 - e^{-kn/m})^k <= fp, and the
// k with the smallest m. (bloom.EstimateParameters rounds k up from the
// optimum and can land just above the target.)

// maxBloomK bounds k (a target of 1e-19 needs about 63).
const maxBloomK = 64

// bloomFilter is one fixed-size Bloom filter.
type bloomFilter struct {
	bf    *bloom.BloomFilter
	words []uint64 // bf's bitset words
	m     uint64   // bits
	k     int
	n     uint64
	cap   uint64
}

// bloomParams returns the bits and probes that meet fp at n keys.
func bloomParams(n uint64, fp float64) (m uint64, k int) {
	best, k := bloomBits(n, fp)
	return max(64, uint64(best)), k
}

// bloomBits returns the bits (rounded up, as a float) and probes that meet
// fp at n keys.
func bloomBits(n uint64, fp float64) (bits float64, k int) {
	best := math.Inf(1)
	for kk := 1; kk <= maxBloomK; kk++ {
		// (1-e^{-kn/m})^k <= fp  <=>  m >= -k n / ln(1 - fp^{1/k})
		mm := -float64(kk) * float64(n) / math.Log1p(-math.Pow(fp, 1/float64(kk)))
		if mm < best {
			best, k = mm, kk
		}
	}
	return math.Ceil(best), k
}

func newBloom(capacity uint64, fp float64) *bloomFilter {
	m, k := bloomParams(capacity, fp)
	bf := bloom.New(uint(m), uint(k))
	if uint64(len(bf.BitSet().Words())) < (m+63)/64 {
		// bitset.New swallows an allocation panic and returns an empty set.
		panic(fmt.Sprintf("filter: cannot allocate a %d-bit bloom filter", m))
	}
	adviseHuge(bf.BitSet().Words())
	return bloomFrom(bf, capacity, 0)
}

func bloomFrom(bf *bloom.BloomFilter, capacity, n uint64) *bloomFilter {
	return &bloomFilter{
		bf:    bf,
		words: bf.BitSet().Words(),
		m:     uint64(bf.Cap()),
		k:     int(bf.K()),
		n:     n,
		cap:   capacity,
	}
}

func bloomBytes(capacity uint64, fp float64) float64 {
	m, _ := bloomBits(capacity, fp)
	return math.Ceil(math.Max(64, m)/64) * 8
}

// probes returns the double-hashing start and step for h.
func bloomProbes(h uint64) (a, b uint64) {
	return h, hashmix.Fmix64(h) | 1
}

func (f *bloomFilter) test(h uint64) bool {
	x, step := bloomProbes(h)
	w := f.words
	for range f.k {
		p, _ := bits.Mul64(x, f.m)
		if w[p>>6]&(1<<(p&63)) == 0 {
			return false
		}
		x += step
	}
	return true
}

func (f *bloomFilter) testOrAdd(h uint64) bool {
	x, step := bloomProbes(h)
	w := f.words
	// Branch-free: the k loads are independent, so the CPU keeps them all
	// in flight instead of serialising on a mispredicted "bit set?" branch.
	missing := uint64(0)
	for range f.k {
		p, _ := bits.Mul64(x, f.m)
		bit := uint64(1) << (p & 63)
		old := w[p>>6]
		missing |= ^old & bit
		w[p>>6] = old | bit
		x += step
	}
	if missing != 0 {
		f.n++
		return false
	}
	return true
}

func (f *bloomFilter) count() uint64     { return f.n }
func (f *bloomFilter) capacity() uint64  { return f.cap }
func (f *bloomFilter) full() bool        { return f.n >= f.cap }
func (f *bloomFilter) sizeBytes() uint64 { return uint64(len(f.words)) * 8 }
func (f *bloomFilter) fpRate() float64 {
	return math.Pow(-math.Expm1(-float64(f.k)*float64(f.n)/float64(f.m)), float64(f.k))
}
