package filter

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"

	metro "github.com/dgryski/go-metro"
	cuckoo "github.com/seiflotfy/cuckoofilter"
)

// The cuckoo backend wraps github.com/seiflotfy/cuckoofilter: 4-slot
// buckets, 8-bit fingerprints (hash%255+1, so 255 values), a bucket count
// rounded up to a power of two, partial-key cuckoo hashing. The library
// hashes its []byte key with metro hash, so we hand it the 8 bytes of h: its
// bucket index and fingerprint are then independent of any bits of h the
// engine shards by.
//
// Its false-positive rate at load a (occupied slots / slots) is about
// 1 - (1 - 1/255)^(8a) ≈ 8a/255: a query compares its fingerprint with the
// 8 slots of its two buckets. The fingerprint width fixes that rate at a
// given load, so a target below 8*maxLoad/255 (2.4%) is met only by running
// the table at a lower load a = ln(1-fp) / (8 ln(1-1/255)): bytes per key are
// 1/a, about 6.4 at 1% (2 x 0.5% for the first link), 64 at 0.1%, and they
// double with every halving of the target. This backend is the memory-hungry
// one below a few percent.
//
// Safety. When an insert finds both buckets full, the library kicks
// fingerprints around; if it gives up after 500 kicks it has already evicted
// one: a silent false negative. We never let a link get there: each link's
// load stays below maxCuckooLoad (far under the ~95% where 4-way partial-key
// cuckoo tables start failing), and the chain grows before. As a last line of
// defence, should an insert fail anyway, the link finds which fingerprint
// value was lost (it keeps a histogram of its fingerprints and compares it
// with the table), records that value as "lossy" (any query with that
// fingerprint then answers maybe in this link: no false negative, FP
// estimate raised by 1/255), and marks itself full so the chain grows.
//
// The library's Insert does not check for an existing fingerprint; we call
// it only after Lookup said no (TestOrAdd semantics), so no link holds
// duplicates and Count is the number of distinct inserts.

const (
	cuckooBucket   = 4
	cuckooFPValues = 255
	// maxCuckooLoad caps a link's load, whatever its target.
	maxCuckooLoad = 0.75
	// minCuckooSlots keeps tiny links away from small-table kick failures.
	minCuckooSlots = 1024
	// maxCuckooSlots: the library takes the bucket index from the high 32
	// bits of its hash, so at most 2^32 buckets.
	maxCuckooSlots = cuckooBucket << 32
)

// cuckooLoad returns the load at which the table meets fp.
func cuckooLoad(fp float64) float64 {
	a := math.Log1p(-fp) / (2 * cuckooBucket * math.Log1p(-1.0/cuckooFPValues))
	return math.Min(a, maxCuckooLoad)
}

// cuckooSlots returns the table size (a power of two) for capacity keys at
// target fp, and the capacity it actually offers at that load.
func cuckooSlots(capacity uint64, fp float64) (slots, cap uint64) {
	a := cuckooLoad(fp)
	need := math.Ceil(float64(capacity) / a)
	if need > maxCuckooSlots {
		slots = maxCuckooSlots
	} else {
		slots = max(minCuckooSlots, uint64(1)<<bits.Len64(uint64(need)-1))
	}
	return slots, max(1, uint64(a*float64(slots)))
}

// cuckooFilter is one fixed-size cuckoo filter.
type cuckooFilter struct {
	cf    *cuckoo.Filter
	slots uint64
	n     uint64
	cap   uint64
	buf   [8]byte      // h as the library's []byte key, without allocating
	busy  atomic.Bool  // buf in use: a concurrent reader allocates its own
	hist  *[256]uint64 // fingerprint histogram of the table; nil in old links
	lossy [4]uint64    // fingerprint values a failed insert lost
	nLost int          // popcount of lossy
	all   bool         // the loss could not be pinned down: answer maybe
}

func newCuckoo(capacity uint64, fp float64) *cuckooFilter {
	slots, c := cuckooSlots(capacity, fp)
	return &cuckooFilter{cf: cuckoo.NewFilter(uint(slots)), slots: slots, cap: c, hist: new([256]uint64)}
}

// cuckooBytes returns the table size for capacity keys at fp, before the
// maxCuckooSlots cap.
func cuckooBytes(capacity uint64, fp float64) float64 {
	need := float64(capacity) / cuckooLoad(fp)
	return math.Max(minCuckooSlots, math.Exp2(math.Ceil(math.Log2(need))))
}

// key returns h as the library's 8-byte key: in the filter's scratch buffer
// (no allocation) unless another reader holds it. Call done(own) after use.
// This keeps Test safe for concurrent readers, as the package promises.
func (f *cuckooFilter) key(h uint64) (b []byte, own bool) {
	if f.busy.CompareAndSwap(false, true) {
		b, own = f.buf[:], true
	} else {
		b = make([]byte, 8)
	}
	binary.LittleEndian.PutUint64(b, h)
	return b, own
}

func (f *cuckooFilter) done(own bool) {
	if own {
		f.busy.Store(false)
	}
}

// fingerprint returns the library's fingerprint of h (metro hash with its
// seed 1337, then %255+1).
func (f *cuckooFilter) fingerprint(h uint64) byte {
	b, own := f.key(h)
	fp := byte(metro.Hash64(b, 1337)%cuckooFPValues + 1)
	f.done(own)
	return fp
}

func (f *cuckooFilter) lost(h uint64) bool {
	if f.all {
		return true
	}
	fp := f.fingerprint(h)
	return f.lossy[fp>>6]&(1<<(fp&63)) != 0
}

func (f *cuckooFilter) test(h uint64) bool {
	b, own := f.key(h)
	found := f.cf.Lookup(b)
	f.done(own)
	return found || (f.nLost > 0 || f.all) && f.lost(h)
}

func (f *cuckooFilter) testOrAdd(h uint64) bool {
	if f.test(h) {
		return true
	}
	if f.hist == nil {
		f.hist = f.histogram()
	}
	f.hist[f.fingerprint(h)]++
	f.n++
	b, own := f.key(h)
	ok := f.cf.Insert(b)
	f.done(own)
	if !ok {
		f.recoverLoss()
	}
	return false
}

// histogram counts the fingerprints in the table.
func (f *cuckooFilter) histogram() *[256]uint64 {
	var hist [256]uint64
	for _, b := range f.cf.Encode() {
		hist[b]++
	}
	hist[0] = 0
	return &hist
}

// recoverLoss runs after the library's Insert gave up and evicted one
// fingerprint: it finds the lost value, marks it lossy and the link full.
func (f *cuckooFilter) recoverLoss() {
	now := f.histogram()
	lostV, diffs := -1, 0
	for v := 1; v < 256; v++ {
		if now[v] != f.hist[v] {
			diffs++
			if f.hist[v] == now[v]+1 {
				lostV = v
			}
		}
	}
	if diffs == 1 && lostV > 0 {
		if f.lossy[lostV>>6]&(1<<(lostV&63)) == 0 {
			f.lossy[lostV>>6] |= 1 << (lostV & 63)
			f.nLost++
		}
	} else {
		f.all = true // someone changed the library's hasher? stay correct
	}
	f.hist = now
	f.cap = f.n // full: the chain grows on the next insert
}

func (f *cuckooFilter) count() uint64     { return f.n }
func (f *cuckooFilter) capacity() uint64  { return f.cap }
func (f *cuckooFilter) full() bool        { return f.n >= f.cap }
func (f *cuckooFilter) sizeBytes() uint64 { return f.slots }
func (f *cuckooFilter) fpRate() float64 {
	if f.all {
		return 1
	}
	load := float64(f.n) / float64(f.slots)
	p := -math.Expm1(2 * cuckooBucket * load * math.Log1p(-1.0/cuckooFPValues))
	return p + (1-p)*float64(f.nLost)/cuckooFPValues
}
