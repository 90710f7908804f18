package filter

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/streamdedup/dedup/internal/prefetch"
)

// LaneTable is a generation-interleaved blocked Bloom filter: one table
// whose every bucket holds one lane per generation, so that a lookup asks
// all generations about a key with one memory access instead of one per
// generation.
//
// Layout. The table is an array of buckets of 8 or 16 words (one or two
// 64-byte cache lines, the bucket's "lines"). With L lanes, each word is cut
// into L fields of F = 64/L bits, lane l owning bits [l*F, (l+1)*F) of every
// word (64 - L*F bits of a word stay unused). A key hash h picks its bucket
// from its high 32 bits by multiply-shift, and k <= 8 positions from its
// low 32 bits: position i is (lo*salt[i] mod 2^32) * (lines*F) >> 32, which
// falls in word i (one line) or word 2i or 2i+1 (two lines) at bit offset
// p mod F inside the lane's field. The positions do not depend on the lane:
// a key's mask is computed once, and shifting each of its k words right by
// the key's offset in that word and ANDing the results leaves bit l*F set
// exactly when lane l holds every one of the key's bits. So one pass over
// the bucket tests every lane: [LaneTable.Test] returns the set of lanes
// that may hold h.
//
// A lane is one generation of a time-rotating window: [LaneTable.Add]
// sets the key's bits in one lane, [LaneTable.ClearLane] empties a lane
// across the whole table when its generation expires, and the lane is
// reused by the next generation.
//
// Sizing. Each lane is a split-block Bloom filter with k blocks of lines*F
// bits; a block receives one bit of every key of its bucket's lane, so with
// j keys in the bucket's lane a query finds its bit set with probability
// 1 - (1 - 1/(lines*F))^j, and FP_j is that to the k-th power. The load j
// is Poisson(lambda) with lambda the mean keys per bucket per lane, and the
// lane's rate is the Poisson mixture (see interleavedLaneFP). A table built
// for (capacity, fp) meets fp for a lookup across all L lanes when every
// lane holds capacity keys: each lane is sized for 1 - (1-fp)^(1/L).
//
// Concurrency: like every filter here, the read methods may run
// concurrently with each other; Add, TestOrAdd and ClearLane need
// exclusive access.
type LaneTable struct {
	words    []uint64 // nbuckets * lines * 8, 64-byte aligned
	nbuckets uint64
	lanes    int
	width    uint   // F: bits of a lane in each word
	lines    int    // 1 or 2 cache lines per bucket
	k        int    // bits per key, 1..8
	laneBits uint64 // bit l*F set for every lane l: where Test's result lands
	laneOf   [64]uint8
	cap      uint64 // keys per lane at which the target is met
	fp       float64
	count    [MaxLanes]uint64
	wide     bool // a whole line per lane (wide.go): lines is 1, width 0
}

// LaneSet is a set of lanes of a [LaneTable]: bit l stands for lane
// l.
type LaneSet uint32

// Has reports whether lane l is in s.
func (s LaneSet) Has(l int) bool { return s>>uint(l)&1 != 0 }

// LaneTable limits.
const (
	// MaxLanes is the most lanes a table holds (4 bits per lane and word).
	MaxLanes = 16
	// maxInterleavedK is the most bits per key: one per word (group).
	maxInterleavedK = 8
)

// LaneTableOptions shapes a [LaneTable].
type LaneTableOptions struct {
	// Lanes is the number of lanes (generations), 1..MaxLanes.
	Lanes int
	// Capacity is the number of keys each lane is sized for, >= 1.
	Capacity uint64
	// FalsePositiveRate is the target of a lookup across all lanes when
	// every lane holds Capacity keys, in (0, 1).
	FalsePositiveRate float64
	// Lines is the bucket size in 64-byte cache lines: 1 (one memory access
	// per operation) or 2 (two adjacent lines: blocks twice as wide, so
	// fewer bits per key, for a second access to the neighbouring line).
	// 0 selects 1.
	Lines int
	// Wide selects the wide layout (see [Wide]): each lane owns a whole
	// 64-byte line of every bucket, a bucket is Lanes adjacent lines, and
	// each lane is a blocked filter at its share of the target. Lines
	// must be 0 or 1.
	Wide bool
}

func (c *LaneTableOptions) validate() error {
	switch {
	case c.Lanes < 1 || c.Lanes > MaxLanes:
		return fmt.Errorf("filter: interleaved Lanes must be in [1, %d], got %d", MaxLanes, c.Lanes)
	case c.Capacity < 1 || c.Capacity > maxCapacity:
		return fmt.Errorf("filter: interleaved Capacity must be in [1, 2^48], got %d", c.Capacity)
	case !(c.FalsePositiveRate > 0 && c.FalsePositiveRate < 1):
		return fmt.Errorf("filter: interleaved FalsePositiveRate must be in (0, 1), got %g", c.FalsePositiveRate)
	case c.Lines != 0 && c.Lines != 1 && c.Lines != 2:
		return fmt.Errorf("filter: interleaved Lines must be 1 or 2, got %d", c.Lines)
	case c.Wide && c.Lines > 1:
		return fmt.Errorf("filter: wide Lines must be 1 (a line per lane), got %d", c.Lines)
	}
	return nil
}

// NewLaneTable returns an empty table for cfg.
func NewLaneTable(cfg LaneTableOptions) (*LaneTable, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Wide {
		return newWideTable(cfg)
	}
	lines := max(cfg.Lines, 1)
	width := uint(64 / cfg.Lanes)
	k, lambda := interleavedParams(laneTarget(cfg.FalsePositiveRate, cfg.Lanes), lines*int(width))
	nb := math.Ceil(float64(cfg.Capacity) / lambda)
	if nb*float64(lines)*blockBytes > maxLinkBytes || nb > maxBlocks {
		return nil, fmt.Errorf("filter: interleaved capacity %d at fp %g needs %.0f bytes, over the %d limit",
			cfg.Capacity, cfg.FalsePositiveRate, nb*float64(lines)*blockBytes, uint64(maxLinkBytes))
	}
	t := newInterleaved(uint64(max(nb, 1)), cfg.Lanes, lines, k)
	t.fp = cfg.FalsePositiveRate
	t.cap = max(1, uint64(lambda*float64(t.nbuckets)))
	return t, nil
}

// EstimateLaneTableBytes returns the table memory NewLaneTable(cfg)
// allocates.
func EstimateLaneTableBytes(cfg LaneTableOptions) (uint64, error) {
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	if cfg.Wide {
		return uint64(wideBytes(cfg)), nil
	}
	lines := max(cfg.Lines, 1)
	_, lambda := interleavedParams(laneTarget(cfg.FalsePositiveRate, cfg.Lanes), lines*(64/cfg.Lanes))
	return uint64(math.Max(1, math.Ceil(float64(cfg.Capacity)/lambda))) * uint64(lines) * blockBytes, nil
}

func newInterleaved(nbuckets uint64, lanes, lines, k int) *LaneTable {
	t := &LaneTable{
		words:    alignedWords(nbuckets * uint64(lines) * blockWords),
		nbuckets: nbuckets,
		lanes:    lanes,
		width:    uint(64 / lanes),
		lines:    lines,
		k:        k,
	}
	for l := range lanes {
		t.laneBits |= 1 << (uint(l) * t.width)
	}
	for i := range t.laneOf {
		t.laneOf[i] = uint8(uint(i) / t.width)
	}
	return t
}

// laneTarget is the rate each of n lanes must meet for a lookup across all
// of them to meet fp: 1 - (1-fp)^(1/n).
func laneTarget(fp float64, n int) float64 {
	return -math.Expm1(math.Log1p(-fp) / float64(n))
}

// Lanes returns the number of lanes.
func (t *LaneTable) Lanes() int { return t.lanes }

// Wide reports whether the table has the wide layout (a line per lane).
func (t *LaneTable) Wide() bool { return t.wide }

// Lines returns the bucket size in cache lines (1 or 2; 1 for a wide
// table, whose lanes have a line each).
func (t *LaneTable) Lines() int { return t.lines }

// K returns the number of bits set per key.
func (t *LaneTable) K() int { return t.k }

// Capacity returns the number of keys each lane holds at the target rate.
func (t *LaneTable) Capacity() uint64 { return t.cap }

// TargetFP returns the false-positive rate the table was built for: a
// lookup across all lanes, each holding Capacity keys.
func (t *LaneTable) TargetFP() float64 { return t.fp }

// Count returns the keys inserted into lane l since it was last cleared
// (repeats of a key the lane already held are not counted).
func (t *LaneTable) Count(l int) uint64 { return t.count[l] }

// Full reports whether lane l holds its capacity.
func (t *LaneTable) Full(l int) bool { return t.count[l] >= t.cap }

// SizeBytes returns the table's memory.
func (t *LaneTable) SizeBytes() uint64 { return uint64(len(t.words)) * 8 }

// LaneFPRate estimates lane l's false-positive rate at its current fill.
func (t *LaneTable) LaneFPRate(l int) float64 {
	if t.wide {
		return blockedFP(float64(t.count[l])/float64(t.nbuckets), t.k)
	}
	return interleavedLaneFP(float64(t.count[l])/float64(t.nbuckets), t.k, t.lines*int(t.width))
}

// FPRate estimates the false-positive rate of a lookup across every lane at
// their current fills: 1 - prod(1 - lane rate).
func (t *LaneTable) FPRate() float64 {
	q := 1.0
	for l := range t.lanes {
		q *= 1 - t.LaneFPRate(l)
	}
	return 1 - q
}

// interleavedSalts are the multipliers of the per-bit positions: the
// blocked backend's first eight (Parquet's SBBF salts). Part of the
// encoding.
var interleavedSalts = [maxInterleavedK]uint32{
	0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
}

// bucket returns the index of the first word of h's bucket.
func (t *LaneTable) bucket(h uint64) uint64 {
	return ((h >> 32) * t.nbuckets) >> 32 * uint64(t.lines) * blockWords
}

// Prefetch starts loading the bucket of h (both lines of a two-line
// bucket), so that a later Test, Add or TestOrAdd of h does not wait for
// memory. It implements [Prefetcher].
func (t *LaneTable) Prefetch(h uint64) {
	if t.wide {
		t.widePrefetch(h)
		return
	}
	i := t.bucket(h)
	prefetch.Addr(unsafe.Pointer(&t.words[i]))
	if t.lines == 2 {
		prefetch.Addr(unsafe.Pointer(&t.words[i+blockWords]))
	}
}

// pos returns the word (relative to the bucket) and the bit offset inside
// a lane's field of bit i of a key whose low hash bits are lo.
func (t *LaneTable) pos(lo uint32, i int) (word int, off uint) {
	p := uint((uint64(lo*interleavedSalts[i]) * uint64(t.lines) * uint64(t.width)) >> 32)
	if t.lines == 1 {
		return i, p
	}
	if p >= t.width {
		return 2*i + 1, p - t.width
	}
	return 2 * i, p
}

// match returns the bits l*F of the lanes whose fields hold every bit of h,
// with the positions of h in word and off.
func (t *LaneTable) match(h uint64) uint64 {
	b := t.words[t.bucket(h):]
	lo := uint32(h)
	acc := t.laneBits
	if t.lines == 1 && t.k == maxInterleavedK {
		// One line, k = 8 (what every target from 10% down chooses):
		// unrolled, one word per bit.
		w := uint64(t.width)
		b := (*[blockWords]uint64)(b[:blockWords])
		return acc &
			(b[0] >> ((uint64(lo*interleavedSalts[0]) * w) >> 32)) &
			(b[1] >> ((uint64(lo*interleavedSalts[1]) * w) >> 32)) &
			(b[2] >> ((uint64(lo*interleavedSalts[2]) * w) >> 32)) &
			(b[3] >> ((uint64(lo*interleavedSalts[3]) * w) >> 32)) &
			(b[4] >> ((uint64(lo*interleavedSalts[4]) * w) >> 32)) &
			(b[5] >> ((uint64(lo*interleavedSalts[5]) * w) >> 32)) &
			(b[6] >> ((uint64(lo*interleavedSalts[6]) * w) >> 32)) &
			(b[7] >> ((uint64(lo*interleavedSalts[7]) * w) >> 32))
	}
	if t.lines == 2 && t.k == maxInterleavedK {
		w := uint64(t.width)
		b := (*[2 * blockWords]uint64)(b[:2*blockWords])
		return acc &
			pair(b, 0, lo, w) & pair(b, 1, lo, w) & pair(b, 2, lo, w) & pair(b, 3, lo, w) &
			pair(b, 4, lo, w) & pair(b, 5, lo, w) & pair(b, 6, lo, w) & pair(b, 7, lo, w)
	}
	for i := range t.k {
		w, off := t.pos(lo, i)
		acc &= b[w] >> off
	}
	return acc
}

// pair returns the word of bit i of a two-line bucket, shifted right by the
// key's offset in it: position p in [0, 2F) is word 2i+1 at p-F when p >=
// F, else word 2i at p (branch-free).
func pair(b *[2 * blockWords]uint64, i int, lo uint32, w uint64) uint64 {
	p := (uint64(lo*interleavedSalts[i]) * 2 * w) >> 32
	hi := 1 ^ (p-w)>>63
	return b[2*i+int(hi)] >> (p - hi*w)
}

// lanesOf turns match bits (l*F) into a LaneSet.
func (t *LaneTable) lanesOf(m uint64) LaneSet {
	var s LaneSet
	for m != 0 {
		s |= 1 << t.laneOf[bits.TrailingZeros64(m)]
		m &= m - 1
	}
	return s
}

// Test returns the lanes that may hold h (a lane outside the set certainly
// does not).
func (t *LaneTable) Test(h uint64) LaneSet {
	if t.wide {
		return t.wideTest(h, 1<<t.lanes-1)
	}
	m := t.match(h)
	if m == 0 {
		return 0
	}
	return t.lanesOf(m)
}

// TestIn returns the lanes of used that may hold h: Test(h)&used, which a
// wide table answers without reading the lines of the other lanes.
func (t *LaneTable) TestIn(h uint64, used LaneSet) LaneSet {
	if t.wide {
		return t.wideTest(h, used)
	}
	return t.Test(h) & used
}

// has reports whether lane l may hold h.
func (t *LaneTable) has(h uint64, l int) bool {
	if t.wide {
		return t.wideHas(h, l)
	}
	return t.match(h)>>(uint(l)*t.width)&1 != 0
}

// TestOrAdd returns the lanes that may hold h, then adds h to lane l unless
// lane l already may hold it: the test and the insert are one pass over the
// bucket.
func (t *LaneTable) TestOrAdd(h uint64, l int) LaneSet {
	s := t.Test(h)
	if !s.Has(l) {
		t.set(h, l)
	}
	return s
}

// Add inserts h into lane l. A hash lane l already may hold is not inserted
// again, so repeats do not fill the lane.
func (t *LaneTable) Add(h uint64, l int) { t.addLane(h, l) }

// addLane adds h to lane l unless the lane may hold it already, and
// reports whether it did: the positions are computed once, and one line,
// k = 8 (what every target from 10% down chooses) is unrolled.
func (t *LaneTable) addLane(h uint64, l int) (held bool) {
	if t.wide {
		return t.wideAdd(h, l)
	}
	if t.lines != 1 || t.k != maxInterleavedK {
		if t.match(h)>>(uint(l)*t.width)&1 != 0 {
			return true
		}
		t.set(h, l)
		return false
	}
	b := (*[blockWords]uint64)(t.words[t.bucket(h):][:blockWords])
	lo, w, base := uint32(h), uint64(t.width), uint(l)*t.width
	p0, p1 := base+uint((uint64(lo*interleavedSalts[0])*w)>>32), base+uint((uint64(lo*interleavedSalts[1])*w)>>32)
	p2, p3 := base+uint((uint64(lo*interleavedSalts[2])*w)>>32), base+uint((uint64(lo*interleavedSalts[3])*w)>>32)
	p4, p5 := base+uint((uint64(lo*interleavedSalts[4])*w)>>32), base+uint((uint64(lo*interleavedSalts[5])*w)>>32)
	p6, p7 := base+uint((uint64(lo*interleavedSalts[6])*w)>>32), base+uint((uint64(lo*interleavedSalts[7])*w)>>32)
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
	t.count[l]++
	return false
}

func (t *LaneTable) set(h uint64, l int) {
	if t.wide {
		b := (*[blockWords]uint64)(t.words[t.wideLine(h, l):])
		for j := 0; j < t.k; j++ {
			b[j&7] |= 1 << ((uint32(h) * blockSalts[j&(maxBlockK-1)]) >> 26)
		}
		t.count[l]++
		return
	}
	b := t.words[t.bucket(h):]
	lo := uint32(h)
	base := uint(l) * t.width
	for i := range t.k {
		w, off := t.pos(lo, i)
		b[w] |= 1 << (base + off)
	}
	t.count[l]++
}

// interleavedAhead is how many keys ahead the batch operations prefetch:
// enough misses in flight to cover DRAM latency (a core keeps about ten
// outstanding), few enough that the lines are still cached when used.
const interleavedAhead = 12

// TestBatch sets out[i] to Test(hs[i]) for every i, prefetching ahead so
// that the memory accesses of consecutive keys overlap. out must be at
// least as long as hs.
func (t *LaneTable) TestBatch(hs []uint64, out []LaneSet) {
	out = out[:len(hs)]
	for _, h := range hs[:min(interleavedAhead, len(hs))] {
		t.Prefetch(h)
	}
	for i, h := range hs {
		if j := i + interleavedAhead; j < len(hs) {
			t.Prefetch(hs[j])
		}
		out[i] = t.Test(h)
	}
}

// AddBatch adds every hash of hs to lane l, prefetching ahead.
func (t *LaneTable) AddBatch(hs []uint64, l int) {
	for _, h := range hs[:min(interleavedAhead, len(hs))] {
		t.Prefetch(h)
	}
	for i, h := range hs {
		if j := i + interleavedAhead; j < len(hs) {
			t.Prefetch(hs[j])
		}
		t.Add(h, l)
	}
}

// ClearLane empties lane l across the whole table: one pass over its
// memory (a few milliseconds per hundred MiB), after which the lane can
// take a new generation.
func (t *LaneTable) ClearLane(l int) {
	if t.wide {
		t.wideClear(l)
		t.count[l] = 0
		return
	}
	keep := ^(((uint64(1) << t.width) - 1) << (uint(l) * t.width))
	for i := range t.words {
		t.words[i] &= keep
	}
	t.count[l] = 0
}

// interleavedLaneFP returns the false-positive rate of one lane with k bits
// per key, blocks of blockBits bits, and lambda keys per bucket on average.
// With j keys in the bucket's lane each of the key's k blocks has received j
// bits, so FP_j = (1 - (1-1/blockBits)^j)^k; j is Poisson(lambda).
func interleavedLaneFP(lambda float64, k, blockBits int) float64 {
	if lambda <= 0 || k <= 0 {
		return 0
	}
	sd := math.Sqrt(lambda)
	jlo := int(math.Max(0, math.Floor(lambda-14*sd-20)))
	jhi := int(math.Ceil(lambda + 14*sd + 30))
	q := 1 - 1/float64(blockBits)
	var sum float64
	for j := jlo; j <= jhi; j++ {
		p := math.Exp(-lambda + float64(j)*math.Log(lambda) - lgammaInt(j+1))
		sum += p * math.Pow(1-math.Pow(q, float64(j)), float64(k))
	}
	return math.Min(1, sum)
}

type interleavedSize struct {
	k      int
	lambda float64
}

var interleavedParamsCache sync.Map // [2]float64{fp, blockBits} -> interleavedSize

// interleavedParams returns the k and the keys-per-bucket load at which a
// lane with blocks of blockBits bits meets the lane target fp with the
// fewest buckets.
func interleavedParams(fp float64, blockBits int) (k int, lambda float64) {
	key := [2]float64{fp, float64(blockBits)}
	if v, ok := interleavedParamsCache.Load(key); ok {
		s := v.(interleavedSize)
		return s.k, s.lambda
	}
	best := interleavedSize{k: 1}
	for k := 1; k <= maxInterleavedK; k++ {
		lo, hi := 0.0, float64(64*blockBits)
		for range 40 {
			mid := (lo + hi) / 2
			if interleavedLaneFP(mid, k, blockBits) <= fp {
				lo = mid
			} else {
				hi = mid
			}
		}
		if lo > best.lambda {
			best = interleavedSize{k: k, lambda: lo}
		}
	}
	if best.lambda <= 0 {
		best.lambda = 1e-9
	}
	interleavedParamsCache.Store(key, best)
	return best.k, best.lambda
}

// Encoding of a LaneTable (version 1), little-endian:
//
//	[0:4]   magic "DDIL"
//	[4]     format version (1)
//	[5]     lanes, 1..16
//	[6]     lines per bucket, 1 or 2
//	[7]     k, 1..8
//	[8:16]  buckets
//	[16:24] capacity per lane
//	[24:32] target fp, float64 bits
//	then lanes x u64 count per lane,
//	then buckets*lines*64 bytes of words,
//	then xxhash64 of every byte before it.
//
// The lane width is 64/lanes; the salts are fixed.
const (
	interleavedMagic   = "DDIL"
	interleavedVersion = 1
	interleavedHead    = 32
)

// MarshalBinary encodes the table in the format above.
func (t *LaneTable) MarshalBinary() ([]byte, error) {
	size := interleavedHead + 8*t.lanes + len(t.words)*8 + trailerLen
	b := make([]byte, 0, size)
	if t.wide {
		b = append(b, wideMagic...)
	} else {
		b = append(b, interleavedMagic...)
	}
	b = append(b, interleavedVersion, byte(t.lanes), byte(t.lines), byte(t.k))
	b = binary.LittleEndian.AppendUint64(b, t.nbuckets)
	b = binary.LittleEndian.AppendUint64(b, t.cap)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.fp))
	for l := range t.lanes {
		b = binary.LittleEndian.AppendUint64(b, t.count[l])
	}
	b = appendWords(b, t.words)
	b = binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b))
	if len(b) != size {
		return nil, fmt.Errorf("filter: internal error: encoded %d bytes, expected %d", len(b), size)
	}
	return b, nil
}

// UnmarshalLaneTable decodes a table encoded by
// [LaneTable.MarshalBinary]. Truncated, altered or foreign bytes return an
// error wrapping ErrCorrupt, never a panic. The result does not alias data.
func UnmarshalLaneTable(data []byte) (*LaneTable, error) {
	if len(data) < interleavedHead+trailerLen {
		return nil, corrupt("interleaved: %d bytes, shorter than header and checksum", len(data))
	}
	wide := string(data[:4]) == wideMagic
	if !wide && string(data[:4]) != interleavedMagic {
		return nil, corrupt("interleaved: bad magic %q", data[:4])
	}
	body := data[:len(data)-trailerLen]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(data[len(data)-trailerLen:]); got != want {
		return nil, corrupt("interleaved: checksum mismatch (%016x, stored %016x)", got, want)
	}
	if v := data[4]; v != interleavedVersion {
		return nil, corrupt("interleaved: unsupported format version %d", v)
	}
	lanes, lines, k := int(data[5]), int(data[6]), int(data[7])
	nb := binary.LittleEndian.Uint64(data[8:])
	capacity := binary.LittleEndian.Uint64(data[16:])
	fp := math.Float64frombits(binary.LittleEndian.Uint64(data[24:]))
	if wide {
		if err := wideCheck("interleaved", lines, k); err != nil {
			return nil, err
		}
	}
	switch {
	case lanes < 1 || lanes > MaxLanes:
		return nil, corrupt("interleaved: %d lanes", lanes)
	case lines != 1 && lines != 2:
		return nil, corrupt("interleaved: %d lines per bucket", lines)
	case !wide && (k < 1 || k > maxInterleavedK):
		return nil, corrupt("interleaved: k %d", k)
	case nb < 1 || nb > maxBlocks:
		return nil, corrupt("interleaved: %d buckets", nb)
	case capacity < 1 || capacity > maxCapacity:
		return nil, corrupt("interleaved: capacity %d", capacity)
	case !(fp > 0 && fp < 1):
		return nil, corrupt("interleaved: fp %g", fp)
	}
	rest := body[interleavedHead:]
	perBucket := uint64(lines)
	if wide {
		perBucket = uint64(lanes)
	}
	if uint64(len(rest)) != uint64(8*lanes)+nb*perBucket*blockBytes {
		return nil, corrupt("interleaved: %d buckets of %d lines and %d lanes need %d bytes, have %d",
			nb, perBucket, lanes, uint64(8*lanes)+nb*perBucket*blockBytes, len(rest))
	}
	var t *LaneTable
	if wide {
		t = newWide(nb, lanes, k)
	} else {
		t = newInterleaved(nb, lanes, lines, k)
	}
	t.cap, t.fp = capacity, fp
	for l := range lanes {
		t.count[l] = binary.LittleEndian.Uint64(rest[8*l:])
	}
	readWords(t.words, rest[8*lanes:])
	return t, nil
}
