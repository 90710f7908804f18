package filter

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/streamdedup/dedup/internal/prefetch"
)

// The wide layout of a [LaneTable] (LaneTableOptions.Wide, kind [Wide]):
// every lane owns whole 64-byte lines, and a bucket is one line per lane,
// adjacent: with L lanes, bucket b is lines [b*L, (b+1)*L), and lane l's
// line of it is line b*L + l. Each lane's lines form a split-block Bloom
// filter of exactly the blocked backend's geometry and bit math (512-bit
// blocks, k bits per key from blockSalts, word j%8 at (lo*salt[j])>>26),
// so a lane costs what a blocked filter at the lane's target costs: 2.16
// bytes per remembered key at a 1% target over 4 generations and 5 lanes,
// against 3.02 for the 12-bit fields of the packed layout.
//
// A key's bucket is picked once from its high 32 bits, so asking every
// generation about it reads L adjacent lines: one page (one TLB miss)
// instead of one page per generation, and the adjacent-line prefetcher
// pairs them up. A bucket of 5 lines is 320 bytes: 1 bucket in 12.8
// straddles a 4 KiB page boundary.
//
// Clearing an expired lane zeroes one line per bucket, strided.

// wideMagic and wideLaneMagic mark the encodings of a wide table and of a
// wide lane: the layouts of interleavedMagic and laneMagic, with the lane
// data as whole lines.
const (
	wideMagic     = "DDIW"
	wideLaneMagic = "DDLW"
)

// newWide returns an empty wide table of nbuckets buckets of lanes lines.
func newWide(nbuckets uint64, lanes, k int) *LaneTable {
	return &LaneTable{
		words:    alignedWords(nbuckets * uint64(lanes) * blockWords),
		nbuckets: nbuckets,
		lanes:    lanes,
		lines:    1,
		k:        k,
		wide:     true,
	}
}

// wideParams returns the k and keys per line at which each of lanes lanes
// meets its share of fp.
func wideParams(fp float64, lanes int) (k int, lambda float64) {
	return blockedParams(laneTarget(fp, lanes))
}

// wideLine returns the index of the first word of lane l's line of h's
// bucket.
func (t *LaneTable) wideLine(h uint64, l int) uint64 {
	b := ((h >> 32) * t.nbuckets) >> 32
	return (b*uint64(t.lanes) + uint64(l)) * blockWords
}

// widePrefetch starts loading every line of h's bucket (one call).
func (t *LaneTable) widePrefetch(h uint64) {
	prefetch.Lines(unsafe.Pointer(&t.words[t.wideLine(h, 0)]), t.lanes)
}

// wideTest returns the lanes of used whose line may hold h. The bit
// positions inside a line do not depend on the lane: they are computed
// once, and every lane's line of the bucket is tested with them (the
// lines are adjacent; a free lane's line is zero).
func (t *LaneTable) wideTest(h uint64, used LaneSet) LaneSet {
	i := t.wideLine(h, 0)
	lo := uint32(h)
	words := t.words[i : i+uint64(t.lanes)*blockWords]
	var s LaneSet
	if t.k == 8 {
		p0, p1 := (lo*blockSalts[0])>>26, (lo*blockSalts[1])>>26
		p2, p3 := (lo*blockSalts[2])>>26, (lo*blockSalts[3])>>26
		p4, p5 := (lo*blockSalts[4])>>26, (lo*blockSalts[5])>>26
		p6, p7 := (lo*blockSalts[6])>>26, (lo*blockSalts[7])>>26
		for l := 0; l+blockWords <= len(words); l += blockWords {
			b := (*[blockWords]uint64)(words[l : l+blockWords])
			s |= LaneSet((b[0]>>p0)&(b[1]>>p1)&(b[2]>>p2)&(b[3]>>p3)&(b[4]>>p4)&(b[5]>>p5)&(b[6]>>p6)&(b[7]>>p7)&1) << (l / blockWords)
		}
		return s & used
	}
	for l := range t.lanes {
		if used.Has(l) && blockHas((*[blockWords]uint64)(words[l*blockWords:]), lo, t.k) {
			s |= 1 << l
		}
	}
	return s
}

// wideHas reports whether lane l may hold h.
func (t *LaneTable) wideHas(h uint64, l int) bool {
	return blockHas((*[blockWords]uint64)(t.words[t.wideLine(h, l):]), uint32(h), t.k)
}

// blockHas reports whether the 512-bit block b holds every bit of the key
// whose low hash bits are lo: the blocked backend's test.
func blockHas(b *[blockWords]uint64, lo uint32, k int) bool {
	if k == 8 {
		return (b[0]>>((lo*blockSalts[0])>>26))&
			(b[1]>>((lo*blockSalts[1])>>26))&
			(b[2]>>((lo*blockSalts[2])>>26))&
			(b[3]>>((lo*blockSalts[3])>>26))&
			(b[4]>>((lo*blockSalts[4])>>26))&
			(b[5]>>((lo*blockSalts[5])>>26))&
			(b[6]>>((lo*blockSalts[6])>>26))&
			(b[7]>>((lo*blockSalts[7])>>26))&1 != 0
	}
	for j := 0; j < k; j++ {
		if (b[j&7]>>((lo*blockSalts[j&(maxBlockK-1)])>>26))&1 == 0 {
			return false
		}
	}
	return true
}

// blockTestOrSet reports whether b holds the key's bits, and sets them if
// not: the blocked backend's testOrAdd without the count.
func blockTestOrSet(b *[blockWords]uint64, lo uint32, k int) (held bool) {
	if k == 8 {
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
		return false
	}
	var m [blockWords]uint64
	for j := 0; j < k; j++ {
		m[j&7] |= 1 << ((lo * blockSalts[j&(maxBlockK-1)]) >> 26)
	}
	if (b[0]&m[0]^m[0])|(b[1]&m[1]^m[1])|(b[2]&m[2]^m[2])|(b[3]&m[3]^m[3])|
		(b[4]&m[4]^m[4])|(b[5]&m[5]^m[5])|(b[6]&m[6]^m[6])|(b[7]&m[7]^m[7]) == 0 {
		return true
	}
	for j := range b {
		b[j] |= m[j]
	}
	return false
}

// wideAdd adds h to lane l unless the lane may hold it, and reports
// whether it did not.
func (t *LaneTable) wideAdd(h uint64, l int) (held bool) {
	if blockTestOrSet((*[blockWords]uint64)(t.words[t.wideLine(h, l):]), uint32(h), t.k) {
		return true
	}
	t.count[l]++
	return false
}

// wideClear zeroes lane l's line of every bucket.
func (t *LaneTable) wideClear(l int) {
	stride := uint64(t.lanes) * blockWords
	for i := uint64(l) * blockWords; i < uint64(len(t.words)); i += stride {
		clear(t.words[i : i+blockWords])
	}
}

// wideMove ORs lane from of s into lane to of t (same geometry).
func wideMove(s, t *LaneTable, from, to int) {
	stride := uint64(s.lanes) * blockWords
	for b := uint64(0); b < s.nbuckets; b++ {
		src := s.words[b*stride+uint64(from)*blockWords:][:blockWords]
		dst := t.words[b*stride+uint64(to)*blockWords:][:blockWords]
		for j := range dst {
			dst[j] |= src[j]
		}
	}
}

// appendWideLane appends lane l's lines of every bucket, in bucket order.
func (t *LaneTable) appendWideLane(b []byte, l int) []byte {
	stride := uint64(t.lanes) * blockWords
	for i := uint64(l) * blockWords; i < uint64(len(t.words)); i += stride {
		b = appendWords(b, t.words[i:i+blockWords])
	}
	return b
}

// readWideLane fills lane l's lines from src (appendWideLane's output).
func (t *LaneTable) readWideLane(src []byte, l int) {
	stride := uint64(t.lanes) * blockWords
	for b := uint64(0); b < t.nbuckets; b++ {
		readWords(t.words[b*stride+uint64(l)*blockWords:][:blockWords], src[b*blockBytes:])
	}
}

// wideCheck validates the parameters of a decoded wide table or lane.
func wideCheck(what string, lines, k int) error {
	switch {
	case lines != 1:
		return corrupt("%s: wide layout with %d lines per bucket", what, lines)
	case k < 1 || k > maxBlockK:
		return corrupt("%s: k %d", what, k)
	}
	return nil
}

// wideBytes returns the table memory of a wide table for cfg (valid).
func wideBytes(cfg LaneTableOptions) float64 {
	_, lambda := wideParams(cfg.FalsePositiveRate, cfg.Lanes)
	return math.Max(1, math.Ceil(float64(cfg.Capacity)/lambda)) * float64(cfg.Lanes) * blockBytes
}

func newWideTable(cfg LaneTableOptions) (*LaneTable, error) {
	k, lambda := wideParams(cfg.FalsePositiveRate, cfg.Lanes)
	nb := math.Max(1, math.Ceil(float64(cfg.Capacity)/lambda))
	if nb*float64(cfg.Lanes)*blockBytes > maxLinkBytes || nb > maxBlocks {
		return nil, fmt.Errorf("filter: wide capacity %d at fp %g needs %.0f bytes, over the %d limit",
			cfg.Capacity, cfg.FalsePositiveRate, nb*float64(cfg.Lanes)*blockBytes, uint64(maxLinkBytes))
	}
	t := newWide(uint64(nb), cfg.Lanes, k)
	t.fp = cfg.FalsePositiveRate
	t.cap = max(1, uint64(lambda*float64(t.nbuckets)))
	return t, nil
}

// wideLaneSum is the checksum of an encoding body (shared with the other
// formats: xxhash64).
func wideLaneSum(b []byte) []byte { return binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b)) }
